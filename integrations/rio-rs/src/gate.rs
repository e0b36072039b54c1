//! The oracle's fence for a rio-rs server: which registrations it holds, whether it may run them
//! now, and what to do when the oracle's word changes.
//!
//! - A registration is held from the moment a claim (asked as this server's silo) names this
//!   silo, until the silo is declared dead, leaves, or hands the object over.
//! - A call is admitted only for a held registration while the silo holds its lease
//!   ([`Silo::may_run_grains_as`] the incarnation that claimed it), and never while its object is
//!   being handed over.
//! - The lease running out (the SDK calls [`SiloEvents::paused`] at that instant) closes every
//!   activation and starts a new lease era, so that the first call after the resume loads state
//!   again. A death or a leave closes every activation, forgets every registration and drops the
//!   objects from rio-rs's registry. A hand-over waits for the object's calls in flight, closes
//!   its activation and drops it.
//! - A registration handed over is retired: a claim answered before the hand-over but received
//!   after it (the same epoch, or an older one) is not held again for [`STALE_CLAIM_WINDOW`],
//!   longer than any claim can take.
//!
//! The SDK holds the gate's hooks through [`Gate::events`], which refers to the gate weakly, so
//! that the gate (which holds the silo) and the silo do not keep each other alive. The observer of
//! activations is told of those that ended after the gate's lock is released.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

use placement_oracle_sdk::{Ending, HandOver, Migration, Migrator, Silo, SiloEvents};
use rio_rs::server::{AdminCommands, AdminSender};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::fence::{Activations, Admission, Fence, Refusal, Token};

/// How long a retired registration stays refused: longer than a claim can be in flight (the
/// SDK's timeout, once per replica).
pub const STALE_CLAIM_WINDOW: Duration = Duration::from_secs(30);

/// A registration this server holds: the incarnation that claimed it, its epoch (`None` for a
/// stateless worker, which is never registered) and which claim of the server's it was.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Holding {
    silo: String,
    epoch: Option<i64>,
    claim: u64,
}

#[derive(Default)]
struct State {
    era: u64,
    claims: u64,
    held: HashMap<String, Holding>,
    /// Objects being handed over: never admitted or claimed meanwhile.
    leaving: HashSet<String>,
    /// Registrations handed over: (epoch, when), refused again up to that epoch for a while.
    retired: HashMap<String, (Option<i64>, Instant)>,
    /// The silo left (or is leaving): nothing is admitted any more.
    gone: bool,
}

impl State {
    /// Whether `object` may serve here as far as the gate's own records go: held, not being
    /// handed over, the silo not leaving. The lease is checked by the caller.
    fn standing(&self, object: &str) -> Result<&Holding, Refusal> {
        if self.gone {
            return Err(Refusal::Gone);
        }
        if self.leaving.contains(object) {
            return Err(Refusal::HandingOver);
        }
        self.held.get(object).ok_or(Refusal::NotHere)
    }

    /// Whether a claim of `object` under `epoch` is one this server already handed over.
    fn is_retired(&mut self, object: &str, epoch: Option<i64>, now: Instant) -> bool {
        self.retired
            .retain(|_, (_, at)| now.duration_since(*at) < STALE_CLAIM_WINDOW);
        match self.retired.get(object) {
            Some((retired, _)) if epoch <= *retired => true,
            Some(_) => {
                self.retired.remove(object);
                false
            }
            None => false,
        }
    }
}

/// Counts a gate keeps.
#[derive(Debug, Default)]
pub struct GateStats {
    pub pauses: AtomicU64,
    pub deaths: AtomicU64,
    pub handed_over: AtomicU64,
    /// Hand-overs put off because calls were still in flight.
    pub hand_overs_later: AtomicU64,
}

pub struct Gate {
    silo: OnceLock<Silo>,
    activations: Arc<Activations>,
    admin: OnceLock<AdminSender>,
    state: Mutex<State>,
    left: watch::Sender<bool>,
    /// How long a hand-over waits for the object's calls in flight.
    hand_over_wait: Duration,
    stats: GateStats,
}

