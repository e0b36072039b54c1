//! The runtime side of the placement oracle's protocol, done once, for actor runtimes written in
//! Rust: a silo's membership and lease ([`Silo`]), placement with the registration rule
//! ([`Placement`], [`Claim`]), migrations carried out ([`MigrationWorker`]), edge reports
//! ([`EdgeReporter`]) and connection pools ([`connect`]). Logs through `tracing`.
//!
//! The rules it keeps for a runtime: run a grain only under a registration the silo holds (asked
//! as the requesting silo) and only while the silo holds its lease; pause every grain the instant
//! the lease runs out, resume them when a heartbeat is acknowledged; told dead, drop every grain
//! before rejoining as the next generation; deactivate and hand over by epoch.
#![forbid(unsafe_code)]

mod backoff;
mod claim;
mod client;
mod edges;
mod error;
mod lease;
mod migrations;
mod periodic;
mod placement;
mod reporting;
mod silo;
mod types;

pub use backoff::{parse_retry_after, Backoff};
pub use claim::{decide, Claim};
pub use client::{segment, ClientOptions, OracleClient};
pub use edges::{Edge, EdgeCounter, MAX_COUNT, MAX_EDGES_PER_REPORT, MAX_REPORT_BYTES};
pub use error::OracleError;
pub use lease::Lease;
pub use migrations::{Ending, HandOver, MigrationStats, MigrationWorker, Migrator};
pub use placement::Placement;
pub use reporting::EdgeReporter;
pub use silo::{LoadFn, NoEvents, Silo, SiloEvents, SiloOptions, SiloStats, Status};
pub use types::{Connection, Description, Load, Migration, PlacementAnswer};

/// Which node of a SmartConnect-style pool a new client connection should go to.
pub async fn connect(client: &OracleClient, pool: &str) -> Result<Connection, OracleError> {
    let path = format!("/pools/{}/connections", segment(pool));
    client.call(reqwest::Method::POST, &path, None).await
}
