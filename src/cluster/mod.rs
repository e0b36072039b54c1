//! The cluster domain: names, silos and their lifecycle, load statistics and their smoothing.
//!
//! Pure code: no I/O, no clock reads (time is passed in), so every rule here is tested directly.

pub mod heartbeat;
pub mod kalman;
pub mod lease;
pub mod names;
pub mod ownership;
pub mod silo;

pub use heartbeat::{Heartbeat, HeartbeatRejection};
pub use names::{ClusterName, GrainId, PoolName, SiloId};
pub use silo::{Liveness, LoadReport, SiloRecord, SiloStatus};
