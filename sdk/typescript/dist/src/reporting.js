/**
 * Edge reports on a timer: `recordCall` counts locally (bounded, see `EdgeCounter`), each round
 * sends what was counted in batches within the oracle's limits, and a batch the oracle did not take
 * (unreachable, rate-limited) is counted again for the next round instead of lost; one it refused
 * as such (422, 413) would fail for ever, so it is dropped and counted in `counter.dropped`.
 */
import { OracleError } from "./errors.js";
import { EdgeCounter } from "./edges.js";
import { Periodic } from "./periodic.js";
export class EdgeReporter extends Periodic {
    name = "edges";
    intervalMs;
    logger;
    client;
    counter;
    /** Edges the oracle took, in all. */
    reported = 0;
    constructor(client, options = {}) {
        super();
        this.client = client;
        this.counter = new EdgeCounter(options.maxPairs);
        this.intervalMs = options.intervalMs ?? 5_000;
        this.logger = options.logger ?? client.logger;
    }
    /** `calls` calls from grain `from` to grain `to` (a runtime may count them in batches). */
    recordCall(from, to, calls = 1) {
        this.counter.record(from, to, calls);
    }
    tick() {
        return this.reportOnce();
    }
    /** Sends what was counted; resolves how many edges were sent. */
    async reportOnce() {
        const batches = this.counter.takeBatches();
        let sent = 0;
        for (const [i, batch] of batches.entries()) {
            try {
                await this.client.call("POST", "/edges", { body: { edges: batch } });
            }
            catch (error) {
                const refused = error instanceof OracleError && !error.retryable;
                if (refused) {
                    this.logger.warn(`an edge report of ${batch.length} edges was refused (${error.message}); they are dropped`);
                    this.counter.dropped += batch.reduce((sum, edge) => sum + edge.count, 0);
                }
                for (const rest of batches.slice(refused ? i + 1 : i))
                    this.counter.putBack(rest);
                this.reported += sent;
                throw error;
            }
            sent += batch.length;
        }
        this.reported += sent;
        return sent;
    }
}
//# sourceMappingURL=reporting.js.map