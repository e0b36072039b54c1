//! The limits of the API's own inputs (what no domain type owns: a heartbeat's labels and
//! figures, batch sizes, edge reports, key labels), declared once: the published schema states
//! them (`contract`) and the handlers check them. The domain's options declare theirs beside
//! them (`rebalancer::options::bounds`, `policy::bounds`, …).

use crate::validation::{Bound, MAX_SAFE_INTEGER};

/// Metadata pairs one heartbeat may carry.
pub const HEARTBEAT_METADATA: Bound = Bound::new(0.0, 64.0);
pub const MAX_METADATA_KEY_CHARS: usize = 128;
pub const MAX_METADATA_VALUE_CHARS: usize = 1_024;
/// Grain types one silo may list.
pub const GRAIN_TYPES: Bound = Bound::new(0.0, 4_096.0);
pub const MAX_ROLE_CHARS: usize = 128;
/// CPU usage in percent.
pub const CPU_USAGE: Bound = Bound::new(0.0, 100.0);
/// Byte counts, activation and connection counts: what a JSON number carries exactly.
pub const COUNT: Bound = Bound::new(0.0, MAX_SAFE_INTEGER as f64);
/// Grains one placement batch may carry.
pub const BATCH: Bound = Bound::new(1.0, 1_000.0);
/// Edges one report may carry.
pub const EDGES: Bound = Bound::new(1.0, 10_000.0);
/// Calls one edge may count.
pub const EDGE_COUNT: Bound = Bound::new(1.0, 1_000_000_000.0);
/// A rebalancer suspension: up to a week.
pub const SUSPENSION_MS: Bound = Bound::new(1.0, 604_800_000.0);
/// Migration ids (`…/migrations/{id}`) and the cursor of a silo's migrations (the last id seen).
pub const MIGRATION_ID: Bound = Bound::new(1.0, MAX_SAFE_INTEGER as f64);
pub const MIGRATION_CURSOR: Bound = Bound::new(0.0, MAX_SAFE_INTEGER as f64);
/// Activation epochs.
pub const EPOCH: Bound = Bound::new(1.0, MAX_SAFE_INTEGER as f64);
/// Scopes one key may have.
pub const KEY_SCOPES: Bound = Bound::new(1.0, 8.0);
pub const MAX_KEY_LABEL_CHARS: usize = 200;
