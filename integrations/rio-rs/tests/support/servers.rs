//! The three rio-rs servers of a run, of either backend, each on a tokio runtime of its own so
//! that a kill is a kill: shutting the runtime down drops every task and socket of the server
//! at once, with no goodbye, as the end of its process would.
//!
//! - [`Backend::RioPostgres`]: rio-rs as it ships — `PostgresMembershipStorage` with the
//!   peer-to-peer provider (pings every second, inactive after 3 failures in 5 s) and
//!   `PostgresObjectPlacement`. rio-rs stops a server whose membership store fails; a supervisor
//!   starts it again a second later, on the same address, as a process supervisor would.
//! - [`Backend::Oracle`]: the same application on [`OracleNode`].
//!
//! A server that is to be cut off from its membership store (rio-rs: the database of membership
//! and placement; the oracle: the oracle) reaches it through a link of its own, a TCP relay on
//! the test's runtime; the others reach it directly, so that the relay's cost (rio-rs's servers
//! query their store on every call) weighs on no other run.
//!
//! Both keep the counters' state in the same Postgres database, reached directly, and report
//! activations to the referee: on the oracle through its gate, on rio-rs through a fence that
//! admits everything (an object is running from its load until its server ends).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use placement_oracle_rio::{
    Activations, Admission, Fence, FenceHandle, NodeHandle, NodeOptions, Observer, OracleNode,
    Refusal, Token,
};
use rio_rs::app_data::AppData;
use rio_rs::cluster::membership_protocol::peer_to_peer::PeerToPeerClusterProvider;
use rio_rs::cluster::storage::postgres::PostgresMembershipStorage;
use rio_rs::object_placement::postgres::PostgresObjectPlacement;
use rio_rs::server::Server;
use sqlx::postgres::PgPoolOptions;
use tokio::net::TcpListener;

use crate::app::{self, CounterStore};
use crate::support::proxy::FaultyLink;
use crate::support::registry::Registry as Referee;
use crate::support::yielding::Yielding;

/// The most calls the test's clients have in flight at once (its clients and its probe).
const CALLS_IN_FLIGHT: usize = 9;

/// Which directory and membership the servers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    RioPostgres,
    Oracle,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::RioPostgres => "rio-rs's Postgres placement and membership",
            Backend::Oracle => "the oracle",
        }
    }
}

/// What a server needs to start.
#[derive(Clone)]
pub struct ServerSpec {
    pub backend: Backend,
    /// Where it listens (and, on rio-rs, the address it is known by).
    pub address: String,
    /// The counters' state (reached directly).
    pub state_url: String,
    /// rio-rs: the membership and placement database; the oracle: its base URL.
    pub upstream: String,
    /// Reach the upstream through a link that can be cut.
    pub through_link: bool,
    pub cluster: String,
    pub referee: Arc<Referee>,
}

/// The referee, told of every activation that starts and ends.
struct RefereeObserver(Arc<Referee>);

/// Each activation is its own runner to the referee (its token: server, epoch, claim and era),
/// so that the end of an older one never erases a newer one's start; two of one server
/// overlapping would count too.
impl Observer for RefereeObserver {
    fn started(&self, object: &str, token: &Token) {
        self.0
            .start(object, &token.to_string(), token.epoch.unwrap_or(0), false);
    }

    fn ended(&self, object: &str, token: &Token) {
        self.0.end(object, &token.to_string());
    }
}

/// rio-rs as it is: every call admitted, under one activation per server incarnation.
struct AdmitsAll {
    server: String,
    activations: Arc<Activations>,
}

impl Fence for AdmitsAll {
    fn admit(&self, object: &str) -> Result<Admission, Refusal> {
        let token = Token {
            server: self.server.clone(),
            epoch: None,
            claim: 0,
            era: 0,
        };
        // The same bound on state I/O as the oracle's servers get from their lease.
        Ok(self
            .activations
            .enter(object, token, Duration::from_millis(2_700)))
    }
}

