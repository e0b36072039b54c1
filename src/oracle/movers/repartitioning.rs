//! The repartitioner as a use case: edge reports from any silo through any replica go into the
//! cluster's bounded buffer; the replica holding the cluster's lease counts them into the sketch
//! (every few seconds, and before every round), runs rounds on their timer or when asked, turns a
//! round's moves into `repartitioner` migrations, and keeps its state in the store under the lease.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{Movers, OracleError};
use crate::clock::Millis;
use crate::cluster::{ClusterName, GrainId, SiloId, SiloStatus};
use crate::placement::Strategy;
use crate::policy::{Immovable, Policy};
use crate::rebalancer::Rebalancer;
use crate::repartitioner::{
    plan_round, Graph, GraphInput, Repartitioner, RepartitionerOptions, RoundSummary,
};
use crate::store::{
    EdgeIntake, EdgeReport, Lease, Membership, Migration, MigrationReason, NewMigration,
};
use crate::telemetry::metric;

/// The work-state kind the repartitioner is stored under.
const KIND: &str = "repartitioner";
/// How often the lease holder counts waiting edge reports between rounds.
const ABSORB_EVERY_MS: Millis = 5_000;
/// Most edge reports counted in one step.
const MAX_ABSORBED: u32 = 250_000;
/// Edge reports read from the store at a time while counting (bounds the replica's memory).
const ABSORB_PAGE: u32 = 10_000;
/// Grains looked up in the directory per call.
const LOOKUP_CHUNK: usize = 1_000;

/// What an edge report did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdgesTaken {
    /// Edges stored for the next round (a pair listed twice counts once).
    pub accepted: u64,
    /// Edges left out: a grain calling itself, or two grains that never move.
    pub ignored: u64,
    /// Older waiting reports dropped to make room (the buffer was full).
    pub dropped: u64,
}

/// A round and what it issued.
#[derive(Debug, Clone)]
pub struct RepartitionerRound {
    pub summary: RoundSummary,
    /// Planned moves: (grain, from, to).
    pub moves: Vec<(String, String, String)>,
    pub migrations: Vec<Migration>,
}

/// The repartitioner of a cluster, as `GET …/repartitioner` shows it.
#[derive(Debug, Clone)]
pub struct RepartitionerStatus {
    pub state: Repartitioner,
    pub options: RepartitionerOptions,
    pub intake: EdgeIntake,
    /// Tracked weight between grains on different silos ÷ all tracked weight, now.
    pub remote_fraction: f64,
    pub lease: Option<Lease>,
    pub now: Millis,
}

impl Movers {
    /// Stores a silo's edge report for the lease holder's next count.
    pub async fn report_edges(
        &self,
        cluster: &ClusterName,
        edges: &[EdgeReport],
    ) -> Result<EdgesTaken, OracleError> {
        let (membership, _) = self.views.for_placement(cluster, false).await?;
        let policy = &membership.policy;
        let fixed = fixed_types(policy);
        let mut merged: BTreeMap<(&GrainId, &GrainId), u64> = BTreeMap::new();
        let mut ignored = 0;
        for edge in edges {
            let fixed_end = |g: &GrainId| fixed.contains(g.grain_type());
            if edge.from == edge.to || (fixed_end(&edge.from) && fixed_end(&edge.to)) {
                ignored += 1;
                continue;
            }
            let key = if edge.from <= edge.to {
                (&edge.from, &edge.to)
            } else {
                (&edge.to, &edge.from)
            };
            let count = merged.entry(key).or_default();
            *count = count.saturating_add(edge.count);
        }
        let kept: Vec<EdgeReport> = merged
            .into_iter()
            .map(|((from, to), count)| EdgeReport {
                from: from.clone(),
                to: to.clone(),
                count,
            })
            .collect();
        let dropped = if kept.is_empty() {
            0
        } else {
            self.store
                .append_edges(cluster, &kept, policy.repartitioner.max_unprocessed_edges)
                .await
                .inspect_err(|_| metric::store_error("append_edges"))?
                .ok_or_else(|| OracleError::ClusterNotFound(cluster.to_string()))?
        };
        metric::edges(kept.len() as u64, ignored, dropped);
        Ok(EdgesTaken {
            accepted: kept.len() as u64,
            ignored,
            dropped,
        })
    }

