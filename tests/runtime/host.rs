//! A silo host that keeps every rule the README gives a runtime ("What a runtime does with an
//! answer"), so that what it does is what a careful runtime would do:
//!
//! - it heartbeats every [`HEARTBEAT_INTERVAL`], alternating replicas, and holds the lease each
//!   acknowledgement grants (`lease_ms`, counted from when it sent that heartbeat);
//! - it runs grains only while it holds the lease: when the lease runs out it pauses them all,
//!   and resumes the same registrations under the same epochs at the next acknowledgement;
//! - it activates a grain only when the oracle, asked with this host as `requesting_silo`, names
//!   this host; otherwise it forwards the call once to the silo named;
//! - it deactivates and hands grains over by epoch, ending them locally first and never
//!   re-activating one while its own deactivation or hand-over is in flight;
//! - told `silo-declared-dead`, it drops every grain and rejoins as the next generation.
//!
//! All of the host's traffic to the oracle goes through proxies of its own, one per replica, which
//! a test can cut to partition it from the oracle while callers still reach it.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reqwest::Method;
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::{Api, Reply};
use crate::proxy::FaultyLink;
use crate::registry::Registry;

/// How often a host heartbeats.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(300);
/// How often a host asks for its migrations.
const MIGRATION_POLL: Duration = Duration::from_millis(250);
/// How often a host deactivates one of its grains (on average).
const DEACTIVATION_INTERVAL: Duration = Duration::from_millis(700);

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
    /// The longest time between two acknowledged heartbeats' sends, in ms.
    pub longest_unacknowledged_ms: AtomicU64,
}

struct State {
    generation: u64,
    /// This incarnation's silo id, `address@generation`.
    id: String,
    /// Until when the last acknowledged heartbeats allow running grains.
    lease_until: Option<Instant>,
    /// Whether the grains run now (the lease is held and they were resumed).
    running: bool,
    /// Registrations this incarnation holds and acts on: grain → epoch.
    grains: BTreeMap<String, i64>,
    /// Grains whose deactivation or hand-over is in flight: not activated again meanwhile.
    leaving: HashSet<String>,
    /// When the last acknowledged heartbeat was sent.
    last_acknowledged_send: Option<Instant>,
    /// Killed, or left after a drain.
    gone: bool,
}

