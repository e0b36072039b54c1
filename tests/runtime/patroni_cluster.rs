//! A Patroni cluster of the test's own, as operators run Postgres for high availability: one etcd
//! (its v2 API: Patroni 3.0.2's etcd3 client can hand a thawed old primary the leader key back, a
//! bug fixed in 3.0.3), three Patroni members each running a Postgres server, and HAProxy in front
//! with Patroni's template (`OPTIONS /primary`). Everything on loopback, in a temporary folder,
//! on free ports; as root the members run as the `postgres` user (`setpriv`).
//!
//! Faults, as operators meet them: a switchover (`patronictl`), the primary's postmaster killed,
//! the primary's Postgres frozen (SIGSTOP on the postmaster and every child) and thawed, and etcd
//! stopped and started.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::postgres_server::{free_port, running_as_root};

/// How the primary's commits wait for the standbys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// `synchronous_mode` and `synchronous_mode_strict`: a commit is acknowledged only once a
    /// standby has it, and never by the primary alone.
    Synchronous,
    /// Commits are acknowledged by the primary alone; a failover may lose the log's tail.
    Asynchronous,
}

struct Member {
    name: String,
    pg_port: u16,
    api_port: u16,
    config: PathBuf,
    data: PathBuf,
    patroni: Option<Child>,
}

pub struct PatroniCluster {
    dir: PathBuf,
    as_postgres: bool,
    etcd_port: u16,
    etcd_peer_port: u16,
    etcd: Option<Child>,
    members: Vec<Member>,
    pub haproxy_port: u16,
    haproxy: Option<Child>,
    pub replication: Replication,
}

impl PatroniCluster {
    /// etcd, three members and HAProxy, started; returns once a leader and two streaming
    /// replicas (one synchronous, in that mode) are up and HAProxy routes to the leader alone.
    pub fn start(replication: Replication) -> Self {
        let as_postgres = running_as_root();
        let dir = std::env::temp_dir().join(format!(
            "oracle-patroni-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(dir.join("run")).expect("create the cluster's folder");
        let mut cluster = Self {
            etcd_port: free_port(),
            etcd_peer_port: free_port(),
            etcd: None,
            members: Vec::new(),
            haproxy_port: free_port(),
            haproxy: None,
            replication,
            dir,
            as_postgres,
        };
        for name in ["m1", "m2", "m3"] {
            let member = cluster.member(name);
            std::fs::write(&member.config, cluster.patroni_config(&member))
                .expect("write a member's configuration");
            cluster.members.push(member);
        }
        if as_postgres {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&cluster.dir));
        }
        cluster.start_etcd();
        for i in 0..cluster.members.len() {
            cluster.start_member(i);
            if i == 0 {
                // The first member bootstraps; the others clone it once it leads.
                cluster.until(Duration::from_secs(60), "the first member leads", |c| {
                    c.leader().is_some()
                });
            }
        }
        cluster.start_haproxy();
        cluster.until_healthy(Duration::from_secs(120));
        cluster.psql_on_leader("CREATE DATABASE oracle");
        cluster.until(
            Duration::from_secs(30),
            "the database is there through HAProxy",
            |c| {
                c.psql_within(
                    c.haproxy_port,
                    "SELECT count(*) FROM pg_database WHERE datname = 'oracle'",
                    "2",
                )
                .is_some_and(|n| n == "1")
            },
        );
        cluster
    }

    fn member(&self, name: &str) -> Member {
        Member {
            name: name.to_owned(),
            pg_port: free_port(),
            api_port: free_port(),
            config: self.dir.join(format!("{name}.yml")),
            data: self.dir.join(format!("data-{name}")),
            patroni: None,
        }
    }

