//! A database that answers but cannot serve: a read-only server (a standby not yet promoted, or a
//! primary set `default_transaction_read_only`) and a primary whose commits hang (its synchronous
//! standby gone). Each on a server of the test's own, reconfigured with `ALTER SYSTEM` and a
//! reload, with one oracle process on it: what an operator's probes and a silo see, and how soon.
//! The figures are printed (`cargo test --test runtime store_states -- --nocapture`).

use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::{Connection, Executor, PgConnection};

use crate::api::{Api, Reply};
use crate::faults::ONE_AT_A_TIME;
use crate::oracle_process::OracleProcess;
use crate::postgres_server::OwnPostgres;

const SILO: &str = "10.0.0.1:11111@1";

/// What a kubelet's readiness probe must see within this long of the database changing.
const NOTICED_WITHIN: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_database_makes_the_oracle_unready_and_says_so_until_it_takes_writes() {
    let (_one, server, oracle, api) = one_oracle_on_a_server_of_its_own("read-only").await;

    let noticed = unready_after(
        (&server, &oracle, &api),
        "ALTER SYSTEM SET default_transaction_read_only = on",
        "store-read-only",
    )
    .await;
    let refused = heartbeat(&api, &oracle).await;
    assert!(refused.is_retryable(), "{}", refused.describe());
    assert_eq!(
        refused.problem(),
        Some("store-read-only"),
        "{}",
        refused.describe()
    );

    configure(&server, "ALTER SYSTEM RESET default_transaction_read_only").await;
    let writable = Instant::now();
    until_ready_is(&api, &oracle, true).await;
    let ready_again = writable.elapsed();
    let accepted = heartbeat(&api, &oracle).await;
    let body = accepted
        .ok()
        .unwrap_or_else(|| panic!("{}", accepted.describe()));
    assert_eq!(body["status"], "active", "the silo lives on: {body}");

    println!(
        "read-only database: /readyz 503 store-read-only {noticed:?} after the reload; ready \
         again {ready_again:?} after it took writes"
    );
    assert!(noticed <= NOTICED_WITHIN, "noticed after {noticed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_that_hang_make_the_oracle_unready_within_a_second() {
    let (_one, server, oracle, api) = one_oracle_on_a_server_of_its_own("hung-commits").await;

    // Commits now wait for a synchronous standby that never connects.
    let noticed = unready_after(
        (&server, &oracle, &api),
        "ALTER SYSTEM SET synchronous_standby_names = 'gone'",
        "store-writes-stalled",
    )
    .await;
    // Probes keep coming (a kubelet's, a load balancer's): still unready, and the stuck readiness
    // writes do not pile up, one backend each — one is outstanding at most.
    for _ in 0..20 {
        let reply = api.readyz(&oracle.base()).await;
        assert_eq!(
            reply.problem(),
            Some("store-writes-stalled"),
            "{}",
            reply.describe()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut admin = PgConnection::connect(&server.url("postgres"))
        .await
        .unwrap();
    let stuck: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE wait_event = 'SyncRep' AND query LIKE '%readiness_probes%'",
    )
    .fetch_one(&mut admin)
    .await
    .unwrap();
    admin.close().await.unwrap();
    assert_eq!(stuck, 1, "readiness writes waiting for the standby");

    // Without the setting the waiting commits are released.
    configure(&server, "ALTER SYSTEM RESET synchronous_standby_names").await;
    let released = Instant::now();
    until_ready_is(&api, &oracle, true).await;
    let ready_again = released.elapsed();

    println!(
        "hung commits: /readyz 503 store-writes-stalled {noticed:?} after the reload; ready \
         again {ready_again:?} after the commits were released"
    );
    assert!(noticed <= NOTICED_WITHIN, "noticed after {noticed:?}");
}

/// With every connection of its pool busy (one connection, held by the sweep, which waits for a
/// table lock the test takes), a heartbeat waits for a connection: counted live in this process's
/// `oracle_store_pool_waiters` while it waits, gone when it got one, its wait recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_waiting_for_a_connection_are_counted_while_they_wait() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = OwnPostgres::start();
    let oracle = OracleProcess::start_with(
        "waiters",
        &server.url("postgres"),
        &[
            ("ORACLE_DB_POOL_SIZE", "1"),
            ("ORACLE_DB_ACQUIRE_TIMEOUT_MS", "4000"),
        ],
    )
    .await;
    let api = Api::new("waiters");
    assert!(heartbeat(&api, &oracle).await.ok().is_some());
    let waits_before = metric(&oracle, "oracle_store_pool_wait_duration_seconds_count").await;

    let mut locker = PgConnection::connect(&server.url("postgres"))
        .await
        .unwrap();
    locker.execute("BEGIN").await.unwrap();
    locker
        .execute("LOCK TABLE silos IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let (api, base) = (api.clone(), oracle.base());
        async move {
            api.post(&base, "/heartbeats", json!({"silo": SILO, "cpu_usage": 10}))
                .await
        }
    });
    let started = Instant::now();
    while metric(&oracle, "oracle_store_pool_waiters").await < 1.0 {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "no call was counted waiting"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    locker.execute("COMMIT").await.unwrap();
    let answered = waiting.await.unwrap();
    assert!(answered.ok().is_some(), "{}", answered.describe());
    let started = Instant::now();
    while metric(&oracle, "oracle_store_pool_waiters").await != 0.0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a waiter stayed counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(metric(&oracle, "oracle_store_pool_wait_duration_seconds_count").await > waits_before);
}

/// A series of the oracle process's `/metrics` (0 when absent).
pub async fn metric(oracle: &OracleProcess, series: &str) -> f64 {
    let text = reqwest::get(format!("{}/metrics", oracle.base()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    crate::cluster_run::series_value(&text, series)
}

/// A server of the test's own with one oracle process on it, which a silo's heartbeat reached; the
/// harness's lock is held meanwhile.
async fn one_oracle_on_a_server_of_its_own(
    name: &str,
) -> (
    tokio::sync::MutexGuard<'static, ()>,
    OwnPostgres,
    OracleProcess,
    Api,
) {
    let one = ONE_AT_A_TIME.lock().await;
    let server = OwnPostgres::start();
    let oracle = OracleProcess::start(name, &server.url("postgres")).await;
    let api = Api::new("states");
    let first = heartbeat(&api, &oracle).await;
    assert!(first.ok().is_some(), "{}", first.describe());
    (one, server, oracle, api)
}

async fn heartbeat(api: &Api, oracle: &OracleProcess) -> Reply {
    api.post(
        &oracle.base(),
        "/heartbeats",
        json!({"silo": SILO, "cpu_usage": 10}),
    )
    .await
}

/// How long after `statement` reconfigured the server `/readyz` answered 503 `problem`.
async fn unready_after(
    (server, oracle, api): (&OwnPostgres, &OracleProcess, &Api),
    statement: &str,
    problem: &str,
) -> Duration {
    configure(server, statement).await;
    let changed = Instant::now();
    let unready = until_ready_is(api, oracle, false).await;
    let noticed = changed.elapsed();
    assert_eq!(unready.problem(), Some(problem), "{}", unready.describe());
    noticed
}

/// Runs `statement` (an `ALTER SYSTEM`) on the server and reloads its configuration. The session
/// sets itself writable first, so that a server made read-only can be made writable again.
pub async fn configure(server: &OwnPostgres, statement: &str) {
    let mut admin = PgConnection::connect(&server.url("postgres"))
        .await
        .expect("connect to the test's own server");
    admin
        .execute("SET default_transaction_read_only = off")
        .await
        .unwrap();
    admin.execute(statement).await.unwrap();
    admin.execute("SELECT pg_reload_conf()").await.unwrap();
    admin.close().await.unwrap();
}

/// Polls `/readyz` every 20 ms until it answers 200 (`ready`) or 503, and returns that answer.
async fn until_ready_is(api: &Api, oracle: &OracleProcess, ready: bool) -> Reply {
    let started = Instant::now();
    loop {
        let reply = api.readyz(&oracle.base()).await;
        let status = match &reply {
            Reply::Answer { status, .. } => *status,
            Reply::Unreachable(_) => 0,
        };
        if (ready && status == 200) || (!ready && status == 503) {
            return reply;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "/readyz never became {}: {}",
            if ready { "200" } else { "503" },
            reply.describe()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