pub struct Host {
    pub address: String,
    api: Api,
    /// The replicas, as this host reaches them: through its own proxies.
    oracle: Vec<String>,
    links: Vec<FaultyLink>,
    registry: Arc<Registry>,
    state: Mutex<State>,
    lease_changed: watch::Sender<Option<Instant>>,
    next_replica: AtomicUsize,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    pub stats: HostStats,
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
    /// its own; it joins with its first heartbeat.
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
        let oracle = links
            .iter()
            .map(|l| format!("http://127.0.0.1:{}", l.port))
            .collect();
        let host = Arc::new(Self {
            address: address.to_owned(),
            api,
            oracle,
            links,
            registry,
            state: Mutex::new(State {
                generation: 1,
                id: format!("{address}@1"),
                lease_until: None,
                running: false,
                grains: BTreeMap::new(),
                leaving: HashSet::new(),
                last_acknowledged_send: None,
                gone: false,
            }),
            lease_changed: watch::channel(None).0,
            next_replica: AtomicUsize::new(seed as usize),
            tasks: Mutex::new(Vec::new()),
            stats: HostStats::default(),
        });
        let tasks = vec![
            tokio::spawn(host.clone().heartbeats()),
            tokio::spawn(host.clone().lease_watch()),
            tokio::spawn(host.clone().migrations()),
            tokio::spawn(host.clone().deactivations(seed)),
        ];
        *host.tasks.lock().unwrap() = tasks;
        host
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends a request to the next replica (alternating, through this host's proxies), and on to
    /// the one after when a replica does not answer or answers 503 (it may be the one that
    /// cannot reach the store), as the README tells a runtime to.
    async fn ask(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Reply {
        let mut reply = Reply::Unreachable("not sent".into());
        for _ in 0..self.oracle.len() {
            let i = self.next_replica.fetch_add(1, Ordering::Relaxed);
            let replica = &self.oracle[i % self.oracle.len()];
            reply = self
                .api
                .send(replica, method.clone(), path, body.clone())
                .await;
            if !matches!(reply, Reply::Unreachable(_)) && !reply.is_retryable() {
                break;
            }
        }
        reply
    }

    pub fn id(&self) -> String {
        self.lock().id.clone()
    }

    pub fn grains(&self) -> usize {
        self.lock().grains.len()
    }

    /// Killed, or left.
    pub fn is_gone(&self) -> bool {
        self.lock().gone
    }

    /// Whether it may run grains now and does.
    pub fn is_running(&self) -> bool {
        let state = self.lock();
        can_run(&state, Instant::now())
    }

    // ---- calls ----

    /// A call for `grain` arrives. `forwarded` when another host sent it on (it is not sent on
    /// again).
    pub async fn call(self: Arc<Self>, grain: String, hosts: Hosts, forwarded: bool) -> Outcome {
        let asking = {
            let state = self.lock();
            if state.gone {
                return Outcome::Retry("host gone".into());
            }
            if !can_run(&state, Instant::now()) {
                return Outcome::Retry("host paused (no lease)".into());
            }
            if state.grains.contains_key(&grain) {
                self.stats.served.fetch_add(1, Ordering::Relaxed);
                return Outcome::Served;
            }
            if state.leaving.contains(&grain) {
                return Outcome::Retry("grain being handed over".into());
            }
            state.id.clone()
        };
        // Not running here: ask as the requesting silo, which always gets the store's answer.
        let reply = self
            .ask(
                Method::POST,
                "/placements",
                Some(json!({ "grain": grain, "requesting_silo": asking })),
            )
            .await;
        let Some(placement) = reply.ok() else {
            return refusal(&reply);
        };
        let silo = placement["silo"].as_str().unwrap_or_default();
        if silo == asking {
            let epoch = placement["epoch"]
                .as_i64()
                .expect("a registered grain has an epoch");
            return self.activate(&grain, &asking, epoch);
        }
        if forwarded {
            return Outcome::Retry("forwarded to a silo that does not hold it".into());
        }
        let address = placement["address"].as_str().unwrap_or_default();
        match hosts.find(address) {
            Some(peer) => {
                self.stats.forwarded.fetch_add(1, Ordering::Relaxed);
                Box::pin(peer.call(grain, hosts.clone(), true)).await
            }
            None => Outcome::Unexpected(format!("placed on an unknown silo: {placement}")),
        }
    }

    /// Starts `grain` under the registration the oracle just named this silo for.
    fn activate(&self, grain: &str, asked_as: &str, epoch: i64) -> Outcome {
        let mut state = self.lock();
        if state.gone || state.id != asked_as {
            return Outcome::Retry("rejoined while asking".into());
        }
        if !can_run(&state, Instant::now()) {
            return Outcome::Retry("host paused (no lease)".into());
        }
        if state.leaving.contains(grain) {
            return Outcome::Retry("grain being handed over".into());
        }
        if !state.grains.contains_key(grain) {
            self.registry.start(grain, &state.id, epoch, false);
            state.grains.insert(grain.to_owned(), epoch);
        }
        self.stats.served.fetch_add(1, Ordering::Relaxed);
        Outcome::Served
    }

    // ---- membership and the lease ----

    /// Sends a heartbeat every [`HEARTBEAT_INTERVAL`], each on its own: one that hangs (a replica
    /// being killed) does not hold back the next. Each goes to the next replica, and on to the
    /// one after if that one does not answer.
    async fn heartbeats(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(HEARTBEAT_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if self.lock().gone {
                return;
            }
            tokio::spawn(self.clone().heartbeat());
        }
    }

    async fn heartbeat(self: Arc<Self>) {
        let (id, count) = {
            let state = self.lock();
            (state.id.clone(), state.grains.len())
        };
        let body = json!({ "silo": id, "address": self.address, "activation_count": count,
                           "cpu_usage": 10.0,
                           "memory_usage_bytes": 100_000_000 + 1_000_000 * count as u64,
                           "max_available_memory_bytes": 8_000_000_000_u64 });
        // The lease counts from the send — the first, when a replica that does not answer is
        // given up for the next — so the time is taken before it.
        let sent = Instant::now();
        let reply = self.ask(Method::POST, "/heartbeats", Some(body)).await;
        match reply.ok() {
            Some(silo) => {
                // An oracle that grants no lease (before leases existed) is taken at its old
                // word: a silo may run its grains until told it is dead.
                let lease = silo["lease_ms"]
                    .as_u64()
                    .map_or(Duration::from_secs(3600), Duration::from_millis);
                self.acknowledged(&id, sent, lease);
            }
            None if reply.problem() == Some("silo-declared-dead") => self.declared_dead(&id),
            None => {
                self.stats.heartbeats_failed.fetch_add(1, Ordering::Relaxed);
                let what = match &reply {
                    Reply::Answer { status, .. } => {
                        format!("{status} {}", reply.problem().unwrap_or_default())
                    }
                    Reply::Unreachable(error) => format!("unreachable: {error}"),
                };
                *self
                    .stats
                    .heartbeat_failures
                    .lock()
                    .unwrap()
                    .entry(what)
                    .or_default() += 1;
            }
        }
    }

    /// A heartbeat of incarnation `id`, sent at `sent`, was acknowledged with `lease`: the grains
    /// run (again) under the registrations they held, until `sent + lease` at least.
    fn acknowledged(&self, id: &str, sent: Instant, lease: Duration) {
        let mut state = self.lock();
        if state.gone || state.id != id {
            return;
        }
        if let Some(previous) = state.last_acknowledged_send.filter(|&p| p < sent) {
            let gap = (sent - previous).as_millis() as u64;
            self.stats
                .longest_unacknowledged_ms
                .fetch_max(gap, Ordering::Relaxed);
        }
        state.last_acknowledged_send =
            Some(state.last_acknowledged_send.map_or(sent, |p| p.max(sent)));
        let until = sent + lease;
        let until = state.lease_until.map_or(until, |held| held.max(until));
        state.lease_until = Some(until);
        if !state.running && Instant::now() < until {
            state.running = true;
            for (grain, epoch) in &state.grains {
                self.registry.start(grain, &state.id, *epoch, true);
            }
        }
        drop(state);
        self.lease_changed.send_replace(Some(until));
    }

    /// Told incarnation `id` is dead: every grain goes, and the next generation joins.
    fn declared_dead(&self, id: &str) {
        let mut state = self.lock();
        if state.gone || state.id != id {
            return;
        }
        self.stop_all(&mut state);
        state.grains.clear();
        state.leaving.clear();
        state.generation += 1;
        state.id = format!("{}@{}", self.address, state.generation);
        state.lease_until = None;
        state.last_acknowledged_send = None;
        self.stats.rejoins.fetch_add(1, Ordering::Relaxed);
        drop(state);
        self.lease_changed.send_replace(None);
    }

    /// Pauses the grains the moment the lease runs out.
    async fn lease_watch(self: Arc<Self>) {
        let mut changed = self.lease_changed.subscribe();
        loop {
            let until = *changed.borrow_and_update();
            if let Some(until) = until.filter(|&u| u > Instant::now()) {
                tokio::select! {
                    _ = tokio::time::sleep_until(until.into()) => {}
                    result = changed.changed() => {
                        if result.is_err() { return; }
                        continue;
                    }
                }
            }
            self.pause_if_lapsed();
            if changed.changed().await.is_err() {
                return;
            }
        }
    }

    fn pause_if_lapsed(&self) {
        let mut state = self.lock();
        let lapsed = state.lease_until.is_none_or(|u| Instant::now() >= u);
        if state.running && lapsed {
            self.stop_all(&mut state);
            self.stats.pauses.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Stops running every grain (they stay registered, unless the caller drops them).
    fn stop_all(&self, state: &mut State) {
        if state.running {
            for grain in state.grains.keys() {
                self.registry.end(grain, &state.id);
            }
            state.running = false;
        }
    }

    /// Takes `grain` out of service before its registration is given up: it stops running if it
    /// ran, and is not activated again until [`Self::left`] (a call asking meanwhile would be told
    /// the registration is still here). Its epoch, if this incarnation held it.
    fn take_out(&self, state: &mut State, grain: &str) -> Option<i64> {
        state.leaving.insert(grain.to_owned());
        let epoch = state.grains.remove(grain)?;
        if state.running {
            self.registry.end(grain, &state.id);
        }
        Some(epoch)
    }

    fn left(&self, grain: &str) {
        self.lock().leaving.remove(grain);
    }

    // ---- migrations and deactivations ----

    async fn migrations(self: Arc<Self>) {
        loop {
            tokio::time::sleep(MIGRATION_POLL).await;
            let id = {
                let state = self.lock();
                if state.gone {
                    return;
                }
                if !can_run(&state, Instant::now()) {
                    continue;
                }
                state.id.clone()
            };
            let reply = self
                .ask(Method::GET, &format!("/migrations?silo={id}"), None)
                .await;
            let Some(page) = reply.ok() else { continue };
            for migration in page["migrations"].as_array().into_iter().flatten() {
                let grain = migration["grain"].as_str().unwrap_or_default().to_owned();
                let epoch = migration["epoch"].as_i64().unwrap_or_default();
                {
                    let mut state = self.lock();
                    if state.id != id || state.gone {
                        break;
                    }
                    // A registration of another epoch is not the one this migration moves.
                    if state.grains.get(&grain).is_some_and(|&held| held != epoch) {
                        continue;
                    }
                    self.take_out(&mut state, &grain);
                }
                let done = self
                    .ask(
                        Method::POST,
                        &format!("/migrations/{}/complete", migration["id"]),
                        Some(json!({})),
                    )
                    .await;
                match &done {
                    Reply::Answer { status: 200, .. } => {
                        self.stats
                            .migrations_completed
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    Reply::Answer {
                        status: 409 | 404, ..
                    } => {
                        self.stats
                            .migrations_refused
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
                self.left(&grain);
            }
        }
    }

    async fn deactivations(self: Arc<Self>, seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        loop {
            let pause = rng.gen_range(DEACTIVATION_INTERVAL / 2..DEACTIVATION_INTERVAL * 3 / 2);
            tokio::time::sleep(pause).await;
            let (grain, id, epoch) = {
                let mut state = self.lock();
                if state.gone {
                    return;
                }
                if !can_run(&state, Instant::now()) || state.grains.is_empty() {
                    continue;
                }
                let pick = rng.gen_range(0..state.grains.len());
                let grain = state.grains.keys().nth(pick).unwrap().clone();
                let epoch = self.take_out(&mut state, &grain).unwrap();
                (grain, state.id.clone(), epoch)
            };
            self.ask(
                Method::DELETE,
                &format!("/activations/{grain}?silo={id}&epoch={epoch}"),
                None,
            )
            .await;
            self.stats.deactivations.fetch_add(1, Ordering::Relaxed);
            self.left(&grain);
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

    /// The process dies: its grains stop at once and nothing is said to the oracle.
    pub fn kill(&self) {
        let mut state = self.lock();
        self.stop_all(&mut state);
        state.gone = true;
        drop(state);
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
        self.cut_off();
    }

    /// After a drain: leaves the cluster (the oracle releases whatever is still registered) and
    /// stops.
    pub async fn leave(&self) -> Reply {
        let id = {
            let mut state = self.lock();
            self.stop_all(&mut state);
            state.grains.clear();
            state.gone = true;
            state.id.clone()
        };
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
        self.ask(Method::DELETE, &format!("/silos/{id}"), None)
            .await
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

fn can_run(state: &State, now: Instant) -> bool {
    !state.gone && state.running && state.lease_until.is_some_and(|until| now < until)
}

/// A call's outcome when the oracle did not answer with a placement.
fn refusal(reply: &Reply) -> Outcome {
    if reply.is_retryable() {
        return Outcome::Retry(format!(
            "oracle 503 {}",
            reply.problem().unwrap_or_default()
        ));
    }
    match reply {
        Reply::Unreachable(_) => Outcome::Retry("no replica answered".into()),
        other => Outcome::Unexpected(format!(
            "placement as requesting silo: {}",
            other.describe()
        )),
    }
}
