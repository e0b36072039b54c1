//! What an object asks before it serves a call, and the record of which activations run.
//!
//! rio-rs keeps an object in its server's registry from its first call until the server stops:
//! nothing in rio-rs deactivates it, fences it, or tells it that it moved. So an object that
//! wants to run only where and while it may asks a [`Fence`] at the top of every handler
//! ([`admit`]). The answer, an [`Admission`], names the activation the call runs under (a
//! [`Token`]: the incarnation holding the registration, the registration's epoch, and the lease
//! era); the object loads its state again whenever that token differs from the one it loaded
//! under, and bounds its I/O by [`Admission::deadline`]. The fence keeps, in [`Activations`], how
//! many calls each activation has in flight, so that an activation it closes (a pause, a death, a
//! hand-over) ends only after its last call has.
//!
//! [`crate::Gate`] is the oracle's fence. A fence that admits everything (rio-rs as it is) is a
//! few lines over [`Activations`]; the side-by-side test has one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rio_rs::app_data::AppData;
use rio_rs::server::AdminSender;
use tokio::time::Instant;

/// One activation of an object: who runs it, under which registration, since which claim, in
/// which lease era. Two activations never share a token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Token {
    /// The server incarnation running it (for the oracle, the silo id `address@generation`).
    pub server: String,
    /// The registration's epoch, if the directory gives one (an object saves with it, so that an
    /// older registration's late write cannot overwrite a newer one's).
    pub epoch: Option<i64>,
    /// Which of the server's claims it is held by: a registration held again after it was let
    /// go (a hand-over the oracle then cancelled) is a new activation.
    pub claim: u64,
    /// Bumped by every pause: the first call after a resume loads state afresh.
    pub era: u64,
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let epoch = self.epoch.map_or("-".to_owned(), |e| e.to_string());
        write!(
            f,
            "{} epoch {epoch} claim {} era {}",
            self.server, self.claim, self.era
        )
    }
}

/// Why a call was not admitted. The caller may retry: elsewhere, or here later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// This server does not hold the object's registration (it moved, or was never claimed).
    NotHere,
    /// The server's lease ran out: it runs nothing until a heartbeat is acknowledged again.
    Paused,
    /// The object is being handed over or released.
    HandingOver,
    /// The server left or is leaving.
    Gone,
    /// No fence was put in the server's `AppData` (a wiring mistake).
    NoFence,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::NotHere => "this server does not hold the object's registration",
            Refusal::Paused => "this server's lease ran out; it runs nothing now",
            Refusal::HandingOver => "the object is being handed over",
            Refusal::Gone => "this server is leaving",
            Refusal::NoFence => "no fence in the server's AppData",
        })
    }
}

impl std::error::Error for Refusal {}

/// Asked by an object before it serves a call.
pub trait Fence: Send + Sync + 'static {
    /// May `object` (`type/id`) serve a call here now, and under which activation?
    fn admit(&self, object: &str) -> Result<Admission, Refusal>;
    /// The server's admin channel (rio-rs puts it in `AppData` when the server runs), through
    /// which the fence drops objects from the registry.
    fn attach_admin(&self, _sender: &AdminSender) {}
}

/// The fence of a server, as put in its `AppData`.
#[derive(Clone)]
pub struct FenceHandle(pub Arc<dyn Fence>);

/// The object's id as the oracle names grains: `type/id`.
pub fn object_key(object_type: &str, object_id: &str) -> String {
    format!("{object_type}/{object_id}")
}

/// Asks the fence in `app_data` whether object `object_type`/`object_id` may serve a call now.
/// Call it at the top of every handler (and of `load`), and keep the admission until the call's
/// last write is done.
pub fn admit(app_data: &AppData, object_type: &str, object_id: &str) -> Result<Admission, Refusal> {
    let fence = app_data.try_get::<FenceHandle>().ok_or(Refusal::NoFence)?;
    if let Some(admin) = app_data.try_get::<AdminSender>() {
        fence.0.attach_admin(admin);
    }
    fence.0.admit(&object_key(object_type, object_id))
}

