//! `activation_count`: power of k choices over recent activation counts (Orleans
//! `ActivationCountBasedPlacement`, §1.12).
//!
//! Sample k distinct candidates, take the one with the fewest recently used activations plus the
//! activations this replica placed on it since its last heartbeat. Overloaded silos are skipped;
//! silos that report no figures are used only when no silo with figures qualifies.
//!
//! One departure from Orleans (reference quirk 4): Orleans adds the number of silos with statistics
//! to a silo's local tally for each placement, because every Orleans silo places independently and
//! each decision stands for all of them. The oracle places centrally, so each placement counts once.

use rand::Rng;

use super::options::ActivationCountOptions;
use super::{random, CandidateScore, Choice, ClusterView, LocalDeltas, PlacementError, Rule};
use crate::cluster::{SiloRecord, SiloStatus};

fn recent(silo: &SiloRecord) -> Option<u64> {
    silo.profile.load.recent_activation_count
}

pub fn choose<'v>(
    view: &ClusterView,
    candidates: &[&'v SiloRecord],
    local: Option<&'v SiloRecord>,
    options: &ActivationCountOptions,
    deltas: &LocalDeltas,
    rng: &mut impl Rng,
) -> Result<Choice<'v>, PlacementError> {
    let any_statistics = view.silos.iter().any(|s| {
        matches!(view.status(s), SiloStatus::Joining | SiloStatus::Active) && recent(s).is_some()
    });
    if !any_statistics {
        // Nobody has reported yet: place locally when possible, as Orleans does until its
        // statistics cache fills.
        return Ok(
            match local.filter(|l| candidates.iter().any(|c| c.id == l.id)) {
                Some(local) => Choice::plain(local, Rule::Local),
                None => Choice::plain(random::choose(candidates, rng), Rule::NoStatistics),
            },
        );
    }

    let mut relevant = Vec::with_capacity(candidates.len());
    let mut without_statistics = None;
    let mut seen_without = 0u32;
    for &silo in candidates {
        match recent(silo) {
            None => {
                // Reservoir sampling: each silo without figures is kept with equal probability.
                seen_without += 1;
                if rng.gen_range(0..seen_without) == 0 {
                    without_statistics = Some(silo);
                }
            }
            Some(_) if silo.profile.load.overloaded => {}
            Some(_) => relevant.push(silo),
        }
    }

    if relevant.is_empty() {
        return match without_statistics {
            Some(silo) => Ok(Choice::plain(silo, Rule::NoStatistics)),
            None => Err(PlacementError::AllOverloaded {
                candidates: candidates.len(),
            }),
        };
    }

    let draws = relevant.len().min(options.choose_out_of as usize);
    for i in 0..draws {
        let j = rng.gen_range(i..relevant.len());
        relevant.swap(i, j);
    }
    let load = |silo: &SiloRecord| deltas.get(silo) + recent(silo).unwrap_or(0);
    let mut best = relevant[0];
    for &silo in &relevant[1..draws] {
        if load(silo) < load(best) {
            best = silo;
        }
    }
    let scores = relevant[..draws]
        .iter()
        .map(|silo| CandidateScore {
            silo: silo.id.to_string(),
            score: load(silo) as f64,
            terms: [
                (
                    "recent_activation_count".to_owned(),
                    recent(silo).unwrap_or(0) as f64,
                ),
                ("placed_since_heartbeat".to_owned(), deltas.get(silo) as f64),
            ]
            .into(),
            missing: Vec::new(),
        })
        .collect();
    Ok(Choice {
        silo: best,
        rule: Rule::LeastLoaded,
        scores,
    })
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::placement::testing::{silo, view};

    fn with_recent(id: &str, recent: Option<u64>, overloaded: bool) -> SiloRecord {
        let mut s = silo(id, SiloStatus::Active, None);
        s.profile.load.recent_activation_count = recent;
        s.profile.load.overloaded = overloaded;
        s
    }

    fn pick(
        v: &ClusterView,
        local: Option<&str>,
        deltas: &LocalDeltas,
        seed: u64,
    ) -> Result<String, PlacementError> {
        let candidates: Vec<&SiloRecord> = v.silos.iter().collect();
        let local = local.and_then(|l| v.silos.iter().find(|s| s.id.as_str() == l));
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        choose(
            v,
            &candidates,
            local,
            &ActivationCountOptions::default(),
            deltas,
            &mut rng,
        )
        .map(|c| c.silo.id.to_string())
    }

    #[test]
    fn scenario_5_the_least_loaded_of_two_wins_until_its_tally_catches_up() {
        let v = view(vec![
            with_recent("B", Some(100), false),
            with_recent("C", Some(10), false),
        ]);
        let mut deltas = LocalDeltas::default();
        for seed in 0..20 {
            assert_eq!(pick(&v, None, &deltas, seed).unwrap(), "C");
        }
        // Each placement on C counts; after 90 of them B and C tie and after 91 B wins.
        let c = &v.silos[1];
        deltas.add(c, 91);
        assert_eq!(pick(&v, None, &deltas, 0).unwrap(), "B");
        // A new heartbeat from C (a new heartbeat count) brings fresh figures: the tally resets.
        let mut fresh = v.clone();
        std::sync::Arc::make_mut(&mut fresh.silos)[1].heartbeat_count += 1;
        assert_eq!(pick(&fresh, None, &deltas, 0).unwrap(), "C");
    }

    #[test]
    fn a_late_tally_from_an_older_view_adds_to_the_newer_tally_and_can_be_taken_back() {
        let old = with_recent("S", Some(10), false);
        let mut newer = old.clone();
        newer.heartbeat_count += 1;
        let mut deltas = LocalDeltas::default();
        deltas.add(&newer, 50);
        deltas.add(&old, 1);
        assert_eq!(
            deltas.get(&newer),
            51,
            "an old view's placement must not wipe the newer tally"
        );
        deltas.remove(&newer, 2);
        assert_eq!(deltas.get(&newer), 49);
        deltas.remove(&old, 10);
        assert_eq!(
            deltas.get(&newer),
            49,
            "a take-back for an older heartbeat leaves the newer alone"
        );
        deltas.remove(&newer, 100);
        assert_eq!(deltas.get(&newer), 0);
    }

    #[test]
    fn scenario_6_all_overloaded_is_an_error() {
        let v = view(vec![
            with_recent("B", Some(1), true),
            with_recent("C", Some(1), true),
        ]);
        assert_eq!(
            pick(&v, None, &LocalDeltas::default(), 0),
            Err(PlacementError::AllOverloaded { candidates: 2 })
        );
    }

    #[test]
    fn the_orleans_unit_test_rows_hold() {
        // Empty statistics, local compatible → local; local not compatible → the other silo.
        let none = view(vec![
            with_recent("101", None, false),
            with_recent("local", None, false),
        ]);
        assert_eq!(
            pick(&none, Some("local"), &LocalDeltas::default(), 0).unwrap(),
            "local"
        );
        let only = view(vec![with_recent("101", None, false)]);
        assert_eq!(
            pick(&only, Some("local"), &LocalDeltas::default(), 0).unwrap(),
            "101"
        );
        // A silo with figures beats one without.
        let mixed = view(vec![
            with_recent("101", Some(10), false),
            with_recent("102", None, false),
        ]);
        assert_eq!(
            pick(&mixed, None, &LocalDeltas::default(), 0).unwrap(),
            "101"
        );
        // Overloaded with figures vs no figures → the one without figures.
        let fallback = view(vec![
            with_recent("101", Some(10), true),
            with_recent("102", None, false),
        ]);
        assert_eq!(
            pick(&fallback, None, &LocalDeltas::default(), 0).unwrap(),
            "102"
        );
    }

    #[test]
    fn overloaded_silos_are_never_chosen() {
        let v = view(vec![
            with_recent("a", Some(0), true),
            with_recent("b", Some(500), false),
            with_recent("c", Some(900), false),
        ]);
        for seed in 0..50 {
            assert_ne!(pick(&v, None, &LocalDeltas::default(), seed).unwrap(), "a");
        }
    }
}
