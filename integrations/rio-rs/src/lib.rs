//! rio-rs servers placed and fenced by the placement oracle.
//!
//! [rio-rs](https://crates.io/crates/rio-rs) (0.7.2) leaves two seams open: where an object
//! lives (`ObjectPlacement`) and who is in the cluster (`MembershipStorage`, driven by a
//! `ClusterProvider`). Its own backends place an object on whichever server gets its first
//! call, with a blind upsert, so two servers can run one object at once, and nothing fences a
//! server that lost its membership. This crate fills both seams with the oracle, through the
//! Rust SDK (`sdk/rust`):
//!
//! - [`OraclePlacement`] answers rio-rs's lookups with the oracle's directory: an object that
//!   runs nowhere is claimed as the asking server's silo and lands where the cluster's policy
//!   says; concurrent first calls on two servers get one answer.
//! - [`OracleMembership`] and [`OracleClusterProvider`]: membership is the silo's heartbeats.
//! - [`Gate`] is the fence: an object serves a call only under a registration its server holds,
//!   while that server holds its lease ([`admit`] at the top of every handler), loads its state
//!   again when the activation it runs under changes, and is dropped when its server is declared
//!   dead, leaves, or hands it over for a migration the oracle issued.
//! - [`OracleNode`] wires them with rio-rs's `Server`; [`NodeHandle::drain`] is a planned
//!   shutdown.
//!
//! The example application (`examples/counter`) and the side-by-side test
//! (`tests/side_by_side.rs`, rio-rs's own Postgres backends against these under the same
//! faults) show it in use.
#![forbid(unsafe_code)]

mod fence;
mod gate;
mod membership;
mod node;
mod placement;

pub use fence::{
    admit, object_key, Activations, Admission, Ended, Fence, FenceHandle, NoObserver, Observer,
    Refusal, Token,
};
pub use gate::{Gate, GateStats};
pub use membership::{OracleClusterProvider, OracleMembership};
pub use node::{NodeError, NodeHandle, NodeOptions, OracleNode, OracleServer};
pub use placement::OraclePlacement;
