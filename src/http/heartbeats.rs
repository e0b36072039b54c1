//! `POST /v1/clusters/{cluster}/heartbeats`: a silo reports its status and load.

use crate::oracle::Members;
use crate::rate_limit::RateLimits;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Cluster;
use super::bodies::SiloResponse;
use super::error::{ApiError, Problem};
use super::extract::ApiJson;
use super::limits;
use crate::cluster::lease;
use crate::cluster::names::{check_grain_type, MAX_SILO_ID_CHARS};
use crate::cluster::{Heartbeat, LoadReport, SiloId, SiloStatus};
use crate::validation::{self, Invalid, Violations};

/// The statuses a silo may report; `dead` is the oracle's verdict, never reported.
#[derive(Debug, Clone, Copy, Default, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReportedStatus {
    Joining,
    #[default]
    Active,
    ShuttingDown,
}

impl From<ReportedStatus> for SiloStatus {
    fn from(status: ReportedStatus) -> Self {
        match status {
            ReportedStatus::Joining => SiloStatus::Joining,
            ReportedStatus::Active => SiloStatus::Active,
            ReportedStatus::ShuttingDown => SiloStatus::ShuttingDown,
        }
    }
}

/// A heartbeat. Only `silo` is required; absent load figures mean "no statistics".
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "silo": "10.0.0.5:11111@139000",
    "address": "10.0.0.5:11111",
    "status": "active",
    "role": "frontend",
    "metadata": {"zone": "az1"},
    "grain_types": ["user", "order"],
    "cpu_usage": 37.5,
    "memory_usage_bytes": 6_800_000_000_u64,
    "max_available_memory_bytes": 16_000_000_000_u64,
    "activation_count": 1200,
    "recent_activation_count": 450,
    "overloaded": false,
    "connection_count": 37,
    "network_bytes_per_second": 1_250_000
}))]
pub struct HeartbeatRequest {
    /// Unique per silo incarnation, conventionally `address@generation`. At most 255 characters, no
    /// white space or control characters.
    pub silo: String,
    /// Where clients and grains reach the silo; defaults to the part of `silo` before '@'.
    pub address: Option<String>,
    /// Defaults to `active`.
    pub status: Option<ReportedStatus>,
    /// For role-based placement and connection pools.
    pub role: Option<String>,
    /// Free-form labels for placement filters (at most 64 entries).
    pub metadata: Option<BTreeMap<String, String>>,
    /// Grain types this silo can host; absent means every type.
    pub grain_types: Option<Vec<String>>,
    /// Percent, 0 to 100, raw (the oracle smooths it).
    pub cpu_usage: Option<f64>,
    /// Bytes in use, raw (the oracle smooths it). May exceed `max_available_memory_bytes` (a soft
    /// limit): the silo then counts as full.
    pub memory_usage_bytes: Option<u64>,
    /// The silo's memory limit in bytes; available = max − usage.
    pub max_available_memory_bytes: Option<u64>,
    /// All activations on the silo.
    pub activation_count: Option<u64>,
    /// Activations used in the last few seconds.
    pub recent_activation_count: Option<u64>,
    /// The silo's own load-shedding verdict.
    pub overloaded: Option<bool>,
    /// ESTABLISHED external client TCP connections.
    pub connection_count: Option<u64>,
    /// Bytes per second in and out on external interfaces.
    pub network_bytes_per_second: Option<u64>,
}

impl HeartbeatRequest {
    /// Checks every field and builds the domain heartbeat, or reports every bad field at once.
    pub fn validate(self) -> Result<Heartbeat, Invalid> {
        let mut v = Violations::default();
        let silo = v.check(SiloId::parse("silo", &self.silo));
        if let Some(address) = &self.address {
            v.check(validation::token("address", address, MAX_SILO_ID_CHARS));
        }
        if let Some(role) = &self.role {
            v.check(validation::label("role", role, limits::MAX_ROLE_CHARS));
        }
        let metadata = self.metadata.unwrap_or_default();
        limits::HEARTBEAT_METADATA.check_count(&mut v, "metadata", metadata.len());
        for (key, value) in &metadata {
            v.check(
                validation::token("metadata", key, limits::MAX_METADATA_KEY_CHARS).map_err(|e| {
                    Invalid::one(format!("metadata.{key}"), format!("key {}", e.0[0].message))
                }),
            );
            if !value.is_empty() {
                v.check(validation::label(
                    &format!("metadata.{key}"),
                    value,
                    limits::MAX_METADATA_VALUE_CHARS,
                ));
            }
        }
        if let Some(types) = &self.grain_types {
            limits::GRAIN_TYPES.check_count(&mut v, "grain_types", types.len());
            for (i, grain_type) in types.iter().enumerate() {
                v.check(check_grain_type(&format!("grain_types[{i}]"), grain_type));
            }
        }
        if let Some(cpu) = self.cpu_usage {
            limits::CPU_USAGE.check(&mut v, "cpu_usage", cpu);
        }
        let counts = [
            ("memory_usage_bytes", self.memory_usage_bytes),
            (
                "max_available_memory_bytes",
                self.max_available_memory_bytes,
            ),
            ("activation_count", self.activation_count),
            ("recent_activation_count", self.recent_activation_count),
            ("connection_count", self.connection_count),
            ("network_bytes_per_second", self.network_bytes_per_second),
        ];
        for (field, value) in counts {
            if let Some(value) = value {
                limits::COUNT.check(&mut v, field, value as f64);
            }
        }
        v.finish(|| {
            let silo = silo.expect("checked");
            Heartbeat {
                address: self
                    .address
                    .unwrap_or_else(|| silo.default_address().to_owned()),
                silo,
                status: self.status.unwrap_or_default().into(),
                role: self.role,
                metadata,
                grain_types: self.grain_types,
                load: LoadReport {
                    cpu_usage: self.cpu_usage,
                    memory_usage_bytes: self.memory_usage_bytes,
                    max_available_memory_bytes: self.max_available_memory_bytes,
                    activation_count: self.activation_count,
                    recent_activation_count: self.recent_activation_count,
                    overloaded: self.overloaded.unwrap_or(false),
                    connection_count: self.connection_count,
                    network_bytes_per_second: self.network_bytes_per_second,
                },
            }
        })
    }
}

