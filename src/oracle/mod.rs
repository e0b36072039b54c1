//! The oracle's use cases: the one place that combines the store, the clock, the RNG and the pure
//! domain. HTTP handlers (and anything else that drives the oracle) call these methods and only
//! translate inputs and outputs.

mod directory;
mod membership;
mod sweeper;

use std::sync::{Arc, Mutex};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

pub use directory::{Outcome, Page, PlaceRequest, Placement};
pub use membership::SiloSnapshot;
pub use sweeper::run_sweeper;

use crate::clock::Clock;
use crate::cluster::HeartbeatRejection;
use crate::placement::PlacementError;
use crate::store::{Store, StoreError};

/// Why a use case could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    #[error("cluster `{0}` is unknown: clusters come into being with their first heartbeat")]
    ClusterNotFound(String),
    #[error("silo `{silo}` is not a member of cluster `{cluster}`")]
    SiloNotFound { cluster: String, silo: String },
    #[error("grain `{0}` has no activation")]
    ActivationNotFound(String),
    #[error("grain `{grain}` is active on silo `{silo}`, not on the silo named")]
    ActivationElsewhere { grain: String, silo: String },
    #[error(transparent)]
    HeartbeatRejected(#[from] HeartbeatRejection),
    #[error(transparent)]
    Unplaceable(#[from] PlacementError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The oracle: shared by every request of one process.
pub struct Oracle {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    /// One seeded generator for every random decision of this process. Seeded from the OS in
    /// production; tests pass a seed and get the same decisions every run.
    rng: Mutex<ChaCha8Rng>,
}

impl Oracle {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, seed: Option<u64>) -> Self {
        let rng = match seed {
            Some(seed) => ChaCha8Rng::seed_from_u64(seed),
            None => ChaCha8Rng::from_entropy(),
        };
        Self {
            store,
            clock,
            rng: Mutex::new(rng),
        }
    }

    pub fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    fn with_rng<T>(&self, f: impl FnOnce(&mut ChaCha8Rng) -> T) -> T {
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut rng)
    }
}
