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
//! `paused`, `resumed` and `declared_dead` are called from one task (the lease keeper), in order,
//! never while the SDK holds a lock, so a hook may call back into the silo; `declared_dead` may
//! also be called from [`Silo::join`], before that task starts, and `leaving` from [`Silo::stop`]
//! or [`Silo::leave`]. A hook that panics is logged and the silo carries on.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
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
    /// The silo is about to leave ([`Silo::stop`] at its deadline, or [`Silo::leave`]): stop
    /// every grain still running, the leave releases their registrations.
    fn leaving(&self, _silo: &str) {}
    /// A heartbeat was not acknowledged (for logs and counters); called from the heartbeat's
    /// own task.
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
    /// The lease the last acknowledgement granted: a heartbeat waits at most a third of it for a
    /// replica before it tries the next (see [`Inner::beat`]).
    granted: Option<Duration>,
    /// Stopping or left: never rejoins, and runs no grain once left.
    stopping: bool,
    left: bool,
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
                    granted: None,
                    stopping: false,
                    left: false,
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
        self.inner.lock().may_run(Instant::now())
    }

    /// As [`Self::may_run_grains`], and the silo is still incarnation `id` (a claim made before a
    /// rejoin is not the new incarnation's).
    pub fn may_run_grains_as(&self, id: &str) -> bool {
        let state = self.inner.lock();
        state.may_run(Instant::now()) && state.id(&self.inner.address) == id
    }

    /// How long the lease still holds.
    pub fn lease_remaining(&self) -> Duration {
        self.inner.lock().lease.remaining(Instant::now())
    }

    /// Joins (a `joining` heartbeat, then an `active` one) and starts heartbeating on the timer. A
    /// silo told on the way that it is dead drops its grains and joins as the next generation.
    pub async fn join(&self, timeout: Duration) -> Result<(), OracleError> {
        let deadline = Instant::now() + timeout;
        loop {
            let reported = self.status();
            let result = self.beat().await;
            self.inner.settle_death();
            let wait = match result {
                Ok(true) if reported == Status::Active && self.may_run_grains() => break,
                Ok(_) => Duration::ZERO,
                Err(error) if Instant::now() >= deadline => return Err(error),
                Err(error) if error.is_declared_dead() => Duration::ZERO,
                Err(error) if !error.is_retryable() => return Err(error),
                Err(error) => self.inner.lock().backoff.next_delay(error.retry_after),
            };
            if Instant::now() >= deadline {
                return Err(OracleError::unexpected(format!(
                    "{} did not join within {timeout:?}",
                    self.id()
                )));
            }
            tokio::time::sleep(wait).await;
        }
        let mut tasks = self.inner.tasks_lock();
        for task in tasks.drain(..) {
            task.abort();
        }
        // The tasks hold the silo weakly: when every handle is dropped, they end.
        let weak = Arc::downgrade(&self.inner);
        tasks.push(tokio::spawn(Inner::heartbeats(weak.clone())));
        tasks.push(tokio::spawn(Inner::keep_lease(weak)));
        Ok(())
    }

    /// One heartbeat, now: whether it was acknowledged for this incarnation. Returns what the
    /// oracle refused (a death is recorded first).
    pub async fn beat(&self) -> Result<bool, OracleError> {
        self.inner.beat().await
    }

    /// Drains and leaves: asks the oracle to move every grain away (carried out by the silo's
    /// [`crate::MigrationWorker`], which must keep running meanwhile; the key needs the
    /// `operator` scope), waits until none remains or `deadline`, then leaves as
    /// [`Self::leave`] does (calling [`SiloEvents::leaving`] first, so that what still runs
    /// stops). A death meanwhile ends the stop: the silo does not rejoin. Returns how many
    /// activations remained when it left.
    pub async fn stop(&self, deadline: Duration, poll: Duration) -> Result<u64, OracleError> {
        let id = {
            let mut state = self.inner.lock();
            state.status = Status::ShuttingDown;
            state.stopping = true;
            state.id(&self.inner.address)
        };
        let path = format!("/silos/{}", segment(&id));
        let until = Instant::now() + deadline;
        let drained = async {
            let client = &self.inner.client;
            client
                .call_value(Method::POST, &format!("{path}/drain"), None)
                .await?;
            loop {
                let silo = client.call_value(Method::GET, &path, None).await?;
                let remaining = silo["drain"]["remaining_activations"].as_u64();
                let left = silo["status"] == "dead" || remaining == Some(0);
                if left || Instant::now() >= until {
                    return Ok::<u64, OracleError>(remaining.unwrap_or(0));
                }
                tokio::time::sleep(poll).await;
            }
        }
        .await;
        let leave = self.leave_as(&id).await;
        let remaining = drained?;
        leave.map(|()| remaining)
    }

    /// Stops heartbeating and leaves at once: [`SiloEvents::leaving`] is called and
    /// [`Self::may_run_grains`] is false from then on, since the oracle releases whatever is still
    /// registered (the key needs the `operator` scope).
    pub async fn leave(&self) -> Result<(), OracleError> {
        let id = self.id();
        self.leave_as(&id).await
    }

    async fn leave_as(&self, id: &str) -> Result<(), OracleError> {
        {
            let mut state = self.inner.lock();
            state.stopping = true;
            state.left = true;
        }
        self.close();
        guarded("leaving", || self.inner.events.leaving(id));
        let path = format!("/silos/{}", segment(id));
        match self
            .inner
            .client
            .call_value(Method::DELETE, &path, None)
            .await
        {
            Ok(_) => Ok(()),
            Err(error) if error.status == 404 => Ok(()), // gone already
            Err(error) => Err(error),
        }
    }

    /// Stops heartbeating without leaving (the oracle will judge the silence). The lease still
    /// runs out when it does, but no hook is called any more: stop the grains yourself.
    pub fn close(&self) {
        for task in self.inner.tasks_lock().drain(..) {
            task.abort();
        }
    }
}