/// What a server "process" and its supervisor share.
#[derive(Default)]
struct Shared {
    /// The current incarnation's runtime: shutting it down ends every task and socket of it.
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    /// The current incarnation's activations (on the oracle, its gate's).
    activations: Mutex<Option<Arc<Activations>>>,
    /// On the oracle, the node of the current incarnation.
    node: Mutex<Option<NodeHandle>>,
    /// Killed, drained or left: not started again.
    ended: AtomicBool,
    /// An incarnation has started serving and has not stopped.
    serving: AtomicBool,
    restarts: AtomicU64,
    /// The longest any incarnation's runtime ran a timer late (see [`pulse`]), in ms.
    longest_stall_ms: Arc<AtomicU64>,
}

impl Shared {
    /// The process ends: its runtime is shut down and the activations it ran end with it.
    fn stop(&self) {
        if let Some(runtime) = self.runtime.lock().unwrap().take() {
            runtime.shutdown_background();
        }
        if let Some(activations) = self.activations.lock().unwrap().as_ref() {
            activations.close_all().report();
        }
    }

    fn node(&self) -> Option<NodeHandle> {
        self.node.lock().unwrap().clone()
    }
}

/// One server "process": incarnations started by a supervisor, and the link to its membership
/// store.
pub struct ServerProcess {
    pub spec: ServerSpec,
    link: Option<FaultyLink>,
    shared: Arc<Shared>,
    supervisor: tokio::task::JoinHandle<()>,
}

impl ServerProcess {
    /// Starts the server (waiting until it serves: on the oracle, until its silo joined) and
    /// its supervisor.
    pub async fn start(spec: ServerSpec) -> Self {
        let (link, upstream) = if spec.through_link {
            let link = FaultyLink::start(host_port(&spec.upstream)).await;
            let relayed = replace_host_port(&spec.upstream, link.port);
            (Some(link), relayed)
        } else {
            (None, spec.upstream.clone())
        };
        let shared = Arc::new(Shared::default());
        let (started, ready) = tokio::sync::oneshot::channel();
        let supervisor = tokio::spawn(supervise(spec.clone(), upstream, shared.clone(), started));
        let started = tokio::time::timeout(Duration::from_secs(30), ready).await;
        assert!(
            matches!(started, Ok(Ok(()))),
            "server {} did not start within 30 s",
            spec.address
        );
        Self {
            spec,
            link,
            shared,
            supervisor,
        }
    }

    pub fn restarts(&self) -> u64 {
        self.shared.restarts.load(Ordering::Relaxed)
    }

    /// The longest its runtime ran a 50 ms timer late (see [`pulse`]).
    pub fn longest_stall(&self) -> Duration {
        Duration::from_millis(self.shared.longest_stall_ms.load(Ordering::Relaxed))
    }

    /// The process dies: every task and socket of it ends now, nothing is said to anyone.
    pub fn kill(&self) {
        self.shared.ended.store(true, Ordering::SeqCst);
        self.shared.stop();
    }

    /// Cuts the server off from its membership store (rio-rs: the database of membership and
    /// placement; the oracle: the oracle), while clients still reach it.
    pub fn cut_off(&self) {
        self.link().cut();
    }

    pub fn reconnect(&self) {
        self.link().restore();
    }

    fn link(&self) -> &FaultyLink {
        self.link
            .as_ref()
            .expect("a server to be cut off is started through_link")
    }

