//! rio-rs's `ObjectPlacement`, answered by the oracle.
//!
//! rio-rs asks `lookup` on every request a server receives, and on a miss places the object on
//! the server that asked with a blind `update`. Here `lookup` never misses: for an object this
//! server does not run, it claims the object as this server's silo ([`Placement::claim`]), so the
//! answer is the directory's (a new object lands where the cluster's policy says, and two servers
//! asking at once get the same one). Its own registration comes back as the server's own address
//! (rio-rs then runs the object here); another silo's as that silo's address (rio-rs redirects the
//! caller there). `update`, `clean_server` and `remove` change nothing: the oracle's directory is
//! the one record, and a registration ends by release, hand-over or death, never by rio-rs's
//! word.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use placement_oracle_sdk::{Claim, Placement};
use rio_rs::errors::ObjectPlacementError;
use rio_rs::object_placement::{ObjectPlacement, ObjectPlacementItem};
use rio_rs::ObjectId;

use crate::fence::object_key;
use crate::gate::Gate;

/// The oracle's directory as rio-rs's object placement; cheap to clone.
#[derive(Clone)]
pub struct OraclePlacement {
    inner: Arc<Inner>,
}

struct Inner {
    gate: Arc<Gate>,
    placement: Placement,
    /// The address rio-rs's service compares a lookup's answer with (`Server::try_local_addr`).
    service_address: String,
}

impl OraclePlacement {
    pub fn new(gate: Arc<Gate>, placement: Placement, service_address: String) -> Self {
        Self {
            inner: Arc::new(Inner {
                gate,
                placement,
                service_address,
            }),
        }
    }
}

impl fmt::Debug for OraclePlacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OraclePlacement")
            .field("service_address", &self.inner.service_address)
            .finish_non_exhaustive()
    }
}

fn refused(detail: impl fmt::Display) -> ObjectPlacementError {
    ObjectPlacementError::Upstream(detail.to_string())
}

/// Yields to the runtime before rio-rs goes on to activate an object here.
///
/// rio-rs 0.7.2 keeps a registry shard's read guard (a blocking lock) across a handler's
/// awaits, and activating an object takes that shard's write lock, which blocks the worker
/// thread until those handlers end. A task that this connection's task woke since it last
/// yielded sits in this worker's LIFO slot, which no other worker may take: if it is such a
/// handler, the worker would block on it for good. Yielding lets it run first. (rio-rs's own
/// lookups always await their database, which yields the same way.)
async fn yield_before_activation() {
    tokio::task::yield_now().await;
}

#[async_trait]
impl ObjectPlacement for OraclePlacement {
    async fn lookup(&self, object_id: &ObjectId) -> Result<Option<String>, ObjectPlacementError> {
        let inner = &self.inner;
        let object = object_key(&object_id.0, &object_id.1);
        if !inner.gate.runs_here(&object) {
            // Never claimed while its hand-over is in flight: the oracle would answer with the
            // registration being moved.
            if inner.gate.is_leaving(&object) {
                return Err(refused(format!("{object} is being handed over")));
            }
            match inner.placement.claim(&object).await.map_err(refused)? {
                Claim::RunHere { silo, epoch, .. } => {
                    inner.gate.hold(&object, &silo, epoch).map_err(refused)?
                }
                Claim::ForwardTo { address, .. } => return Ok(Some(address)),
            }
        }
        yield_before_activation().await;
        Ok(Some(inner.service_address.clone()))
    }

    /// Reached only if a lookup missed, which this one never does: refused unless the object is
    /// already this server's.
    async fn update(&self, item: ObjectPlacementItem) -> Result<(), ObjectPlacementError> {
        let object = object_key(&item.object_id.0, &item.object_id.1);
        if self.inner.gate.runs_here(&object) {
            return Ok(());
        }
        Err(refused(format!(
            "{object}: placement is the oracle's; only a claim registers an object"
        )))
    }

    /// A server is gone by the oracle's judgement (heartbeats), not by a peer's: nothing to do.
    async fn clean_server(&self, _address: String) -> Result<(), ObjectPlacementError> {
        Ok(())
    }

    /// rio-rs calls it when it drops an object from its registry (a panic, or the gate's own
    /// shutdown). The registration stays until a release, a hand-over or a death ends it, and
    /// an error here would stop rio-rs's server.
    async fn remove(&self, _object_id: &ObjectId) -> Result<(), ObjectPlacementError> {
        Ok(())
    }
}