/// The silo as the oracle now sees it, and the lease this acknowledgement grants.
#[derive(Debug, Serialize, ToSchema)]
pub struct HeartbeatResponse {
    #[serde(flatten)]
    pub silo: SiloResponse,
    /// How long, counted from when the silo *sent* this heartbeat, it may keep running its grains
    /// without another acknowledged heartbeat: the TTL less a tenth (the margin covers clock
    /// rates and the time to stop), or less when the replica answered without writing this
    /// heartbeat (it changed only load figures, at most a third of the TTL after the one stored):
    /// then the lease ends a margin before the stored heartbeat's protection. When it
    /// runs out, pause every grain but keep the
    /// registrations; resume them, under the same epochs, when a heartbeat is acknowledged again;
    /// drop them only when told `silo-declared-dead`. A later acknowledgement never shortens a
    /// lease already held. The oracle declares no silo dead before its lease has run out.
    #[schema(example = 9000)]
    pub lease_ms: i64,
}

/// Report a silo's status and load.
///
/// Creates the cluster on its first heartbeat and the silo on its first. The oracle stamps the
/// heartbeat with its own clock and grants a lease (`lease_ms`, counted from when the silo sent
/// the heartbeat) during which the silo may run its grains. A silo silent for the cluster's
/// `silo_ttl_ms` is declared dead and its activations are released — never before its lease ran
/// out, and never for silence while the oracle could not reach its store. Send heartbeats well
/// within the lease (every second or two at the default 10 s TTL).
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/heartbeats",
    tag = "membership",
    security(("bearer" = ["silo"])),
    params(("cluster" = String, Path, description = "Cluster name: [a-z0-9][a-z0-9-]{0,62}")),
    request_body = HeartbeatRequest,
    responses(
        (status = 200, description = "The silo as the oracle now sees it, and its lease", body = HeartbeatResponse),
        (status = 409, description = "The silo was declared dead or is not newer than a dead generation at its address (rejoin under a newer generation), its status moved backwards, or a new cluster would exceed ORACLE_MAX_CLUSTERS", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields, each named", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "A new silo in a cluster at ORACLE_MAX_SILOS_PER_CLUSTER, or the cluster is over ORACLE_RATE_LIMIT_HEARTBEATS on this replica; retry after Retry-After", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn post_heartbeat(
    State(members): State<Arc<Members>>,
    State(limits): State<Arc<RateLimits>>,
    Cluster(cluster): Cluster,
    ApiJson(request): ApiJson<HeartbeatRequest>,
) -> Result<Json<HeartbeatResponse>, ApiError> {
    let _watch = SlowHeartbeatWatch {
        members: &members,
        arrived: Instant::now(),
    };
    limits.heartbeat(&cluster)?;
    let heartbeat = request.validate()?;
    let snapshot = members.heartbeat(&cluster, heartbeat).await?;
    Ok(Json(HeartbeatResponse {
        silo: SiloResponse::from(&snapshot),
        lease_ms: lease::granted_ms(
            snapshot.liveness.silo_ttl_ms,
            snapshot.record.protected_until_ms,
            snapshot.liveness.now,
        ),
    }))
}

/// A heartbeat this long in the replica's hands before it was answered (or given up on by its
/// client) waited in the replica's own queue: its silo's silence, and its neighbours', looks
/// longer than it was.
const SLOW_HEARTBEAT: Duration = Duration::from_secs(1);

/// Tells [`Members::could_not_keep_up`] when the heartbeat it watches took [`SLOW_HEARTBEAT`] or
/// longer, answered or dropped: a replica whose admitted work queues for seconds refuses little
/// (its in-flight limit is not reached while the queue drains), and judging silence then declared
/// the flood's own silo dead in the runtime overload fault, its heartbeats waiting behind the
/// flood's placements past the TTL and cancelled by their client.
struct SlowHeartbeatWatch<'a> {
    members: &'a Members,
    arrived: Instant,
}

impl Drop for SlowHeartbeatWatch<'_> {
    fn drop(&mut self) {
        if self.arrived.elapsed() >= SLOW_HEARTBEAT {
            self.members.could_not_keep_up();
        }
    }
}
