//! Faults of the store under load: two replicas on the database's clock, with their sweepers
//! running, under steady heartbeats and placements while the path to Postgres is reset (what a
//! restart does to clients) and then cut for ten seconds — longer than the TTL.
//!
//! Afterwards every acknowledged placement is found with the same silo and epoch (no silo may die:
//! they never stopped beating, only the store could not hear them), no grain was ever answered
//! with two silos, every error was a 503 problem, `/readyz` reported the outage, and both replicas
//! recovered unaided. The error window and recovery time are printed (run with `--nocapture`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use placement_oracle::background::{run_clusters, ClusterWork};
use placement_oracle::clock::ManualClock;
use placement_oracle::store::StoreSettings;
use serde_json::json;
use tokio::sync::watch;

use crate::helpers::{unique_cluster, Backend, Reply, TestApp, TestDatabase, START_MS};
use crate::proxy::FaultyLink;

const SILOS: [&str; 4] = [
    "10.1.0.1:1@1",
    "10.1.0.2:1@1",
    "10.1.0.3:1@1",
    "10.1.0.4:1@1",
];
const TTL_MS: i64 = 3_000;

/// What the load saw, shared by its tasks.
#[derive(Default)]
struct Observed {
    /// Every acknowledged placement: grain → (silo, epoch) answers.
    answers: HashMap<String, Vec<(String, i64)>>,
    /// Errors by problem type, and when the first and last came.
    errors: BTreeMap<String, u64>,
    first_error: Option<Instant>,
    last_error: Option<Instant>,
    /// Requests that got an answer other than 200 or a 503 problem.
    unexpected: Vec<String>,
}

