//! Where a new activation goes: compatibility, the placement hint and the strategies.
//!
//! [`place`] is a pure function of a cluster view, a request, the strategy, its options, this
//! replica's recent placements and an RNG. The caller (the oracle service) has already looked the
//! grain up in the directory; this module only decides among live silos and says why. Each strategy
//! lives in its own module and follows Orleans' director of the same name (reference §1), except
//! where the reference's section 7 records Orleans' behaviour as a mistake; each such departure is
//! documented where it is made.

pub mod activation_count;
pub mod consistent_hash;
pub mod filters;
pub mod hash;
pub mod hash_based;
pub mod options;
pub mod prefer_local;
pub mod random;
pub mod resource_optimized;
pub mod silo_role;
pub mod stateless_worker;
pub mod webhook_hosts;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rand::Rng;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use options::StrategyOptions;

use crate::clock::Millis;
use crate::cluster::{GrainId, Liveness, SiloId, SiloRecord, SiloStatus};

/// A placement strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Uniformly random among compatible silos (Orleans `RandomPlacement`).
    Random,
    /// The requesting silo when it can host the grain, else random (Orleans `PreferLocalPlacement`).
    PreferLocal,
    /// Orleans' grain hash modulo the Orleans-ordered candidates (`HashBasedPlacement`).
    HashBased,
    /// Power of k choices over recent activation counts (`ActivationCountBasedPlacement`).
    ActivationCount,
    /// Weighted CPU, memory and activation score over √n sampled candidates, with a preference for
    /// the requesting silo (`ResourceOptimizedPlacement`, Orleans' default since 9.2, and ours).
    #[default]
    ResourceOptimized,
    /// The requesting silo when it is not shutting down, else random; never registered
    /// (`StatelessWorkerPlacement`).
    StatelessWorker,
    /// Random among silos whose role is the grain's key (`SiloRoleBasedPlacement`).
    SiloRole,
    /// Rendezvous hashing with bounded loads: about 1/n of grains move when one of n silos joins
    /// or leaves, and no silo carries much more than the mean (beyond Orleans).
    ConsistentHash,
    /// The operator's HTTP endpoint picks among the candidates; a fallback strategy decides when
    /// it is slow or wrong (beyond Orleans: custom placement without writing .NET).
    Webhook,
}

impl Strategy {
    pub const ALL: [Strategy; 9] = [
        Strategy::Random,
        Strategy::PreferLocal,
        Strategy::HashBased,
        Strategy::ActivationCount,
        Strategy::ResourceOptimized,
        Strategy::StatelessWorker,
        Strategy::SiloRole,
        Strategy::ConsistentHash,
        Strategy::Webhook,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Random => "random",
            Strategy::PreferLocal => "prefer_local",
            Strategy::HashBased => "hash_based",
            Strategy::ActivationCount => "activation_count",
            Strategy::ResourceOptimized => "resource_optimized",
            Strategy::StatelessWorker => "stateless_worker",
            Strategy::SiloRole => "silo_role",
            Strategy::ConsistentHash => "consistent_hash",
            Strategy::Webhook => "webhook",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == value)
    }

    /// Whether this replica keeps a tally of its placements for the strategy (the load-aware ones
    /// that read activation counts between heartbeats).
    pub fn tallies(self) -> bool {
        matches!(self, Strategy::ActivationCount | Strategy::ConsistentHash)
    }

    /// Whether placements are registered in the directory (stateless workers are not: every call
    /// may land on another instance).
    pub fn registers(self) -> bool {
        self != Strategy::StatelessWorker
    }
}

/// The membership a decision is made against: the silos and the judge that decides which of them
/// are alive.
#[derive(Debug, Clone)]
pub struct ClusterView {
    pub liveness: Liveness,
    /// Ordered by silo id, so a seeded decision does not depend on storage order. Shared, because
    /// every placement of a quarter of a second decides against the same membership read.
    pub silos: Arc<Vec<SiloRecord>>,
}

