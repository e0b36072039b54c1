//! "Which grains should move", the rebalancer's part (reference 4): measures how unevenly a
//! cluster's activations (and memory) are spread, and in sessions of cycles plans moves from heavy
//! silos to light ones. Pure: the options, the arithmetic of one cycle and the session state
//! machine, over figures and an instant handed in; the oracle turns moves into migrations.

pub mod options;
pub mod plan;
pub mod session;

pub use options::RebalancerOptions;
pub use plan::{Measure, Move, SiloLoad};
pub use session::{CycleOutcome, CycleReport, Rebalancer, SiloTally};

#[cfg(test)]
mod tests;