    /// The repartitioner's state (a fresh one if it never ran), its buffer and the cluster's lease.
    pub async fn repartitioner_status(
        &self,
        cluster: &ClusterName,
    ) -> Result<RepartitionerStatus, OracleError> {
        let membership = self.views.read(cluster).await?;
        let now = membership.liveness.now;
        let options = membership.policy.repartitioner;
        let state = self.stored_repartitioner(cluster, now, &options).await?;
        let (graph, _, _) = self.graph(cluster, &membership, &state).await?;
        let remote_fraction = graph.remote_fraction(&graph.locations());
        metric::repartitioner_state(cluster.as_str(), state.sketch.len(), remote_fraction);
        Ok(RepartitionerStatus {
            state,
            options,
            intake: self.store.edge_intake(cluster).await?,
            remote_fraction,
            lease: self.store.lease(cluster).await?,
            now,
        })
    }

    /// Runs one round now, as the lease holder (counting every waiting report first).
    pub async fn run_repartitioner_round(
        &self,
        cluster: &ClusterName,
    ) -> Result<RepartitionerRound, OracleError> {
        // The lease first: an unknown cluster is refused before it gets a gate.
        let lease = self.lease_for_request(cluster).await?;
        let _gate = self.mover_gate(cluster).await;
        let membership = self.views.read(cluster).await?;
        let now = membership.liveness.now;
        let options = membership.policy.repartitioner;
        let (mut state, _) = self
            .read_repartitioner(cluster, now, &options, Some(&lease))
            .await?;
        self.absorb(cluster, now, &options, &mut state).await?;
        self.round(cluster, &lease, &membership, state).await
    }

    /// The movers' driver's repartitioner step, under the lease and the gate: counts waiting
    /// reports every few seconds, and runs the round when its timer says so (when enabled).
    pub(super) async fn repartitioner_step(
        &self,
        cluster: &ClusterName,
        lease: &Lease,
        membership: &Membership,
    ) -> Result<Option<RepartitionerRound>, OracleError> {
        let now = membership.liveness.now;
        let options = membership.policy.repartitioner;
        let intake = self.store.edge_intake(cluster).await?;
        if !options.enabled && intake.pending == 0 {
            return Ok(None);
        }
        let (mut state, stored) = self
            .read_repartitioner(cluster, now, &options, Some(lease))
            .await?;
        let due = options.enabled && state.round_due(now);
        let waiting = intake.last_seq > state.absorbed_through;
        let absorb =
            waiting && (due || now.saturating_sub(state.last_absorbed_at_ms) >= ABSORB_EVERY_MS);
        if absorb {
            self.absorb(cluster, now, &options, &mut state).await?;
        }
        if due {
            return self
                .round(cluster, lease, membership, state)
                .await
                .map(Some);
        }
        if absorb || (options.enabled && !stored) {
            self.save_repartitioner(cluster, lease, &state).await?;
            if absorb {
                self.store
                    .forget_edges(cluster, state.absorbed_through)
                    .await?;
            }
        }
        Ok(None)
    }

    /// Counts the waiting reports into the sketch.
    async fn absorb(
        &self,
        cluster: &ClusterName,
        now: Millis,
        options: &RepartitionerOptions,
        state: &mut Repartitioner,
    ) -> Result<(), OracleError> {
        let mut counted = 0;
        while counted < MAX_ABSORBED {
            let pending = self
                .store
                .pending_edges(cluster, state.absorbed_through, ABSORB_PAGE)
                .await?;
            state.absorb(
                now,
                options,
                pending
                    .iter()
                    .map(|e| (e.seq, e.from.as_str(), e.to.as_str(), e.count)),
            );
            counted += pending.len() as u32;
            if pending.len() < ABSORB_PAGE as usize {
                break;
            }
        }
        Ok(())
    }