impl ClusterView {
    pub fn find(&self, id: &SiloId) -> Option<&SiloRecord> {
        self.silos.iter().find(|s| &s.id == id)
    }

    pub fn status(&self, silo: &SiloRecord) -> SiloStatus {
        silo.status_at(&self.liveness)
    }

    /// The store's clock at the view's instant.
    pub fn now(&self) -> Millis {
        self.liveness.now
    }
}

/// What is being placed and on whose behalf.
#[derive(Debug, Clone, Copy)]
pub struct PlacementInput<'a> {
    pub grain: &'a GrainId,
    /// The silo asking ("local" to Orleans' directors).
    pub requesting_silo: Option<&'a SiloId>,
    /// A silo the caller would like; honoured when it is compatible (Orleans §1.4).
    pub hint: Option<&'a SiloId>,
}

/// Activations this replica placed on each silo since that silo's last heartbeat, keyed by silo and
/// tagged with the heartbeat count they were counted against: a new heartbeat brings fresh counts
/// and the tally starts again (Orleans resets its local delta on every statistics update).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalDeltas(pub HashMap<SiloId, (i64, u64)>);

impl LocalDeltas {
    /// This replica's placements on `silo` since its last heartbeat.
    pub fn get(&self, silo: &SiloRecord) -> u64 {
        match self.0.get(&silo.id) {
            Some(&(count, delta)) if count == silo.heartbeat_count => delta,
            _ => 0,
        }
    }

    /// Counts `n` more placements on `silo`. A record older than the tally's (a decision made on a
    /// view read before the silo's latest heartbeat) adds to the newer tally instead of resetting it.
    pub fn add(&mut self, silo: &SiloRecord, n: u64) {
        let entry = self
            .0
            .entry(silo.id.clone())
            .or_insert((silo.heartbeat_count, 0));
        if silo.heartbeat_count > entry.0 {
            *entry = (silo.heartbeat_count, 0);
        }
        entry.1 += n;
    }

    /// Forgets the tallies of silos that are not in `view` (dead, left, or never seen again), so a
    /// tally never outgrows the cluster's membership.
    pub fn retain_silos(&mut self, view: &ClusterView) {
        if self.0.len() > view.silos.len() {
            self.0.retain(|id, _| view.find(id).is_some());
        }
    }

    /// Takes back `n` placements counted on `silo` that did not happen (the grain existed, or the
    /// registration failed). Never goes below zero, and never touches a newer heartbeat's tally.
    pub fn remove(&mut self, silo: &SiloRecord, n: u64) {
        if let Some(entry) = self.0.get_mut(&silo.id) {
            if entry.0 == silo.heartbeat_count {
                entry.1 = entry.1.saturating_sub(n);
            }
        }
    }
}

/// Which rule made the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The placement hint named a compatible silo.
    Hint,
    /// Uniform random pick among the candidates.
    Random,
    /// The requesting silo, as the strategy prefers it.
    Local,
    /// Orleans' grain hash picked the silo.
    Hash,
    /// The least loaded of the sampled candidates.
    LeastLoaded,
    /// The lowest resource score among the sampled candidates.
    LowestScore,
    /// The requesting silo's score was within the preference margin of the best.
    LocalWithinMargin,
    /// No candidate reported load figures: a uniform random pick.
    NoStatistics,
    /// Every candidate with figures was overloaded: the first compatible silo (Orleans' rule).
    AllOverloaded,
    /// Only one candidate: it is chosen without looking at its figures (Orleans' rule).
    OnlyCandidate,
    /// The heaviest-weighted candidate was over its load bound; the next one under it was chosen.
    LoadBound,
    /// The operator's webhook chose this candidate.
    Webhook,
}

/// A silo left out of the candidates, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Excluded {
    pub silo: String,
    #[schema(example = "status is joining; only active silos take new activations")]
    pub reason: String,
}

