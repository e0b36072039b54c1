//! `random`: a uniform pick among the candidates (Orleans `RandomPlacement`, §1.5).
//!
//! It ignores load entirely, which makes it the right choice only when activations are cheap and
//! numerous enough for the law of large numbers to spread them.

use rand::Rng;

use crate::cluster::SiloRecord;

/// Picks one candidate uniformly. `candidates` must not be empty.
pub fn choose<'a>(candidates: &[&'a SiloRecord], rng: &mut impl Rng) -> &'a SiloRecord {
    candidates[rng.gen_range(0..candidates.len())]
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::cluster::SiloStatus;
    use crate::placement::testing::silo;

    #[test]
    fn spreads_evenly_over_many_picks() {
        let silos: Vec<_> = (0..4)
            .map(|i| silo(&format!("s{i}"), SiloStatus::Active, None))
            .collect();
        let candidates: Vec<_> = silos.iter().collect();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut counts = [0u32; 4];
        for _ in 0..40_000 {
            let chosen = choose(&candidates, &mut rng);
            counts[silos.iter().position(|s| s.id == chosen.id).unwrap()] += 1;
        }
        for count in counts {
            assert!((9_500..=10_500).contains(&count), "{counts:?}");
        }
    }

    #[test]
    fn a_single_candidate_is_always_chosen() {
        let only = silo("only", SiloStatus::Active, None);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert_eq!(choose(&[&only], &mut rng).id, only.id);
    }
}
