//! `DATABASE_URL` with several hosts and `target_session_attrs`, as libpq reads them: the store
//! connects to a host that takes writes, refuses a read-only session at connect and says why, and
//! moves to another host when the one it uses fails. (Real failovers, with Patroni, are the
//! runtime harness's.)

use std::time::{Duration, Instant};

use placement_oracle::store::postgres::{Pooling, PostgresStore};
use placement_oracle::store::{Store, StoreError, StoreSettings};

use crate::helpers::{TestDatabase, TTL_MS};
use crate::proxy::FaultyLink;

/// The database's URL with the hosts `127.0.0.1:{port}` of `ports`, in order, and `attrs`.
fn hosts_url(database: &TestDatabase, ports: &[u16], attrs: &str) -> String {
    let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let one = database.url_via(ports[0]);
    format!(
        "{}?target_session_attrs={attrs}",
        one.replace(&hosts[0], &hosts.join(","))
    )
}

async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
    PostgresStore::connect(
        url,
        4,
        Duration::from_millis(500),
        Pooling::Session,
        StoreSettings::with_ttl(TTL_MS),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_list_reaches_a_host_that_takes_writes_and_moves_when_that_host_fails() {
    let database = TestDatabase::create().await;
    let first = FaultyLink::start(database.server_address()).await;
    let second = FaultyLink::start(database.server_address()).await;
    first.cut();
    let store = connect(&hosts_url(
        &database,
        &[first.port, second.port],
        "read-write",
    ))
    .await
    .expect("the second host takes writes");
    store.ping().await.expect("ready through the second host");
    let server = store.database_server().expect("a checked connection");
    assert!(server.timeline >= 1, "{server:?}");

    // The host in use fails and the first comes back: calls fail until the store moves there.
    first.restore();
    second.cut();
    let cut = Instant::now();
    let recovered = loop {
        if store.stats().await.is_ok() {
            break cut.elapsed();
        }
        assert!(
            cut.elapsed() < Duration::from_secs(10),
            "the store never moved to the other host"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    store.ping().await.expect("ready through the first host");
    println!("moved to the other host {recovered:?} after the cut");
}

#[tokio::test]
async fn read_write_refuses_a_read_only_database_at_connect_and_any_takes_it() {
    let database = TestDatabase::create().await;
    database.set_read_only(true).await;
    let link = FaultyLink::start(database.server_address()).await;
    let error = connect(&hosts_url(&database, &[link.port], "read-write"))
        .await
        .expect_err("no host takes writes");
    assert!(
        matches!(&error, StoreError::ReadOnly(detail) if detail.contains("read-only")),
        "{error}"
    );

    let store = connect(&hosts_url(&database, &[link.port], "any"))
        .await
        .expect("any session will do");
    assert!(
        matches!(store.ping().await, Err(StoreError::ReadOnly(_))),
        "connected, but not ready: it cannot write"
    );
    database.set_read_only(false).await;
}

#[tokio::test]
async fn a_url_the_store_cannot_read_is_refused_with_the_reason() {
    for (url, says) in [
        ("postgres://postgres@127.0.0.1:5432,/oracle", "empty host"),
        ("postgres://postgres@127.0.0.1:54x32/oracle", "invalid port"),
        (
            "postgres://postgres@127.0.0.1:5432/oracle?target_session_attrs=standby",
            "the oracle writes",
        ),
    ] {
        let error = connect(url).await.expect_err(url);
        assert!(error.to_string().contains(says), "{url}: {error}");
    }
}