    /// The member's configuration: fast failure detection for a test (TTL 10 s, a loop every
    /// second, 4 s of retries), pg_rewind for a former primary, standbys that look for a new
    /// primary every second (`wal_retrieve_retry_interval`: the default 5 s holds a synchronous
    /// primary's commits that long after a failover), and the replication mode. `failsafe_mode`
    /// stays off: in 3.0.2 a primary demotes itself when etcd comes back (fixed upstream later).
    fn patroni_config(&self, member: &Member) -> String {
        let synchronous = self.replication == Replication::Synchronous;
        let run = self.dir.join("run");
        format!(
            "scope: oracle-harness
namespace: /service/
name: {name}
restapi:
  listen: 127.0.0.1:{api}
  connect_address: 127.0.0.1:{api}
etcd:
  hosts: 127.0.0.1:{etcd}
  protocol: http
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    failsafe_mode: false
    synchronous_mode: {synchronous}
    synchronous_mode_strict: {synchronous}
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: 'on'
        wal_log_hints: 'on'
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 128MB
        max_connections: 100
        shared_buffers: 32MB
        fsync: 'off'
        synchronous_commit: 'on'
        wal_retrieve_retry_interval: 1s
  initdb:
    - encoding: UTF8
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {data}
  bin_dir: {bin}
  pgpass: {run}/pgpass.{name}
  authentication:
    superuser:
      username: postgres
    replication:
      username: replicator
      password: replicator
  parameters:
    unix_socket_directories: {run}
  pg_hba:
    - local all all trust
    - host replication all 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
watchdog:
  mode: 'off'
",
            name = member.name,
            api = member.api_port,
            etcd = self.etcd_port,
            pg = member.pg_port,
            data = member.data.display(),
            bin = crate::postgres_server::binaries().display(),
            run = run.display(),
        )
    }