/// A candidate's score and the terms it is made of (lower scores win).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct CandidateScore {
    pub silo: String,
    #[schema(example = 0.275)]
    pub score: f64,
    /// Each weighted term of the score, by name.
    pub terms: BTreeMap<String, f64>,
    /// Terms the silo's heartbeats give no figure for (`resource_optimized`): its score is the
    /// reported terms' sum divided by their weight. Empty for other strategies.
    pub missing: Vec<String>,
}

/// Why a placement went where it did.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Explanation {
    pub strategy: Strategy,
    /// Compatible silos, in the order the strategy saw them.
    pub candidates: Vec<String>,
    /// Known silos that were not candidates, with the reason.
    pub excluded: Vec<Excluded>,
    /// What each placement filter removed, in the order they ran.
    pub filters: Vec<filters::FilterEffect>,
    /// What the placement hint did, when one was given.
    pub hint: Option<String>,
    /// Scores of the candidates the strategy evaluated, when it scores.
    pub scores: Vec<CandidateScore>,
    pub rule: Rule,
}

/// A placement decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub silo: SiloId,
    pub address: String,
    pub rule: Rule,
    pub explanation: Option<Explanation>,
    /// Whether the decision was added to the tally (`deltas`): its strategy tallies — for
    /// `webhook`, its fallback does. A decision that does not become a placement is taken back.
    pub tallied: bool,
}

/// Why no silo could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("the cluster has no active silo: {known} known silo(s), none active and alive")]
    NoActiveSilo { known: usize },
    #[error("no active silo can host grain type `{grain_type}`: active silos {active:?} declare grain types that do not include it")]
    NoCompatibleSilo {
        grain_type: String,
        active: Vec<String>,
    },
    #[error("no active silo has role `{role}` (silo_role placement takes the role from the grain's key)")]
    NoSiloWithRole { role: String },
    #[error("all {candidates} compatible silo(s) report being overloaded")]
    AllOverloaded { candidates: usize },
    #[error("filter {filter} left no silo: none of the compatible silos {compatible:?} matches the requesting silo's metadata")]
    FilteredOut {
        filter: String,
        compatible: Vec<String>,
    },
}

/// Candidates for a grain type: active, alive silos that host it, in view order.
pub fn compatible<'v>(view: &'v ClusterView, grain_type: &str) -> Vec<&'v SiloRecord> {
    view.silos
        .iter()
        .filter(|silo| view.status(silo) == SiloStatus::Active && silo.hosts(grain_type))
        .collect()
}

fn exclusion_reason(view: &ClusterView, silo: &SiloRecord, grain_type: &str) -> Option<String> {
    match view.status(silo) {
        SiloStatus::Active if silo.hosts(grain_type) => None,
        SiloStatus::Active => Some(format!("does not host grain type `{grain_type}`")),
        SiloStatus::Dead => Some(format!(
            "dead: no heartbeat for {} ms (silo_ttl {} ms)",
            view.liveness.silent_for(silo.last_heartbeat_ms),
            view.liveness.silo_ttl_ms
        )),
        other => Some(format!(
            "status is {}; only active silos take new activations",
            other.as_str()
        )),
    }
}

fn no_candidate_error(view: &ClusterView, grain_type: &str) -> PlacementError {
    let active: Vec<String> = view
        .silos
        .iter()
        .filter(|s| view.status(s) == SiloStatus::Active)
        .map(|s| s.id.to_string())
        .collect();
    if active.is_empty() {
        PlacementError::NoActiveSilo {
            known: view.silos.len(),
        }
    } else {
        PlacementError::NoCompatibleSilo {
            grain_type: grain_type.to_owned(),
            active,
        }
    }
}

/// What a strategy chose, with its evidence.
pub struct Choice<'v> {
    pub silo: &'v SiloRecord,
    pub rule: Rule,
    pub scores: Vec<CandidateScore>,
}

