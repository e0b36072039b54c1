/**
 * Edge reports on a timer: `recordCall` counts locally (bounded, see `EdgeCounter`), each round
 * sends what was counted in batches within the oracle's limits, and a batch the oracle did not take
 * (unreachable, rate-limited) is counted again for the next round instead of lost; one it refused
 * as such (422, 413) would fail for ever, so it is dropped and counted in `counter.dropped`.
 */
import type { OracleClient } from "./client.js";
import { EdgeCounter } from "./edges.js";
import type { Logger } from "./logger.js";
import { Periodic } from "./periodic.js";
export interface EdgeReporterOptions {
    /** Distinct pairs kept between reports (100,000 by default). */
    maxPairs?: number;
    /** Between reports, ms (5000 by default). */
    intervalMs?: number;
    logger?: Logger;
}
export declare class EdgeReporter extends Periodic {
    readonly name = "edges";
    readonly intervalMs: number;
    protected readonly logger: Logger;
    readonly client: OracleClient;
    readonly counter: EdgeCounter;
    /** Edges the oracle took, in all. */
    reported: number;
    constructor(client: OracleClient, options?: EdgeReporterOptions);
    /** `calls` calls from grain `from` to grain `to` (a runtime may count them in batches). */
    recordCall(from: string, to: string, calls?: number): void;
    tick(): Promise<number>;
    /** Sends what was counted; resolves how many edges were sent. */
    reportOnce(): Promise<number>;
}
