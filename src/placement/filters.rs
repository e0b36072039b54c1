//! Placement filters on silo metadata (Orleans' silo-metadata placement filters, §1.10): they narrow
//! the compatible silos before the strategy chooses, in ascending `order`, each working on what the
//! previous one kept. The reference point is always the requesting silo's metadata (empty when the
//! request names no silo, as Orleans treats a silo missing from its metadata cache).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::cluster::SiloRecord;
use crate::validation::{self, Invalid, Violations};

/// Most metadata keys one filter may name.
pub(crate) const MAX_KEYS: usize = 16;

/// Bounds of a filter list, declared once: the published schema states them and [`validate`]
/// checks them.
pub mod bounds {
    use crate::validation::Bound;

    /// Filters one grain type may have.
    pub const FILTERS: Bound = Bound::new(0.0, 16.0);
    /// Metadata keys one filter names.
    pub const KEYS: Bound = Bound::new(1.0, super::MAX_KEYS as f64);
    /// The longest metadata key, in characters.
    pub const MAX_KEY_CHARS: usize = 128;
    pub const ORDER: Bound = Bound::new(i32::MIN as f64, i32::MAX as f64);
    pub const MIN_CANDIDATES: Bound = Bound::new(1.0, u32::MAX as f64);
}

/// One filter of a grain type's policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Filter {
    /// Keep only silos whose value for every key equals the requesting silo's (a key both lack
    /// counts as equal). If none is left, placement fails: the requirement is hard.
    RequiredMatch {
        keys: Vec<String>,
        #[serde(default)]
        order: i32,
    },
    /// Prefer silos matching the requesting silo on the most important keys (the last key matters
    /// most), but keep at least `min_candidates` silos; never empties the set.
    PreferredMatch {
        keys: Vec<String>,
        #[serde(default = "default_min_candidates")]
        min_candidates: u32,
        #[serde(default)]
        order: i32,
    },
}

fn default_min_candidates() -> u32 {
    2
}

impl Filter {
    pub fn order(&self) -> i32 {
        match self {
            Filter::RequiredMatch { order, .. } | Filter::PreferredMatch { order, .. } => *order,
        }
    }

    fn keys(&self) -> &[String] {
        match self {
            Filter::RequiredMatch { keys, .. } | Filter::PreferredMatch { keys, .. } => keys,
        }
    }

    pub fn name(&self) -> String {
        let kind = match self {
            Filter::RequiredMatch { .. } => "required_match",
            Filter::PreferredMatch { .. } => "preferred_match",
        };
        format!("{kind}{:?}", self.keys())
    }
}

/// Checks a grain type's filter list: keys are metadata keys. Filters that share an `order` run in
/// the order listed (Orleans fails such placements at run time; here the order is simply defined).
pub fn validate(filters: &[Filter], prefix: &str) -> Result<(), Invalid> {
    let mut v = Violations::default();
    bounds::FILTERS.check_count(&mut v, prefix, filters.len());
    for (i, filter) in filters.iter().enumerate() {
        let keys = filter.keys();
        bounds::KEYS.check_count(&mut v, format!("{prefix}[{i}].keys"), keys.len());
        for (k, key) in keys.iter().enumerate() {
            v.check(validation::token(
                &format!("{prefix}[{i}].keys[{k}]"),
                key,
                bounds::MAX_KEY_CHARS,
            ));
        }
        if let Filter::PreferredMatch { min_candidates, .. } = filter {
            bounds::MIN_CANDIDATES.check(
                &mut v,
                format!("{prefix}[{i}].min_candidates"),
                f64::from(*min_candidates),
            );
        }
    }
    v.finish(|| ())
}

/// What one filter did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct FilterEffect {
    #[schema(example = "required_match[\"zone\"]")]
    pub filter: String,
    /// Silos it removed.
    pub removed: Vec<String>,
}

/// Applies `filters` in ascending order. Returns what is left and each filter's effect; the result
/// is empty only when a `required_match` left nothing.
pub fn apply<'v>(
    filters: &[Filter],
    local: &BTreeMap<String, String>,
    candidates: Vec<&'v SiloRecord>,
) -> (Vec<&'v SiloRecord>, Vec<FilterEffect>) {
    let mut ordered: Vec<&Filter> = filters.iter().collect();
    ordered.sort_by_key(|f| f.order());
    let mut kept = candidates;
    let mut effects = Vec::with_capacity(ordered.len());
    for filter in ordered {
        let next = match filter {
            Filter::RequiredMatch { keys, .. } => required_match(keys, local, &kept),
            Filter::PreferredMatch {
                keys,
                min_candidates,
                ..
            } => preferred_match(keys, *min_candidates as usize, local, &kept),
        };
        effects.push(FilterEffect {
            filter: filter.name(),
            removed: kept
                .iter()
                .filter(|s| !next.iter().any(|n| n.id == s.id))
                .map(|s| s.id.to_string())
                .collect(),
        });
        kept = next;
        if kept.is_empty() {
            break;
        }
    }
    (kept, effects)
}

