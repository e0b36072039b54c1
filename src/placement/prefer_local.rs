//! `prefer_local`: the requesting silo when it is active and can host the grain, otherwise a random
//! candidate (Orleans `PreferLocalPlacement`, §1.6). No load checks: choose it for grains that
//! mostly talk to the grain that created them.

use rand::Rng;

use super::{random, Choice, Rule};
use crate::cluster::SiloRecord;

/// `candidates` are active and compatible, so the local silo qualifies exactly when it is among them.
pub fn choose<'v>(
    candidates: &[&'v SiloRecord],
    local: Option<&'v SiloRecord>,
    rng: &mut impl Rng,
) -> Choice<'v> {
    match local.filter(|local| candidates.iter().any(|c| c.id == local.id)) {
        Some(local) => Choice::plain(local, Rule::Local),
        None => Choice::plain(random::choose(candidates, rng), Rule::Random),
    }
}
