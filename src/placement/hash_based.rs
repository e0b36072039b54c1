//! `hash_based`: Orleans' grain hash modulo the candidates in Orleans' silo order
//! (`HashBasedPlacement`, §1.7). Every replica — and Orleans itself — agrees on the silo without
//! coordination. It is a plain modulo, not consistent hashing: a membership change remaps about
//! (n−1)/n of new placements (existing activations stay where they are).
//!
//! Grain keys must be spelled as Orleans spells them: integer keys in upper-case hex without
//! padding (1234 → `4D2`), a key extension after `+`.

use super::hash::{grain_hash, orleans_order};
use crate::cluster::{GrainId, SiloRecord};

/// `candidates` must not be empty.
pub fn choose<'v>(candidates: &[&'v SiloRecord], grain: &GrainId) -> &'v SiloRecord {
    let mut ordered = candidates.to_vec();
    ordered.sort_by(|a, b| orleans_order(&a.id, &b.id));
    let hash = grain_hash(grain.grain_type(), grain.key()) & 0x7FFF_FFFF;
    ordered[hash as usize % ordered.len()]
}
