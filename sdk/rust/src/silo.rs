//! A silo's membership and lease.
//!
//! It joins (`joining`, then `active`), heartbeats on a timer with the load its host reports, and
//! holds the lease each acknowledgement grants ([`Lease`]). Grains may run only while the lease
//! holds: when it runs out (the oracle unreachable) the silo's [`SiloEvents::paused`] is called at
//! that instant, and [`SiloEvents::resumed`] when a heartbeat is acknowledged again. Told it is
//! dead, it calls [`SiloEvents::declared_dead`] (drop every grain) and only then rejoins as the
//! next generation. It waits as `Retry-After` says after a 429 or 503. [`Silo::stop`] drains: the
//! oracle issues migrations for its grains (a [`crate::MigrationWorker`] carries them out), it
//! waits until none remains or a deadline, and leaves.
//!
//! The hooks are called from one task, in order, never while the SDK holds a lock, so a hook may
//! call back into the silo.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::Method;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::client::{segment, OracleClient};
use crate::error::OracleError;
use crate::lease::Lease;
use crate::types::{Description, HeartbeatAnswer, Load};

/// The lease taken from an oracle that grants none (one from before leases): it is held at its
/// old word, that a silo runs its grains until told it is dead.
const LEASE_OF_AN_ORACLE_WITHOUT_LEASES: Duration = Duration::from_secs(3600);
/// Heartbeats in flight at once: beyond it a tick is skipped (the oracle is not answering).
const MAX_HEARTBEATS_IN_FLIGHT: usize = 4;

/// What the runtime does when the silo's standing changes. Every method has a default that
/// does nothing.
pub trait SiloEvents: Send + Sync + 'static {
    /// Incarnation `silo`'s lease ran out: stop serving its grains (keep their registrations).
    fn paused(&self, _silo: &str) {}
    /// A heartbeat was acknowledged after a pause: the same registrations run again.
    fn resumed(&self, _silo: &str) {}
    /// The oracle declared incarnation `silo` dead: drop every grain, their registrations are
    /// gone. The next generation joins once this returns.
    fn declared_dead(&self, _silo: &str) {}
    /// A heartbeat was not acknowledged (for logs and counters).
    fn heartbeat_failed(&self, _error: &OracleError) {}
}

/// Hooks that do nothing.
pub struct NoEvents;
impl SiloEvents for NoEvents {}

/// What the host measures, asked for before each heartbeat.
pub type LoadFn = Arc<dyn Fn() -> Load + Send + Sync>;

/// The status a silo reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Joining,
    Active,
    ShuttingDown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Joining => "joining",
            Status::Active => "active",
            Status::ShuttingDown => "shutting_down",
        }
    }
}

pub struct SiloOptions {
    /// The first generation; by default the wall clock in ms, so a restarted process is a new
    /// incarnation.
    pub generation: Option<u64>,
    pub description: Description,
    /// How often it heartbeats (keep it well under the cluster's TTL and lease).
    pub interval: Duration,
    pub load: LoadFn,
    pub events: Arc<dyn SiloEvents>,
    pub backoff: Backoff,
}

impl Default for SiloOptions {
    fn default() -> Self {
        Self {
            generation: None,
            description: Description::default(),
            interval: Duration::from_secs(1),
            load: Arc::new(Load::default),
            events: Arc::new(NoEvents),
            backoff: Backoff::default(),
        }
    }
}

/// Counts a silo keeps.
#[derive(Debug, Default)]
pub struct SiloStats {
    pub heartbeats_sent: AtomicU64,
    pub heartbeats_acknowledged: AtomicU64,
    pub heartbeats_failed: AtomicU64,
    pub pauses: AtomicU64,
    pub deaths: AtomicU64,
    /// The longest time between two acknowledged heartbeats' sends, in ms.
    pub longest_unacknowledged_ms: AtomicU64,
}

/// A silo of the cluster; cheap to clone (clones are the same silo).
#[derive(Clone)]
pub struct Silo {
    inner: Arc<Inner>,
}

