//! Response bodies more than one resource answers with: a silo as the oracle sees it now (silos,
//! heartbeats, drains) and a grain's activation (lookups, listings, placements).

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

use crate::cluster::{LoadReport, SiloStatus};
use crate::oracle::SiloSnapshot;
use crate::store::Activation;

/// Smoothed load: the dual-mode Kalman filter's output over the silo's heartbeats.
#[derive(Debug, Serialize, ToSchema)]
pub struct SmoothedLoad {
    /// Smoothed CPU usage, percent.
    #[schema(example = 41.2)]
    pub cpu_usage: Option<f64>,
    /// Smoothed memory in use, bytes.
    #[schema(example = 6_700_000_000_u64)]
    pub memory_usage_bytes: Option<u64>,
    /// Memory limit minus smoothed usage, bytes.
    #[schema(example = 9_300_000_000_u64)]
    pub available_memory_bytes: Option<u64>,
}

/// A silo as the oracle sees it now.
#[derive(Debug, Serialize, ToSchema)]
pub struct SiloResponse {
    #[schema(example = "10.0.0.5:11111@139000")]
    pub silo: String,
    #[schema(example = "10.0.0.5:11111")]
    pub address: String,
    /// Status now: what the silo reported, or `dead` once it stayed silent for `silo_ttl_ms`.
    pub status: SiloStatus,
    pub role: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// Grain types it hosts; null means every type.
    pub grain_types: Option<Vec<String>>,
    /// The last heartbeat's figures, as sent.
    pub load: LoadReport,
    pub smoothed: SmoothedLoad,
    /// Milliseconds since the last heartbeat, on the store's clock.
    #[schema(example = 850)]
    pub last_heartbeat_age_ms: i64,
    /// When the last heartbeat arrived, ms since the Unix epoch (the store's clock: the database's,
    /// the same for every replica).
    pub last_heartbeat_at_ms: i64,
    /// When the oracle first heard from this silo, ms since the Unix epoch.
    pub first_seen_at_ms: i64,
    pub heartbeat_count: i64,
    /// The cluster's silence limit: heartbeat well within it.
    #[schema(example = 10000)]
    pub silo_ttl_ms: i64,
    /// The drain's progress while the silo is drained (`POST …/drain`) and alive; null otherwise.
    pub drain: Option<DrainProgress>,
}

/// How far a silo's drain has got. It is done when `remaining_activations` is 0; activations that
/// stay are of immovable types (`immovable: any`) or of types no other silo can take.
#[derive(Debug, Serialize, ToSchema)]
pub struct DrainProgress {
    /// When the drain was asked for, ms since the Unix epoch (the store's clock).
    #[schema(example = 1_764_547_200_000_i64)]
    pub requested_at_ms: i64,
    /// Activations still on the silo.
    #[schema(example = 120)]
    pub remaining_activations: u64,
    /// Of those, how many have an open migration (see `GET …/migrations?silo=`).
    #[schema(example = 118)]
    pub migrating: u64,
}

impl From<&SiloSnapshot> for SiloResponse {
    fn from(snapshot: &SiloSnapshot) -> Self {
        let record = &snapshot.record;
        let profile = &record.profile;
        let smoothed_memory = profile.smoothing.memory_usage_bytes;
        Self {
            silo: record.id.to_string(),
            address: profile.address.clone(),
            status: snapshot.status(),
            role: profile.role.clone(),
            metadata: profile.metadata.clone(),
            grain_types: profile.grain_types.clone(),
            load: profile.load.clone(),
            smoothed: SmoothedLoad {
                cpu_usage: profile.smoothing.cpu_usage,
                memory_usage_bytes: smoothed_memory,
                available_memory_bytes: profile
                    .load
                    .max_available_memory_bytes
                    .zip(smoothed_memory)
                    .map(|(max, used)| max.saturating_sub(used)),
            },
            last_heartbeat_age_ms: snapshot.liveness.silent_for(record.last_heartbeat_ms),
            last_heartbeat_at_ms: record.last_heartbeat_ms,
            first_seen_at_ms: profile.first_seen_ms,
            heartbeat_count: record.heartbeat_count,
            silo_ttl_ms: snapshot.liveness.silo_ttl_ms,
            drain: snapshot.drain.map(|drain| DrainProgress {
                requested_at_ms: drain.requested_at_ms,
                remaining_activations: drain.remaining_activations,
                migrating: drain.migrating,
            }),
        }
    }
}

/// A grain's activation.
#[derive(Debug, Serialize, ToSchema)]
pub struct ActivationResponse {
    #[schema(example = "user/alice")]
    pub grain: String,
    #[schema(example = "10.0.0.7:11111@139002")]
    pub silo: String,
    #[schema(example = "10.0.0.7:11111")]
    pub address: String,
    #[schema(example = "random")]
    pub strategy: String,
    #[schema(example = 1)]
    pub epoch: i64,
    /// When it was registered, ms since the Unix epoch (oracle clock).
    pub created_at_ms: i64,
}

impl From<Activation> for ActivationResponse {
    fn from(a: Activation) -> Self {
        Self {
            grain: a.grain,
            silo: a.silo,
            address: a.address,
            strategy: a.strategy,
            epoch: a.epoch,
            created_at_ms: a.created_ms,
        }
    }
}
