//! The SDK's rules against a scripted replica (`fake_oracle.rs`): failover between replicas,
//! `Retry-After`, the lease running out and coming back, and a death and rejoin.

mod fake_oracle;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_oracle::{FakeOracle, Reply, Request};
use placement_oracle_sdk::{
    Backoff, ClientOptions, OracleClient, Silo, SiloEvents, SiloOptions, Status,
};
use reqwest::Method;
use serde_json::json;

/// A port nothing listens on.
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

fn client(urls: &[String]) -> OracleClient {
    let options = ClientOptions {
        key: Some("k".into()),
        timeout: Duration::from_secs(2),
        ..ClientOptions::default()
    };
    OracleClient::new(urls, "c1", options).unwrap()
}

#[derive(Default)]
struct Events(Mutex<Vec<String>>);

impl SiloEvents for Events {
    fn paused(&self, silo: &str) {
        self.0.lock().unwrap().push(format!("paused {silo}"));
    }
    fn resumed(&self, silo: &str) {
        self.0.lock().unwrap().push(format!("resumed {silo}"));
    }
    fn declared_dead(&self, silo: &str) {
        self.0.lock().unwrap().push(format!("dead {silo}"));
    }
}

impl Events {
    fn seen(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

fn silo(client: OracleClient, events: Arc<Events>, interval_ms: u64) -> Silo {
    Silo::new(
        client,
        "10.0.0.1:11111",
        SiloOptions {
            generation: Some(1),
            interval: Duration::from_millis(interval_ms),
            events,
            backoff: Backoff::new(Duration::from_millis(10), Duration::from_millis(50), 3),
            ..SiloOptions::default()
        },
    )
}

async fn until(what: &str, check: impl Fn() -> bool) {
    for _ in 0..400 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not within 4 s");
}

#[tokio::test]
async fn a_replica_that_is_down_or_answers_503_is_left_for_the_next_and_the_next_is_kept() {
    let unavailable =
        FakeOracle::start(|_| Reply::problem(503, "store-unavailable").retry_after(1)).await;
    let good = FakeOracle::start(|r: &Request| Reply::ok(json!({ "path": r.path }))).await;
    let client = client(&[closed_port_url(), unavailable.url.clone(), good.url.clone()]);
    let answer = client
        .call_value(Method::GET, "/silos", None)
        .await
        .unwrap();
    assert_eq!(answer["path"], "/v1/clusters/c1/silos");
    client
        .call_value(Method::GET, "/silos", None)
        .await
        .unwrap();
    assert_eq!(
        unavailable.count("/silos"),
        1,
        "the replica that answered is asked first next time"
    );
    assert_eq!(good.count("/silos"), 2);
    let only_unavailable = self::client(std::slice::from_ref(&unavailable.url));
    let error = only_unavailable
        .call_value(Method::GET, "/silos", None)
        .await
        .unwrap_err();
    assert_eq!(
        (error.status, error.problem.as_str()),
        (503, "store-unavailable")
    );
    assert_eq!(error.retry_after, Some(Duration::from_secs(1)));
    let none = self::client(&[closed_port_url()]);
    let error = none
        .call_value(Method::GET, "/silos", None)
        .await
        .unwrap_err();
    assert!(error.status == 0 && error.is_retryable(), "{error}");
}

#[tokio::test]
async fn a_silo_joins_then_reports_active_and_stays_quiet_as_retry_after_says() {
    let shed = Arc::new(AtomicBool::new(false));
    let shedding = shed.clone();
    let oracle = FakeOracle::start(move |_| {
        if shedding.load(Ordering::Relaxed) {
            Reply::problem(429, "rate-limited").retry_after(1)
        } else {
            Reply::ok(json!({ "lease_ms": 5000 }))
        }
    })
    .await;
    let events = Arc::new(Events::default());
    let silo = silo(client(std::slice::from_ref(&oracle.url)), events, 20);
    silo.join(Duration::from_secs(2)).await.unwrap();
    assert!(silo.may_run_grains());
    assert_eq!(silo.status(), Status::Active);
    let statuses: Vec<String> = oracle
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.body["status"].to_string())
        .collect();
    assert_eq!(
        statuses[..2],
        ["\"joining\"".to_owned(), "\"active\"".to_owned()]
    );
    shed.store(true, Ordering::Relaxed);
    until("a heartbeat is shed", || {
        silo.stats().heartbeats_failed.load(Ordering::Relaxed) >= 1
    })
    .await;
    let refused_at = oracle.count("/heartbeats");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        oracle.count("/heartbeats"),
        refused_at,
        "no heartbeat before Retry-After's second"
    );
    shed.store(false, Ordering::Relaxed);
    until("heartbeats again after the second", || {
        oracle.count("/heartbeats") > refused_at
    })
    .await;
    silo.close();
}