fn required_match<'v>(
    keys: &[String],
    local: &BTreeMap<String, String>,
    candidates: &[&'v SiloRecord],
) -> Vec<&'v SiloRecord> {
    candidates
        .iter()
        .copied()
        .filter(|silo| {
            keys.iter()
                .all(|key| silo.profile.metadata.get(key) == local.get(key))
        })
        .collect()
}

fn preferred_match<'v>(
    keys: &[String],
    min_candidates: usize,
    local: &BTreeMap<String, String>,
    candidates: &[&'v SiloRecord],
) -> Vec<&'v SiloRecord> {
    if local.is_empty() || candidates.len() <= min_candidates {
        return candidates.to_vec();
    }
    // A silo's score: how many keys, from the last (most important) backwards, it matches on
    // before the first mismatch or missing value.
    let score = |silo: &SiloRecord| {
        keys.iter()
            .rev()
            .take_while(
                |key| match (silo.profile.metadata.get(*key), local.get(*key)) {
                    (Some(theirs), Some(ours)) => theirs == ours,
                    _ => false,
                },
            )
            .count()
    };
    let scores: Vec<usize> = candidates.iter().map(|s| score(s)).collect();
    if scores.iter().all(|&s| s == 0) {
        return candidates.to_vec();
    }
    let mut cutoff = 0;
    let mut enough = 0;
    for level in (0..=keys.len()).rev() {
        enough += scores.iter().filter(|&&s| s == level).count();
        if enough >= min_candidates {
            cutoff = level;
            break;
        }
    }
    candidates
        .iter()
        .zip(&scores)
        .filter(|(_, &s)| s >= cutoff)
        .map(|(silo, _)| *silo)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::SiloStatus;
    use crate::placement::testing::silo;

    fn metadata(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn with_metadata(id: &str, pairs: &[(&str, &str)]) -> SiloRecord {
        let mut s = silo(id, SiloStatus::Active, None);
        s.profile.metadata = metadata(pairs);
        s
    }

    fn keys(names: &[&str]) -> Vec<String> {
        names.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn the_18_preferred_match_rows_of_the_orleans_tests_hold() {
        let local = metadata(&[
            ("all.match", "match"),
            ("one.match", "match"),
            ("two.match", "match"),
            ("no.match", "match"),
        ]);
        let o1 = with_metadata(
            "o1",
            &[
                ("all.match", "match"),
                ("one.match", "match"),
                ("two.match", "match"),
                ("no.match", "nomatch"),
            ],
        );
        let o2 = with_metadata(
            "o2",
            &[
                ("all.match", "match"),
                ("one.match", "nomatch"),
                ("two.match", "match"),
                ("no.match", "nomatch"),
            ],
        );
        let o3 = with_metadata(
            "o3",
            &[
                ("all.match", "match"),
                ("one.match", "nomatch"),
                ("two.match", "nomatch"),
                ("no.match", "nomatch"),
            ],
        );
        let rows: [(&[&str], usize, usize); 18] = [
            (&["no.match"], 1, 3),
            (&["no.match"], 2, 3),
            (&["one.match"], 1, 1),
            (&["one.match"], 2, 3),
            (&["two.match"], 1, 2),
            (&["two.match"], 2, 2),
            (&["two.match"], 3, 3),
            (&["all.match"], 1, 3),
            (&["all.match"], 2, 3),
            (&["no.match", "all.match"], 1, 3),
            (&["no.match", "one.match", "two.match"], 1, 1),
            (&["no.match", "one.match", "two.match"], 2, 2),
            (&["no.match", "one.match", "two.match"], 3, 3),
            (&["all.match", "no.match"], 1, 3),
            (&["one.match", "all.match"], 1, 1),
            (&["one.match", "all.match"], 2, 3),
            (&["no.match", "one.match", "all.match"], 1, 1),
            (&["no.match", "one.match", "all.match"], 2, 3),
        ];
        for (names, min, expected) in rows {
            let kept = preferred_match(&keys(names), min, &local, &[&o1, &o2, &o3]);
            assert_eq!(kept.len(), expected, "keys {names:?}, min {min}");
        }
    }

    #[test]
    fn preferred_match_passes_through_when_the_other_silo_has_no_metadata() {
        let local = metadata(&[("zone", "z1")]);
        let bare = with_metadata("bare", &[]);
        let other = with_metadata("other", &[]);
        assert_eq!(
            preferred_match(&keys(&["zone"]), 1, &local, &[&bare, &other]).len(),
            2
        );
    }

    #[test]
    fn the_required_match_rows_of_the_orleans_tests_hold() {
        let local = metadata(&[("key", "something")]);
        let lacking = with_metadata("lacking", &[]);
        let different = with_metadata("different", &[("key", "else")]);
        let same = with_metadata("same", &[("key", "something")]);
        let same_too = with_metadata("same-too", &[("key", "something")]);
        assert_eq!(
            required_match(&[], &local, &[&lacking]).len(),
            1,
            "no keys: pass-through"
        );
        assert!(required_match(&keys(&["key"]), &local, &[&lacking]).is_empty());
        assert!(required_match(&keys(&["key"]), &local, &[&different]).is_empty());
        assert_eq!(required_match(&keys(&["key"]), &local, &[&same]).len(), 1);
        assert_eq!(
            required_match(&keys(&["key"]), &local, &[&same, &same_too]).len(),
            2
        );
        // Both lacking the key counts as a match.
        assert_eq!(
            required_match(&keys(&["other"]), &local, &[&lacking]).len(),
            1
        );
    }

    #[test]
    fn scenario_9_required_zone_keeps_only_the_local_zone_and_can_leave_nothing() {
        let b = with_metadata("B", &[("zone", "z1")]);
        let c = with_metadata("C", &[("zone", "z2")]);
        let filters = [Filter::RequiredMatch {
            keys: keys(&["zone"]),
            order: 0,
        }];
        let (kept, effects) = apply(&filters, &metadata(&[("zone", "z1")]), vec![&b, &c]);
        assert_eq!(
            kept.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            ["B"]
        );
        assert_eq!(effects[0].removed, ["C"]);
        let (kept, _) = apply(&filters, &metadata(&[("zone", "z3")]), vec![&b, &c]);
        assert!(kept.is_empty());
    }

    #[test]
    fn filters_run_in_ascending_order_whatever_the_declared_order() {
        let a = with_metadata("a", &[("rack", "r1"), ("zone", "z1")]);
        let b = with_metadata("b", &[("rack", "r2"), ("zone", "z1")]);
        let c = with_metadata("c", &[("rack", "r1"), ("zone", "z2")]);
        let zone = Filter::RequiredMatch {
            keys: keys(&["zone"]),
            order: 1,
        };
        let rack = Filter::PreferredMatch {
            keys: keys(&["rack"]),
            min_candidates: 1,
            order: 2,
        };
        let local = metadata(&[("rack", "r1"), ("zone", "z1")]);
        for filters in [[zone.clone(), rack.clone()], [rack.clone(), zone.clone()]] {
            let (kept, effects) = apply(&filters, &local, vec![&a, &b, &c]);
            assert_eq!(
                kept.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
                ["a"]
            );
            assert!(effects[0].filter.starts_with("required_match"));
        }
    }

    #[test]
    fn filters_sharing_an_order_run_in_the_order_listed() {
        let zone = Filter::RequiredMatch {
            keys: keys(&["zone"]),
            order: 0,
        };
        let rack = Filter::RequiredMatch {
            keys: keys(&["rack"]),
            order: 0,
        };
        assert!(validate(&[zone.clone(), rack.clone()], "filters").is_ok());
        let mut sorted = [&zone, &rack];
        sorted.sort_by_key(|f| f.order());
        assert_eq!(
            sorted,
            [&zone, &rack],
            "a stable sort keeps the listed order"
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        fn arbitrary_metadata() -> impl Strategy<Value = Vec<(String, String)>> {
            proptest::collection::vec(
                (
                    prop_oneof![Just("zone"), Just("rack"), Just("tier")],
                    prop_oneof![Just("a"), Just("b")],
                )
                    .prop_map(|(k, v)| (k.to_owned(), v.to_owned())),
                0..3,
            )
        }

        fn arbitrary_filter() -> impl Strategy<Value = Filter> {
            let keys = proptest::collection::vec(
                prop_oneof![Just("zone"), Just("rack"), Just("tier")].prop_map(str::to_owned),
                0..3,
            );
            (keys, any::<bool>(), 1u32..4, -3i32..3).prop_map(|(keys, required, min, order)| {
                if required {
                    Filter::RequiredMatch { keys, order }
                } else {
                    Filter::PreferredMatch {
                        keys,
                        min_candidates: min,
                        order,
                    }
                }
            })
        }

        proptest! {
            #[test]
            fn filters_never_widen_the_candidates_and_only_required_match_empties_them(
                silos in proptest::collection::vec(arbitrary_metadata(), 0..8),
                local in arbitrary_metadata(),
                filters in proptest::collection::vec(arbitrary_filter(), 0..4),
            ) {
                let records: Vec<SiloRecord> = silos
                    .iter()
                    .enumerate()
                    .map(|(i, md)| {
                        let pairs: Vec<(&str, &str)> = md.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                        with_metadata(&format!("s{i}"), &pairs)
                    })
                    .collect();
                let input: Vec<&SiloRecord> = records.iter().collect();
                let local: BTreeMap<String, String> = local.into_iter().collect();
                let (kept, _) = apply(&filters, &local, input.clone());
                prop_assert!(kept.len() <= input.len());
                prop_assert!(kept.iter().all(|k| input.iter().any(|i| i.id == k.id)));
                let has_required = filters.iter().any(|f| matches!(f, Filter::RequiredMatch { .. }));
                if kept.is_empty() && !input.is_empty() {
                    prop_assert!(has_required, "only a required match may leave nothing");
                }
            }
        }
    }
}
