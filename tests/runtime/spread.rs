//! The clusters' background work spread over replicas: three replicas share thirty clusters
//! (each held, under its lease, by the replica rendezvous hashing picks), one of them is killed
//! and the other two take its clusters over as its leases run out (within a lease TTL of the
//! kill, and a tick), and when it comes back it gets its clusters handed back at once. After each
//! step, each replica runs (its gauge) exactly the clusters whose lease it holds: none works on a
//! cluster without its lease, so none works on one another runs. After the takeover, silos that
//! join and fall silent are declared dead within their TTL and the sweep's bound.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::{Connection, PgConnection};

use crate::cluster_run::SharedDatabase;
use crate::faults::ONE_AT_A_TIME;
use crate::oracle_process::OracleProcess;
use crate::store_states::metric;

const CLUSTERS: usize = 30;
/// The cluster lease's TTL in this test (replicas are seen gone after half of it).
const LEASE_TTL: Duration = Duration::from_secs(6);
/// The silos' TTL in this test: short, so that deaths the new owners declare are seen quickly.
const SILO_TTL_MS: i64 = 3_000;
/// How long after its silence a silo may wait for a sweep to declare it dead: the sweep runs every
/// second, and a busy test machine delays a tick.
const SWEEP_BOUND_MS: i64 = 3_000;

/// Unexpired cluster leases by holder, at the database's clock.
async fn holders(db: &mut PgConnection) -> BTreeMap<String, usize> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT holder, count(*) FROM cluster_leases
         WHERE expires_at_ms > oracle_now_ms() GROUP BY holder",
    )
    .fetch_all(db)
    .await
    .unwrap();
    rows.into_iter().map(|(h, n)| (h, n as usize)).collect()
}

/// Waits until every cluster's lease is held (unexpired) and `ready` holds of the holders;
/// returns how long that took.
async fn until_held(
    db: &mut PgConnection,
    limit: Duration,
    ready: impl Fn(&BTreeMap<String, usize>) -> bool,
) -> (Duration, BTreeMap<String, usize>) {
    let since = Instant::now();
    loop {
        let now = holders(db).await;
        if now.values().sum::<usize>() == CLUSTERS && ready(&now) {
            return (since.elapsed(), now);
        }
        assert!(
            since.elapsed() < limit,
            "the clusters were not all held as expected within {limit:?}: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What each replica says it runs equals the leases it holds.
async fn runs_what_it_holds(replicas: &[&OracleProcess], held: &BTreeMap<String, usize>) {
    for replica in replicas {
        let run = metric(replica, "oracle_background_clusters_run").await;
        let holds = held.get(&replica.name).copied().unwrap_or(0);
        assert_eq!(
            run as usize, holds,
            "{} runs {run}, holds {holds}",
            replica.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_the_clusters_take_a_stopped_ones_over_and_hand_back() {
    let _one = ONE_AT_A_TIME.lock().await;
    let database = SharedDatabase::create().await;
    let ttl_ms = LEASE_TTL.as_millis().to_string();
    let silo_ttl_ms = SILO_TTL_MS.to_string();
    let env = [
        ("ORACLE_LEASE_TTL_MS", ttl_ms.as_str()),
        ("ORACLE_SILO_TTL_MS", silo_ttl_ms.as_str()),
    ];
    let mut replicas = Vec::new();
    for name in ["replica-1", "replica-2", "replica-3"] {
        replicas.push(OracleProcess::start_with(name, &database.url(), &env).await);
    }
    let client = reqwest::Client::new();
    beat_in_every_cluster(&client, |n| replicas[n % 3].base(), "10.0.0.1:1@1").await;
    let mut db = PgConnection::connect(&database.url()).await.unwrap();

    // Shared: every replica holds some, none holds most.
    until_held(&mut db, Duration::from_secs(20), |held| {
        held.len() == 3 && held.values().all(|n| (4..=16).contains(n))
    })
    .await;
    // Settled (a replica seen late may still be handed a few), the shares are what the hashing
    // gives three replicas.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let shared = holders(&mut db).await;
    runs_what_it_holds(&[&replicas[0], &replicas[1], &replicas[2]], &shared).await;
    println!("shared: {shared:?}");

    // replica-1 is killed: its clusters are taken over within the lease TTL.
    replicas[0].kill();
    let (taken_over, after_kill) = until_held(&mut db, 3 * LEASE_TTL, |held| {
        !held.contains_key("replica-1")
    })
    .await;
    println!("taken over {taken_over:?} after the kill: {after_kill:?}");
    // Its leases run out at most a lease TTL after the kill (they were renewed before it), and
    // the others look every second.
    assert!(
        taken_over < LEASE_TTL + Duration::from_millis(1_500),
        "took {taken_over:?}, the lease TTL is {LEASE_TTL:?}"
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    runs_what_it_holds(&[&replicas[1], &replicas[2]], &holders(&mut db).await).await;

    // A silo joins every cluster and falls silent: the owners, new ones included, declare each
    // dead within its TTL and the sweep's bound (their first silos died long ago, so each
    // cluster's last look at its silence was taken with no silo alive).
    beat_in_every_cluster(&client, |_| replicas[1].base(), "10.0.0.2:1@1").await;
    let since = Instant::now();
    let silences: Vec<i64> = loop {
        let rows: Vec<(Option<i64>,)> = sqlx::query_as(
            "SELECT dead_since_ms - last_heartbeat_ms FROM silos
             WHERE silo = '10.0.0.2:1@1' AND status = 'dead'",
        )
        .fetch_all(&mut db)
        .await
        .unwrap();
        if rows.len() == CLUSTERS {
            break rows.into_iter().map(|(s,)| s.unwrap()).collect();
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "{} of {CLUSTERS} declared dead",
            rows.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!("silent for {silences:?} ms when declared dead");
    assert!(
        silences
            .iter()
            .all(|s| (SILO_TTL_MS..=SILO_TTL_MS + SWEEP_BOUND_MS).contains(s)),
        "declared dead after {silences:?} ms of silence, the TTL is {SILO_TTL_MS} ms"
    );

    // It comes back: the clusters that hash to it are handed back, and the shares are as
    // before the kill.
    replicas[0].restart().await;
    let (handed_back, after_return) =
        until_held(&mut db, 3 * LEASE_TTL, |held| *held == shared).await;
    println!("handed back {handed_back:?} after the restart: {after_return:?}");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    runs_what_it_holds(
        &[&replicas[0], &replicas[1], &replicas[2]],
        &holders(&mut db).await,
    )
    .await;
}

/// One heartbeat of `silo` in each of the test's clusters, cluster `n`'s through the replica at
/// `base(n)`; each must be accepted.
async fn beat_in_every_cluster(
    client: &reqwest::Client,
    base: impl Fn(usize) -> String,
    silo: &str,
) {
    for n in 0..CLUSTERS {
        let url = format!("{}/v1/clusters/spread-{n}/heartbeats", base(n));
        let answer = client
            .post(url)
            .json(&json!({ "silo": silo }))
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{}", answer.status());
    }
}
