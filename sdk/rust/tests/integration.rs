//! The SDK against a real oracle on Postgres: a process of the oracle's binary started here, alone
//! on its database, so that it can be killed and started again (an oracle outage). Three SDK
//! silos go through placements and the registration rule, a deactivation, edge reports, a drain
//! whose migrations a worker hands over, the oracle gone for longer than their leases (paused,
//! resumed, none dead), and a silo declared dead that rejoins as its next generation.
//!
//! ```sh
//! ORACLE_BINARY=target/debug/placement-oracle \
//! ORACLE_SDK_DATABASE_URL=postgres://postgres@127.0.0.1:5432/oracle_sdk_rust \
//!   cargo test -p placement-oracle-sdk --test integration -- --nocapture
//! ```
//! Both variables are required: without them the test fails (the contract suite sets them).

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use placement_oracle_sdk::{
    segment, Claim, ClientOptions, EdgeReporter, HandOver, Load, Migration, MigrationWorker,
    Migrator, OracleClient, Placement, Silo, SiloEvents, SiloOptions,
};
use reqwest::Method;
use serde_json::{json, Value};

const TTL_MS: u64 = 3_000;

struct OracleProcess {
    binary: String,
    database_url: String,
    port: u16,
    admin: String,
    child: Option<Child>,
}