impl<'v> Choice<'v> {
    fn plain(silo: &'v SiloRecord, rule: Rule) -> Self {
        Self {
            silo,
            rule,
            scores: Vec::new(),
        }
    }
}

/// Everything a placement decision reads.
pub struct Request<'a> {
    pub input: PlacementInput<'a>,
    pub strategy: Strategy,
    pub options: &'a StrategyOptions,
    /// The grain type's metadata filters, applied to the compatible silos first.
    pub filters: &'a [filters::Filter],
    /// For `webhook`: the silo the operator's endpoint chose, if it answered in time. Used when it
    /// is a candidate; otherwise the webhook's fallback strategy decides.
    pub chosen_by_webhook: Option<&'a SiloId>,
    pub explain: bool,
}

/// The silos a request may be placed on — compatible, through the filters, and for `silo_role` of
/// the grain's role — with each filter's effect. The webhook strategy sends these to the operator.
pub fn candidates<'v>(
    view: &'v ClusterView,
    request: &Request<'_>,
) -> Result<(Vec<&'v SiloRecord>, Vec<filters::FilterEffect>), PlacementError> {
    let input = request.input;
    let grain_type = input.grain.grain_type();
    let local = input.requesting_silo.and_then(|id| view.find(id));
    let all_compatible = compatible(view, grain_type);
    let no_metadata = BTreeMap::new();
    let local_metadata = local.map_or(&no_metadata, |l| &l.profile.metadata);
    if request.filters.is_empty() && request.strategy != Strategy::SiloRole {
        // The common case, without copying the candidate list (a decision among 1,000 silos).
        return Ok((all_compatible, Vec::new()));
    }
    let (compatible, filter_effects) =
        filters::apply(request.filters, local_metadata, all_compatible.clone());
    if compatible.is_empty() && !all_compatible.is_empty() {
        return Err(PlacementError::FilteredOut {
            filter: filter_effects
                .last()
                .map(|e| e.filter.clone())
                .unwrap_or_default(),
            compatible: all_compatible.iter().map(|s| s.id.to_string()).collect(),
        });
    }
    if request.strategy != Strategy::SiloRole {
        return Ok((compatible, filter_effects));
    }
    let role = input.grain.key();
    let with_role = silo_role::candidates(&compatible, role);
    if with_role.is_empty() && !compatible.is_empty() {
        return Err(PlacementError::NoSiloWithRole {
            role: role.to_owned(),
        });
    }
    Ok((with_role, filter_effects))
}