    /// A planned shutdown. On the oracle: a drain (the oracle moves every object away, the node
    /// hands each over) and a leave. rio-rs has no drain: the server is removed from the
    /// membership table (so that peers and lookups treat it as gone) and stops.
    pub async fn drain(&self, admin_rio_url: &str) -> Result<u64, String> {
        self.shared.ended.store(true, Ordering::SeqCst);
        let drained = match self.spec.backend {
            Backend::Oracle => {
                let node = self.shared.node().ok_or("not running")?;
                let runtime = self
                    .shared
                    .runtime
                    .lock()
                    .unwrap()
                    .as_ref()
                    .map(|r| r.handle().clone());
                let draining = runtime
                    .ok_or("not running")?
                    .spawn(async move { node.drain(Duration::from_secs(20)).await });
                draining
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())
            }
            Backend::RioPostgres => {
                let (ip, port) = self.spec.address.rsplit_once(':').unwrap();
                let admin = sqlx::PgPool::connect(admin_rio_url)
                    .await
                    .map_err(|e| e.to_string())?;
                sqlx::query("DELETE FROM cluster_provider_members WHERE ip = $1 AND port = $2")
                    .bind(ip)
                    .bind(port)
                    .execute(&admin)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(0)
            }
        };
        // The leave stopped rio-rs's server (or there is none to wait for): the process ends.
        self.shared.stop();
        drained
    }

    /// Whether the server serves now: on the oracle, whether its silo holds its lease; on
    /// rio-rs, whether an incarnation is up (rio-rs stops a server whose store fails).
    pub fn is_running(&self) -> bool {
        let shared = &self.shared;
        if shared.ended.load(Ordering::SeqCst) || !shared.serving.load(Ordering::SeqCst) {
            return false;
        }
        shared
            .node()
            .is_none_or(|node| node.silo().may_run_grains())
    }

    /// On the oracle: pauses, deaths and hand-overs its gate counted.
    pub fn gate_counts(&self) -> [u64; 3] {
        self.shared.node().map_or([0; 3], |node| {
            let stats = node.gate().stats();
            [&stats.pauses, &stats.deaths, &stats.handed_over].map(|c| c.load(Ordering::Relaxed))
        })
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.shared.ended.store(true, Ordering::SeqCst);
        self.supervisor.abort();
        self.shared.stop();
    }
}

/// Runs incarnation after incarnation of the server until it is ended: each on a new runtime,
/// a second after the last one stopped (on the oracle, a node stops only when its silo leaves,
/// and is not started again).
async fn supervise(
    spec: ServerSpec,
    upstream: String,
    shared: Arc<Shared>,
    started: tokio::sync::oneshot::Sender<()>,
) {
    let observer: Arc<dyn Observer> = Arc::new(RefereeObserver(spec.referee.clone()));
    let mut started = Some(started);
    let mut incarnation = 0u64;
    while !shared.ended.load(Ordering::SeqCst) {
        incarnation += 1;
        // rio-rs 0.7.2 holds a registry (DashMap) shard's read guard across a handler's awaits,
        // and activating an object takes that shard's write lock, blocking its worker thread
        // until those handlers end: a worker per call the clients can have in flight at once,
        // so that a handler always has a thread to finish on.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(CALLS_IN_FLIGHT)
            .enable_all()
            .build()
            .unwrap();
        runtime.spawn(pulse(shared.longest_stall_ms.clone()));
        let (joined, on_join) = tokio::sync::oneshot::channel();
        let task = runtime.spawn(run_once(
            spec.clone(),
            upstream.clone(),
            incarnation,
            observer.clone(),
            shared.clone(),
            joined,
        ));
        *shared.runtime.lock().unwrap() = Some(runtime);
        if on_join.await.is_ok() {
            shared.serving.store(true, Ordering::SeqCst);
            if let Some(started) = started.take() {
                let _ = started.send(());
            }
        }
        let outcome = task.await;
        shared.serving.store(false, Ordering::SeqCst);
        if shared.ended.load(Ordering::SeqCst) {
            return; // whoever ended it stops the process
        }
        shared.stop();
        if spec.backend == Backend::Oracle {
            return;
        }
        tracing::info!(server = %spec.address, ?outcome, "the server stopped; starting it again in 1 s");
        tokio::time::sleep(Duration::from_secs(1)).await;
        shared.restarts.fetch_add(1, Ordering::Relaxed);
    }
}

