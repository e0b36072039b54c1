//! A silo host built on the Rust SDK (`sdk/rust`), so that the harness holds the SDK to every
//! rule docs/runtimes.md gives a runtime ("What a runtime does with an answer"):
//!
//! - the SDK's [`Silo`] heartbeats every [`HEARTBEAT_INTERVAL`] and holds the lease each
//!   acknowledgement grants (counted from when it sent that heartbeat); the host runs grains only
//!   while it holds the lease: the SDK pauses them the instant the lease runs out, and resumes
//!   the same registrations under the same epochs at the next acknowledgement;
//! - it activates a grain only when [`Placement::claim`] (asked as this host) names this host;
//!   otherwise it forwards the call once to the silo named;
//! - it deactivates ([`Placement::release`]) and hands grains over ([`MigrationWorker`]) by epoch,
//!   ending them locally first and never re-activating one while its own deactivation or
//!   hand-over is in flight;
//! - told `silo-declared-dead`, the SDK has it drop every grain before it rejoins as the next
//!   generation.
//!
//! All of the host's traffic to the oracle goes through proxies of its own, one per replica, which
//! a test can cut to partition it from the oracle while callers still reach it.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use placement_oracle_sdk::{
    Backoff, Claim, ClientOptions, Ending, HandOver, Load, Migration, MigrationWorker, Migrator,
    OracleClient, OracleError, Placement, Silo, SiloEvents, SiloOptions,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::task::JoinHandle;

use crate::api::Api;
use crate::proxy::FaultyLink;
use crate::registry::Registry;

/// How often a host heartbeats.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(300);
/// How often a host asks for its migrations.
const MIGRATION_POLL: Duration = Duration::from_millis(250);
/// How often a host deactivates one of its grains (on average).
const DEACTIVATION_INTERVAL: Duration = Duration::from_millis(700);
/// Longest a host waits for one answer (the oracle answers within its 5 s request timeout).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// What became of a call.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Served,
    /// Not served now; the caller may retry (the reason names why).
    Retry(String),
    /// An answer a runtime did not expect: the test fails on it.
    Unexpected(String),
}

/// Counts a host keeps.
#[derive(Debug, Default)]
pub struct HostStats {
    pub served: AtomicU64,
    pub forwarded: AtomicU64,
    pub pauses: AtomicU64,
    pub rejoins: AtomicU64,
    pub migrations_completed: AtomicU64,
    pub migrations_refused: AtomicU64,
    pub deactivations: AtomicU64,
    pub heartbeats_failed: AtomicU64,
    /// Failed heartbeats by what came back.
    pub heartbeat_failures: Mutex<BTreeMap<String, u64>>,
}

/// The grains a host runs, and what the SDK tells it ([`SiloEvents`], [`Migrator`]).
struct Grains {
    registry: Arc<Registry>,
    state: Mutex<State>,
    stats: HostStats,
}

#[derive(Default)]
struct State {
    /// Whether the grains run now (false between a pause and a resume).
    running: bool,
    /// Registrations this host holds and acts on: grain → (incarnation, epoch).
    grains: BTreeMap<String, (String, i64)>,
    /// Grains whose deactivation or hand-over is in flight: not activated again meanwhile.
    leaving: HashSet<String>,
    /// Killed, or left after a drain.
    gone: bool,
}

impl Grains {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops running every grain (they stay registered, unless the caller drops them).
    fn stop_all(&self, state: &mut State) {
        if state.running {
            for (grain, (silo, _)) in &state.grains {
                self.registry.end(grain, silo);
            }
            state.running = false;
        }
    }

    /// Takes `grain` out of service before its registration is given up: it stops running if it
    /// ran, and is not activated again until [`Self::left`]. Its epoch, if the host held it.
    fn take_out(&self, state: &mut State, grain: &str) -> Option<i64> {
        state.leaving.insert(grain.to_owned());
        let (silo, epoch) = state.grains.remove(grain)?;
        if state.running {
            self.registry.end(grain, &silo);
        }
        Some(epoch)
    }

    fn left(&self, grain: &str) {
        self.lock().leaving.remove(grain);
    }
}

