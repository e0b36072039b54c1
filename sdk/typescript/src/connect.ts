/**
 * Connection pools: which node a new client connection should go to, by the pool's
 * SmartConnect-style rule (round robin, connection count, network throughput, CPU).
 */

import type { OracleClient } from "./client.js";
import type { ConnectionAnswer } from "./wire.js";

/** Asks the oracle for the node; the answer holds for `valid_for_ms`. */
export async function connect(client: OracleClient, pool: string): Promise<ConnectionAnswer> {
  const { body } = await client.call<ConnectionAnswer>(
    "POST",
    `/pools/${encodeURIComponent(pool)}/connections`,
  );
  return body;
}