/// Told when activations start (state loaded under a token) and end (closed, and their last
/// call done). For metrics, logs, or a test's referee.
pub trait Observer: Send + Sync + 'static {
    fn started(&self, _object: &str, _token: &Token) {}
    fn ended(&self, _object: &str, _token: &Token) {}
}

/// An observer that does nothing.
pub struct NoObserver;
impl Observer for NoObserver {}

#[derive(Default)]
struct Entry {
    in_flight: usize,
    started: bool,
    closing: bool,
}

/// The activations a server runs: calls in flight for each, which have started, which are closing.
pub struct Activations {
    observer: Arc<dyn Observer>,
    entries: Mutex<HashMap<(String, Token), Entry>>,
}

impl Activations {
    pub fn new(observer: Arc<dyn Observer>) -> Arc<Self> {
        Arc::new(Self {
            observer,
            entries: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(String, Token), Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call of `object` admitted under `token`, which may do I/O for `budget`.
    pub fn enter(self: &Arc<Self>, object: &str, token: Token, budget: Duration) -> Admission {
        let key = (object.to_owned(), token);
        self.lock().entry(key.clone()).or_default().in_flight += 1;
        Admission {
            activations: self.clone(),
            key,
            deadline: Instant::now() + budget,
        }
    }

    /// Closes every activation `closes` picks: those with nothing in flight end now, the others
    /// when their last call is done. Their objects must not be admitted under the same token
    /// again (the fence changes the token, or refuses). The observer is told of those that ended
    /// when the caller reports them ([`Ended::report`]), after it let go of its own locks.
    pub fn close(&self, closes: impl Fn(&str, &Token) -> bool) -> Ended<'_> {
        let mut ended = Vec::new();
        self.lock().retain(|(object, token), entry| {
            if !closes(object, token) {
                return true;
            }
            entry.closing = true;
            if entry.in_flight > 0 {
                return true;
            }
            if entry.started {
                ended.push((object.clone(), token.clone()));
            }
            false
        });
        Ended {
            activations: self,
            ended,
        }
    }

    /// Closes every activation.
    pub fn close_all(&self) -> Ended<'_> {
        self.close(|_, _| true)
    }

    /// Calls of `object` in flight, under any token.
    pub fn in_flight(&self, object: &str) -> usize {
        self.lock()
            .iter()
            .filter(|((o, _), _)| o == object)
            .map(|(_, e)| e.in_flight)
            .sum()
    }

    fn started(&self, key: &(String, Token)) {
        let first = match self.lock().get_mut(key) {
            Some(entry) if !entry.started && !entry.closing => {
                entry.started = true;
                true
            }
            _ => false,
        };
        if first {
            self.observer.started(&key.0, &key.1);
        }
    }

    fn leave(&self, key: &(String, Token)) {
        let ended = {
            let mut entries = self.lock();
            let Some(entry) = entries.get_mut(key) else {
                return;
            };
            entry.in_flight -= 1;
            if entry.in_flight > 0 || !entry.closing {
                return;
            }
            let started = entry.started;
            entries.remove(key);
            started
        };
        if ended {
            self.observer.ended(&key.0, &key.1);
        }
    }
}

/// Activations that ended when they were closed, not yet reported to the observer.
#[must_use = "report the activations that ended"]
pub struct Ended<'a> {
    activations: &'a Activations,
    ended: Vec<(String, Token)>,
}

impl Ended<'_> {
    pub fn report(self) {
        for (object, token) in &self.ended {
            self.activations.observer.ended(object, token);
        }
    }
}

/// A call admitted: the activation it runs under, until dropped.
pub struct Admission {
    activations: Arc<Activations>,
    key: (String, Token),
    deadline: Instant,
}

impl Admission {
    pub fn token(&self) -> &Token {
        &self.key.1
    }

    /// Until when the call may do I/O: the end of the server's lease (a write that lands later
    /// could land after the object was placed elsewhere).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// How long is left until [`Self::deadline`].
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The object loaded its state under this admission's token: the activation has started.
    pub fn loaded(&self) {
        self.activations.started(&self.key);
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.activations.leave(&self.key);
    }
}
