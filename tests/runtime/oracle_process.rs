//! Oracle replicas as real processes of the built binary: started with the production defaults
//! but a short TTL, killed with SIGKILL (no goodbye, its leases left to run out), and started
//! again on the same port.
//!
//! The binary is cargo's own for this package's tests; other packages' tests that include this
//! file (integrations/rio-rs) name it in `ORACLE_BINARY`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The silo TTL every harness cluster uses.
pub const SILO_TTL_MS: u64 = 3_000;
/// How long a replica's hold on a cluster's background work lasts without renewal.
const CLUSTER_LEASE_TTL_MS: u64 = 2_000;

pub struct OracleProcess {
    pub name: String,
    database_url: String,
    /// Settings beyond the harness's own.
    extra_env: Vec<(String, String)>,
    pub port: u16,
    log: PathBuf,
    child: Option<Child>,
}

impl OracleProcess {
    /// Starts replica `name` on `database_url` and waits until it is ready.
    pub async fn start(name: &str, database_url: &str) -> Self {
        Self::start_with(name, database_url, &[]).await
    }

    /// Starts replica `name` with `extra_env` set too, and waits until it is ready.
    pub async fn start_with(name: &str, database_url: &str, extra_env: &[(&str, &str)]) -> Self {
        let log = std::env::temp_dir().join(format!(
            "oracle-harness-{}-{name}-{}.log",
            std::process::id(),
            super::postgres_server::free_port()
        ));
        let mut replica = Self {
            name: name.to_owned(),
            database_url: database_url.to_owned(),
            extra_env: extra_env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            port: super::postgres_server::free_port(),
            log,
            child: None,
        };
        replica.spawn();
        replica.wait_ready().await;
        replica
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the replica's log");
        let child = Command::new(binary())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DATABASE_URL", &self.database_url)
            .env("ORACLE_LISTEN", format!("127.0.0.1:{}", self.port))
            .env("ORACLE_REPLICA_ID", &self.name)
            .env("ORACLE_SILO_TTL_MS", SILO_TTL_MS.to_string())
            .env("ORACLE_LEASE_TTL_MS", CLUSTER_LEASE_TTL_MS.to_string())
            .env("ORACLE_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .envs(self.extra_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the oracle binary");
        self.child = Some(child);
    }

    /// Waits until `/readyz` answers 200 (the store reached, migrations applied).
    async fn wait_ready(&mut self) {
        let client = reqwest::Client::new();
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!(
                    "replica {} exited with {status} at start:\n{}",
                    self.name,
                    self.log_text()
                );
            }
            let ready = client
                .get(format!("{}/readyz", self.base()))
                .timeout(Duration::from_secs(1))
                .send()
                .await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "replica {} was not ready within 60 s:\n{}",
                self.name,
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: the process ends without finishing anything or giving up its leases.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: the process stops running, as a paused VM or a debugger stops it, while its
    /// kernel still accepts connections and queues their requests.
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// SIGCONT: the frozen process runs again, its queued requests first.
    pub fn thaw(&self) {
        self.signal("CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("the replica runs").id();
        let sent = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// Starts the killed replica again on its port.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "kill the replica first");
        self.spawn();
        self.wait_ready().await;
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The oracle's binary: the one cargo built for these tests, or `ORACLE_BINARY`.
fn binary() -> String {
    option_env!("CARGO_BIN_EXE_placement-oracle")
        .map(str::to_owned)
        .or_else(|| std::env::var("ORACLE_BINARY").ok())
        .expect("ORACLE_BINARY must name the oracle's binary (e.g. target/debug/placement-oracle)")
}

impl Drop for OracleProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() || std::env::var_os("ORACLE_HARNESS_KEEP_LOGS").is_some() {
            eprintln!(
                "replica {}'s log is kept: {}",
                self.name,
                self.log.display()
            );
        } else {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}
