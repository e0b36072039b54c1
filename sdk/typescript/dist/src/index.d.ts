/**
 * The runtime side of the placement oracle's protocol, done once: a silo's membership and lease,
 * placement with the registration rule, migrations carried out, edge reports, connection pools.
 */
export { Backoff, MAX_RETRY_AFTER_S, parseRetryAfter, seededRandom, type BackoffOptions, type Random, } from "./backoff.js";
export { decide, type Claim, type ForwardTo, type RunHere } from "./claim.js";
export { monotonic, type Clock } from "./clock.js";
export { OracleClient, type Answer, type CallOptions, type Fetch, type OracleClientOptions, type Params, } from "./client.js";
export { connect } from "./connect.js";
export { EdgeCounter, MAX_COUNT, MAX_EDGES_PER_REPORT, MAX_REPORT_BYTES, type Edge } from "./edges.js";
export { OracleError, UNAVAILABLE } from "./errors.js";
export { Lease } from "./lease.js";
export { consoleLogger, silentLogger, type Logger } from "./logger.js";
export { MigrationWorker, type HandOver, type MigrationWorkerOptions } from "./migrations.js";
export { Periodic } from "./periodic.js";
export { Placement, type PlacementOptions } from "./placement.js";
export { EdgeReporter, type EdgeReporterOptions } from "./reporting.js";
export { Silo, type Hook, type ReportedStatus, type SiloOptions, type StopOptions } from "./silo.js";
export type { ConnectionAnswer, DrainProgress, EdgesAccepted, HeartbeatAnswer, Load, Migration, MigrationCompleted, MigrationPage, PlacementAnswer, SiloView, } from "./wire.js";
