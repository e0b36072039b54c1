//! `stateless_worker`: the requesting silo unless it is shutting down, otherwise a random candidate;
//! never registered in the directory (Orleans `StatelessWorkerPlacement`, §1.8). Unlike
//! `prefer_local`, a joining silo keeps its workers local. How many workers run per silo
//! (`max_local`) is the silo's business; the oracle passes the option along.

use super::ClusterView;
use crate::cluster::{SiloRecord, SiloStatus};

/// The requesting silo, if it may host the worker: not terminating (joining or active) and hosting
/// the grain type.
pub fn eligible_local<'v>(
    view: &ClusterView,
    local: Option<&'v SiloRecord>,
    grain_type: &str,
) -> Option<&'v SiloRecord> {
    local.filter(|local| {
        matches!(view.status(local), SiloStatus::Joining | SiloStatus::Active)
            && local.hosts(grain_type)
    })
}
