//! A Postgres failover that loses the tail of the log, on servers of the test's own: a primary
//! with an asynchronous streaming standby, reached through a TCP forwarder standing in for the
//! service address. The replication link fails first (the common real case), placements go on
//! on the primary alone, then the primary stops hard, the address moves to the standby and the
//! standby is promoted. What was replicated stays as acknowledged; what was not is lost (that
//! is asynchronous replication: docs/HIGH-AVAILABILITY.md); and no epoch is handed out again,
//! nor a smaller one: every epoch drawn after the failover is larger than every epoch drawn
//! before it, lost or not. The figures are printed
//! (`cargo test --test runtime failover -- --nocapture`).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};

use crate::api::{Api, Reply};
use crate::faults::ONE_AT_A_TIME;
use crate::oracle_process::OracleProcess;
use crate::postgres_server::{OwnPostgres, StopMode};
use crate::proxy::FaultyLink;
use crate::store_states::configure;

const SILOS: [&str; 3] = ["10.0.0.1:11111@1", "10.0.0.2:11111@1", "10.0.0.3:11111@1"];
/// Grains placed per phase, in batches of 100.
const GRAINS_PER_PHASE: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_that_loses_the_logs_tail_hands_out_no_epoch_again() {
    let _one = ONE_AT_A_TIME.lock().await;
    let primary = OwnPostgres::start();
    let standby = OwnPostgres::standby_of(&primary);
    let address = FaultyLink::start(format!("127.0.0.1:{}", primary.port)).await;
    let oracle = OracleProcess::start(
        "failover",
        &format!("postgres://postgres@127.0.0.1:{}/postgres", address.port),
    )
    .await;
    let api = Api::new("failover");
    let beating = keep_silos_beating(api.clone(), oracle.base());
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Replicated: the standby has these before anything fails.
    let kept = place_all(&api, &oracle, "kept").await;
    until_replayed(&primary, &standby).await;

    // The link fails first; the primary goes on acknowledging what the standby never gets.
    configure(&standby, "ALTER SYSTEM SET primary_conninfo = ''").await;
    until_no_standby_streams(&primary).await;
    let unreplicated = place_all(&api, &oracle, "tail").await;

    primary.stop(StopMode::Immediate);
    address.switch_to(format!("127.0.0.1:{}", standby.port));
    let switched = Instant::now();
    standby.promote();
    let promoted = Instant::now();
    let first = until_placed(&api, &oracle, "after/first").await;
    let (from_switch, from_promotion) = (switched.elapsed(), promoted.elapsed());

    let mut before: HashMap<String, i64> = kept.clone();
    before.extend(unreplicated.clone());
    let mut after = place_all(&api, &oracle, "after").await;
    // The lost grains are placed anew, as a runtime asking for them again would.
    after.extend(place_named(&api, &oracle, unreplicated.keys().cloned().collect()).await);
    after.insert("after/first".to_owned(), first);
    beating.abort();

    for (grain, epoch) in &kept {
        let found = api
            .send(
                &oracle.base(),
                reqwest::Method::GET,
                &format!("/activations/{grain}"),
                None,
            )
            .await;
        let body = found.ok().unwrap_or_else(|| panic!("{}", found.describe()));
        assert_eq!(
            body["epoch"].as_i64(),
            Some(*epoch),
            "{grain} was replicated"
        );
    }
    let before_epochs: HashSet<i64> = before.values().copied().collect();
    let reused = after.values().filter(|e| before_epochs.contains(e)).count();
    let highest_before = before_epochs.iter().max().copied().unwrap();
    let lowest_after = after.values().min().copied().unwrap();
    println!(
        "failover losing the log's tail: placements resumed {from_switch:?} after the address \
         moved ({from_promotion:?} after the promotion returned); {} acknowledged placements \
         were lost with the tail; {} epochs drawn after, {reused} of them drawn before; lowest \
         after {lowest_after}, highest before {highest_before}",
        unreplicated.len(),
        after.len()
    );
    assert_eq!(reused, 0, "no epoch handed out twice");
    assert!(
        lowest_after > highest_before,
        "every epoch after the failover is larger than every one before"
    );
    assert!(lowest_after < 1 << 53, "epochs stay exact in JavaScript");

    // A split brain: the old primary comes back as a primary, on the timeline the promotion left
    // behind, and the address leads to it again (as a proxy that kept a thawed old primary routed
    // would). The oracle has written on the new timeline: it must not write there.
    let beating = keep_silos_beating(api.clone(), oracle.base());
    primary.start_again();
    address.switch_to(format!("127.0.0.1:{}", primary.port));
    let refused = Instant::now();
    let mut answered = Vec::new();
    while refused.elapsed() < Duration::from_secs(3) {
        let reply = api
            .post(&oracle.base(), "/placements", json!({"grain": "split/0"}))
            .await;
        answered.push(reply.ok().is_some());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = reqwest::get(format!("{}/metrics", oracle.base()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let regressions =
        crate::cluster_run::series_value(&metrics, "oracle_store_timeline_regressions_total");
    address.switch_to(format!("127.0.0.1:{}", standby.port));
    let back = until_placed(&api, &oracle, "split/1").await;
    beating.abort();
    println!(
        "the old primary back as a primary on the old timeline: {} of {} placements acknowledged \
         through it, {regressions} connections refused as behind the timeline",
        answered.iter().filter(|&&ok| ok).count(),
        answered.len()
    );
    assert!(
        answered.iter().all(|&ok| !ok),
        "a placement was acknowledged on a primary behind the timeline"
    );
    assert!(regressions >= 1.0, "the regression was counted");
    assert!(
        back > highest_before,
        "placements resume on the new primary"
    );
}

/// Heartbeats for every silo every 300 ms, whatever the answers.
fn keep_silos_beating(api: Api, base: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            for silo in SILOS {
                let _ = api
                    .post(&base, "/heartbeats", json!({"silo": silo, "cpu_usage": 10}))
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
}

/// Places `prefix/0` … and returns each grain's epoch.
async fn place_all(api: &Api, oracle: &OracleProcess, prefix: &str) -> HashMap<String, i64> {
    let grains = (0..GRAINS_PER_PHASE)
        .map(|i| format!("{prefix}/{i}"))
        .collect();
    place_named(api, oracle, grains).await
}

/// Places `grains` in batches of 100; each batch must be acknowledged.
async fn place_named(
    api: &Api,
    oracle: &OracleProcess,
    grains: Vec<String>,
) -> HashMap<String, i64> {
    let mut epochs = HashMap::new();
    for batch in grains.chunks(100) {
        let body =
            json!({"placements": batch.iter().map(|g| json!({"grain": g})).collect::<Vec<_>>()});
        let reply = api.post(&oracle.base(), "/placements/batch", body).await;
        let answer = reply.ok().unwrap_or_else(|| panic!("{}", reply.describe()));
        for (grain, result) in batch.iter().zip(answer["results"].as_array().unwrap()) {
            epochs.insert(grain.clone(), epoch_of(&result["placement"], grain));
        }
    }
    epochs
}

fn epoch_of(placement: &Value, grain: &str) -> i64 {
    placement["epoch"]
        .as_i64()
        .unwrap_or_else(|| panic!("{grain} was not placed: {placement}"))
}

/// Places `grain`, retrying every 20 ms while the oracle answers that it cannot (at most 30 s).
async fn until_placed(api: &Api, oracle: &OracleProcess, grain: &str) -> i64 {
    let started = Instant::now();
    loop {
        let reply = api
            .post(&oracle.base(), "/placements", json!({"grain": grain}))
            .await;
        if let Some(body) = reply.ok() {
            return epoch_of(body, grain);
        }
        assert!(
            matches!(reply, Reply::Unreachable(_)) || reply.is_retryable(),
            "{}",
            reply.describe()
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "placements never resumed: {}\n{}",
            reply.describe(),
            oracle.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the standby has replayed everything the primary has written.
async fn until_replayed(primary: &OwnPostgres, standby: &OwnPostgres) {
    let written: String = query(primary, "SELECT pg_current_wal_lsn()::text").await;
    let started = Instant::now();
    loop {
        let caught_up: bool = query(
            standby,
            &format!("SELECT pg_last_wal_replay_lsn() >= '{written}'::pg_lsn"),
        )
        .await;
        if caught_up {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "standby lags");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until no standby streams from `primary`.
async fn until_no_standby_streams(primary: &OwnPostgres) {
    let started = Instant::now();
    while query::<i64>(primary, "SELECT count(*) FROM pg_stat_replication").await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the standby kept streaming"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn query<T>(server: &OwnPostgres, sql: &str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    let mut connection = PgConnection::connect(&server.url("postgres"))
        .await
        .unwrap();
    let value = sqlx::query_scalar(sql)
        .fetch_one(&mut connection)
        .await
        .unwrap();
    connection.close().await.unwrap();
    value
}