#[tokio::test]
async fn grains_pause_when_the_lease_runs_out_and_resume_when_a_heartbeat_is_acknowledged() {
    let down = Arc::new(AtomicBool::new(false));
    let is_down = down.clone();
    let oracle = FakeOracle::start(move |_| {
        if is_down.load(Ordering::Relaxed) {
            Reply::problem(503, "store-unavailable")
        } else {
            Reply::ok(json!({ "lease_ms": 300 }))
        }
    })
    .await;
    let events = Arc::new(Events::default());
    let silo = silo(
        client(std::slice::from_ref(&oracle.url)),
        events.clone(),
        50,
    );
    silo.join(Duration::from_secs(2)).await.unwrap();
    down.store(true, Ordering::Relaxed);
    until("the lease runs out", || !silo.may_run_grains()).await;
    until("paused", || events.seen() == ["paused 10.0.0.1:11111@1"]).await;
    assert!(silo.lease_remaining().is_zero());
    down.store(false, Ordering::Relaxed);
    until("resumed", || events.seen().len() == 2).await;
    assert_eq!(
        events.seen()[1],
        "resumed 10.0.0.1:11111@1",
        "the same incarnation, not a new one"
    );
    assert!(silo.may_run_grains());
    assert_eq!(silo.stats().pauses.load(Ordering::Relaxed), 1);
    assert_eq!(silo.stats().deaths.load(Ordering::Relaxed), 0);
    silo.close();
}

