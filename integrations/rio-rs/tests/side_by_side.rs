//! rio-rs with its own directory and membership, and rio-rs on the oracle, under the same
//! workload and the same faults.
//!
//! Each test runs one fault twice, once per backend, on a Postgres server of its own: three
//! rio-rs servers of the example application (counters with their state in Postgres), eight
//! clients sending increments to 500 counters through any server, and a referee that every
//! activation's start and end is reported to. After the fault, the counters' final state is
//! compared with the increments acknowledged. On the oracle there must be no double activation
//! and no lost acknowledged increment; what rio-rs's own backends come to is printed as found.
//!
//! ```sh
//! cargo build && ORACLE_BINARY=$PWD/target/debug/placement-oracle \
//!   cargo test -p placement-oracle-rio --test side_by_side -- --nocapture --test-threads 1
//! ```
//! It needs the Postgres server binaries (`initdb`, `pg_ctl`; see tests/runtime) and
//! `ORACLE_BINARY` (it fails without them, it never skips). Each test runs in a network namespace
//! of its own ([`support::netns`]): rio-rs names its servers by the machine's first non-loopback
//! address, and the test's traffic must stay on loopback.

#[path = "../examples/counter/app.rs"]
mod app;
mod support;

use std::sync::Arc;

use support::netns;
use support::postgres_server::OwnPostgres;
use support::run::{run, Fault, Report};
use support::servers::Backend;

/// The runs take both cores: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn side_by_side(fault: Fault) -> (Report, Report) {
    let _one = ONE_AT_A_TIME.lock().await;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let server = Arc::new(OwnPostgres::start());
    let rio = run(Backend::RioPostgres, fault, &server).await;
    rio.print();
    let oracle = run(Backend::Oracle, fault, &server).await;
    oracle.print();
    (rio, oracle)
}

/// What the oracle must show under every fault: nothing run twice, nothing acknowledged lost,
/// and the clients served from the fault on at no less than a quarter of the pace before it
/// (a fault takes at most three TTLs of a run's five or so).
fn assert_exact(report: &Report) {
    assert!(
        report.double_before.is_empty() && report.double_after.is_empty(),
        "double activations on the oracle: {:?} {:?}",
        report.double_before,
        report.double_after
    );
    assert!(
        report.lost.is_empty(),
        "acknowledged increments lost on the oracle: {:?}",
        report.lost
    );
    assert!(
        report.kept_pace >= 0.25,
        "the clients were hardly served from the fault on: {report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server() {
    if !netns::inside() {
        return netns::run_inside("a_killed_server");
    }
    let (_, oracle) = side_by_side(Fault::Kill).await;
    assert_exact(&oracle);
    let Some((_, held)) = oracle.recovery else {
        panic!(
            "the killed server's counters were not all served again: {} (the oracle's log: {:?})",
            oracle.note, oracle.oracle_log
        );
    };
    assert!(held > 0, "the killed server held counters");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_cut_off_from_its_membership_store() {
    if !netns::inside() {
        return netns::run_inside("a_server_cut_off_from_its_membership_store");
    }
    let (_, oracle) = side_by_side(Fault::CutOff).await;
    assert_exact(&oracle);
    let [pauses, deaths, _] = oracle.gates;
    assert!(
        pauses >= 1 && deaths >= 1,
        "the cut-off server paused, was declared dead and rejoined: {:?}",
        oracle.gates
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_server() {
    if !netns::inside() {
        return netns::run_inside("a_drained_server");
    }
    let (_, oracle) = side_by_side(Fault::Drain).await;
    assert_exact(&oracle);
    assert_eq!(
        oracle.drained,
        Some(Ok(0)),
        "the drain moved every counter away"
    );
    assert!(oracle.gates[2] > 0, "counters were handed over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_longer_than_the_membership_timeout() {
    if !netns::inside() {
        return netns::run_inside("postgres_stopped_longer_than_the_membership_timeout");
    }
    let (_, oracle) = side_by_side(Fault::PostgresStopped).await;
    assert_exact(&oracle);
    assert_eq!(
        oracle.paused_during_outage,
        Some(3),
        "every server paused while Postgres was down"
    );
    assert_eq!(oracle.gates[1], 0, "no server was declared dead");
}