    /// Plans a round on the tracked edges, issues its moves as migrations (fenced by the lease),
    /// and stores the state.
    async fn round(
        &self,
        cluster: &ClusterName,
        lease: &Lease,
        membership: &Membership,
        mut state: Repartitioner,
    ) -> Result<RepartitionerRound, OracleError> {
        let now = membership.liveness.now;
        let options = membership.policy.repartitioner;
        let started = std::time::Instant::now();
        let (graph, counts, epochs) = self.graph(cluster, membership, &state).await?;
        let graph_ms = started.elapsed().as_millis();
        let deviation = self.rebalancer_deviation(cluster).await?;
        let plan = plan_round(&graph, &counts, &options, deviation);
        let plan_ms = started.elapsed().as_millis() - graph_ms;
        let mut wanted = Vec::with_capacity(plan.moves.len());
        let mut moves = Vec::with_capacity(plan.moves.len());
        for m in &plan.moves {
            let grain = &graph.vertices[m.vertex].grain;
            let (from, to) = (&graph.silos[m.from], &graph.silos[m.to]);
            moves.push((grain.clone(), from.clone(), to.clone()));
            let (Ok(grain_id), Ok(from_id), Ok(to_id), Some(&epoch)) = (
                GrainId::parse("grain", grain),
                SiloId::parse("from", from),
                SiloId::parse("to", to),
                epochs.get(grain.as_str()),
            ) else {
                continue;
            };
            wanted.push(NewMigration {
                grain: grain_id,
                from: from_id,
                to: to_id,
                epoch,
                reason: MigrationReason::Repartitioner,
            });
        }
        let migrations = if wanted.is_empty() {
            Vec::new()
        } else {
            match self.store.issue_migrations(cluster, lease, &wanted).await? {
                Some(issued) => issued,
                None => return Err(self.lost_lease(cluster).await),
            }
        };
        let reason = MigrationReason::Repartitioner.as_str();
        metric::migrations(reason, "issued", migrations.len() as u64);
        metric::repartitioner_round(moves.len() as u64);
        let summary = self.with_rng(|rng| {
            state.finish_round(now, &options, &graph, &plan, migrations.len() as u64, rng)
        });
        metric::repartitioner_state(
            cluster.as_str(),
            state.sketch.len(),
            plan.remote_fraction_after,
        );
        self.save_repartitioner(cluster, lease, &state).await?;
        self.store
            .forget_edges(cluster, state.absorbed_through)
            .await?;
        tracing::info!(
            %cluster,
            round = summary.round,
            edges = graph.adjacency.iter().map(Vec::len).sum::<usize>() / 2,
            grains = graph.vertices.len(),
            moves = moves.len(),
            graph_ms,
            plan_ms,
            total_ms = started.elapsed().as_millis(),
            "repartitioner round planned and issued"
        );
        Ok(RepartitionerRound {
            summary,
            moves,
            migrations,
        })
    }

    /// The graph of the tracked edges over where their grains live now, the activations of
    /// each silo that may receive grains (less what open migrations take away, plus what they
    /// bring), and each located grain's activation epoch (what its migration applies to).
    async fn graph(
        &self,
        cluster: &ClusterName,
        membership: &Membership,
        state: &Repartitioner,
    ) -> Result<(Graph, Vec<i64>, HashMap<String, i64>), OracleError> {
        let edges = state.sketch.edges();
        let grains: HashSet<&str> = edges.iter().flat_map(|e| [e.a, e.b]).collect();
        let mut locations: HashMap<String, String> = HashMap::new();
        let mut epochs: HashMap<String, i64> = HashMap::new();
        for (grain, silo, epoch) in self.locate(cluster, grains.into_iter()).await? {
            epochs.insert(grain.clone(), epoch);
            locations.insert(grain, silo);
        }
        let view = membership.view();
        let targets: Vec<String> = view
            .silos
            .iter()
            .filter(|s| view.status(s) == SiloStatus::Active)
            .map(|s| s.id.to_string())
            .collect();
        let policy = &membership.policy;
        let fixed = fixed_types(policy);
        let anchoring = policy.repartitioner.anchoring_filter_enabled;
        let movable = |grain: &str| !fixed.contains(grain.split('/').next().unwrap_or_default());
        let anchored = |grain: &str| anchoring && state.is_anchored(grain);
        let compat = policy.repartitioner.orleans_compat;
        let graph = Graph::build(
            edges.iter().map(|e| (e.a, e.b, planning_weight(e, compat))),
            &GraphInput {
                targets: targets.clone(),
                locations: &locations,
                movable: &movable,
                anchored: &anchored,
            },
        );
        // Each silo's entries, less what open migrations take away, plus what they bring.
        let mut by_silo: HashMap<String, i64> = self
            .store
            .activation_counts(cluster)
            .await?
            .into_iter()
            .map(|(silo, n)| (silo, i64::try_from(n).unwrap_or(i64::MAX)))
            .collect();
        for (from, to, n) in self.store.open_migration_counts(cluster).await? {
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            *by_silo.entry(from).or_default() -= n;
            *by_silo.entry(to).or_default() += n;
        }
        let counts: Vec<i64> = targets
            .iter()
            .map(|silo| by_silo.get(silo).copied().unwrap_or(0))
            .collect();
        Ok((graph, counts, epochs))
    }

