//! One run: three rio-rs servers of one backend on a Postgres server of the run's own, the
//! clients, one fault, and what the referee and the counters' final state say.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rio_rs::cluster::storage::postgres::PostgresMembershipStorage;
use rio_rs::cluster::storage::MembershipStorage;
use rio_rs::object_placement::postgres::PostgresObjectPlacement;
use rio_rs::object_placement::ObjectPlacement;
use sqlx::Connection;

use crate::app::CounterStore;
use crate::support::oracle_process::{OracleProcess, SILO_TTL_MS};
use crate::support::postgres_server::{free_port, OwnPostgres, StopMode};
use crate::support::registry::Registry as Referee;
use crate::support::servers::{pulse, rio_address, Backend, ServerProcess, ServerSpec};
use crate::support::workload::{counter_id, probe, Workload, COUNTERS};

/// The oracle's silo TTL; rio-rs's peer-to-peer provider is set to about the same (3 failed
/// pings, one a second).
pub const TTL: Duration = Duration::from_millis(SILO_TTL_MS);
const WARM_UP: Duration = Duration::from_secs(4);
const CLIENTS: u64 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Server 0's process dies.
    Kill,
    /// Server 0 loses its membership store for 3 TTLs while clients still reach it.
    CutOff,
    /// Server 0 is shut down as planned.
    Drain,
    /// The Postgres server is stopped (fast: sessions end with 57P01) for 3 TTLs.
    PostgresStopped,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "a server killed",
            Fault::CutOff => "a server cut off from its membership store for 3 TTLs",
            Fault::Drain => "a server drained",
            Fault::PostgresStopped => "Postgres stopped for 3 TTLs",
        }
    }
}

/// What a run came to.
#[derive(Debug)]
pub struct Report {
    pub backend: Backend,
    pub fault: Fault,
    pub acked: usize,
    pub unacknowledged: u64,
    /// Acknowledged increments missing from their counter's final state.
    pub lost: Vec<String>,
    /// Two servers running one counter at once: before the fault, and from the fault on.
    pub double_before: Vec<String>,
    pub double_after: Vec<String>,
    pub throughput: f64,
    pub p50: Duration,
    pub p99: Duration,
    /// Before the fault: acknowledged increments per second and p99.
    pub steady_throughput: f64,
    pub steady_p99: Duration,
    /// A kill: how long until every counter the killed server held was served again (and how
    /// many it held).
    pub recovery: Option<(Duration, usize)>,
    pub refusals: Vec<(String, u64)>,
    pub restarts: u64,
    /// Acknowledged increments from the fault on, and the fraction that is of what the rate
    /// before the fault would have given over the same time.
    pub acked_after: usize,
    pub kept_pace: f64,
    /// Postgres stopped: how many servers did not run while it was down.
    pub paused_during_outage: Option<usize>,
    /// A drain: what the drain answered (registrations left when it left).
    pub drained: Option<Result<u64, String>>,
    /// On the oracle: pauses, deaths and hand-overs its servers' gates counted.
    pub gates: [u64; 3],
    /// The longest each server's runtime, and the clients', ran a 50 ms timer late: a stalled
    /// server runs nothing, and its activations end only when it runs again.
    pub server_stalls: Vec<Duration>,
    pub client_stall: Duration,
    /// On the oracle: its log, kept for a run to be read after the test.
    pub oracle_log: Option<PathBuf>,
    pub note: String,
}

impl Report {
    /// The lost increments by what befell their counter: a double activation before the fault
    /// (rio-rs's first-call race), one after it, or none the referee saw.
    pub fn lost_by_cause(&self) -> String {
        let doubled = |lines: &[String], counter: &str| {
            let name = format!("Counter/{counter} ");
            lines.iter().any(|line| line.starts_with(&name))
        };
        let (mut before, mut after, mut neither) = (0, 0, 0);
        for lost in &self.lost {
            let counter = lost.split(' ').next().unwrap_or_default();
            if doubled(&self.double_after, counter) {
                after += 1;
            } else if doubled(&self.double_before, counter) {
                before += 1;
            } else {
                neither += 1;
            }
        }
        format!(
            "{before} on counters run twice before the fault, {after} on counters run twice after it, {neither} on counters never run twice"
        )
    }

