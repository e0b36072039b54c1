//! One run of the harness: two oracle replicas on a database, silo hosts that join through them,
//! callers calling grains, the referee, and what they all saw.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};

use crate::api::Api;
use crate::callers::{CallStats, Callers};
use crate::host::{Host, Hosts};
use crate::oracle_process::{OracleProcess, SILO_TTL_MS};
use crate::registry::{Registry, Tally};

pub const TTL: Duration = Duration::from_millis(SILO_TTL_MS);

/// The shape of a run.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub replicas: usize,
    pub hosts: usize,
    pub grains: usize,
    pub callers: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            replicas: 2,
            hosts: 5,
            grains: 200,
            callers: 3,
        }
    }
}

pub struct Run {
    pub replicas: Vec<OracleProcess>,
    pub hosts: Hosts,
    pub registry: Arc<Registry>,
    pub api: Api,
    callers: Option<Callers>,
    started: Instant,
}

impl Run {
    /// Starts the replicas (two by default) on `database_url`, the hosts (waiting until each
    /// runs), and the callers.
    pub async fn start(database_url: &str, options: Options) -> Self {
        let urls = vec![database_url.to_owned(); options.replicas];
        Self::start_on(&urls, options).await
    }

    /// As [`Self::start`], a replica on each of `database_urls` (the same database, reached
    /// differently).
    pub async fn start_on(database_urls: &[String], options: Options) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let cluster = format!(
            "rt-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut replicas = Vec::new();
        for (n, url) in database_urls.iter().enumerate() {
            replicas.push(OracleProcess::start(&format!("replica-{}", n + 1), url).await);
        }
        let mut run = Self {
            replicas,
            hosts: Hosts::default(),
            registry: Arc::default(),
            api: Api::new(&cluster),
            callers: None,
            started: Instant::now(),
        };
        for _ in 0..options.hosts {
            run.add_host().await;
        }
        assert!(
            run.until_all_running(Duration::from_secs(20))
                .await
                .is_some(),
            "the hosts did not all join: {}",
            run.replicas[0].log_text()
        );
        run.callers = Some(Callers::start(
            options.callers,
            options.grains,
            run.api.clone(),
            run.replica_bases(),
            run.hosts.clone(),
        ));
        run
    }

    pub fn replica_bases(&self) -> Vec<String> {
        self.replicas.iter().map(OracleProcess::base).collect()
    }

    /// Starts one more host (it joins with its first heartbeat).
    pub async fn add_host(&mut self) -> Arc<Host> {
        let n = self.hosts.all().len() as u64 + 1;
        let ports: Vec<u16> = self.replicas.iter().map(|r| r.port).collect();
        let host = Host::start(
            &format!("10.9.0.{n}:11111"),
            self.api.clone(),
            &ports,
            self.registry.clone(),
            n,
        )
        .await;
        self.hosts.push(host.clone());
        host
    }

    pub fn host(&self, i: usize) -> Arc<Host> {
        self.hosts.all()[i].clone()
    }