impl Gate {
    pub fn new(activations: Arc<Activations>, hand_over_wait: Duration) -> Arc<Self> {
        Arc::new(Self {
            silo: OnceLock::new(),
            activations,
            admin: OnceLock::new(),
            state: Mutex::new(State::default()),
            left: watch::channel(false).0,
            hand_over_wait,
            stats: GateStats::default(),
        })
    }

    /// The hooks to give the SDK's silo ([`placement_oracle_sdk::SiloOptions::events`]).
    pub fn events(self: &Arc<Self>) -> Arc<dyn SiloEvents> {
        Arc::new(GateEvents(Arc::downgrade(self)))
    }

    /// The silo whose lease the gate checks; set once, before it joins.
    pub fn attach_silo(&self, silo: Silo) {
        let _ = self.silo.set(silo);
    }

    /// The activations it admits calls to.
    pub fn activations(&self) -> &Arc<Activations> {
        &self.activations
    }

    pub fn stats(&self) -> &GateStats {
        &self.stats
    }

    /// How many registrations it holds.
    pub fn held(&self) -> usize {
        self.lock().held.len()
    }

    /// Resolves when the silo has left (the server's cluster provider returns then, which ends
    /// rio-rs's `Server::run`).
    pub async fn until_left(&self) {
        let mut left = self.left.subscribe();
        let _ = left.wait_for(|left| *left).await;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn may_run_as(&self, silo: &str) -> bool {
        self.silo.get().is_some_and(|s| s.may_run_grains_as(silo))
    }

    /// Whether `object` runs here without asking the oracle: held, not leaving, lease held.
    pub fn runs_here(&self, object: &str) -> bool {
        let state = self.lock();
        state
            .standing(object)
            .is_ok_and(|holding| self.may_run_as(&holding.silo))
    }

    /// Whether `object` is being handed over (or the silo is leaving): not to be claimed now.
    pub fn is_leaving(&self, object: &str) -> bool {
        matches!(
            self.lock().standing(object),
            Err(Refusal::Gone | Refusal::HandingOver)
        )
    }

    /// A claim made as incarnation `silo` named this silo: hold the registration. Refused when
    /// the lease does not hold for that incarnation (it rejoined, or paused, meanwhile), the
    /// object is being handed over, or the registration is one this server handed over already.
    pub fn hold(&self, object: &str, silo: &str, epoch: Option<i64>) -> Result<(), Refusal> {
        let mut state = self.lock();
        match state.standing(object) {
            Err(refusal @ (Refusal::Gone | Refusal::HandingOver)) => return Err(refusal),
            _ if !self.may_run_as(silo) => return Err(Refusal::Paused),
            Ok(held) if held.silo == silo && held.epoch == epoch => return Ok(()),
            _ => {}
        }
        if state.is_retired(object, epoch, Instant::now()) {
            return Err(Refusal::NotHere);
        }
        state.claims += 1;
        let holding = Holding {
            silo: silo.to_owned(),
            epoch,
            claim: state.claims,
        };
        state.held.insert(object.to_owned(), holding);
        Ok(())
    }

    /// Closes every activation, forgets every registration and drops every object: the silo died
    /// or leaves.
    fn drop_everything(&self) {
        let (objects, ended) = {
            let mut state = self.lock();
            state.era += 1;
            state.leaving.clear();
            state.retired.clear();
            let objects: Vec<String> = state.held.drain().map(|(object, _)| object).collect();
            (objects, self.activations.close_all())
        };
        ended.report();
        for object in objects {
            self.drop_object(&object);
        }
    }

    /// Removes `object` from rio-rs's registry (through the server's admin channel, once a call
    /// has attached it). Its state is saved already: every acknowledged write was.
    fn drop_object(&self, object: &str) {
        let (Some(admin), Some((kind, id))) = (self.admin.get(), object.split_once('/')) else {
            return;
        };
        let _ = admin.send(AdminCommands::Shutdown(kind.to_owned(), id.to_owned()));
    }
}

impl Fence for Gate {
    fn admit(&self, object: &str) -> Result<Admission, Refusal> {
        let state = self.lock();
        let holding = state.standing(object)?;
        let silo = self.silo.get().ok_or(Refusal::Paused)?;
        if !silo.may_run_grains_as(&holding.silo) {
            return Err(Refusal::Paused);
        }
        let token = Token {
            server: holding.silo.clone(),
            epoch: holding.epoch,
            claim: holding.claim,
            era: state.era,
        };
        // Entered under the gate's lock, so that a pause or a hand-over closing activations
        // cannot pass between the check and the count.
        Ok(self
            .activations
            .enter(object, token, silo.lease_remaining()))
    }