/// Decides where `request.input.grain` goes, counting an `activation_count` or `consistent_hash`
/// placement in `deltas`. Errors say why nothing fits.
pub fn place(
    view: &ClusterView,
    request: &Request<'_>,
    deltas: &mut LocalDeltas,
    rng: &mut impl Rng,
) -> Result<Decision, PlacementError> {
    let input = request.input;
    let grain_type = input.grain.grain_type();
    let local = input.requesting_silo.and_then(|id| view.find(id));
    let (candidates, filter_effects) = candidates(view, request)?;
    // `webhook` decides with the operator's answer when it names a candidate, else by its fallback.
    let strategy = match request.strategy {
        Strategy::Webhook => request.options.webhook.fallback.into(),
        other => other,
    };
    let stateless_local = (strategy == Strategy::StatelessWorker)
        .then(|| stateless_worker::eligible_local(view, local, grain_type))
        .flatten();
    if candidates.is_empty() && stateless_local.is_none() {
        return Err(no_candidate_error(view, grain_type));
    }

    let hinted = input
        .hint
        .and_then(|hint| candidates.iter().copied().find(|c| &c.id == hint));
    let webhook_chose = request
        .chosen_by_webhook
        .and_then(|chosen| candidates.iter().copied().find(|c| &c.id == chosen));
    let choice = match (hinted, webhook_chose) {
        (Some(silo), _) => Choice::plain(silo, Rule::Hint),
        (None, Some(silo)) => Choice::plain(silo, Rule::Webhook),
        (None, None) => match strategy {
            Strategy::Random | Strategy::SiloRole => {
                Choice::plain(random::choose(&candidates, rng), Rule::Random)
            }
            Strategy::PreferLocal => prefer_local::choose(&candidates, local, rng),
            Strategy::HashBased => {
                Choice::plain(hash_based::choose(&candidates, input.grain), Rule::Hash)
            }
            Strategy::StatelessWorker => match stateless_local {
                Some(local) => Choice::plain(local, Rule::Local),
                None => Choice::plain(random::choose(&candidates, rng), Rule::Random),
            },
            Strategy::ActivationCount => activation_count::choose(
                view,
                &candidates,
                local,
                &request.options.activation_count,
                deltas,
                rng,
            )?,
            Strategy::ConsistentHash => consistent_hash::choose(
                &candidates,
                input.grain,
                &request.options.consistent_hash,
                deltas,
            ),
            // A webhook's fallback is never a webhook (its type cannot say so); the arm is here
            // for completeness.
            Strategy::ResourceOptimized | Strategy::Webhook => resource_optimized::choose(
                view,
                &candidates,
                local,
                &request.options.resource_optimized,
                request.explain,
                rng,
            ),
        },
    };
    let tallied = strategy.tallies();
    if tallied {
        deltas.add(choice.silo, 1);
    }

    let explanation = request.explain.then(|| Explanation {
        strategy: request.strategy,
        candidates: candidates.iter().map(|c| c.id.to_string()).collect(),
        excluded: view
            .silos
            .iter()
            .filter_map(|silo| {
                exclusion_reason(view, silo, grain_type).map(|reason| Excluded {
                    silo: silo.id.to_string(),
                    reason,
                })
            })
            .collect(),
        filters: filter_effects,
        hint: input.hint.map(|hint| match hinted {
            Some(_) => format!("{hint} is compatible: used"),
            None => format!("{hint} is not a compatible silo: ignored"),
        }),
        scores: choice.scores,
        rule: choice.rule,
    });

    Ok(Decision {
        silo: choice.silo.id.clone(),
        address: choice.silo.profile.address.clone(),
        rule: choice.rule,
        explanation,
        tallied,
    })
}

#[cfg(test)]
pub(crate) mod testing {
    //! Small builders for placement tests.
    use std::collections::BTreeMap;

    use super::ClusterView;
    use crate::cluster::silo::{LoadReport, SiloProfile, Smoothing};
    use crate::cluster::{Liveness, SiloId, SiloRecord, SiloStatus};

    pub fn silo(id: &str, status: SiloStatus, grain_types: Option<&[&str]>) -> SiloRecord {
        SiloRecord {
            id: SiloId::parse("silo", id).unwrap(),
            status,
            last_heartbeat_ms: 0,
            heartbeat_count: 1,
            profile: SiloProfile {
                address: id.to_owned(),
                role: None,
                metadata: BTreeMap::new(),
                grain_types: grain_types.map(|t| t.iter().map(|s| s.to_string()).collect()),
                load: LoadReport::default(),
                smoothing: Smoothing::default(),
                first_seen_ms: 0,
            },
            drained_at_ms: None,
            protected_until_ms: 0,
        }
    }