impl Observed {
    fn record(&mut self, reply: &Reply) -> bool {
        if reply.status == StatusCode::OK {
            return true;
        }
        let problem = reply.body["type"].as_str().unwrap_or("").to_owned();
        if reply.status != StatusCode::SERVICE_UNAVAILABLE
            || !problem.starts_with("urn:placement-oracle:problem:")
            || !reply.headers.contains_key("retry-after")
        {
            self.unexpected
                .push(format!("{} {}", reply.status, reply.body));
        }
        *self.errors.entry(problem).or_default() += 1;
        let now = Instant::now();
        self.first_error.get_or_insert(now);
        self.last_error = Some(now);
        false
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_keep_every_acknowledged_placement_through_a_restart_and_a_ten_second_outage()
{
    let database = TestDatabase::create().await;
    let link = FaultyLink::start(database.server_address()).await;
    let cluster = unique_cluster();
    let unused = ManualClock::starting_at(START_MS);
    let mut replicas = Vec::new();
    for seed in [1, 2] {
        let store = database
            .store_via_on_database_clock(link.port, StoreSettings::with_ttl(TTL_MS))
            .await;
        replicas.push(
            TestApp::builder(Backend::Postgres)
                .on(store, &database)
                .cluster(cluster.clone())
                .seed(seed)
                .clock(unused.clone())
                .build()
                .await,
        );
    }
    let (stop, stopped) = watch::channel(false);
    let until_stopped = |mut stopped: watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let mut background = Vec::new();
    for replica in &replicas {
        let work = ClusterWork {
            ownership: replica.oracle.ownership.clone(),
            members: replica.oracle.members.clone(),
            movers: replica.oracle.movers.clone(),
        };
        background.push(tokio::spawn(run_clusters(
            work,
            until_stopped(stopped.clone()),
        )));
    }
    for silo in SILOS {
        replicas[0]
            .heartbeat(silo, json!({ "cpu_usage": 20.0 }))
            .await;
    }

    let observed = Arc::new(Mutex::new(Observed::default()));
    // Heartbeats: every silo every 500 ms, alternating replicas.
    for (i, silo) in SILOS.iter().enumerate() {
        let (replicas, observed, mut stopped) =
            (replicas.clone(), observed.clone(), stopped.clone());
        background.push(tokio::spawn(async move {
            let mut beat = 0usize;
            while !*stopped.borrow() {
                let replica = &replicas[(i + beat) % 2];
                let reply = replica
                    .try_heartbeat(silo, json!({ "cpu_usage": 20.0 }))
                    .await;
                observed.lock().unwrap().record(&reply);
                beat += 1;
                let _ = tokio::time::timeout(Duration::from_millis(500), stopped.changed()).await;
            }
        }));
    }
    // Placements: new grains and grains placed before, alternating replicas, every 20 ms.
    for worker in 0..2usize {
        let (replicas, observed, mut stopped) =
            (replicas.clone(), observed.clone(), stopped.clone());
        background.push(tokio::spawn(async move {
            let mut n = 0usize;
            while !*stopped.borrow() {
                let grain = if n % 3 == 2 {
                    format!("user/w{worker}-{}", n / 2)
                } else {
                    format!("user/w{worker}-{n}")
                };
                let reply = replicas[n % 2]
                    .post("/placements", json!({ "grain": grain }))
                    .await;
                {
                    let mut seen = observed.lock().unwrap();
                    if seen.record(&reply) {
                        let answer = (
                            reply.body["silo"].as_str().unwrap().to_owned(),
                            reply.body["epoch"].as_i64().unwrap(),
                        );
                        seen.answers.entry(grain).or_default().push(answer);
                    }
                }
                n += 1;
                let _ = tokio::time::timeout(Duration::from_millis(20), stopped.changed()).await;
            }
        }));
    }

    tokio::time::sleep(Duration::from_secs(2)).await;
    link.reset(); // a restart: every connection drops, new ones are welcome at once
    tokio::time::sleep(Duration::from_secs(2)).await;

    link.cut();
    let cut_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for replica in &replicas {
        let started = Instant::now();
        let ready = replica.send(Method::GET, "/readyz", None).await;
        assert_eq!(
            ready.problem(StatusCode::SERVICE_UNAVAILABLE)["type"],
            "urn:placement-oracle:problem:store-unavailable"
        );
        println!(
            "readyz during the outage answered 503 in {:?}",
            started.elapsed()
        );
    }
    tokio::time::sleep(Duration::from_millis(9_500)).await;
    link.restore();
    let restored_at = Instant::now();

    // Both replicas recover unaided: each answers placements and readiness again.
    let mut recovered = Vec::new();
    for replica in &replicas {
        loop {
            let ready = replica.send(Method::GET, "/readyz", None).await;
            if ready.status == StatusCode::OK {
                recovered.push(restored_at.elapsed());
                break;
            }
            assert!(
                restored_at.elapsed() < Duration::from_secs(10),
                "a replica did not recover within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Two more TTLs under load: any silo wrongly judged silent would die now.
    tokio::time::sleep(Duration::from_millis(2 * TTL_MS as u64)).await;
    let _ = stop.send(true);
    for task in background {
        task.await.unwrap();
    }

    let observed = Arc::try_unwrap(observed)
        .ok()
        .unwrap()
        .into_inner()
        .unwrap();
    assert!(observed.unexpected.is_empty(), "{:?}", observed.unexpected);
    let last_error = observed.last_error.expect("the outage was seen");
    println!(
        "errors {:?}; error window from the cut: {:?} (outage {:?}); last error {:?} after restore; replicas ready again {:?} after restore; {} grains acknowledged",
        observed.errors,
        last_error.duration_since(cut_at),
        restored_at.duration_since(cut_at),
        last_error.saturating_duration_since(restored_at),
        recovered,
        observed.answers.len(),
    );

    for silo in SILOS {
        let now = replicas[1].get(&format!("/silos/{silo}")).await.body;
        assert_eq!(now["status"], "active", "{now}");
    }
    for (grain, answers) in &observed.answers {
        let first = &answers[0];
        assert!(
            answers.iter().all(|answer| answer == first),
            "{grain} answered differently: {answers:?}"
        );
        let now = replicas[0].get(&format!("/activations/{grain}")).await;
        assert_eq!(now.status, StatusCode::OK, "{grain}: {}", now.body);
        assert_eq!(
            (
                now.body["silo"].as_str().unwrap(),
                now.body["epoch"].as_i64().unwrap()
            ),
            (first.0.as_str(), first.1),
            "{grain}"
        );
    }
}