    fn attach_admin(&self, sender: &AdminSender) {
        if self.admin.get().is_none() {
            let _ = self.admin.set(sender.clone());
        }
    }
}

/// The SDK's hooks, holding the gate weakly.
struct GateEvents(Weak<Gate>);

impl SiloEvents for GateEvents {
    fn paused(&self, _silo: &str) {
        let Some(gate) = self.0.upgrade() else { return };
        let ended = {
            let mut state = gate.lock();
            state.era += 1;
            gate.activations.close_all()
        };
        ended.report();
        gate.stats.pauses.fetch_add(1, Ordering::Relaxed);
    }

    fn declared_dead(&self, silo: &str) {
        let Some(gate) = self.0.upgrade() else { return };
        tracing::warn!(%silo, "declared dead: dropping every object before rejoining");
        gate.drop_everything();
        gate.stats.deaths.fetch_add(1, Ordering::Relaxed);
    }

    fn leaving(&self, _silo: &str) {
        let Some(gate) = self.0.upgrade() else { return };
        gate.lock().gone = true;
        gate.drop_everything();
        gate.left.send_replace(true);
    }
}

impl Migrator for Gate {
    async fn hand_over(&self, migration: &Migration) -> HandOver {
        let object = &migration.grain;
        {
            let mut state = self.lock();
            if state.gone {
                return HandOver::Later;
            }
            // A registration of another epoch is not the one this migration moves.
            if state
                .held
                .get(object)
                .is_some_and(|h| h.epoch != Some(migration.epoch))
            {
                return HandOver::Later;
            }
            // No call is admitted from here on; those in flight finish first.
            state.leaving.insert(object.clone());
        }
        let waited = Instant::now();
        while self.activations.in_flight(object) > 0 {
            if waited.elapsed() >= self.hand_over_wait {
                self.lock().leaving.remove(object);
                self.stats.hand_overs_later.fetch_add(1, Ordering::Relaxed);
                return HandOver::Later;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let ended = {
            let mut state = self.lock();
            state.held.remove(object);
            // Until its ending is known, a claim answered with this registration is stale.
            let retired = (Some(migration.epoch), Instant::now());
            state.retired.insert(object.clone(), retired);
            self.activations.close(|o, _| o == object)
        };
        ended.report();
        self.drop_object(object);
        HandOver::Moved
    }

    fn ended(&self, migration: &Migration, ending: &Ending) {
        let mut state = self.lock();
        state.leaving.remove(&migration.grain);
        match ending {
            Ending::Moved { .. } => {
                self.stats.handed_over.fetch_add(1, Ordering::Relaxed);
            }
            // The completion may have landed (unsettled), or the oracle ended the migration
            // otherwise (closed: cancelled, or completed by an earlier attempt whose answer was
            // lost): the registration stays retired, and a claim that still names it here once
            // the window has passed is a fresh answer.
            Ending::Unsettled { .. } | Ending::Closed { .. } => {}
            // Failed: the oracle keeps the registration here; the next claim holds it again.
            Ending::Failed => {
                state.retired.remove(&migration.grain);
            }
        }
    }
}