    /// Live activations of `grains`: (grain, silo, epoch).
    async fn locate<'g>(
        &self,
        cluster: &ClusterName,
        grains: impl Iterator<Item = &'g str>,
    ) -> Result<Vec<(String, String, i64)>, OracleError> {
        let ids: Vec<GrainId> = grains
            .filter_map(|g| GrainId::parse("grain", g).ok())
            .collect();
        let mut found = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(LOOKUP_CHUNK) {
            for located in self.store.lookup(cluster, chunk).await? {
                if located.live {
                    let a = located.activation;
                    found.push((a.grain, a.silo, a.epoch));
                }
            }
        }
        Ok(found)
    }

    /// The rebalancer's last measured deviation (Orleans' `ClusterImbalance`), 0 before any.
    async fn rebalancer_deviation(&self, cluster: &ClusterName) -> Result<f64, OracleError> {
        let (stored, _) = self
            .load_work::<Rebalancer>(cluster, super::rebalancing::KIND)
            .await?;
        Ok(stored.map_or(0.0, |rebalancer| rebalancer.deviation))
    }

    async fn stored_repartitioner(
        &self,
        cluster: &ClusterName,
        now: Millis,
        options: &RepartitionerOptions,
    ) -> Result<Repartitioner, OracleError> {
        Ok(self
            .read_repartitioner(cluster, now, options, None)
            .await?
            .0)
    }

    /// The stored repartitioner (a fresh one when none is stored or it cannot be read), and
    /// whether one was stored. Under `lease`, the copy this replica stored under that token is
    /// the stored state.
    async fn read_repartitioner(
        &self,
        cluster: &ClusterName,
        now: Millis,
        options: &RepartitionerOptions,
        lease: Option<&Lease>,
    ) -> Result<(Repartitioner, bool), OracleError> {
        if let Some(lease) = lease {
            let states = self
                .repartitioner_states
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some((token, state)) = states.get(cluster) {
                if *token == lease.token {
                    return Ok((state.clone(), true));
                }
            }
        }
        let (stored, found) = self.load_work(cluster, KIND).await?;
        let state =
            stored.unwrap_or_else(|| self.with_rng(|rng| Repartitioner::new(now, options, rng)));
        Ok((state, found))
    }

    async fn save_repartitioner(
        &self,
        cluster: &ClusterName,
        lease: &Lease,
        state: &Repartitioner,
    ) -> Result<(), OracleError> {
        self.store_work(cluster, lease, KIND, state).await?;
        let mut states = self
            .repartitioner_states
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Bounded like the membership cache: past it, the copies are dropped (and read again).
        if states.len() >= super::super::views::MAX_CACHED_MEMBERSHIPS
            && !states.contains_key(cluster)
        {
            states.clear();
        }
        states.insert(cluster.clone(), (lease.token, state.clone()));
        Ok(())
    }
}

/// Grain types the repartitioner never moves: immovable for it, or stateless workers.
fn fixed_types(policy: &Policy) -> HashSet<String> {
    let mut fixed: HashSet<String> = policy
        .immovable_types(Immovable::keeps_from_repartitioner)
        .into_iter()
        .collect();
    fixed.extend(
        policy
            .grain_types
            .keys()
            .filter(|t| policy.resolve(t, None).strategy == Strategy::StatelessWorker)
            .cloned(),
    );
    fixed
}

/// The weight a plan gives a tracked edge: Orleans' estimate in compat mode; otherwise only the
/// calls the sketch knows the edge carries (an edge that displaced another is credited with that
/// one's count as its error; planning on it would move grains on other edges' calls).
fn planning_weight(edge: &crate::repartitioner::sketch::TrackedEdge<'_>, compat: bool) -> u64 {
    if compat {
        edge.count
    } else {
        edge.guaranteed()
    }
}
