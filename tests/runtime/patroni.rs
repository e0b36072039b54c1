//! The oracle on a real Patroni cluster ([`PatroniCluster`]) through the faults operators meet: a
//! switchover, the primary's postmaster killed, the primary frozen for 20 s and thawed, etcd
//! stopped for 15 s — in synchronous mode and in asynchronous mode, one cluster per mode, the
//! faults one after the other (each once the cluster is healthy again).
//!
//! Two replicas: one reaches Postgres through HAProxy (Patroni's template), the other through
//! `DATABASE_URL`'s host list with `target_session_attrs=read-write`. The usual run (hosts
//! beating every 300 ms, callers, the referee) goes on throughout; beside it a prober places a new
//! grain through each replica every 40 ms, keeping every acknowledged answer, and a monitor asks
//! every member every 100 ms whether it takes writes. What each fault shows:
//! - when a member took writes again, and how long after that each replica placed again;
//! - acknowledged placements lost (every one is looked up at the end: synchronous mode must lose
//!   none), and epochs handed out twice (a lost grain placed again must get a larger epoch);
//! - no live silo declared dead, and (synchronous) no grain run twice.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::api::Api;
use crate::cluster_run::{Options, Run, TTL};
use crate::faults::ONE_AT_A_TIME;
use crate::patroni_cluster::{PatroniCluster, Replication};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronous_patroni_through_every_fault_loses_no_placement_and_kills_no_silo() {
    patroni_faults(Replication::Synchronous).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asynchronous_patroni_through_every_fault_kills_no_silo() {
    patroni_faults(Replication::Asynchronous).await;
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    Switchover,
    PrimaryKilled,
    PrimaryFrozen,
    EtcdStopped,
}

async fn patroni_faults(replication: Replication) {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = Arc::new(
        tokio::task::spawn_blocking(move || PatroniCluster::start(replication))
            .await
            .unwrap(),
    );
    let urls = [cluster.haproxy_url(), cluster.host_list_url()];
    let run = Run::start_on(&urls, Options::default()).await;
    let prober = Prober::start(run.replica_bases()).await;
    let monitor = Monitor::start(cluster.clone());
    tokio::time::sleep(Duration::from_secs(3)).await;

    let mut figures = Vec::new();
    for fault in [
        Fault::Switchover,
        Fault::PrimaryKilled,
        Fault::PrimaryFrozen,
        Fault::EtcdStopped,
    ] {
        let at = Instant::now();
        let injected = cluster.clone();
        tokio::task::spawn_blocking(move || inject(&injected, fault))
            .await
            .unwrap();
        let healthy = cluster.clone();
        tokio::task::spawn_blocking(move || healthy.until_healthy(Duration::from_secs(90)))
            .await
            .unwrap();
        tokio::time::sleep(2 * TTL).await;
        figures.push(Figures::of(fault, at, &monitor, &prober));
    }

    let lost = prober.lost_and_placed_again().await;
    let report = run.finish().await;
    report.print(&format!("Patroni ({replication:?}) through four faults"));
    for f in &figures {
        f.print();
    }
    println!(
        "  acknowledged placements: {}; lost {} (epochs of the lost, placed again, all larger: {})",
        prober.acknowledged(),
        lost.lost,
        lost.epochs_grew
    );
    report.assert_no_rejoin();
    assert_eq!(
        report.metric("oracle_silos_declared_dead_total"),
        0.0,
        "no silo (the hosts', the prober's) was declared dead"
    );
    assert!(lost.epochs_grew, "an epoch was handed out again");
    if replication == Replication::Synchronous {
        report.assert_single_activation();
        assert_eq!(
            lost.lost, 0,
            "acknowledged placements lost in synchronous mode"
        );
    }
    for f in &figures {
        assert!(
            f.split_brain.is_none(),
            "{:?}: two members took writes at once ({:?}); the oracle must not have written on both",
            f.fault,
            f.split_brain
        );
    }
    drop(monitor);
}

fn inject(cluster: &PatroniCluster, fault: Fault) {
    match fault {
        Fault::Switchover => {
            cluster.switchover();
        }
        Fault::PrimaryKilled => {
            cluster.kill_primary();
        }
        Fault::PrimaryFrozen => {
            let (_, frozen) = cluster.freeze_primary();
            std::thread::sleep(Duration::from_secs(20));
            cluster.thaw(&frozen);
        }
        Fault::EtcdStopped => {
            cluster.freeze_etcd();
            std::thread::sleep(Duration::from_secs(15));
            cluster.thaw_etcd();
        }
    }
}

/// What one fault came to.
#[derive(Debug)]
struct Figures {
    fault: Fault,
    /// Since the fault: when no member took writes, and when one did again (`None`: writes never
    /// stopped as the monitor saw them).
    writes_stopped: Option<Duration>,
    writes_back: Option<Duration>,
    /// Per replica (HAProxy, host list): placements refused from the fault on (by what came
    /// back), and how long after writes came back it placed again (`None` when it never failed).
    replicas: Vec<(BTreeMap<String, u64>, Option<Duration>)>,
    /// Two members taking writes at once, as the monitor saw them (since the fault).
    split_brain: Option<Duration>,
}

impl Figures {
    fn of(fault: Fault, at: Instant, monitor: &Monitor, prober: &Prober) -> Self {
        let seen = monitor.since(at);
        let stopped = seen.iter().find(|(_, w)| w.is_empty()).map(|(t, _)| *t);
        let back = stopped.and_then(|s| seen.iter().find(|(t, w)| *t > s && !w.is_empty()));
        let back_at = back.map(|(t, _)| *t);
        let split_brain = seen.iter().find(|(_, w)| w.len() > 1).map(|(t, _)| *t - at);
        let replicas = (0..prober.replicas())
            .map(|r| {
                let (failures, last_failure) = prober.failures_since(r, at);
                let recovered = last_failure.and_then(|failed| {
                    let first = prober.first_success_after(r, failed)?;
                    Some(first.saturating_duration_since(back_at.unwrap_or(at)))
                });
                (failures, recovered)
            })
            .collect();
        Self {
            fault,
            writes_stopped: stopped.map(|t| t - at),
            writes_back: back_at.map(|t| t - at),
            replicas,
            split_brain,
        }
    }

    fn print(&self) {
        println!(
            "  {:?}: no member took writes from {:?} to {:?} after the fault; placements refused \
             and time to place again after writes came back — through HAProxy {:?}, through the \
             host list {:?}; two writable members {:?}",
            self.fault,
            self.writes_stopped,
            self.writes_back,
            self.replicas[0],
            self.replicas[1],
            self.split_brain
        );
    }
}

/// Which members commit a write, each asked every 100 ms on a thread of its own (a frozen one
/// takes its whole second to say no without holding the others back).
struct Monitor {
    /// When each answer came, from which member, and whether it committed.
    seen: Arc<Mutex<Vec<(Instant, usize, bool)>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Monitor {
    fn start(cluster: Arc<PatroniCluster>) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        for member in 0..cluster.members() {
            let (cluster, record, stopping) = (cluster.clone(), seen.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                    let commits = cluster.commits(member);
                    record
                        .lock()
                        .unwrap()
                        .push((Instant::now(), member, commits));
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
        Self { seen, stop }
    }

    /// From `at` on, in order: when, and which members committed as last seen then.
    fn since(&self, at: Instant) -> Vec<(Instant, Vec<usize>)> {
        let mut seen = self.seen.lock().unwrap().clone();
        seen.sort_by_key(|(t, _, _)| *t);
        let mut last: BTreeMap<usize, bool> = BTreeMap::new();
        let mut out = Vec::new();
        for (t, member, commits) in seen {
            last.insert(member, commits);
            if t >= at {
                let writable = last.iter().filter(|(_, c)| **c).map(|(m, _)| *m).collect();
                out.push((t, writable));
            }
        }
        out
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// New grains placed through each replica in a cluster of the prober's own, on two silos it keeps
/// alive itself; every acknowledged answer kept.
struct Prober {
    api: Api,
    bases: Vec<String>,
    /// Per replica: every attempt, when, and what came back.
    attempts: Arc<Mutex<Vec<Vec<Attempt>>>>,
    /// Grain → the epoch acknowledged.
    acknowledged: Arc<Mutex<BTreeMap<String, i64>>>,
    /// The silos' heartbeats (they beat until the prober is dropped), and the placements.
    heartbeats: Vec<tokio::task::JoinHandle<()>>,
    placements: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Prober {
    fn drop(&mut self) {
        for task in self.heartbeats.iter().chain(&self.placements) {
            task.abort();
        }
    }
}

const PROBE_SILOS: [&str; 2] = ["10.8.0.1:1@1", "10.8.0.2:1@1"];

/// When a placement was asked, and what came back: `None` when acknowledged, else the problem (or
/// why there was no answer).
type Attempt = (Instant, Option<String>);

impl Prober {
    async fn start(bases: Vec<String>) -> Self {
        let api = Api::new(&format!("probe-{}", std::process::id()));
        let attempts = Arc::new(Mutex::new(vec![Vec::new(); bases.len()]));
        let acknowledged = Arc::new(Mutex::new(BTreeMap::new()));
        let (mut heartbeats, mut placements) = (Vec::new(), Vec::new());
        // The silos beat through every replica every 300 ms: one that answers keeps them alive.
        for silo in PROBE_SILOS {
            for base in &bases {
                let (api, base) = (api.clone(), base.clone());
                heartbeats.push(tokio::spawn(async move {
                    loop {
                        let _ = api
                            .post(&base, "/heartbeats", json!({ "silo": silo }))
                            .await;
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                }));
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        for (replica, base) in bases.iter().enumerate() {
            let (api, base) = (api.clone(), base.clone());
            let (attempts, acknowledged) = (attempts.clone(), acknowledged.clone());
            placements.push(tokio::spawn(async move {
                for n in 0u64.. {
                    let grain = format!("probe/{replica}-{n}");
                    let reply = api
                        .post(&base, "/placements", json!({ "grain": grain }))
                        .await;
                    let epoch = reply.ok().and_then(|body| body["epoch"].as_i64());
                    let refusal = match epoch {
                        Some(_) => None,
                        None => Some(reply.problem().map_or_else(
                            || reply.describe().chars().take(60).collect(),
                            str::to_owned,
                        )),
                    };
                    attempts.lock().unwrap()[replica].push((Instant::now(), refusal));
                    if let Some(epoch) = epoch {
                        acknowledged.lock().unwrap().insert(grain, epoch);
                    }
                    tokio::time::sleep(Duration::from_millis(40)).await;
                }
            }));
        }
        Self {
            api,
            bases,
            attempts,
            acknowledged,
            heartbeats,
            placements,
        }
    }

    fn replicas(&self) -> usize {
        self.bases.len()
    }

    fn acknowledged(&self) -> usize {
        self.acknowledged.lock().unwrap().len()
    }

    /// Refusals of `replica` since `at` by what came back, and the last one's time.
    fn failures_since(
        &self,
        replica: usize,
        at: Instant,
    ) -> (BTreeMap<String, u64>, Option<Instant>) {
        let attempts = self.attempts.lock().unwrap();
        let mut refusals = BTreeMap::new();
        let mut last = None;
        for (t, refusal) in attempts[replica].iter().filter(|(t, _)| *t >= at) {
            if let Some(refusal) = refusal {
                *refusals.entry(refusal.clone()).or_default() += 1;
                last = Some(*t);
            }
        }
        (refusals, last)
    }

    fn first_success_after(&self, replica: usize, after: Instant) -> Option<Instant> {
        self.attempts.lock().unwrap()[replica]
            .iter()
            .find(|(t, refusal)| *t > after && refusal.is_none())
            .map(|(t, _)| *t)
    }

    /// Stops placing (the silos beat on); looks every acknowledged grain up, and places each one
    /// lost again: how many were lost, and whether every new epoch is larger than the one
    /// acknowledged before.
    async fn lost_and_placed_again(&self) -> Lost {
        for task in &self.placements {
            task.abort();
        }
        let acknowledged = self.acknowledged.lock().unwrap().clone();
        let base = &self.bases[1];
        let (mut lost, mut epochs_grew) = (0, true);
        for (grain, epoch) in acknowledged {
            let found = self
                .api
                .send(
                    base,
                    reqwest::Method::GET,
                    &format!("/activations/{grain}"),
                    None,
                )
                .await;
            if found.ok().and_then(|b: &Value| b["epoch"].as_i64()) == Some(epoch) {
                continue;
            }
            if lost < 5 {
                println!(
                    "  lost: {grain} acknowledged with epoch {epoch}; now {}",
                    found.describe()
                );
            }
            lost += 1;
            let again = self
                .api
                .post(base, "/placements", json!({ "grain": grain }))
                .await;
            let new_epoch = again.ok().and_then(|b| b["epoch"].as_i64());
            epochs_grew &= new_epoch.is_some_and(|e| e > epoch);
        }
        Lost { lost, epochs_grew }
    }
}

struct Lost {
    lost: u64,
    epochs_grew: bool,
}
