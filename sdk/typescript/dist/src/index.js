/**
 * The runtime side of the placement oracle's protocol, done once: a silo's membership and lease,
 * placement with the registration rule, migrations carried out, edge reports, connection pools.
 */
export { Backoff, MAX_RETRY_AFTER_S, parseRetryAfter, seededRandom, } from "./backoff.js";
export { decide } from "./claim.js";
export { monotonic } from "./clock.js";
export { OracleClient, } from "./client.js";
export { connect } from "./connect.js";
export { EdgeCounter, MAX_COUNT, MAX_EDGES_PER_REPORT, MAX_REPORT_BYTES } from "./edges.js";
export { OracleError, UNAVAILABLE } from "./errors.js";
export { Lease } from "./lease.js";
export { consoleLogger, silentLogger } from "./logger.js";
export { MigrationWorker } from "./migrations.js";
export { Periodic } from "./periodic.js";
export { Placement } from "./placement.js";
export { EdgeReporter } from "./reporting.js";
export { Silo } from "./silo.js";
//# sourceMappingURL=index.js.map