impl State {
    fn may_run(&self, now: Instant) -> bool {
        self.dead.is_none() && !self.left && self.lease.holds(now)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in self.tasks_lock().drain(..) {
            task.abort();
        }
    }
}

/// Runs a hook of the runtime's; a panic in it is logged instead of ending the silo's task.
fn guarded<T: Default>(hook: &str, call: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(call)).unwrap_or_else(|_| {
        tracing::error!(hook, "a silo hook panicked; the silo carries on");
        T::default()
    })
}

/// Counts a heartbeat in flight until it is dropped, however it ends.
struct InFlight(Arc<Inner>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
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
        let load = guarded("load", || (self.load)());
        let mut body = serde_json::to_value(load).unwrap_or_else(|_| json!({}));
        if !body.is_object() {
            body = json!({});
        }
        let fields = body.as_object_mut().expect("made an object above");
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

    /// One heartbeat. Its attempt on one replica is given up for the next after a third of the
    /// last lease granted (or the client's timeout, if shorter): a replica that accepts the
    /// connection but does not answer — frozen, its VM paused — must not hold the heartbeat
    /// until the silo's silence reaches the TTL, where the replicas that do run would find it
    /// dead. Two replicas are tried within two thirds of the lease.
    async fn beat(&self) -> Result<bool, OracleError> {
        let (id, generation, status, attempt) = {
            let state = self.lock();
            if let Some(dead) = &state.dead {
                return Err(OracleError {
                    status: 409,
                    problem: "silo-declared-dead".into(),
                    detail: format!("{dead} is dropping its grains before it rejoins"),
                    retry_after: None,
                });
            }
            if state.left {
                return Err(OracleError::unexpected("the silo left"));
            }
            (
                state.id(&self.address),
                state.generation,
                state.status,
                state.granted.map(|lease| lease / 3),
            )
        };
        let body = self.body(&id, status);
        // The lease counts from the send (the first, when a replica that does not answer is
        // given up for the next), so the time is taken before it.
        let sent = Instant::now();
        self.stats.heartbeats_sent.fetch_add(1, Ordering::Relaxed);
        let answer = self
            .client
            .call_within::<HeartbeatAnswer>(Method::POST, "/heartbeats", Some(&body), attempt)
            .await;
        match answer {
            Ok(answer) => {
                let lease = Duration::from_millis(answer.lease_ms);
                Ok(self.acknowledged(generation, status, sent, lease))
            }
            Err(error) => {
                self.stats.heartbeats_failed.fetch_add(1, Ordering::Relaxed);
                guarded("heartbeat_failed", || self.events.heartbeat_failed(&error));
                self.refused(generation, &id, &error);
                Err(error)
            }
        }
    }

    /// Records an acknowledgement; says whether it was this incarnation's.
    fn acknowledged(
        &self,
        generation: u64,
        status: Status,
        sent: Instant,
        lease: Duration,
    ) -> bool {
        self.stats
            .heartbeats_acknowledged
            .fetch_add(1, Ordering::Relaxed);
        let mut state = self.lock();
        if state.generation != generation || state.dead.is_some() || state.left {
            return false; // an answer to an incarnation that is gone
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
        state.granted = Some(lease);
        if status == Status::Joining && state.status == Status::Joining {
            state.status = Status::Active;
        }
        let granted = state.lease.grant(sent, lease, Instant::now());
        drop(state);
        if granted {
            self.wake_keeper();
        }
        true
    }

    fn refused(&self, generation: u64, id: &str, error: &OracleError) {
        let mut state = self.lock();
        if state.generation != generation || state.dead.is_some() || state.left {
            return;
        }
        if error.is_declared_dead() {
            tracing::warn!(silo = id, "declared dead: its grains are dropped");
            state.dead = Some(id.to_owned());
            state.generation += 1;
            state.status = Status::Joining;
            state.lease = Lease::default();
            state.last_acknowledged_send = None;
            state.granted = None;
            state.quiet_until = None;
            // A silo that was stopping does not come back.
            state.left = state.stopping;
            self.stats.deaths.fetch_add(1, Ordering::Relaxed);
            drop(state);
            self.wake_keeper();
        } else if error.is_retryable() {
            // As the oracle asks, but never so long that a lease held runs out unrenewed.
            let now = Instant::now();
            let asked = state.backoff.next_delay(error.retry_after);
            let wait = asked.min(self.interval.max(state.lease.remaining(now) / 2));
            state.quiet_until = Some(now + wait);
            tracing::debug!(silo = id, %error, ?wait, "heartbeat not acknowledged");
        }
    }

    /// Runs the runtime's `declared_dead` for an incarnation told it is dead, then lets the next
    /// generation heartbeat. Says whether there was one.
    fn settle_death(&self) -> bool {
        let Some(dead) = self.lock().dead.clone() else {
            return false;
        };
        guarded("declared_dead", || self.events.declared_dead(&dead));
        self.lock().dead = None;
        true
    }

    /// A heartbeat every `interval`, each on a task of its own (up to
    /// [`MAX_HEARTBEATS_IN_FLIGHT`]): one that hangs (a replica being killed) does not hold back
    /// the next.
    async fn heartbeats(silo: Weak<Self>) {
        let Some(interval) = silo.upgrade().map(|s| s.interval) else {
            return;
        };
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let Some(silo) = silo.upgrade() else { return };
            let quiet = {
                let state = silo.lock();
                state.dead.is_some()
                    || state.left
                    || state.quiet_until.is_some_and(|q| Instant::now() < q)
            };
            if quiet || silo.in_flight.load(Ordering::Relaxed) >= MAX_HEARTBEATS_IN_FLIGHT {
                continue;
            }
            silo.in_flight.fetch_add(1, Ordering::Relaxed);
            let flight = InFlight(silo);
            tokio::spawn(async move {
                let _ = flight.0.beat().await;
                drop(flight);
            });
        }
    }

    /// Calls the hooks as the lease and the silo's standing change: `paused` the instant the
    /// lease runs out, `resumed` when an acknowledgement grants it again, `declared_dead` when
    /// told so.
    async fn keep_lease(silo: Weak<Self>) {
        let Some(mut changes) = silo.upgrade().map(|s| s.changed.subscribe()) else {
            return;
        };
        let (mut holding, mut paused) = (false, false);
        loop {
            changes.borrow_and_update();
            let expiry = {
                let Some(silo) = silo.upgrade() else { return };
                if silo.settle_death() {
                    (holding, paused) = (false, false);
                    continue;
                }
                let (id, lease, dying) = {
                    let state = silo.lock();
                    (state.id(&silo.address), state.lease, state.dead.is_some())
                };
                if dying {
                    continue; // settled at the top of the next round
                }
                let holds = lease.holds(Instant::now());
                if holding && !holds {
                    paused = true;
                    silo.stats.pauses.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(silo = %id, "lost its lease: grains pause");
                    guarded("paused", || silo.events.paused(&id));
                } else if !holding && holds && paused {
                    paused = false;
                    tracing::info!(silo = %id, "holds its lease again: grains resume");
                    guarded("resumed", || silo.events.resumed(&id));
                }
                holding = holds;
                lease.until().filter(|_| holds)
            };
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