    /// A command of `program`, as the `postgres` user when running as root.
    fn command(&self, program: impl AsRef<Path>) -> Command {
        let mut command = if self.as_postgres {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=postgres",
                "--regid=postgres",
                "--init-groups",
                "--",
            ])
            .arg(program.as_ref());
            c
        } else {
            Command::new(program.as_ref())
        };
        command
            .env("HOME", self.dir.join("run"))
            .env("LC_ALL", "C.UTF-8")
            .current_dir(self.dir.join("run"));
        command
    }

    fn log(&self, name: &str) -> std::fs::File {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{name}.log")))
            .expect("open a log")
    }

    fn start_etcd(&mut self) {
        let peer = format!("http://127.0.0.1:{}", self.etcd_peer_port);
        let client = format!("http://127.0.0.1:{}", self.etcd_port);
        let child = Command::new("etcd")
            .args(["--name", "e1", "--data-dir"])
            .arg(self.dir.join("etcd"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("e1={peer}")])
            .args(["--enable-v2=true", "--log-level", "warn", "--logger", "zap"])
            .stdin(Stdio::null())
            .stdout(self.log("etcd"))
            .stderr(self.log("etcd"))
            .spawn()
            .unwrap_or_else(|e| panic!("start etcd (Debian: etcd-server): {e}"));
        self.etcd = Some(child);
        let keys = format!("{client}/v2/keys/");
        self.until(Duration::from_secs(20), "etcd answers", |_| {
            http_status("GET", &keys) == Some(200)
        });
    }

    fn start_member(&mut self, i: usize) {
        let log = self.log(&format!("patroni-{}", self.members[i].name));
        let child = self
            .command("patroni")
            .arg(&self.members[i].config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start patroni (Debian: patroni): {e}"));
        self.members[i].patroni = Some(child);
    }

    fn start_haproxy(&mut self) {
        let mut servers = String::new();
        for m in &self.members {
            servers.push_str(&format!(
                "    server {} 127.0.0.1:{} maxconn 100 check port {}\n",
                m.name, m.pg_port, m.api_port
            ));
        }
        // Patroni's template (haproxy.cfg in its repository), its check timings included.
        let config = format!(
            "global
    maxconn 300
defaults
    mode tcp
    retries 2
    timeout client 30m
    timeout connect 4s
    timeout server 30m
    timeout check 5s
listen primary
    bind 127.0.0.1:{port}
    option httpchk OPTIONS /primary
    http-check expect status 200
    default-server inter 3s fall 3 rise 2 on-marked-down shutdown-sessions
{servers}",
            port = self.haproxy_port
        );
        let path = self.dir.join("haproxy.cfg");
        std::fs::write(&path, config).expect("write haproxy.cfg");
        let child = Command::new("haproxy")
            .args(["-db", "-f"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(self.log("haproxy"))
            .stderr(self.log("haproxy"))
            .spawn()
            .unwrap_or_else(|e| panic!("start haproxy (Debian: haproxy): {e}"));
        self.haproxy = Some(child);
    }

    /// Polls `check` every 100 ms until it holds, or panics after `limit` with the members' state.
    fn until(&self, limit: Duration, what: &str, check: impl Fn(&Self) -> bool) {
        let started = Instant::now();
        while !check(self) {
            assert!(
                started.elapsed() < limit,
                "{what}: not within {limit:?}; members: {:?}\n{}",
                self.roles(),
                self.logs_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A leader and two replicas streaming from it (one synchronous, in that mode), each member
    /// on the leader's timeline, HAProxy routing to the leader: where a fault may begin.
    pub fn until_healthy(&self, limit: Duration) {
        self.until(limit, "the cluster is healthy", |c| c.healthy());
        // HAProxy's checks (every 3 s, up after 2, down after 3) follow the leader: until then
        // it spreads connections over every server it still takes for up.
        let leader = self.leader().expect("a leader");
        self.until(limit, "HAProxy routes to the leader alone", |c| {
            (0..6).all(|_| {
                c.psql_through_haproxy("SELECT inet_server_port()")
                    .is_some_and(|port| port == c.members[leader].pg_port.to_string())
            })
        });
    }

    fn healthy(&self) -> bool {
        let roles = self.roles();
        let leaders = roles.iter().filter(|r| r.0 == "leader" && r.1 == "running");
        let streaming = roles
            .iter()
            .filter(|r| r.0 != "leader" && matches!(r.1.as_str(), "streaming" | "running"));
        let synchronous = roles.iter().any(|r| r.0 == "sync_standby");
        let timelines: std::collections::BTreeSet<_> = roles.iter().map(|r| r.2).collect();
        leaders.count() == 1
            && streaming.count() == 2
            && timelines.len() == 1
            && (self.replication == Replication::Asynchronous || synchronous)
    }

    /// Each member's role, state and timeline as Patroni's `/cluster` says (empty while no member
    /// answers).
    pub fn roles(&self) -> Vec<(String, String, i64)> {
        for m in &self.members {
            let Some(body) = http_body(&format!("http://127.0.0.1:{}/cluster", m.api_port)) else {
                continue;
            };
            let Ok(cluster) = serde_json::from_str::<serde_json::Value>(&body) else {
                continue;
            };
            return cluster["members"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| {
                    (
                        m["role"].as_str().unwrap_or_default().to_owned(),
                        m["state"].as_str().unwrap_or_default().to_owned(),
                        m["timeline"].as_i64().unwrap_or(0),
                    )
                })
                .collect();
        }
        Vec::new()
    }

    /// The member Patroni's REST API says is the primary (`GET /primary` answers 200).
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().position(|m| {
            http_status("GET", &format!("http://127.0.0.1:{}/primary", m.api_port)) == Some(200)
        })
    }

    /// How many members the cluster has.
    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// Whether `member` commits a write now (a transaction that takes an id, and so waits for a
    /// synchronous standby where there must be one), given a second.
    pub fn commits(&self, member: usize) -> bool {
        self.psql_within(
            self.members[member].pg_port,
            "SELECT txid_current() > 0",
            "1",
        )
        .is_some_and(|r| r == "t")
    }

    /// The oracle's database through HAProxy, asking for a session that takes writes (so that a
    /// connection HAProxy sends to a member that is no longer primary is refused at connect).
    pub fn haproxy_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/oracle?target_session_attrs=read-write",
            self.haproxy_port
        )
    }

    /// The oracle's database at every member, in order, asking for a session that takes writes.
    pub fn host_list_url(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.pg_port))
            .collect();
        format!(
            "postgres://postgres@{}/oracle?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// A planned switchover to the next member (`patronictl switchover`); returns the old leader.
    pub fn switchover(&self) -> usize {
        let leader = self.leader().expect("a leader to switch over from");
        let candidate = (leader + 1) % self.members.len();
        let out = self
            .command("patronictl")
            .arg("-c")
            .arg(&self.members[0].config)
            .args(["switchover", "--leader", &self.members[leader].name])
            .args(["--candidate", &self.members[candidate].name, "--force"])
            .output()
            .expect("run patronictl");
        assert!(
            out.status.success(),
            "patronictl switchover: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        leader
    }

    /// SIGKILL to the leader's postmaster (its backends end with it); returns the leader.
    pub fn kill_primary(&self) -> usize {
        let leader = self.leader().expect("a leader to kill");
        let postmaster = self.postmaster(leader).expect("the leader's postmaster");
        signal(&[postmaster], "KILL");
        leader
    }

    /// SIGSTOP to the leader's postmaster and every process under it, as a paused VM stops them
    /// (its Patroni keeps running, and finds its Postgres not answering); returns the leader and
    /// the processes frozen.
    pub fn freeze_primary(&self) -> (usize, Vec<u32>) {
        let leader = self.leader().expect("a leader to freeze");
        let postmaster = self.postmaster(leader).expect("the leader's postmaster");
        let mut frozen = vec![postmaster];
        frozen.extend(descendants(postmaster));
        signal(&frozen, "STOP");
        (leader, frozen)
    }

    pub fn thaw(&self, processes: &[u32]) {
        signal(processes, "CONT");
    }

    /// SIGSTOP to etcd (it keeps its sockets: clients time out rather than being refused).
    pub fn freeze_etcd(&self) {
        signal(&[self.etcd.as_ref().expect("etcd runs").id()], "STOP");
    }

    pub fn thaw_etcd(&self) {
        signal(&[self.etcd.as_ref().expect("etcd runs").id()], "CONT");
    }

    fn postmaster(&self, member: usize) -> Option<u32> {
        std::fs::read_to_string(self.members[member].data.join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// One value of `sql` on the leader (panics without one).
    fn psql_on_leader(&self, sql: &str) {
        let leader = self.leader().expect("a leader");
        self.psql(self.members[leader].pg_port, sql)
            .unwrap_or_else(|| panic!("{sql} on the leader failed"));
    }

    fn psql_through_haproxy(&self, sql: &str) -> Option<String> {
        self.psql(self.haproxy_port, sql)
    }

    /// The first value `sql` answers on 127.0.0.1:`port`, within 2 s.
    fn psql(&self, port: u16, sql: &str) -> Option<String> {
        self.psql_within(port, sql, "2")
    }

    /// The first value `sql` answers on 127.0.0.1:`port` within `seconds` (a commit waiting for a
    /// standby included: `timeout` ends psql whatever it waits for).
    fn psql_within(&self, port: u16, sql: &str, seconds: &str) -> Option<String> {
        let out = Command::new("timeout")
            .arg(seconds)
            .arg(crate::postgres_server::binaries().join("psql"))
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
            .args(["-d", "postgres", "-XAtq", "-c", sql])
            .env("PGCONNECT_TIMEOUT", seconds)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// The end of every log of the cluster, for a failed assertion.
    pub fn logs_tail(&self) -> String {
        let mut out = String::new();
        for name in ["etcd", "haproxy", "patroni-m1", "patroni-m2", "patroni-m3"] {
            let text =
                std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("--- {name}.log\n"));
            for line in &lines[lines.len().saturating_sub(15)..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        // Thaw anything a failed test left frozen, then stop Patroni (which stops its Postgres),
        // HAProxy and etcd; kill a Postgres that outlived its Patroni.
        if let Some(etcd) = &self.etcd {
            signal(&[etcd.id()], "CONT");
        }
        for i in 0..self.members.len() {
            if let Some(postmaster) = self.postmaster(i) {
                let mut all = vec![postmaster];
                all.extend(descendants(postmaster));
                signal(&all, "CONT");
            }
        }
        for member in &mut self.members {
            if let Some(mut patroni) = member.patroni.take() {
                signal(&[patroni.id()], "TERM");
                let deadline = Instant::now() + Duration::from_secs(15);
                while patroni.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(100));
                }
                let _ = patroni.kill();
                let _ = patroni.wait();
            }
        }
        for i in 0..self.members.len() {
            if let Some(postmaster) = self.postmaster(i) {
                signal(&[postmaster], "KILL");
            }
        }
        for child in [self.haproxy.take(), self.etcd.take()]
            .into_iter()
            .flatten()
        {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() || std::env::var_os("ORACLE_HARNESS_KEEP_LOGS").is_some() {
            eprintln!(
                "the Patroni cluster's folder is kept: {}",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Every process under `pid`, to any depth (from /proc).
fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let child: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let parent = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((child, parent))
        })
        .collect();
    let mut found = Vec::new();
    let mut look = vec![pid];
    while let Some(p) = look.pop() {
        for &(child, parent) in &parents {
            if parent == p {
                found.push(child);
                look.push(child);
            }
        }
    }
    found
}

fn signal(pids: &[u32], signal: &str) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .args(pids.iter().map(u32::to_string))
        .output();
}

fn run(command: &mut Command) {
    let out = command.output().expect("run a command");
    assert!(out.status.success(), "{command:?}: {out:?}");
}

/// The status of a request (`curl`, 1 s at most), `None` when nothing answered.
fn http_status(method: &str, url: &str) -> Option<u16> {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-m",
            "1",
            "-X",
            method,
            url,
        ])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .parse()
        .ok()
        .filter(|&status| status != 0)
}

fn http_body(url: &str) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sf", "-m", "1", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}
