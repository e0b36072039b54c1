//! `resource_optimized` (the default): Orleans' `ResourceOptimizedPlacement` (§1.13).
//!
//! Each candidate gets a score in [0, 1] — lower is better — from its smoothed CPU, smoothed memory
//! use, available memory, memory size relative to the largest silo, and activation count relative to
//! the busiest, weighted by the options. About √n candidates are sampled (so concurrent deciders do
//! not all pile onto one silo), a tiny jitter breaks ties, and the requesting silo wins if its score
//! is within the preference margin of the best, keeping calls local when that costs little.
//!
//! Beyond Orleans, whose silos always publish every statistic: a silo scores on the figures it
//! reports (CPU only is enough), its sum divided by the weight of those terms, and the explanation
//! names the missing ones. Only when no silo reports anything is the choice random.
//!
//! Departure from Orleans (reference quirk 3): when every silo reports zero activations Orleans
//! divides 0 by 0 and every score becomes NaN; here the activation term is 0 instead.

use std::collections::BTreeMap;

use rand::Rng;

use super::options::ResourceOptimizedOptions;
use super::{random, CandidateScore, Choice, ClusterView, Rule};
use crate::cluster::{SiloRecord, SiloStatus};

/// The figures a score is computed from; each one only if the silo reported it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// Smoothed CPU, percent.
    pub cpu: Option<f64>,
    /// Smoothed memory use as a fraction of the silo's maximum (needs both).
    pub memory_usage: Option<f64>,
    /// Available memory as a fraction of the silo's maximum (needs both).
    pub available_memory: Option<f64>,
    /// The silo's maximum memory in bytes.
    pub max_memory: Option<f64>,
    pub activations: Option<f64>,
    pub overloaded: bool,
}

impl Figures {
    /// A silo's figures, if it reported any: CPU, activation count or its memory size. A silo
    /// that reports only some is scored on those (see [`score`]).
    pub fn of(silo: &SiloRecord) -> Option<Self> {
        let cpu = silo.profile.smoothing.cpu_usage;
        let activations = silo.profile.load.activation_count.map(|n| n as f64);
        let max = silo
            .profile
            .load
            .max_available_memory_bytes
            .filter(|&max| max > 0)
            .map(|max| max as f64);
        let used = silo
            .profile
            .smoothing
            .memory_usage_bytes
            .map(|used| used as f64);
        if cpu.is_none() && activations.is_none() && max.is_none() {
            return None;
        }
        let fraction = |x: f64, max: f64| (x / max).clamp(0.0, 1.0);
        let both = max.zip(used);
        Some(Self {
            cpu,
            memory_usage: both.map(|(max, used)| fraction(used, max)),
            available_memory: both.map(|(max, used)| fraction(max - used, max)),
            max_memory: max,
            activations,
            overloaded: silo.profile.load.overloaded,
        })
    }
}

/// Normalised weights: each option divided by their sum (all zero if the sum is zero).
///
/// A silo is judged only on terms that weigh something: one whose reported figures all have
/// weight 0 tells nothing under these options, and is treated like a silo without figures.
#[derive(Debug, Clone, Copy)]
struct Weights {
    cpu: f64,
    memory: f64,
    available: f64,
    max_memory: f64,
    activations: f64,
}

impl Weights {
    /// Whether these weights can judge a silo with figures `f`: some weighed term is reported,
    /// or nothing weighs anything (then every score is 0 and the jitter decides).
    fn judge(&self, f: &Figures) -> bool {
        let all = [
            self.cpu,
            self.memory,
            self.available,
            self.max_memory,
            self.activations,
        ];
        all.iter().all(|&w| w == 0.0)
            || (self.cpu > 0.0 && f.cpu.is_some())
            || (self.memory > 0.0 && f.memory_usage.is_some())
            || (self.available > 0.0 && f.available_memory.is_some())
            || (self.max_memory > 0.0 && f.max_memory.is_some())
            || (self.activations > 0.0 && f.activations.is_some())
    }