    pub fn print(&self) {
        println!(
            "\n== {} — {} ==\n  acknowledged {} increments ({} never acknowledged); lost {}; \
             double activations {} before the fault, {} after\n  throughput {:.0}/s, p50 {:?}, \
             p99 {:?}; before the fault {:.0}/s, p99 {:?}",
            self.fault.name(),
            self.backend.name(),
            self.acked,
            self.unacknowledged,
            self.lost.len(),
            self.double_before.len(),
            self.double_after.len(),
            self.throughput,
            self.p50,
            self.p99,
            self.steady_throughput,
            self.steady_p99,
        );
        if let Some((recovery, held)) = self.recovery {
            println!("  all {held} counters of the killed server served again {recovery:?} after the kill");
        }
        println!(
            "  from the fault on: {} acknowledged, {:.0}% of the pace before it",
            self.acked_after,
            100.0 * self.kept_pace
        );
        if let Some(paused) = self.paused_during_outage {
            println!("  {paused} of 3 servers not running while Postgres was down");
        }
        if let Some(drained) = &self.drained {
            println!("  the drain: {drained:?} registrations left when it left");
        }
        if self.backend == Backend::Oracle {
            let [pauses, deaths, handed_over] = self.gates;
            println!(
                "  gates: {pauses} pauses, {deaths} deaths (each rejoined), {handed_over} objects handed over"
            );
        }
        if self.restarts > 0 {
            println!("  server restarts by the supervisor: {}", self.restarts);
        }
        if !self.note.is_empty() {
            println!("  {}", self.note);
        }
        println!(
            "  longest runtime stalls: servers {:?}, clients {:?}",
            self.server_stalls, self.client_stall
        );
        println!("  refusals retried: {:?}", self.refusals);
        for line in self.double_before.iter().chain(&self.double_after).take(5) {
            println!("  double: {line}");
        }
        if !self.lost.is_empty() {
            println!("  lost, by cause: {}", self.lost_by_cause());
        }
        for line in self.lost.iter().take(5) {
            println!("  lost: {line}");
        }
        if let Some(log) = &self.oracle_log {
            println!("  the oracle's log: {}", log.display());
        }
    }
}

/// The databases of a run on the run's Postgres server.
struct Databases {
    state: String,
    membership: String,
}