impl SiloEvents for Grains {
    fn paused(&self, _silo: &str) {
        let mut state = self.lock();
        if state.running {
            self.stop_all(&mut state);
            self.stats.pauses.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn resumed(&self, _silo: &str) {
        let mut state = self.lock();
        if !state.running && !state.gone {
            state.running = true;
            for (grain, (silo, epoch)) in &state.grains {
                self.registry.start(grain, silo, *epoch, true);
            }
        }
    }

    fn declared_dead(&self, _silo: &str) {
        let mut state = self.lock();
        self.stop_all(&mut state);
        state.grains.clear();
        state.leaving.clear();
        // The next incarnation starts with nothing to pause.
        state.running = !state.gone;
        self.stats.rejoins.fetch_add(1, Ordering::Relaxed);
    }

    fn heartbeat_failed(&self, error: &OracleError) {
        self.stats.heartbeats_failed.fetch_add(1, Ordering::Relaxed);
        let what = match error.status {
            0 => format!("unreachable: {}", error.detail),
            status => format!("{status} {}", error.problem),
        };
        let mut failures = self.stats.heartbeat_failures.lock().unwrap();
        *failures.entry(what).or_default() += 1;
    }
}

impl Migrator for Grains {
    async fn hand_over(&self, migration: &Migration) -> HandOver {
        let mut state = self.lock();
        if state.gone {
            return HandOver::Later;
        }
        // A registration of another epoch is not the one this migration moves.
        if state
            .grains
            .get(&migration.grain)
            .is_some_and(|(_, held)| *held != migration.epoch)
        {
            return HandOver::Later;
        }
        self.take_out(&mut state, &migration.grain);
        HandOver::Moved
    }

    fn ended(&self, migration: &Migration, ending: &Ending) {
        let counter = match ending {
            Ending::Moved { .. } => &self.stats.migrations_completed,
            Ending::Closed { .. } => &self.stats.migrations_refused,
            // The completion may have landed: the grain stays out of service here until the
            // migration comes back (or for good, if it did land).
            Ending::Unsettled { .. } => return,
            Ending::Failed => {
                self.left(&migration.grain);
                return;
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.left(&migration.grain);
    }
}

pub struct Host {
    pub address: String,
    silo: Silo,
    placement: Placement,
    worker: MigrationWorker<Grains>,
    grains: Arc<Grains>,
    links: Vec<FaultyLink>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// Every host of a run, by address (callers and forwarding find each other through it).
#[derive(Clone, Default)]
pub struct Hosts(Arc<std::sync::RwLock<Vec<Arc<Host>>>>);

impl Hosts {
    pub fn push(&self, host: Arc<Host>) {
        self.0.write().unwrap().push(host);
    }

    pub fn all(&self) -> Vec<Arc<Host>> {
        self.0.read().unwrap().clone()
    }

    pub fn find(&self, address: &str) -> Option<Arc<Host>> {
        self.0
            .read()
            .unwrap()
            .iter()
            .find(|h| h.address == address)
            .cloned()
    }
}

impl Host {
    /// Starts a host at `address` that reaches the replicas at `replica_ports` through proxies of
    /// its own, and joins (waits until the oracle acknowledged it as `active`).
    pub async fn start(
        address: &str,
        api: Api,
        replica_ports: &[u16],
        registry: Arc<Registry>,
        seed: u64,
    ) -> Arc<Self> {
        let mut links = Vec::new();
        for port in replica_ports {
            links.push(FaultyLink::start(format!("127.0.0.1:{port}")).await);
        }
        let urls: Vec<String> = links
            .iter()
            .map(|l| format!("http://127.0.0.1:{}", l.port))
            .collect();
        let options = ClientOptions {
            key: None,
            timeout: REQUEST_TIMEOUT,
            // Hosts spread over the replicas, as runtimes behind a load balancer would.
            first_replica: seed as usize,
        };
        let client = OracleClient::new(&urls, &api.cluster, options).unwrap();
        let grains = Arc::new(Grains {
            registry,
            state: Mutex::new(State {
                running: true,
                ..State::default()
            }),
            stats: HostStats::default(),
        });
        let counted = grains.clone();
        let load = move || {
            let count = counted.lock().grains.len() as u64;
            Load {
                activation_count: Some(count),
                cpu_usage: Some(10.0),
                memory_usage_bytes: Some(100_000_000 + 1_000_000 * count),
                max_available_memory_bytes: Some(8_000_000_000),
                ..Load::default()
            }
        };
        let silo = Silo::new(
            client,
            address,
            SiloOptions {
                generation: Some(1),
                interval: HEARTBEAT_INTERVAL,
                load: Arc::new(load),
                events: grains.clone(),
                backoff: Backoff::new(Duration::from_millis(50), Duration::from_secs(1), seed),
                ..SiloOptions::default()
            },
        );
        silo.join(Duration::from_secs(20))
            .await
            .unwrap_or_else(|e| panic!("{address} did not join: {e}"));
        let worker = MigrationWorker::new(&silo, grains.clone());
        worker.start(MIGRATION_POLL);
        let host = Arc::new(Self {
            address: address.to_owned(),
            placement: Placement::for_silo(&silo),
            silo,
            worker,
            grains,
            links,
            tasks: Mutex::new(Vec::new()),
        });
        let deactivations = tokio::spawn(host.clone().deactivations(seed));
        host.tasks.lock().unwrap().push(deactivations);
        host
    }

    pub fn stats(&self) -> &HostStats {
        &self.grains.stats
    }

    /// The longest time between two acknowledged heartbeats' sends, in ms.
    pub fn longest_unacknowledged_ms(&self) -> u64 {
        self.silo
            .stats()
            .longest_unacknowledged_ms
            .load(Ordering::Relaxed)
    }

    pub fn id(&self) -> String {
        self.silo.id()
    }

    pub fn grains(&self) -> usize {
        self.grains.lock().grains.len()
    }

    /// Killed, or left.
    pub fn is_gone(&self) -> bool {
        self.grains.lock().gone
    }

    /// Whether it may run grains now and does.
    pub fn is_running(&self) -> bool {
        let state = self.grains.lock();
        !state.gone && state.running && self.silo.may_run_grains()
    }

    // ---- calls ----

    /// A call for `grain` arrives. `forwarded` when another host sent it on (it is not sent on
    /// again).
    pub async fn call(self: Arc<Self>, grain: String, hosts: Hosts, forwarded: bool) -> Outcome {
        {
            let state = self.grains.lock();
            if state.gone {
                return Outcome::Retry("host gone".into());
            }
            if !state.running || !self.silo.may_run_grains() {
                return Outcome::Retry("host paused (no lease)".into());
            }
            if state.grains.contains_key(&grain) {
                self.stats().served.fetch_add(1, Ordering::Relaxed);
                return Outcome::Served;
            }
            if state.leaving.contains(&grain) {
                return Outcome::Retry("grain being handed over".into());
            }
        }
        // Not running here: claim it, which asks as the requesting silo (the store's answer).
        match self.placement.claim(&grain).await {
            Ok(Claim::RunHere {
                silo,
                epoch: Some(epoch),
                ..
            }) => self.activate(&grain, &silo, epoch),
            Ok(Claim::RunHere { epoch: None, .. }) => {
                Outcome::Unexpected(format!("{grain} placed as a stateless worker"))
            }
            Ok(Claim::ForwardTo { .. }) if forwarded => {
                Outcome::Retry("forwarded to a silo that does not hold it".into())
            }
            Ok(Claim::ForwardTo { address, silo, .. }) => match hosts.find(&address) {
                Some(peer) => {
                    self.stats().forwarded.fetch_add(1, Ordering::Relaxed);
                    Box::pin(peer.call(grain, hosts.clone(), true)).await
                }
                None => Outcome::Unexpected(format!("{grain} placed on an unknown silo {silo}")),
            },
            Err(error) => refusal(&error),
        }
    }

    /// Starts `grain` under the registration the oracle just named incarnation `silo` for.
    fn activate(&self, grain: &str, silo: &str, epoch: i64) -> Outcome {
        let mut state = self.grains.lock();
        if state.gone || self.silo.id() != silo {
            return Outcome::Retry("rejoined while asking".into());
        }
        if !state.running || !self.silo.may_run_grains_as(silo) {
            return Outcome::Retry("host paused (no lease)".into());
        }
        if state.leaving.contains(grain) {
            return Outcome::Retry("grain being handed over".into());
        }
        if !state.grains.contains_key(grain) {
            self.grains.registry.start(grain, silo, epoch, false);
            state
                .grains
                .insert(grain.to_owned(), (silo.to_owned(), epoch));
        }
        self.stats().served.fetch_add(1, Ordering::Relaxed);
        Outcome::Served
    }

    // ---- deactivations ----

    async fn deactivations(self: Arc<Self>, seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        loop {
            let pause = rng.gen_range(DEACTIVATION_INTERVAL / 2..DEACTIVATION_INTERVAL * 3 / 2);
            tokio::time::sleep(pause).await;
            let (grain, epoch) = {
                let mut state = self.grains.lock();
                if state.gone {
                    return;
                }
                if !state.running || !self.silo.may_run_grains() || state.grains.is_empty() {
                    continue;
                }
                let pick = rng.gen_range(0..state.grains.len());
                let grain = state.grains.keys().nth(pick).unwrap().clone();
                let epoch = self.grains.take_out(&mut state, &grain).unwrap();
                (grain, epoch)
            };
            let _ = self.placement.release(&grain, epoch).await;
            self.stats().deactivations.fetch_add(1, Ordering::Relaxed);
            self.grains.left(&grain);
        }
    }

    // ---- faults and shutdown ----

    /// Cuts the host off from the oracle (callers still reach it).
    pub fn cut_off(&self) {
        self.links.iter().for_each(FaultyLink::cut);
    }

    pub fn reconnect(&self) {
        self.links.iter().for_each(FaultyLink::restore);
    }

    /// Stops every task of the host's: its own and the SDK's.
    fn stop_tasks(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
        self.worker.stop();
        self.silo.close();
    }

    /// The process dies: its grains stop at once and nothing is said to the oracle.
    pub fn kill(&self) {
        {
            let mut state = self.grains.lock();
            self.grains.stop_all(&mut state);
            state.gone = true;
        }
        self.stop_tasks();
        self.cut_off();
    }

    /// After a drain: leaves the cluster (the oracle releases whatever is still registered) and
    /// stops.
    pub async fn leave(&self) -> Result<(), OracleError> {
        {
            let mut state = self.grains.lock();
            self.grains.stop_all(&mut state);
            state.grains.clear();
            state.gone = true;
        }
        self.stop_tasks();
        self.silo.leave().await
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop_tasks();
    }
}

/// A call's outcome when the oracle did not answer with a placement.
fn refusal(error: &OracleError) -> Outcome {
    match error.status {
        0 if error.is_retryable() => Outcome::Retry("no replica answered".into()),
        503 if error.retry_after.is_some() => {
            Outcome::Retry(format!("oracle 503 {}", error.problem))
        }
        _ => Outcome::Unexpected(format!("placement as requesting silo: {error}")),
    }
}
