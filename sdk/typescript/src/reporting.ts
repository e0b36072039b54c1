/**
 * Edge reports on a timer: `recordCall` counts locally (bounded, see `EdgeCounter`), each round
 * sends what was counted in batches within the oracle's limits, and a batch the oracle did not take
 * (unreachable, rate-limited) is counted again for the next round instead of lost; one it refused
 * as such (422, 413) would fail for ever, so it is dropped and counted in `counter.dropped`.
 */

import type { OracleClient } from "./client.js";
import { OracleError } from "./errors.js";
import { EdgeCounter } from "./edges.js";
import type { Logger } from "./logger.js";
import { Periodic } from "./periodic.js";
import type { EdgesAccepted } from "./wire.js";

export interface EdgeReporterOptions {
  /** Distinct pairs kept between reports (100,000 by default). */
  maxPairs?: number;
  /** Between reports, ms (5000 by default). */
  intervalMs?: number;
  logger?: Logger;
}

export class EdgeReporter extends Periodic {
  readonly name = "edges";
  readonly intervalMs: number;
  protected readonly logger: Logger;
  readonly client: OracleClient;
  readonly counter: EdgeCounter;
  /** Edges the oracle took, in all. */
  reported = 0;

  constructor(client: OracleClient, options: EdgeReporterOptions = {}) {
    super();
    this.client = client;
    this.counter = new EdgeCounter(options.maxPairs);
    this.intervalMs = options.intervalMs ?? 5_000;
    this.logger = options.logger ?? client.logger;
  }

  /** `calls` calls from grain `from` to grain `to` (a runtime may count them in batches). */
  recordCall(from: string, to: string, calls = 1): void {
    this.counter.record(from, to, calls);
  }

  override tick(): Promise<number> {
    return this.reportOnce();
  }

  /** Sends what was counted; resolves how many edges were sent. */
  async reportOnce(): Promise<number> {
    const batches = this.counter.takeBatches();
    let sent = 0;
    for (const [i, batch] of batches.entries()) {
      try {
        await this.client.call<EdgesAccepted>("POST", "/edges", { body: { edges: batch } });
      } catch (error) {
        const refused = error instanceof OracleError && !error.retryable;
        if (refused) {
          this.logger.warn(`an edge report of ${batch.length} edges was refused (${error.message}); they are dropped`);
          this.counter.dropped += batch.reduce((sum, edge) => sum + edge.count, 0);
        }
        for (const rest of batches.slice(refused ? i + 1 : i)) this.counter.putBack(rest);
        this.reported += sent;
        throw error;
      }
      sent += batch.length;
    }
    this.reported += sent;
    return sent;
  }
}
