//! `consistent_hash` (beyond Orleans): rendezvous hashing with bounded loads.
//!
//! Every candidate gets a pseudo-random weight from hashing (grain, silo); the grain goes to the
//! heaviest candidate — so when a silo joins or leaves, only the grains whose heaviest candidate
//! changed move, about 1/n of them, unlike `hash_based`'s modulo, which remaps almost all. Plain
//! rendezvous hashing spreads grains only as evenly as chance allows (the busiest of 100 silos
//! ends near 1.08× the mean at 100 000 grains), so loads are bounded as in Mirrokni, Thorup and
//! Zadimoghaddam's consistent hashing with bounded loads: a silo already carrying more than
//! `load_factor_percent` of the mean is passed over for the next heaviest. Loads are the silos'
//! reported activation counts plus this replica's placements since their last heartbeat.
//!
//! Weights use XXH3-64, fixed by its specification, so every replica and every version agrees.

use super::options::ConsistentHashOptions;
use super::{CandidateScore, Choice, LocalDeltas, Rule};
use crate::cluster::{GrainId, SiloRecord};

/// The rendezvous weight of `silo` for `grain`.
pub fn weight(grain: &GrainId, silo: &SiloRecord) -> u64 {
    let mut key = Vec::with_capacity(grain.as_str().len() + silo.id.as_str().len() + 1);
    key.extend_from_slice(grain.as_str().as_bytes());
    key.push(0);
    key.extend_from_slice(silo.id.as_str().as_bytes());
    xxhash_rust::xxh3::xxh3_64(&key)
}

/// `candidates` must not be empty.
pub fn choose<'v>(
    candidates: &[&'v SiloRecord],
    grain: &GrainId,
    options: &ConsistentHashOptions,
    deltas: &LocalDeltas,
) -> Choice<'v> {
    let mut ranked: Vec<(&SiloRecord, u64)> = candidates
        .iter()
        .map(|&silo| (silo, weight(grain, silo)))
        .collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.id.cmp(&b.0.id)));

    let load = |silo: &SiloRecord| {
        silo.profile
            .load
            .activation_count
            .map(|reported| reported + deltas.get(silo))
    };
    let loads: Vec<Option<u64>> = ranked.iter().map(|(silo, _)| load(silo)).collect();
    let scores = ranked
        .iter()
        .zip(&loads)
        .map(|((silo, weight), load)| CandidateScore {
            silo: silo.id.to_string(),
            score: *weight as f64,
            terms: load
                .map(|l| [("load".to_owned(), l as f64)].into())
                .unwrap_or_default(),
            missing: Vec::new(),
        })
        .collect();

    // Without load figures from every candidate there is nothing to bound by: plain rendezvous.
    if loads.iter().any(Option::is_none) {
        return Choice {
            silo: ranked[0].0,
            rule: Rule::Hash,
            scores,
        };
    }
    let total: u64 = loads.iter().flatten().sum();
    let capacity =
        (u64::from(options.load_factor_percent) * (total + 1)).div_ceil(100 * ranked.len() as u64);
    let chosen = ranked
        .iter()
        .zip(&loads)
        .find(|(_, load)| load.unwrap_or(0) < capacity)
        .map_or(ranked[0].0, |((silo, _), _)| *silo);
    let rule = if chosen.id == ranked[0].0.id {
        Rule::Hash
    } else {
        Rule::LoadBound
    };
    Choice {
        silo: chosen,
        rule,
        scores,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::cluster::SiloStatus;
    use crate::placement::testing::silo;

    fn grain(i: usize) -> GrainId {
        GrainId::parse("grain", &format!("user/{i}")).unwrap()
    }

    #[test]
    fn a_joining_silo_takes_about_one_nth_and_nothing_else_moves() {
        let mut silos: Vec<SiloRecord> = (0..10)
            .map(|i| silo(&format!("s{i}"), SiloStatus::Active, None))
            .collect();
        let options = ConsistentHashOptions::default();
        let before: Vec<String> = (0..10_000)
            .map(|i| {
                let candidates: Vec<&SiloRecord> = silos.iter().collect();
                choose(&candidates, &grain(i), &options, &LocalDeltas::default())
                    .silo
                    .id
                    .to_string()
            })
            .collect();
        silos.push(silo("s10", SiloStatus::Active, None));
        let candidates: Vec<&SiloRecord> = silos.iter().collect();
        let mut moved = 0;
        for (i, old) in before.iter().enumerate() {
            let new = choose(&candidates, &grain(i), &options, &LocalDeltas::default())
                .silo
                .id
                .to_string();
            if &new != old {
                assert_eq!(new, "s10", "a grain only ever moves to the new silo");
                moved += 1;
            }
        }
        assert!(
            (800..=1_000).contains(&moved),
            "{moved} of 10000 moved; 1/11 is 909"
        );
    }

    #[test]
    fn a_silo_over_its_bound_is_passed_over() {
        let mut silos: Vec<SiloRecord> = (0..4)
            .map(|i| silo(&format!("s{i}"), SiloStatus::Active, None))
            .collect();
        for s in &mut silos {
            s.profile.load.activation_count = Some(100);
        }
        let g = grain(7);
        let candidates: Vec<&SiloRecord> = silos.iter().collect();
        let first = choose(
            &candidates,
            &g,
            &ConsistentHashOptions::default(),
            &LocalDeltas::default(),
        );
        assert_eq!(first.rule, Rule::Hash);
        let favourite = first.silo.id.clone();

        let mut deltas = LocalDeltas::default();
        deltas.add(silos.iter().find(|s| s.id == favourite).unwrap(), 20);
        let second = choose(&candidates, &g, &ConsistentHashOptions::default(), &deltas);
        assert_eq!(second.rule, Rule::LoadBound);
        assert_ne!(second.silo.id, favourite);
    }

    #[test]
    fn bounded_loads_stay_within_the_factor_of_the_mean() {
        let silos: Vec<SiloRecord> = (0..20)
            .map(|i| {
                let mut s = silo(&format!("s{i}"), SiloStatus::Active, None);
                s.profile.load.activation_count = Some(0);
                s
            })
            .collect();
        let candidates: Vec<&SiloRecord> = silos.iter().collect();
        let mut deltas = LocalDeltas::default();
        let mut counts: HashMap<String, u64> = HashMap::new();
        for i in 0..20_000 {
            let chosen = choose(
                &candidates,
                &grain(i),
                &ConsistentHashOptions::default(),
                &deltas,
            )
            .silo;
            deltas.add(chosen, 1);
            *counts.entry(chosen.id.to_string()).or_default() += 1;
        }
        let max = *counts.values().max().unwrap();
        assert!(
            max <= 1_050,
            "most loaded silo has {max}, the bound is 1.05 × 1000"
        );
    }
}
