/**
 * Connection pools: which node a new client connection should go to, by the pool's
 * SmartConnect-style rule (round robin, connection count, network throughput, CPU).
 */
/** Asks the oracle for the node; the answer holds for `valid_for_ms`. */
export async function connect(client, pool) {
    const { body } = await client.call("POST", `/pools/${encodeURIComponent(pool)}/connections`);
    return body;
}
//# sourceMappingURL=connect.js.map