    fn of(options: &ResourceOptimizedOptions) -> Self {
        let sum = f64::from(
            options.cpu_usage_weight
                + options.memory_usage_weight
                + options.available_memory_weight
                + options.max_available_memory_weight
                + options.activation_count_weight,
        );
        let w = |x: u32| if sum > 0.0 { f64::from(x) / sum } else { 0.0 };
        Self {
            cpu: w(options.cpu_usage_weight),
            memory: w(options.memory_usage_weight),
            available: w(options.available_memory_weight),
            max_memory: w(options.max_available_memory_weight),
            activations: w(options.activation_count_weight),
        }
    }
}

/// A silo's score terms in name order (the order a score sums them in, so that a score computed
/// with or without its explanation is the same number to the last bit): each term's weighted value,
/// or `None` when the silo did not report the figure behind it.
fn term_values(
    f: &Figures,
    w: &Weights,
    largest_memory: f64,
    most_activations: f64,
) -> [(&'static str, f64, Option<f64>); 5] {
    let relative = |x: f64, largest: f64| if largest > 0.0 { x / largest } else { 0.0 };
    [
        (
            "activation_count",
            w.activations,
            f.activations
                .map(|n| w.activations * relative(n, most_activations)),
        ),
        (
            "available_memory",
            w.available,
            f.available_memory.map(|a| w.available * (1.0 - a)),
        ),
        ("cpu_usage", w.cpu, f.cpu.map(|cpu| w.cpu * cpu / 100.0)),
        (
            "max_available_memory",
            w.max_memory,
            f.max_memory
                .map(|max| w.max_memory * (1.0 - relative(max, largest_memory))),
        ),
        (
            "memory_usage",
            w.memory,
            f.memory_usage.map(|used| w.memory * used),
        ),
    ]
}

/// The score: the sum of the reported terms. When some are missing, the sum is divided by the
/// weight of those reported, so a silo that reports only CPU is judged by its CPU on the same
/// 0-to-1 scale as one that reports everything (rather than looking idle for what it left out).
fn score(terms: &[(&'static str, f64, Option<f64>); 5]) -> f64 {
    let (mut sum, mut reported_weight, mut missing) = (0.0, 0.0, false);
    for &(_, weight, value) in terms {
        match value {
            Some(value) => {
                sum += value;
                reported_weight += weight;
            }
            None => missing |= weight > 0.0,
        }
    }
    match (missing, reported_weight > 0.0) {
        (false, _) => sum,
        (true, true) => sum / reported_weight,
        (true, false) => 0.0,
    }
}

/// Picks the lowest score among √n candidates sampled from those with figures that are not
/// overloaded (Orleans' power-of-√n choice), unless the local silo is within the margin. Scores and
/// their terms are kept only when `explain` asks for them: a decision among 1,000 silos otherwise
/// allocates nothing per sampled candidate.
pub fn choose<'v>(
    view: &ClusterView,
    candidates: &[&'v SiloRecord],
    local: Option<&'v SiloRecord>,
    options: &ResourceOptimizedOptions,
    explain: bool,
    rng: &mut impl Rng,
) -> Choice<'v> {
    if candidates.len() == 1 {
        return Choice::plain(candidates[0], Rule::OnlyCandidate);
    }
    let any_statistics = view.silos.iter().any(|s| {
        matches!(view.status(s), SiloStatus::Joining | SiloStatus::Active)
            && Figures::of(s).is_some()
    });
    if !any_statistics {
        return Choice::plain(random::choose(candidates, rng), Rule::NoStatistics);
    }

    // One pass: the largest memory and activation count among candidates with figures (the
    // normalisers), and which of them may be sampled.
    let (mut largest_memory, mut most_activations) = (0.0f64, 0.0f64);
    let mut relevant: Vec<u32> = Vec::with_capacity(candidates.len());
    let weights = Weights::of(options);
    for (i, silo) in candidates.iter().enumerate() {
        if let Some(f) = Figures::of(silo).filter(|f| weights.judge(f)) {
            largest_memory = largest_memory.max(f.max_memory.unwrap_or(0.0));
            most_activations = most_activations.max(f.activations.unwrap_or(0.0));
            if !f.overloaded {
                relevant.push(i as u32);
            }
        }
    }
    let score_of =
        |f: &Figures| -> f64 { score(&term_values(f, &weights, largest_memory, most_activations)) };
    let explained = |silo: &SiloRecord, f: &Figures, score: f64| {
        let terms = term_values(f, &weights, largest_memory, most_activations);
        CandidateScore {
            silo: silo.id.to_string(),
            score,
            terms: terms
                .iter()
                .filter_map(|&(name, _, value)| Some((name.to_owned(), value?)))
                .collect::<BTreeMap<_, _>>(),
            missing: terms
                .iter()
                .filter(|(_, _, value)| value.is_none())
                .map(|&(name, _, _)| name.to_owned())
                .collect(),
        }
    };

    let sampled = (relevant.len() as f64).sqrt().ceil() as usize;
    for i in 0..sampled {
        let j = rng.gen_range(i..relevant.len());
        relevant.swap(i, j);
    }

    let mut scores = Vec::new();
    // With nothing sampled (every candidate with figures overloaded), the first candidate: Orleans'
    // rule. Otherwise the lowest sampled score, whatever it is (a silo at 100 % scores 1.0).
    let (mut best_index, mut best_score) = (0usize, f64::INFINITY);
    for &i in &relevant[..sampled] {
        let silo = candidates[i as usize];
        let figures = Figures::of(silo).expect("sampled among candidates with figures");
        let score = score_of(&figures);
        let jitter = rng.gen::<f64>() / 100_000.0;
        if score + jitter < best_score {
            (best_index, best_score) = (i as usize, score);
        }
        if explain {
            scores.push(explained(silo, &figures, score));
        }
    }

    let local_score = local.and_then(|local| {
        let figures = candidates
            .iter()
            .any(|c| c.id == local.id)
            .then(|| Figures::of(local))
            .flatten()
            .filter(|f| weights.judge(f))
            .filter(|f| !f.overloaded)?;
        let score = score_of(&figures);
        if explain && !scores.iter().any(|s| s.silo == local.id.as_str()) {
            scores.push(explained(local, &figures, score));
        }
        Some((local, score))
    });
    let margin = f64::from(options.local_silo_preference_margin) / 100.0;
    if let Some((local, score)) = local_score {
        if view.status(local) == SiloStatus::Active && score - margin <= best_score {
            return Choice {
                silo: local,
                rule: Rule::LocalWithinMargin,
                scores,
            };
        }
    }
    let rule = if relevant.is_empty() {
        Rule::AllOverloaded
    } else {
        Rule::LowestScore
    };
    Choice {
        silo: candidates[best_index],
        rule,
        scores,
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::placement::testing::{silo, view};

    const GIB: u64 = 1 << 30;

    fn loaded(id: &str, cpu: f64, used: u64, max: u64, activations: u64) -> SiloRecord {
        let mut s = silo(id, SiloStatus::Active, None);
        s.profile.smoothing.cpu_usage = Some(cpu);
        s.profile.smoothing.memory_usage_bytes = Some(used);
        s.profile.load.max_available_memory_bytes = Some(max);
        s.profile.load.activation_count = Some(activations);
        s
    }

    /// A silo that reports only its CPU (the smallest useful heartbeat).
    fn cpu_only(id: &str, cpu: f64) -> SiloRecord {
        let mut s = silo(id, SiloStatus::Active, None);
        s.profile.smoothing.cpu_usage = Some(cpu);
        s
    }

    #[test]
    fn silos_reporting_only_cpu_are_scored_by_it_and_the_missing_terms_are_named() {
        let v = view(vec![cpu_only("busy", 60.0), cpu_only("idle", 20.0)]);
        for seed in 0..20 {
            let (chosen, rule, scores) =
                decide(&v, None, &ResourceOptimizedOptions::default(), seed);
            assert_eq!((chosen.as_str(), rule), ("idle", Rule::LowestScore));
            let idle = scores.iter().find(|s| s.silo == "idle").unwrap();
            // Only the CPU term is reported: the score is CPU on the 0-to-1 scale.
            assert!((idle.score - 0.20).abs() < 1e-12, "{}", idle.score);
            assert_eq!(idle.terms.keys().collect::<Vec<_>>(), ["cpu_usage"]);
            assert_eq!(
                idle.missing,
                [
                    "activation_count",
                    "available_memory",
                    "max_available_memory",
                    "memory_usage"
                ]
            );
        }
    }

    #[test]
    fn silos_at_full_load_are_still_ranked_and_unweighted_figures_judge_nothing() {
        // Both sampled silos report 100 % CPU: one of them is chosen by score, never the first
        // candidate by default (that one reports nothing).
        let v = view(vec![
            silo("silent", SiloStatus::Active, None),
            cpu_only("full-a", 100.0),
            cpu_only("full-b", 100.0),
        ]);
        for seed in 0..20 {
            let (chosen, rule, _) = decide(&v, None, &ResourceOptimizedOptions::default(), seed);
            assert_ne!(chosen, "silent", "seed {seed}");
            assert_eq!(rule, Rule::LowestScore);
        }
        // With CPU weighing nothing, a CPU-only silo is not judged on a score of 0: a silo that
        // reports what the options weigh wins.
        let options = ResourceOptimizedOptions {
            cpu_usage_weight: 0,
            ..ResourceOptimizedOptions::default()
        };
        let v = view(vec![
            cpu_only("cpu-only", 5.0),
            loaded("full", 50.0, 4 * GIB, 8 * GIB, 100),
        ]);
        for seed in 0..20 {
            assert_eq!(decide(&v, None, &options, seed).0, "full", "seed {seed}");
        }
    }

    #[test]
    fn a_partial_reporter_is_judged_on_the_same_scale_as_a_full_one() {
        // A full reporter at 50 % of everything against a CPU-only silo at 40 % CPU: the partial
        // one scores 0.40 (not 0.40 × the CPU weight, which would make it look nearly idle).
        let full = loaded("full", 50.0, 4 * GIB, 8 * GIB, 100);
        let v = view(vec![full, cpu_only("partial", 40.0)]);
        let (_, _, scores) = decide(&v, None, &ResourceOptimizedOptions::default(), 1);
        let partial = scores.iter().find(|s| s.silo == "partial").unwrap();
        assert!((partial.score - 0.40).abs() < 1e-12, "{}", partial.score);
        let full = scores.iter().find(|s| s.silo == "full").unwrap();
        assert!(full.missing.is_empty());
        let sum: f64 = full.terms.values().sum();
        assert!((full.score - sum).abs() < 1e-12);
    }

    /// The reference's worked example: A scores 0.695, B 0.275.
    fn worked_example() -> ClusterView {
        view(vec![
            loaded("A", 80.0, 4 * GIB, 8 * GIB, 1000),
            loaded("B", 20.0, 16 * GIB * 3 / 10, 16 * GIB, 500),
        ])
    }

    fn decide(
        v: &ClusterView,
        local: Option<&str>,
        options: &ResourceOptimizedOptions,
        seed: u64,
    ) -> (String, Rule, Vec<CandidateScore>) {
        let candidates: Vec<&SiloRecord> = v.silos.iter().collect();
        let local = local.and_then(|l| v.silos.iter().find(|s| s.id.as_str() == l));
        let choice = choose(
            v,
            &candidates,
            local,
            options,
            true,
            &mut ChaCha8Rng::seed_from_u64(seed),
        );
        (choice.silo.id.to_string(), choice.rule, choice.scores)
    }

    #[test]
    fn asking_for_an_explanation_never_changes_the_choice() {
        let silos: Vec<SiloRecord> = (0..200u64)
            .map(|i| {
                let id = format!("s{i:03}");
                loaded(
                    &id,
                    (i * 37 % 100) as f64,
                    (i % 7) * GIB,
                    8 * GIB,
                    i * 13 % 900,
                )
            })
            .collect();
        let v = view(silos);
        let candidates: Vec<&SiloRecord> = v.silos.iter().collect();
        let local = Some(candidates[17]);
        let options = ResourceOptimizedOptions::default();
        for seed in 0..200 {
            let pick = |explain| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                let choice = choose(&v, &candidates, local, &options, explain, &mut rng);
                (choice.silo.id.clone(), choice.rule, choice.scores.len())
            };
            let (plain, explained) = (pick(false), pick(true));
            assert_eq!(
                (&plain.0, plain.1),
                (&explained.0, explained.1),
                "seed {seed}"
            );
            assert_eq!(plain.2, 0);
            assert!(explained.2 >= 15);
        }
    }

    #[test]
    fn the_worked_example_scores_and_picks_as_the_reference_says() {
        let v = worked_example();
        let (chosen, rule, scores) = decide(&v, None, &ResourceOptimizedOptions::default(), 1);
        assert_eq!((chosen.as_str(), rule), ("B", Rule::LowestScore));
        let score_of = |id: &str| scores.iter().find(|s| s.silo == id).unwrap().score;
        assert!((score_of("A") - 0.695).abs() < 1e-9, "{scores:?}");
        assert!((score_of("B") - 0.275).abs() < 1e-9, "{scores:?}");

        // Scenario 7: local = A → B (0.695 − 0.05 > 0.275); local = B → B, kept local.
        assert_eq!(
            decide(&v, Some("A"), &ResourceOptimizedOptions::default(), 1).0,
            "B"
        );
        let (chosen, rule, _) = decide(&v, Some("B"), &ResourceOptimizedOptions::default(), 1);
        assert_eq!((chosen.as_str(), rule), ("B", Rule::LocalWithinMargin));
    }

    #[test]
    fn a_local_silo_within_the_margin_keeps_the_grain() {
        // Scores 0.30 (A, local) and 0.27 (B): 0.30 − 0.05 ≤ 0.27, so A keeps it. CPU only.
        let only_cpu = ResourceOptimizedOptions {
            cpu_usage_weight: 100,
            memory_usage_weight: 0,
            available_memory_weight: 0,
            max_available_memory_weight: 0,
            activation_count_weight: 0,
            local_silo_preference_margin: 5,
        };
        let v = view(vec![loaded("A", 30.0, 0, 0, 1), loaded("B", 27.0, 0, 0, 1)]);
        assert_eq!(
            decide(&v, Some("A"), &only_cpu, 3).1,
            Rule::LocalWithinMargin
        );
        let no_margin = ResourceOptimizedOptions {
            local_silo_preference_margin: 0,
            ..only_cpu
        };
        assert_eq!(decide(&v, Some("A"), &no_margin, 3).0, "B");
    }

    #[test]
    fn scenario_8_one_candidate_or_no_figures() {
        let mut overloaded = loaded("only", 99.0, 0, 0, 1);
        overloaded.profile.load.overloaded = true;
        let one = view(vec![overloaded]);
        assert_eq!(
            decide(&one, None, &ResourceOptimizedOptions::default(), 0).1,
            Rule::OnlyCandidate
        );
        let bare = view(vec![
            silo("a", SiloStatus::Active, None),
            silo("b", SiloStatus::Active, None),
        ]);
        assert_eq!(
            decide(&bare, None, &ResourceOptimizedOptions::default(), 0).1,
            Rule::NoStatistics
        );
    }

    #[test]
    fn all_overloaded_falls_back_to_the_first_compatible_silo() {
        let mut a = loaded("a", 99.0, 0, 0, 1);
        let mut b = loaded("b", 10.0, 0, 0, 1);
        a.profile.load.overloaded = true;
        b.profile.load.overloaded = true;
        let v = view(vec![a, b]);
        let (chosen, rule, _) = decide(&v, None, &ResourceOptimizedOptions::default(), 0);
        assert_eq!((chosen.as_str(), rule), ("a", Rule::AllOverloaded));
    }

    #[test]
    fn zero_activations_everywhere_gives_a_zero_term_not_nan() {
        let v = view(vec![loaded("a", 50.0, 0, 0, 0), loaded("b", 10.0, 0, 0, 0)]);
        let (chosen, _, scores) = decide(&v, None, &ResourceOptimizedOptions::default(), 0);
        assert_eq!(chosen, "b");
        assert!(scores.iter().all(|s| s.score.is_finite()));
    }

    #[test]
    fn about_the_square_root_of_the_candidates_is_sampled() {
        let v = view(
            (0..10)
                .map(|i| loaded(&format!("s{i}"), 10.0, 0, 0, 1))
                .collect(),
        );
        let (_, _, scores) = decide(&v, None, &ResourceOptimizedOptions::default(), 0);
        assert_eq!(scores.len(), 4, "ceil(sqrt(10)) = 4");
    }
}