struct Inner {
    client: OracleClient,
    address: String,
    description: Description,
    load: LoadFn,
    events: Arc<dyn SiloEvents>,
    interval: Duration,
    state: Mutex<State>,
    /// Bumped on every change the lease keeper must look at.
    changed: watch::Sender<u64>,
    in_flight: AtomicUsize,
    stats: SiloStats,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

struct State {
    generation: u64,
    status: Status,
    lease: Lease,
    backoff: Backoff,
    /// No heartbeat before this (what `Retry-After` or the backoff said).
    quiet_until: Option<Instant>,
    /// An incarnation told it is dead whose grains the runtime has not dropped yet: nothing is
    /// sent for the next generation until it has.
    dead: Option<String>,
    last_acknowledged_send: Option<Instant>,
}

impl State {
    fn id(&self, address: &str) -> String {
        format!("{address}@{}", self.generation)
    }
}

impl Silo {
    /// A silo at `address` (`host:port`, what peers and clients dial); it does nothing until
    /// [`Self::join`].
    pub fn new(client: OracleClient, address: &str, options: SiloOptions) -> Self {
        let generation = options.generation.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_millis() as u64)
        });
        Self {
            inner: Arc::new(Inner {
                client,
                address: address.to_owned(),
                description: options.description,
                load: options.load,
                events: options.events,
                interval: options.interval,
                state: Mutex::new(State {
                    generation,
                    status: Status::Joining,
                    lease: Lease::default(),
                    backoff: options.backoff,
                    quiet_until: None,
                    dead: None,
                    last_acknowledged_send: None,
                }),
                changed: watch::channel(0).0,
                in_flight: AtomicUsize::new(0),
                stats: SiloStats::default(),
                tasks: Mutex::new(Vec::new()),
            }),
        }
    }

    /// This incarnation's id, `address@generation`.
    pub fn id(&self) -> String {
        self.inner.lock().id(&self.inner.address)
    }

    pub fn address(&self) -> &str {
        &self.inner.address
    }

    pub fn generation(&self) -> u64 {
        self.inner.lock().generation
    }

    pub fn status(&self) -> Status {
        self.inner.lock().status
    }

    pub fn stats(&self) -> &SiloStats {
        &self.inner.stats
    }

    pub fn client(&self) -> &OracleClient {
        &self.inner.client
    }

    /// Whether the silo holds its lease now: run grains only while this is true.
    pub fn may_run_grains(&self) -> bool {
        let state = self.inner.lock();
        state.dead.is_none() && state.lease.holds(Instant::now())
    }

    /// As [`Self::may_run_grains`], and the silo is still incarnation `id` (a claim made before a
    /// rejoin is not the new incarnation's).
    pub fn may_run_grains_as(&self, id: &str) -> bool {
        let state = self.inner.lock();
        state.dead.is_none()
            && state.lease.holds(Instant::now())
            && state.id(&self.inner.address) == id
    }

    /// How long the lease still holds.
    pub fn lease_remaining(&self) -> Duration {
        self.inner.lock().lease.remaining(Instant::now())
    }

    /// Joins (a `joining` heartbeat, then `active`) and starts heartbeating on the timer. A silo
    /// told on the way that it is dead drops its grains and joins as the next generation.
    pub async fn join(&self, timeout: Duration) -> Result<(), OracleError> {
        let deadline = Instant::now() + timeout;
        loop {
            let result = self.beat().await;
            self.inner.settle_death();
            match result {
                Ok(()) if self.status() == Status::Active => break,
                Ok(()) => continue,
                Err(error) if Instant::now() >= deadline => return Err(error),
                Err(error) if error.is_declared_dead() => continue,
                Err(error) if !error.is_retryable() => return Err(error),
                Err(error) => {
                    let wait = self.inner.lock().backoff.next_delay(error.retry_after);
                    tokio::time::sleep(wait).await;
                }
            }
        }
        // A second joining heartbeat was answered: report active from the next one on.
        self.beat().await?;
        let mut tasks = self.inner.tasks_lock();
        for task in tasks.drain(..) {
            task.abort();
        }
        tasks.push(tokio::spawn(Inner::heartbeats(self.inner.clone())));
        tasks.push(tokio::spawn(Inner::keep_lease(self.inner.clone())));
        Ok(())
    }

    /// One heartbeat, now. Returns what the oracle refused (a death is recorded first).
    pub async fn beat(&self) -> Result<(), OracleError> {
        self.inner.beat().await
    }

    /// Drains and leaves: asks the oracle to move every grain away (carried out by the silo's
    /// [`crate::MigrationWorker`], which must keep running meanwhile; the key needs the
    /// `operator` scope), waits until none remains or `deadline`, then leaves. Returns how many
    /// activations remained when it left.
    pub async fn stop(&self, deadline: Duration, poll: Duration) -> Result<u64, OracleError> {
        let path = format!("/silos/{}", segment(&self.id()));
        self.inner.lock().status = Status::ShuttingDown;
        let until = Instant::now() + deadline;
        let drained = async {
            self.inner
                .client
                .call_value(Method::POST, &format!("{path}/drain"), None)
                .await?;
            loop {
                let silo = self
                    .inner
                    .client
                    .call_value(Method::GET, &path, None)
                    .await?;
                let remaining = silo["drain"]["remaining_activations"].as_u64().unwrap_or(0);
                if remaining == 0 || Instant::now() >= until {
                    return Ok::<u64, OracleError>(remaining);
                }
                tokio::time::sleep(poll).await;
            }
        }
        .await;
        self.leave().await?;
        drained
    }

    /// Stops heartbeating and leaves at once (the oracle releases whatever is still registered).
    pub async fn leave(&self) -> Result<(), OracleError> {
        let path = format!("/silos/{}", segment(&self.id()));
        self.close();
        self.inner
            .client
            .call_value(Method::DELETE, &path, None)
            .await
            .map(drop)
    }

    /// Stops heartbeating without leaving (the oracle will judge the silence). The lease still
    /// runs out when it does, but no hook is called any more: stop the grains yourself.
    pub fn close(&self) {
        for task in self.inner.tasks_lock().drain(..) {
            task.abort();
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tasks_lock(&self) -> MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake_keeper(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn body(&self, id: &str, status: Status) -> Value {
        let mut body = serde_json::to_value((self.load)()).unwrap_or_else(|_| json!({}));
        let fields = body.as_object_mut().expect("a load is an object");
        fields.insert("silo".into(), json!(id));
        fields.insert("address".into(), json!(self.address));
        fields.insert("status".into(), json!(status.as_str()));
        let d = &self.description;
        if let Some(types) = &d.grain_types {
            fields.insert("grain_types".into(), json!(types));
        }
        if let Some(role) = &d.role {
            fields.insert("role".into(), json!(role));
        }
        if let Some(metadata) = &d.metadata {
            fields.insert("metadata".into(), Value::Object(metadata.clone()));
        }
        body
    }

    async fn beat(&self) -> Result<(), OracleError> {
        let (id, generation, status) = {
            let state = self.lock();
            if let Some(dead) = &state.dead {
                return Err(OracleError {
                    status: 409,
                    problem: "silo-declared-dead".into(),
                    detail: format!("{dead} is dropping its grains before it rejoins"),
                    retry_after: None,
                });
            }
            (state.id(&self.address), state.generation, state.status)
        };
        let body = self.body(&id, status);
        // The lease counts from the send (the first, when a replica that does not answer is
        // given up for the next), so the time is taken before it.
        let sent = Instant::now();
        self.stats.heartbeats_sent.fetch_add(1, Ordering::Relaxed);
        let answer = self
            .client
            .call::<HeartbeatAnswer>(Method::POST, "/heartbeats", Some(&body))
            .await;
        match answer {
            Ok(answer) => {
                let lease = answer
                    .lease_ms
                    .map_or(LEASE_OF_AN_ORACLE_WITHOUT_LEASES, Duration::from_millis);
                self.acknowledged(generation, status, sent, lease);
                Ok(())
            }
            Err(error) => {
                self.stats.heartbeats_failed.fetch_add(1, Ordering::Relaxed);
                self.events.heartbeat_failed(&error);
                self.refused(generation, &id, &error);
                Err(error)
            }
        }
    }

    fn acknowledged(&self, generation: u64, status: Status, sent: Instant, lease: Duration) {
        self.stats
            .heartbeats_acknowledged
            .fetch_add(1, Ordering::Relaxed);
        let mut state = self.lock();
        if state.generation != generation || state.dead.is_some() {
            return; // an answer to an incarnation that is gone
        }
        if let Some(previous) = state.last_acknowledged_send.filter(|&p| p < sent) {
            let gap = (sent - previous).as_millis() as u64;
            self.stats
                .longest_unacknowledged_ms
                .fetch_max(gap, Ordering::Relaxed);
        }
        state.last_acknowledged_send =
            Some(state.last_acknowledged_send.map_or(sent, |p| p.max(sent)));
        state.backoff.reset();
        state.quiet_until = None;
        if status == Status::Joining && state.status == Status::Joining {
            state.status = Status::Active;
        }
        let granted = state.lease.grant(sent, lease, Instant::now());
        drop(state);
        if granted {
            self.wake_keeper();
        }
    }

    fn refused(&self, generation: u64, id: &str, error: &OracleError) {
        let mut state = self.lock();
        if state.generation != generation || state.dead.is_some() {
            return;
        }
        if error.is_declared_dead() {
            tracing::warn!(
                silo = id,
                "declared dead: its grains are dropped; rejoining as the next generation"
            );
            state.dead = Some(id.to_owned());
            state.generation += 1;
            state.status = Status::Joining;
            state.lease = Lease::default();
            state.last_acknowledged_send = None;
            state.quiet_until = None;
            self.stats.deaths.fetch_add(1, Ordering::Relaxed);
            drop(state);
            self.wake_keeper();
        } else if error.is_retryable() {
            let wait = state.backoff.next_delay(error.retry_after);
            state.quiet_until = Some(Instant::now() + wait);
            tracing::debug!(silo = id, %error, ?wait, "heartbeat not acknowledged");
        }
    }

    /// Runs the runtime's `declared_dead` for an incarnation told it is dead, then lets the next
    /// generation heartbeat. Says whether there was one.
    fn settle_death(&self) -> bool {
        let Some(dead) = self.lock().dead.clone() else {
            return false;
        };
        self.events.declared_dead(&dead);
        self.lock().dead = None;
        true
    }

    /// A heartbeat every `interval`, each on a task of its own: one that hangs (a replica being
    /// killed) does not hold back the next.
    async fn heartbeats(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let quiet = {
                let state = self.lock();
                state.dead.is_some() || state.quiet_until.is_some_and(|q| Instant::now() < q)
            };
            if quiet || self.in_flight.load(Ordering::Relaxed) >= MAX_HEARTBEATS_IN_FLIGHT {
                continue;
            }
            self.in_flight.fetch_add(1, Ordering::Relaxed);
            let silo = self.clone();
            tokio::spawn(async move {
                let _ = silo.beat().await;
                silo.in_flight.fetch_sub(1, Ordering::Relaxed);
            });
        }
    }

    /// Calls the hooks as the lease and the silo's standing change: `paused` the instant the
    /// lease runs out, `resumed` when an acknowledgement grants it again, `declared_dead` when
    /// told so.
    async fn keep_lease(self: Arc<Self>) {
        let mut changes = self.changed.subscribe();
        let (mut holding, mut paused) = (self.lock().lease.holds(Instant::now()), false);
        loop {
            changes.borrow_and_update();
            if self.settle_death() {
                (holding, paused) = (false, false);
                continue;
            }
            let (id, lease) = {
                let state = self.lock();
                (state.id(&self.address), state.lease)
            };
            let holds = lease.holds(Instant::now());
            if holding && !holds {
                paused = true;
                self.stats.pauses.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(silo = %id, "lost its lease: grains pause");
                self.events.paused(&id);
            } else if !holding && holds && paused {
                paused = false;
                tracing::info!(silo = %id, "holds its lease again: grains resume");
                self.events.resumed(&id);
            }
            holding = holds;
            let expiry = lease.until().filter(|_| holds);
            tokio::select! {
                () = sleep_until(expiry) => {}
                changed = changes.changed() => if changed.is_err() { return },
            }
        }
    }
}

/// Sleeps until `at`, or for ever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