/// Wakes every 50 ms on the runtime it runs on and keeps the longest it woke late, in ms: a run
/// whose server stalled (rio-rs's registry lock blocking its workers, or a starved machine) says
/// so beside its figures, since a stalled server's activations end only when it runs again.
pub async fn pulse(longest_ms: Arc<AtomicU64>) {
    const PERIOD: Duration = Duration::from_millis(50);
    loop {
        let asleep = tokio::time::Instant::now();
        tokio::time::sleep(PERIOD).await;
        let late = asleep.elapsed().saturating_sub(PERIOD);
        let late_ms = u64::try_from(late.as_millis()).unwrap_or(u64::MAX);
        longest_ms.fetch_max(late_ms, Ordering::Relaxed);
    }
}

/// One incarnation of the server, until rio-rs's `Server::run` returns.
async fn run_once(
    spec: ServerSpec,
    upstream: String,
    incarnation: u64,
    observer: Arc<dyn Observer>,
    shared: Arc<Shared>,
    joined: tokio::sync::oneshot::Sender<()>,
) -> Result<(), String> {
    let store = CounterStore::connect(&spec.state_url).map_err(|e| e.to_string())?;
    let app_data = AppData::new();
    app_data.set(store);
    match spec.backend {
        Backend::Oracle => {
            let node = OracleNode::join(NodeOptions {
                oracle_urls: vec![upstream],
                cluster: spec.cluster.clone(),
                listen: spec.address.clone(),
                object_types: vec!["Counter".into()],
                heartbeat_interval: Duration::from_millis(300),
                migration_poll: Duration::from_millis(250),
                join_timeout: Duration::from_secs(20),
                generation: Some(incarnation),
                observer,
                ..NodeOptions::default()
            })
            .await
            .map_err(|e| e.to_string())?;
            // The gate keeps the activations of this incarnation: a kill ends those.
            *shared.activations.lock().unwrap() = Some(node.handle().gate().activations().clone());
            *shared.node.lock().unwrap() = Some(node.handle());
            let _ = joined.send(());
            node.run(app::registry(), app_data)
                .await
                .map_err(|e| e.to_string())
        }
        Backend::RioPostgres => {
            let activations = Activations::new(observer);
            *shared.activations.lock().unwrap() = Some(activations.clone());
            app_data.set(FenceHandle(Arc::new(AdmitsAll {
                server: format!("{}#{incarnation}", spec.address),
                activations,
            })));
            let pool = PgPoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(1))
                .connect_lazy(&upstream)
                .map_err(|e| e.to_string())?;
            let provider = PeerToPeerClusterProvider::builder()
                .members_storage(Yielding(PostgresMembershipStorage::new(pool.clone())))
                .interval_secs(1)
                .num_failures_threshold(3)
                .interval_secs_threshold(5)
                .build();
            let mut server = Server::builder()
                .registry(app::registry())
                .app_data(app_data)
                .cluster_provider(provider)
                .object_placement_provider(Yielding(PostgresObjectPlacement::new(pool)))
                .build();
            server.prepare().await.map_err(|e| format!("{e:?}"))?;
            let listener = TcpListener::bind(&spec.address)
                .await
                .map_err(|e| e.to_string())?;
            let _ = joined.send(());
            server.run(listener).await.map_err(|e| format!("{e:?}"))
        }
    }
}

/// `host:port` of a URL (`postgres://user@host:port/db`, `http://host:port`).
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split_once('@').map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// The same URL with its host and port replaced by 127.0.0.1:`port`.
fn replace_host_port(url: &str, port: u16) -> String {
    url.replace(&host_port(url), &format!("127.0.0.1:{port}"))
}

/// The address rio-rs's servers know themselves by (the first non-loopback address of the
/// machine, or loopback when there is none), with a free port.
pub async fn rio_address() -> String {
    let probe = TcpListener::bind("127.0.0.1:0").await.unwrap();
    type RioServer = Server<
        PostgresMembershipStorage,
        PeerToPeerClusterProvider<PostgresMembershipStorage>,
        PostgresObjectPlacement,
    >;
    let ip = RioServer::try_local_addr(&probe).unwrap().ip();
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    listener.local_addr().unwrap().to_string()
}