/// A replica that takes connections but never answers — frozen, its VM paused — holds a
/// heartbeat for a third of the lease at most before the next replica is tried: a silo whose
/// lease (900 ms) is shorter than the client's timeout (2 s) keeps it and never pauses.
#[tokio::test]
async fn a_replica_that_never_answers_holds_a_heartbeat_a_third_of_the_lease_at_most() {
    let refusing = Arc::new(AtomicBool::new(false));
    let refuses = refusing.clone();
    let first = FakeOracle::start(move |_| {
        if refuses.load(Ordering::Relaxed) {
            Reply::problem(503, "store-unavailable")
        } else {
            Reply::ok(json!({ "lease_ms": 900 }))
        }
    })
    .await;
    // Its kernel accepts connections (the listen backlog) but nothing reads them.
    let frozen = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let frozen_url = format!("http://{}", frozen.local_addr().unwrap());
    let last = FakeOracle::start(|_| Reply::ok(json!({ "lease_ms": 900 }))).await;
    let events = Arc::new(Events::default());
    let silo = silo(
        client(&[first.url.clone(), frozen_url, last.url.clone()]),
        events.clone(),
        100,
    );
    silo.join(Duration::from_secs(2)).await.unwrap();
    until("a lease from the first replica", || silo.may_run_grains()).await;

    // The first replica now answers 503: each heartbeat goes on to the frozen one, then the last.
    refusing.store(true, Ordering::Relaxed);
    until("a heartbeat through the last replica", || {
        last.count("/heartbeats") > 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(silo.may_run_grains());
    assert!(events.seen().is_empty(), "{:?}", events.seen());
    assert_eq!(silo.stats().pauses.load(Ordering::Relaxed), 0);
    silo.close();
    drop(frozen);
}

#[tokio::test]
async fn told_dead_a_silo_drops_its_grains_before_the_next_generation_joins() {
    let dead_generation = Arc::new(AtomicU64::new(0));
    let declared = dead_generation.clone();
    let oracle = FakeOracle::start(move |r: &Request| {
        let silo = r.body["silo"].as_str().unwrap_or_default().to_owned();
        if silo.ends_with(&format!("@{}", declared.load(Ordering::Relaxed))) {
            Reply::problem(409, "silo-declared-dead")
        } else {
            Reply::ok(json!({ "lease_ms": 5000 }))
        }
    })
    .await;
    let events = Arc::new(Events::default());
    let silo = silo(
        client(std::slice::from_ref(&oracle.url)),
        events.clone(),
        30,
    );
    silo.join(Duration::from_secs(2)).await.unwrap();
    let before = silo.id();
    dead_generation.store(1, Ordering::Relaxed);
    until("rejoined", || {
        silo.id() == "10.0.0.1:11111@2" && silo.may_run_grains()
    })
    .await;
    assert_eq!(
        events.seen(),
        ["dead 10.0.0.1:11111@1"],
        "dropped, and no pause or resume"
    );
    assert!(
        !silo.may_run_grains_as(&before),
        "a claim of the old incarnation is not the new one's"
    );
    let seen = oracle.seen.lock().unwrap().clone();
    assert!(seen
        .iter()
        .all(|r| r.method == "POST" && r.path == "/v1/clusters/c1/heartbeats"));
    let first_of_next = seen
        .iter()
        .find(|r| r.body["silo"] == "10.0.0.1:11111@2")
        .unwrap();
    assert_eq!(first_of_next.body["status"], "joining");
    assert_eq!(silo.stats().deaths.load(Ordering::Relaxed), 1);
    silo.close();
}

#[tokio::test]
async fn a_silo_that_leaves_runs_nothing_from_then_on_and_is_told_first() {
    #[derive(Default)]
    struct Leaving(Mutex<Vec<(String, bool)>>, Mutex<Option<Silo>>);
    impl SiloEvents for Leaving {
        fn leaving(&self, silo: &str) {
            let may_run = self.1.lock().unwrap().as_ref().unwrap().may_run_grains();
            self.0.lock().unwrap().push((silo.to_owned(), may_run));
        }
    }
    let oracle = FakeOracle::start(|r: &Request| match r.method.as_str() {
        "DELETE" => Reply::ok(json!({})),
        _ => Reply::ok(json!({ "lease_ms": 5000 })),
    })
    .await;
    let events = Arc::new(Leaving::default());
    let silo = Silo::new(
        client(std::slice::from_ref(&oracle.url)),
        "10.0.0.1:11111",
        SiloOptions {
            generation: Some(1),
            events: events.clone(),
            ..SiloOptions::default()
        },
    );
    *events.1.lock().unwrap() = Some(silo.clone());
    silo.join(Duration::from_secs(2)).await.unwrap();
    assert!(silo.may_run_grains());
    silo.leave().await.unwrap();
    assert_eq!(
        *events.0.lock().unwrap(),
        [("10.0.0.1:11111@1".to_owned(), false)],
        "told before the registrations go, and already without the lease"
    );
    assert!(!silo.may_run_grains() && silo.lease_remaining() > Duration::ZERO);
    assert_eq!(oracle.count("/silos/10.0.0.1%3A11111%401"), 1);
    *events.1.lock().unwrap() = None;
}

#[tokio::test]
async fn an_answer_without_a_lease_grants_nothing() {
    let oracle = FakeOracle::start(|_| Reply::ok(json!({ "silo": "x" }))).await;
    let silo = silo(
        client(std::slice::from_ref(&oracle.url)),
        Arc::default(),
        50,
    );
    let error = silo.beat().await.unwrap_err();
    assert_eq!(error.problem, "unexpected-answer");
    assert!(!silo.may_run_grains());
}

#[tokio::test]
async fn a_bad_gateway_is_left_for_the_next_replica() {
    let gateway = FakeOracle::start(|_| Reply::problem(502, "bad-gateway")).await;
    let good = FakeOracle::start(|_| Reply::ok(json!({ "ok": true }))).await;
    let client = client(&[gateway.url.clone(), good.url.clone()]);
    assert_eq!(
        client
            .call_value(Method::GET, "/silos", None)
            .await
            .unwrap()["ok"],
        true
    );
}

#[tokio::test]
async fn a_long_retry_after_never_outlasts_the_lease() {
    let shed = Arc::new(AtomicBool::new(false));
    let shedding = shed.clone();
    let oracle = FakeOracle::start(move |_| {
        if shedding.load(Ordering::Relaxed) {
            Reply::problem(429, "rate-limited").retry_after(3600)
        } else {
            Reply::ok(json!({ "lease_ms": 800 }))
        }
    })
    .await;
    let silo = silo(
        client(std::slice::from_ref(&oracle.url)),
        Arc::default(),
        50,
    );
    silo.join(Duration::from_secs(2)).await.unwrap();
    shed.store(true, Ordering::Relaxed);
    until("shed once", || {
        silo.stats().heartbeats_failed.load(Ordering::Relaxed) >= 1
    })
    .await;
    shed.store(false, Ordering::Relaxed);
    let before = oracle.count("/heartbeats");
    until("tries again within the lease, not in an hour", || {
        oracle.count("/heartbeats") > before
    })
    .await;
    silo.close();
}

#[tokio::test]
async fn a_hook_that_panics_does_not_stop_the_lease_keeper() {
    #[derive(Default)]
    struct Panicky(AtomicU64);
    impl SiloEvents for Panicky {
        fn paused(&self, _: &str) {
            self.0.fetch_add(1, Ordering::Relaxed);
            panic!("this hook panics on purpose: the test checks that the silo carries on");
        }
    }
    let up = Arc::new(AtomicBool::new(true));
    let is_up = up.clone();
    let oracle = FakeOracle::start(move |_| {
        if is_up.load(Ordering::Relaxed) {
            Reply::ok(json!({ "lease_ms": 200 }))
        } else {
            Reply::problem(503, "store-unavailable")
        }
    })
    .await;
    let events = Arc::new(Panicky::default());
    let silo = Silo::new(
        client(std::slice::from_ref(&oracle.url)),
        "10.0.0.1:11111",
        SiloOptions {
            generation: Some(1),
            interval: Duration::from_millis(40),
            events: events.clone(),
            backoff: Backoff::new(Duration::from_millis(10), Duration::from_millis(20), 1),
            ..SiloOptions::default()
        },
    );
    silo.join(Duration::from_secs(2)).await.unwrap();
    for round in 1..=2 {
        up.store(false, Ordering::Relaxed);
        until("paused", || events.0.load(Ordering::Relaxed) == round).await;
        up.store(true, Ordering::Relaxed);
        until("runs again", || silo.may_run_grains()).await;
    }
    silo.close();
}