    pub fn view(silos: Vec<SiloRecord>) -> ClusterView {
        let silos = std::sync::Arc::new(silos);
        ClusterView {
            liveness: Liveness::at(1_000, 10_000),
            silos,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::{any, prop_assert, prop_assert_eq, prop_oneof, proptest, Just};
    use proptest::strategy::Strategy as Generator;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::testing::{silo, view};
    use super::*;

    fn grain(id: &str) -> GrainId {
        GrainId::parse("grain", id).unwrap()
    }

    fn input<'a>(grain: &'a GrainId, hint: Option<&'a SiloId>) -> PlacementInput<'a> {
        PlacementInput {
            grain,
            requesting_silo: None,
            hint,
        }
    }

    fn place(
        view: &ClusterView,
        input: PlacementInput<'_>,
        strategy: Strategy,
        explain: bool,
        rng: &mut ChaCha8Rng,
    ) -> Result<Decision, PlacementError> {
        let options = StrategyOptions::default();
        let request = Request {
            input,
            strategy,
            options: &options,
            filters: &[],
            chosen_by_webhook: None,
            explain,
        };
        super::place(view, &request, &mut LocalDeltas::default(), rng)
    }

    #[test]
    fn only_active_silos_that_host_the_type_are_candidates() {
        let v = view(vec![
            silo("a", SiloStatus::Active, None),
            silo("b", SiloStatus::Joining, None),
            silo("c", SiloStatus::ShuttingDown, None),
            silo("d", SiloStatus::Active, Some(&["order"])),
            silo("e", SiloStatus::Dead, None),
        ]);
        let ids: Vec<_> = compatible(&v, "user")
            .iter()
            .map(|s| s.id.as_str())
            .collect();
        assert_eq!(ids, ["a"]);
    }

    #[test]
    fn a_compatible_hint_wins_and_an_incompatible_one_is_ignored() {
        let v = view(vec![
            silo("a", SiloStatus::Active, None),
            silo("b", SiloStatus::Active, None),
            silo("j", SiloStatus::Joining, None),
        ]);
        let g = grain("user/alice");
        let b = SiloId::parse("hint", "b").unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let hinted = place(&v, input(&g, Some(&b)), Strategy::Random, true, &mut rng).unwrap();
        assert_eq!((hinted.silo.as_str(), hinted.rule), ("b", Rule::Hint));

        let j = SiloId::parse("hint", "j").unwrap();
        let ignored = place(&v, input(&g, Some(&j)), Strategy::Random, true, &mut rng).unwrap();
        assert_eq!(ignored.rule, Rule::Random);
        assert_ne!(ignored.silo.as_str(), "j");
        let explanation = ignored.explanation.unwrap();
        assert_eq!(explanation.candidates, ["a", "b"]);
        assert_eq!(explanation.excluded.len(), 1);
        assert!(explanation.hint.unwrap().contains("ignored"));
    }

    #[test]
    fn errors_say_whether_no_silo_is_active_or_none_hosts_the_type() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let g = grain("user/alice");
        let none_active = view(vec![silo("a", SiloStatus::Joining, None)]);
        assert_eq!(
            place(
                &none_active,
                input(&g, None),
                Strategy::Random,
                false,
                &mut rng
            ),
            Err(PlacementError::NoActiveSilo { known: 1 })
        );
        let wrong_type = view(vec![silo("a", SiloStatus::Active, Some(&["order"]))]);
        assert!(matches!(
            place(
                &wrong_type,
                input(&g, None),
                Strategy::Random,
                false,
                &mut rng
            ),
            Err(PlacementError::NoCompatibleSilo { .. })
        ));
    }

    fn arbitrary_silo() -> impl Generator<Value = SiloRecord> {
        (
            (
                0u32..20,
                prop_oneof![
                    Just(SiloStatus::Joining),
                    Just(SiloStatus::Active),
                    Just(SiloStatus::ShuttingDown),
                    Just(SiloStatus::Dead)
                ],
                any::<bool>(),
                0i64..20_000,
            ),
            (
                proptest::option::of(0.0f64..100.0),
                proptest::option::of(0u64..5_000),
                any::<bool>(),
                prop_oneof![Just("z1"), Just("z2")],
                proptest::option::of(Just("x")),
            ),
        )
            .prop_map(
                |((n, status, hosts_user, last), (cpu, count, overloaded, zone, role))| {
                    let types: &[&str] = if hosts_user { &["user"] } else { &["order"] };
                    let mut s = silo(&format!("s{n}"), status, Some(types));
                    s.last_heartbeat_ms = last;
                    s.profile.smoothing.cpu_usage = cpu;
                    s.profile.load.activation_count = count;
                    s.profile.load.recent_activation_count = count;
                    s.profile.load.overloaded = overloaded;
                    s.profile.metadata.insert("zone".into(), zone.into());
                    s.profile.role = role.map(str::to_owned);
                    s
                },
            )
    }

    /// Every strategy but the webhook (which needs an endpoint; it decides by its fallback here).
    fn arbitrary_strategy() -> impl Generator<Value = Strategy> {
        proptest::sample::select(Strategy::ALL.to_vec())
    }

    proptest! {
        #[test]
        fn never_places_on_a_dead_incompatible_or_filtered_out_silo(
            silos in proptest::collection::vec(arbitrary_silo(), 0..12),
            now in 0i64..30_000,
            seed in any::<u64>(),
            strategy in arbitrary_strategy(),
            local in 0usize..12,
            require_zone in any::<bool>(),
        ) {
            let mut silos = silos;
            silos.sort_by(|a, b| a.id.cmp(&b.id));
            silos.dedup_by(|a, b| a.id == b.id);
            let v = ClusterView { liveness: Liveness::at(now, 10_000), silos: std::sync::Arc::new(silos) };
            // silo_role takes the role from the key: "user/x" → role "x".
            let g = grain("user/x");
            let requesting = v.silos.get(local).map(|s| s.id.clone());
            let filters = if require_zone {
                vec![filters::Filter::RequiredMatch { keys: vec!["zone".into()], order: 0 }]
            } else {
                Vec::new()
            };
            let options = StrategyOptions::default();
            let request = Request {
                input: PlacementInput { grain: &g, requesting_silo: requesting.as_ref(), hint: None },
                strategy,
                options: &options,
                filters: &filters,
                chosen_by_webhook: None,
                explain: true,
            };
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            if let Ok(decision) = super::place(&v, &request, &mut LocalDeltas::default(), &mut rng) {
                let chosen = v.silos.iter().find(|s| s.id == decision.silo).unwrap();
                prop_assert!(chosen.hosts("user"));
                let status = chosen.status_at(&Liveness::at(now, 10_000));
                if strategy == Strategy::StatelessWorker && Some(&chosen.id) == requesting.as_ref() {
                    prop_assert!(matches!(status, SiloStatus::Active | SiloStatus::Joining));
                } else {
                    prop_assert_eq!(status, SiloStatus::Active);
                }
                if require_zone {
                    let local_zone = requesting.as_ref().and_then(|id| v.find(id)).and_then(|l| l.profile.metadata.get("zone"));
                    prop_assert_eq!(chosen.profile.metadata.get("zone"), local_zone);
                }
                if strategy == Strategy::SiloRole {
                    prop_assert_eq!(chosen.profile.role.as_deref(), Some("x"));
                }
            }
        }

        #[test]
        fn the_same_seed_gives_the_same_answer(
            seed in any::<u64>(),
            silos in proptest::collection::vec(arbitrary_silo(), 1..12),
            strategy in arbitrary_strategy(),
        ) {
            let mut silos = silos;
            silos.sort_by(|a, b| a.id.cmp(&b.id));
            silos.dedup_by(|a, b| a.id == b.id);
            let v = ClusterView { liveness: Liveness::at(1_000, 10_000), silos: std::sync::Arc::new(silos) };
            let g = grain("user/x");
            let first = place(&v, input(&g, None), strategy, true, &mut ChaCha8Rng::seed_from_u64(seed));
            let second = place(&v, input(&g, None), strategy, true, &mut ChaCha8Rng::seed_from_u64(seed));
            prop_assert_eq!(first, second);
        }
    }
}