    /// How long until every host still in the cluster runs its grains (holds a lease), polling
    /// every 10 ms; `None` if that takes longer than `limit`.
    pub async fn until_all_running(&self, limit: Duration) -> Option<Duration> {
        let since = Instant::now();
        loop {
            let running = self
                .hosts
                .all()
                .iter()
                .filter(|h| !h.is_gone())
                .all(|h| h.is_running());
            if running {
                return Some(since.elapsed());
            }
            if since.elapsed() > limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn calls(&self) -> CallStats {
        self.callers
            .as_ref()
            .map(Callers::stats)
            .unwrap_or_default()
    }

    /// Sets the cluster's policy (whatever version is there).
    pub async fn put_policy(&self, policy: Value) {
        let reply = self.api.put_policy(&self.replicas[0].base(), policy).await;
        assert!(reply.ok().is_some(), "policy: {}", reply.describe());
    }

    /// An operator's request to any replica: the first that answers.
    pub async fn operator(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        for replica in &self.replicas {
            let reply = self
                .api
                .send(&replica.base(), method.clone(), path, body.clone())
                .await;
            if let Some(body) = reply.ok() {
                return body.clone();
            }
        }
        panic!("no replica answered {method} {path}");
    }

    /// The run after a fault that has just ended: how long until every host runs again (at most
    /// four TTLs), two TTLs more to settle, then the report, with when the first call was served
    /// after the fault's end.
    pub async fn recover(self) -> Recovery {
        let back = Instant::now();
        let resumed = self.until_all_running(4 * TTL).await;
        tokio::time::sleep(2 * TTL).await;
        let first_served = self.calls().first_served_after(back).map(|at| at - back);
        Recovery {
            resumed,
            first_served,
            report: self.finish().await,
        }
    }

    /// Stops the callers and the hosts and adds up what everybody saw.
    pub async fn finish(mut self) -> Report {
        let calls = self.callers.take().expect("started").stop().await;
        let mut metrics = BTreeMap::new();
        for replica in &self.replicas {
            for (name, value) in replica_metrics(&replica.base()).await {
                *metrics.entry(name).or_default() += value;
            }
        }
        let warnings = self
            .replicas
            .iter()
            .flat_map(|replica| {
                replica
                    .log_text()
                    .lines()
                    .filter(|line| {
                        line.contains(r#""level":"WARN""#) || line.contains(r#""level":"ERROR""#)
                    })
                    .map(|line| format!("{}: {line}", replica.name))
                    .collect::<Vec<_>>()
            })
            .collect();
        let hosts = self.hosts.all();
        let sum = |f: &dyn Fn(&Host) -> u64| hosts.iter().map(|h| f(h)).sum::<u64>();
        let report = Report {
            seconds: self.started.elapsed().as_secs_f64(),
            tally: self.registry.tally(),
            pauses: sum(&|h| h.stats().pauses.load(Ordering::Relaxed)),
            rejoins: hosts
                .iter()
                .map(|h| h.stats().rejoins.load(Ordering::Relaxed))
                .collect(),
            migrations_completed: sum(&|h| h.stats().migrations_completed.load(Ordering::Relaxed)),
            migrations_refused: sum(&|h| h.stats().migrations_refused.load(Ordering::Relaxed)),
            deactivations: sum(&|h| h.stats().deactivations.load(Ordering::Relaxed)),
            forwarded: sum(&|h| h.stats().forwarded.load(Ordering::Relaxed)),
            heartbeats_failed: sum(&|h| h.stats().heartbeats_failed.load(Ordering::Relaxed)),
            heartbeats: hosts
                .iter()
                .map(|h| {
                    (
                        h.stats().heartbeat_failures.lock().unwrap().clone(),
                        h.longest_unacknowledged_ms(),
                    )
                })
                .collect(),
            calls,
            metrics,
            warnings,
        };
        for host in hosts {
            host.kill();
        }
        report
    }
}

/// How a run came back from a fault ([`Run::recover`]).
pub struct Recovery {
    /// How long after the fault every host ran again; `None` if not within four TTLs.
    pub resumed: Option<Duration>,
    /// How long after the fault the first call was served.
    pub first_served: Option<Duration>,
    pub report: Report,
}

/// What a run saw.
#[derive(Debug)]
pub struct Report {
    pub seconds: f64,
    pub calls: CallStats,
    pub tally: Tally,
    /// Times a host's lease ran out and it paused its grains.
    pub pauses: u64,
    /// Per host, in start order: how often it was told it was dead and rejoined.
    pub rejoins: Vec<u64>,
    pub migrations_completed: u64,
    pub migrations_refused: u64,
    pub deactivations: u64,
    pub forwarded: u64,
    pub heartbeats_failed: u64,
    /// Per host: failed heartbeats by what came back, and the longest gap between two
    /// acknowledged heartbeats' sends (ms).
    pub heartbeats: Vec<(BTreeMap<String, u64>, u64)>,
    /// The replicas' counters of what happened to membership, added up ([`WATCHED_METRICS`]).
    pub metrics: BTreeMap<&'static str, f64>,
    /// The replicas' warnings and errors (outages, stalls, deaths), each prefixed with its
    /// replica's name: what a failed assertion is read with.
    pub warnings: Vec<String>,
}

/// What the replicas say happened: outages, deaths, deaths deferred for an outage, leases that ran
/// out, stalls of their own processes.
pub const WATCHED_METRICS: [&str; 5] = [
    "oracle_store_outages_total",
    "oracle_silos_declared_dead_total",
    "oracle_silo_deaths_deferred_total",
    "oracle_silo_leases_lapsed_total",
    "oracle_replica_stalls_total",
];

/// The watched counters of the replica at `base` (0 for one never incremented; a killed and
/// restarted replica counts from its restart).
async fn replica_metrics(base: &str) -> Vec<(&'static str, f64)> {
    let text = match reqwest::get(format!("{base}/metrics")).await {
        Ok(response) => response.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    WATCHED_METRICS
        .iter()
        .map(|&name| (name, series_value(&text, name)))
        .collect()
}

/// The value of the unlabelled series `name` in a `/metrics` text (0 when absent).
pub fn series_value(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

impl Report {
    /// Prints the figures (run the tests with `--nocapture` to see them).
    pub fn print(&self, name: &str) {
        println!(
            "[{name}] {:.1} s: {} calls, {} served, outcomes {:?}; activations {}, resumed {}, \
             pauses {}, rejoins {:?}, migrations {} completed {} refused, deactivations {}, \
             forwarded {}, heartbeats failed {}, double activations {}",
            self.seconds,
            self.calls.calls,
            self.calls.served(),
            self.calls.outcomes,
            self.tally.activations,
            self.tally.resumptions,
            self.pauses,
            self.rejoins,
            self.migrations_completed,
            self.migrations_refused,
            self.deactivations,
            self.forwarded,
            self.heartbeats_failed,
            self.tally.double_activations.len(),
        );
        println!("  replicas' counters: {:?}", self.metrics);
        for line in self.warnings.iter().take(40) {
            println!("  {line}");
        }
        for (i, (failures, longest)) in self.heartbeats.iter().enumerate() {
            println!("  host {i}: longest wait for an acknowledgement {longest} ms; failed heartbeats {failures:?}");
        }
    }

    /// No grain ran on two hosts at once, and no caller got an answer a runtime cannot act on.
    pub fn assert_single_activation(&self) {
        assert!(
            self.tally.double_activations.is_empty(),
            "{} double activations, e.g. {:?}",
            self.tally.double_activations.len(),
            &self.tally.double_activations[..self.tally.double_activations.len().min(5)]
        );
        assert!(
            self.calls.unexpected.is_empty(),
            "answers no runtime should get: {:?}",
            &self.calls.unexpected[..self.calls.unexpected.len().min(5)]
        );
        assert!(self.calls.served() > 0, "no call was served");
    }

    /// One of the replicas' counters, added up over them ([`WATCHED_METRICS`]).
    pub fn metric(&self, name: &str) -> f64 {
        self.metrics.get(name).copied().unwrap_or(0.0)
    }

    /// No host was declared dead.
    pub fn assert_no_rejoin(&self) {
        assert!(
            self.rejoins.iter().all(|&r| r == 0),
            "live silos were declared dead and rejoined: {:?}",
            self.rejoins
        );
    }
}

/// A database of the run's own on the server every test shares (for faults that leave the server
/// up), dropped when the run ends.
pub struct SharedDatabase {
    server: String,
    pub name: String,
}

impl SharedDatabase {
    pub async fn create() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let server = std::env::var("TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned())
            .trim_end_matches('/')
            .to_owned();
        let name = format!(
            "po_runtime_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut admin = PgConnection::connect(&format!("{server}/postgres"))
            .await
            .unwrap_or_else(|e| panic!("the runtime harness needs Postgres at {server}: {e}"));
        sqlx::query(&format!("CREATE DATABASE {name} TEMPLATE template0"))
            .execute(&mut admin)
            .await
            .expect("create the run's database");
        Self { server, name }
    }

    pub fn url(&self) -> String {
        format!("{}/{}", self.server, self.name)
    }
}

impl Drop for SharedDatabase {
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok(mut admin) = PgConnection::connect(&format!("{server}/postgres")).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut admin)
                        .await;
                }
            });
        })
        .join();
    }
}

/// The silo record of `id` as the oracle lists it.
pub async fn silo(run: &Run, id: &str) -> Value {
    run.operator(reqwest::Method::GET, &format!("/silos/{id}"), None)
        .await
}

/// `POST` as an operator.
pub async fn operator_post(run: &Run, path: &str) -> Value {
    run.operator(reqwest::Method::POST, path, Some(json!({})))
        .await
}