async fn create_databases(server: &OwnPostgres, run: &str) -> Databases {
    let mut admin = sqlx::PgConnection::connect(&server.url("postgres"))
        .await
        .expect("connect to the run's Postgres");
    for name in [format!("{run}_state"), format!("{run}_membership")] {
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    Databases {
        state: server.url(&format!("{run}_state")),
        membership: server.url(&format!("{run}_membership")),
    }
}

/// Runs the servers of `backend` through `fault` on `server` (a Postgres of the test's own).
pub async fn run(backend: Backend, fault: Fault, server: &Arc<OwnPostgres>) -> Report {
    let run = format!(
        "{}_{}",
        match backend {
            Backend::RioPostgres => "rio",
            Backend::Oracle => "oracle",
        },
        format!("{fault:?}").to_lowercase()
    );
    let databases = create_databases(server, &run).await;
    let store = CounterStore::connect(&databases.state).unwrap();
    store.create_table().await.unwrap();
    let referee = Arc::new(Referee::default());

    // The membership store: the oracle (on its own database), or rio-rs's tables.
    let oracle = match backend {
        Backend::Oracle => Some(OracleProcess::start("oracle", &databases.membership).await),
        Backend::RioPostgres => {
            let pool = sqlx::PgPool::connect(&databases.membership).await.unwrap();
            PostgresMembershipStorage::new(pool.clone()).prepare().await;
            PostgresObjectPlacement::new(pool).prepare().await.unwrap();
            None
        }
    };
    let upstream = oracle
        .as_ref()
        .map_or(databases.membership.clone(), |o| o.base());

    let mut servers = Vec::new();
    for index in 0..3 {
        let address = match backend {
            Backend::RioPostgres => rio_address().await,
            Backend::Oracle => format!("127.0.0.1:{}", free_port()),
        };
        let spec = ServerSpec {
            backend,
            address,
            state_url: databases.state.clone(),
            upstream: upstream.clone(),
            through_link: fault == Fault::CutOff && index == 0,
            cluster: run.replace('_', "-"),
            referee: referee.clone(),
        };
        servers.push(ServerProcess::start(spec).await);
    }
    assert!(
        until(Duration::from_secs(20), || servers
            .iter()
            .all(|s| s.is_running()))
        .await,
        "the servers did not all start serving"
    );
    let addresses: Vec<String> = servers.iter().map(|s| s.spec.address.clone()).collect();
    tracing::info!(?addresses, "servers running");

    let client_stall = Arc::new(AtomicU64::new(0));
    let client_pulse = tokio::spawn(pulse(client_stall.clone()));
    let workload = Workload::start(CLIENTS, &addresses);
    let started = Instant::now();
    tokio::time::sleep(WARM_UP).await;
    let double_before = referee.tally().double_activations.len();
    let fault_at = Instant::now();
    let mut recovery = None;
    let mut paused_during_outage = None;
    let mut drained = None;
    let mut note = String::new();
    match fault {
        Fault::Kill => {
            let held = workload.last_on(&addresses[0]);
            servers[0].kill();
            let survivors = addresses[1..].to_vec();
            let served = probe(&held, &survivors, workload.log.clone(), fault_at).await;
            let all = served.iter().copied().collect::<Option<Vec<_>>>();
            recovery = all.map(|times| (times.into_iter().max().unwrap_or_default(), held.len()));
            if recovery.is_none() {
                // Which counters, so that a failed run says where to look in the oracle's log.
                let waiting: Vec<usize> = (held.iter().zip(&served))
                    .filter(|(_, served)| served.is_none())
                    .map(|(&counter, _)| counter)
                    .collect();
                note = format!(
                    "{} of the killed server's {} counters not served again within 30 s: {waiting:?}",
                    waiting.len(),
                    held.len()
                );
            }
            let rest = (4 * TTL).saturating_sub(fault_at.elapsed());
            tokio::time::sleep(rest).await;
        }
        Fault::CutOff => {
            servers[0].cut_off();
            tokio::time::sleep(3 * TTL).await;
            servers[0].reconnect();
            tokio::time::sleep(2 * TTL).await;
        }
        Fault::Drain => {
            drained = Some(servers[0].drain(&databases.membership).await);
            note = format!("drained in {:?}", fault_at.elapsed());
            tokio::time::sleep(3 * TTL).await;
        }
        Fault::PostgresStopped => {
            let stopping = server.clone();
            tokio::task::spawn_blocking(move || stopping.stop(StopMode::Fast))
                .await
                .unwrap();
            tokio::time::sleep(3 * TTL).await;
            paused_during_outage = Some(servers.iter().filter(|s| !s.is_running()).count());
            let starting = server.clone();
            tokio::task::spawn_blocking(move || starting.start_again())
                .await
                .unwrap();
            let back = Instant::now();
            let all_back = until(Duration::from_secs(20), || {
                servers.iter().all(|s| s.is_running())
            })
            .await;
            note = match all_back {
                true => format!("all running {:?} after Postgres was back", back.elapsed()),
                false => "not all running 20 s after Postgres was back".into(),
            };
            tokio::time::sleep(3 * TTL).await;
        }
    }
    let log = workload.stop().await;
    let elapsed = started.elapsed();
    let restarts = servers.iter().map(ServerProcess::restarts).sum();
    let gates = servers.iter().fold([0; 3], |sum, s| {
        let counts = s.gate_counts();
        [0, 1, 2].map(|i| sum[i] + counts[i])
    });
    let server_stalls = servers.iter().map(ServerProcess::longest_stall).collect();
    client_pulse.abort();
    drop(servers);
    // The oracle's log outlives the run (its process's own file goes with it).
    let oracle_log = oracle.as_ref().map(|oracle| {
        let kept = std::env::temp_dir().join(format!("side-by-side-{run}-oracle.log"));
        std::fs::write(&kept, oracle.log_text()).expect("keep the oracle's log");
        kept
    });
    drop(oracle);

    // What the counters hold, read from the store (its pool may still be reconnecting after a
    // Postgres stop).
    let mut read = store.all().await;
    for _ in 0..20 {
        if read.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        read = store.all().await;
    }
    let final_state: HashMap<String, BTreeSet<u64>> =
        read.expect("read the counters").into_iter().collect();
    let log = log.lock().unwrap();
    let lost: Vec<String> = log
        .acked
        .iter()
        .filter(|ack| {
            !final_state
                .get(&counter_id(ack.counter))
                .is_some_and(|ops| ops.contains(&ack.op))
        })
        .map(|ack| format!("{} op {:#x}", counter_id(ack.counter), ack.op))
        .collect();
    assert!(
        final_state.len() <= COUNTERS,
        "counters the clients never named"
    );
    let tally = referee.tally();
    let (steady, after): (Vec<_>, Vec<_>) = log.acked.iter().partition(|a| a.at < fault_at);
    let steady_window = fault_at.duration_since(started).as_secs_f64();
    let steady_rate = steady.len() as f64 / steady_window;
    let kept_pace = after.len() as f64 / (steady_rate * fault_at.elapsed().as_secs_f64());
    let mut refusals: Vec<(String, u64)> = log.refusals.clone().into_iter().collect();
    refusals.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
    Report {
        backend,
        fault,
        acked: log.acked.len(),
        unacknowledged: log.unacknowledged,
        lost,
        double_before: tally.double_activations[..double_before].to_vec(),
        double_after: tally.double_activations[double_before..].to_vec(),
        throughput: log.acked.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(log.acked.iter().map(|a| a.latency), 0.50),
        p99: percentile(log.acked.iter().map(|a| a.latency), 0.99),
        steady_throughput: steady_rate,
        steady_p99: percentile(steady.iter().map(|a| a.latency), 0.99),
        recovery,
        refusals,
        restarts,
        acked_after: after.len(),
        kept_pace,
        paused_during_outage,
        drained,
        gates,
        server_stalls,
        client_stall: Duration::from_millis(client_stall.load(Ordering::Relaxed)),
        oracle_log,
        note,
    }
}

fn percentile(latencies: impl Iterator<Item = Duration>, q: f64) -> Duration {
    let mut all: Vec<Duration> = latencies.collect();
    if all.is_empty() {
        return Duration::ZERO;
    }
    all.sort_unstable();
    let index = ((all.len() as f64 * q).ceil() as usize).clamp(1, all.len()) - 1;
    all[index]
}

/// Polls `ready` every 20 ms until it holds (true) or `limit` passes (false).
async fn until(limit: Duration, ready: impl Fn() -> bool) -> bool {
    let since = Instant::now();
    while !ready() {
        if since.elapsed() >= limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}