impl OracleProcess {
    fn new() -> Self {
        let var = |name: &str| {
            std::env::var(name)
                .unwrap_or_else(|_| panic!("{name} must be set (see this file's header)"))
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self {
            binary: var("ORACLE_BINARY"),
            database_url: var("ORACLE_SDK_DATABASE_URL"),
            port,
            admin: format!("{:032x}", rand::random::<u128>()),
            child: None,
        }
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn start(&mut self) {
        let log = std::fs::File::create(
            std::env::temp_dir().join(format!("oracle-sdk-rust-{}.log", self.port)),
        )
        .unwrap();
        let child = Command::new(&self.binary)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DATABASE_URL", &self.database_url)
            .env("ORACLE_LISTEN", format!("127.0.0.1:{}", self.port))
            .env("ORACLE_ADMIN_TOKEN", &self.admin)
            .env("ORACLE_LEASE_TTL_MS", "1000")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start the oracle binary");
        self.child = Some(child);
        let base = self.base();
        until("the oracle is ready", Duration::from_secs(30), || {
            let base = base.clone();
            async move {
                reqwest::get(format!("{base}/readyz"))
                    .await
                    .is_ok_and(|r| r.status() == 200)
            }
        })
        .await;
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    async fn admin(&self, method: Method, path: &str, body: Value) -> Value {
        let response = reqwest::Client::new()
            .request(method, format!("{}{path}", self.base()))
            .bearer_auth(&self.admin)
            .header("if-match", "*")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{path}: {}",
            response.status()
        );
        response.json().await.unwrap()
    }
}

impl Drop for OracleProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn until<F, R>(what: &str, within: Duration, check: F) -> Duration
where
    F: Fn() -> R,
    R: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

#[derive(Default)]
struct Events(Mutex<Vec<&'static str>>);

impl SiloEvents for Events {
    fn paused(&self, _: &str) {
        self.0.lock().unwrap().push("pause");
    }
    fn resumed(&self, _: &str) {
        self.0.lock().unwrap().push("resume");
    }
    fn declared_dead(&self, _: &str) {
        self.0.lock().unwrap().push("dead");
    }
}

impl Events {
    fn seen(&self) -> Vec<&'static str> {
        self.0.lock().unwrap().clone()
    }
}

/// The runtime's hand-over: here it only records the grain (state transfer would go here).
#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl Migrator for Recorder {
    async fn hand_over(&self, migration: &Migration) -> HandOver {
        self.0.lock().unwrap().push(migration.grain.clone());
        HandOver::Moved
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_sdk_silos_through_placements_a_drain_an_outage_and_a_death() {
    let mut oracle = OracleProcess::new();
    oracle.start().await;
    let cluster = format!("sdk-rust-{}", std::process::id());
    let issued = oracle
        .admin(
            Method::POST,
            &format!("/v1/clusters/{cluster}/keys"),
            json!({ "scopes": ["silo", "operator"] }),
        )
        .await;
    oracle
        .admin(
            Method::PUT,
            &format!("/v1/clusters/{cluster}/policy"),
            json!({ "silo_ttl_ms": TTL_MS }),
        )
        .await;
    let options = ClientOptions {
        key: issued["key"].as_str().map(str::to_owned),
        timeout: Duration::from_secs(1),
        ..ClientOptions::default()
    };
    let client = OracleClient::new(&[oracle.base()], &cluster, options).unwrap();

    let events: Vec<Arc<Events>> = (0..3).map(|_| Arc::default()).collect();
    let silos: Vec<Silo> = (0..3)
        .map(|i| {
            Silo::new(
                client.clone(),
                &format!("10.0.0.{}:11111", i + 1),
                SiloOptions {
                    generation: Some(1),
                    interval: Duration::from_millis(250),
                    load: Arc::new(|| Load {
                        cpu_usage: Some(10.0),
                        ..Load::default()
                    }),
                    events: events[i].clone(),
                    ..SiloOptions::default()
                },
            )
        })
        .collect();
    for silo in &silos {
        silo.join(Duration::from_secs(10)).await.unwrap();
        assert!(silo.may_run_grains());
    }
    let (a, b, c) = (&silos[0], &silos[1], &silos[2]);
    let placements: BTreeMap<String, Placement> = silos
        .iter()
        .map(|s| (s.id(), Placement::for_silo(s)))
        .collect();
    let caller = Placement::for_callers(client.clone());

    // Placement: the silo named holds the registration; any other forwards to it.
    let grains: Vec<String> = (0..30).map(|i| format!("user/{i}")).collect();
    let mut where_: BTreeMap<String, (String, i64)> = BTreeMap::new();
    for grain in &grains {
        let answer = caller.locate(grain).await.unwrap();
        let epoch = answer.epoch.unwrap();
        let claim = placements[&answer.silo].claim(grain).await.unwrap();
        assert_eq!(
            claim,
            Claim::RunHere {
                grain: grain.clone(),
                silo: answer.silo.clone(),
                epoch: Some(epoch)
            }
        );
        let other = placements.keys().find(|s| **s != answer.silo).unwrap();
        let forwarded = placements[other].claim(grain).await.unwrap();
        assert!(
            matches!(forwarded, Claim::ForwardTo { ref silo, .. } if *silo == answer.silo),
            "{forwarded:?}"
        );
        where_.insert(grain.clone(), (answer.silo, epoch));
    }

    // A deactivation ends that epoch only; the grain is placed anew with a larger one.
    let (owner, epoch) = where_["user/0"].clone();
    assert!(placements[&owner].release("user/0", epoch).await.unwrap());
    assert!(
        !placements[&owner].release("user/0", epoch).await.unwrap(),
        "already ended"
    );
    caller.forget("user/0", epoch);
    let again = caller.locate("user/0").await.unwrap();
    assert!(again.epoch.unwrap() > epoch);
    where_.insert("user/0".into(), (again.silo.clone(), again.epoch.unwrap()));

    // Edge reports.
    let edges = EdgeReporter::new(client.clone(), 1_000);
    for i in (0..30).step_by(2) {
        for _ in 0..3 {
            edges.record_call(&format!("user/{i}"), &format!("user/{}", i + 1));
        }
    }
    assert_eq!(edges.report_once().await.unwrap(), 15);

    // A drain: c's grains are handed over by its worker, then c leaves.
    let recorder = Arc::new(Recorder::default());
    let worker = MigrationWorker::new(c, recorder.clone());
    worker.start(Duration::from_millis(100));
    let on_c: BTreeSet<String> = where_
        .iter()
        .filter(|(_, (s, _))| *s == c.id())
        .map(|(g, _)| g.clone())
        .collect();
    assert!(!on_c.is_empty(), "the test places some grains on c");
    let c_id = c.id();
    assert_eq!(
        c.stop(Duration::from_secs(20), Duration::from_millis(200))
            .await
            .unwrap(),
        0
    );
    worker.stop();
    let handed: BTreeSet<String> = recorder.0.lock().unwrap().iter().cloned().collect();
    assert_eq!(handed, on_c);
    assert_eq!(
        worker
            .stats()
            .completed
            .load(std::sync::atomic::Ordering::Relaxed) as usize,
        on_c.len()
    );
    for grain in &on_c {
        let moved = client
            .call_value(
                Method::GET,
                &format!("/activations/{}", segment(grain)),
                None,
            )
            .await
            .unwrap();
        assert_ne!(moved["silo"], c_id.as_str());
        assert!(moved["epoch"].as_i64().unwrap() > where_[grain].1);
    }

    // The oracle gone for longer than a lease: grains pause, then resume; no one dies.
    oracle.kill();
    let paused = until("a and b pause", Duration::from_secs(15), || async {
        !a.may_run_grains() && !b.may_run_grains()
    })
    .await;
    oracle.start().await;
    let resumed = until("a and b resume", Duration::from_secs(15), || async {
        a.may_run_grains() && b.may_run_grains()
    })
    .await;
    until("both were told", Duration::from_secs(5), || async {
        events[0].seen().len() == 2 && events[1].seen().len() == 2
    })
    .await;
    for e in &events[..2] {
        assert_eq!(e.seen(), ["pause", "resume"]);
    }
    println!("oracle outage: leases ran out {paused:.2?} after the kill; resumed {resumed:.2?} after the restart");

    // b falls silent for longer than the TTL: declared dead; it drops its grains and rejoins.
    b.close();
    let old_b = b.id();
    until("b is declared dead", Duration::from_secs(20), || {
        let (client, old_b) = (client.clone(), old_b.clone());
        async move {
            let silo = client
                .call_value(Method::GET, &format!("/silos/{}", segment(&old_b)), None)
                .await;
            silo.is_ok_and(|s| s["status"] == "dead")
        }
    })
    .await;
    b.join(Duration::from_secs(10)).await.unwrap();
    assert_eq!(events[1].seen().last(), Some(&"dead"));
    assert_eq!(b.id(), "10.0.0.2:11111@2");
    assert!(b.may_run_grains());
    for grain in &grains {
        let answer = caller.locate(grain).await.unwrap();
        assert_ne!(answer.silo, old_b, "a dead silo's grains are placed anew");
    }
    for silo in [a, b] {
        silo.stop(Duration::from_millis(500), Duration::from_millis(100))
            .await
            .unwrap();
    }
}
