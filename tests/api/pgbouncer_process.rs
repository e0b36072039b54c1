//! A real PgBouncer for tests: Debian's, started as a process of its own (never a shared one) on
//! a free port, in front of the test server, with PgBouncer's defaults but what it needs to run
//! here. Stopped when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A PgBouncer process on a free port, pooling connections to the test server.
pub struct PgBouncer {
    dir: PathBuf,
    port: u16,
    child: Child,
}

impl PgBouncer {
    /// Starts it with `pool_mode` and at most `server_connections` sessions per database (fewer
    /// than a client's pool, so that client connections share sessions); everything else is PgBouncer's default but what it needs to
    /// run here (addresses, trust authentication, its files in a folder of its own). Panics with
    /// what is missing: this test is never skipped.
    pub fn start(server_address: &str, pool_mode: &str, server_connections: u32) -> Self {
        let binary = PathBuf::from("/usr/sbin/pgbouncer");
        assert!(
            binary.exists(),
            "\n\nThis test runs PgBouncer and found none at /usr/sbin/pgbouncer: \
             apt-get install pgbouncer\n\n"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir =
            std::env::temp_dir().join(format!("oracle-pgbouncer-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (host, server_port) = server_address.rsplit_once(':').map_or_else(
            || ("127.0.0.1".to_owned(), "5432".to_owned()),
            |(h, p)| (h.to_owned(), p.to_owned()),
        );
        std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n").unwrap();
        std::fs::write(
            dir.join("pgbouncer.ini"),
            format!(
                "[databases]\n* = host={host} port={server_port}\n\n[pgbouncer]\n\
                 listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
                 auth_type = trust\nauth_file = {users}\npool_mode = {pool_mode}\n\
                 default_pool_size = {server_connections}\n{prepared}\
                 logfile = {log}\npidfile = {pid}\n",
                prepared = without_prepared_statements(&binary),
                users = dir.join("users.txt").display(),
                log = dir.join("pgbouncer.log").display(),
                pid = dir.join("pgbouncer.pid").display(),
            ),
        )
        .unwrap();
        // PgBouncer refuses to run as root.
        let root = String::from_utf8_lossy(&Command::new("id").arg("-u").output().unwrap().stdout)
            .trim()
            == "0";
        let mut command = if root {
            Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status()
                .unwrap();
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&binary);
            command
        } else {
            Command::new(&binary)
        };
        let child = command
            .arg(dir.join("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pgbouncer");
        let bouncer = Self { dir, port, child };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "pgbouncer did not listen: {}",
                bouncer.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        bouncer
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// What it logged so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

/// PgBouncer 1.21 and later can carry named statements across sessions (`max_prepared_statements`,
/// on by default in newer versions): turned off, so that the tests see what a pooler without it
/// does to a client that names statements (Debian 12's 1.18 has no such setting).
fn without_prepared_statements(binary: &std::path::Path) -> &'static str {
    let out = Command::new(binary).arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let version: Vec<u32> = text
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .split('.')
        .filter_map(|part| part.parse().ok())
        .collect();
    if version.as_slice() >= [1, 21].as_slice() {
        "max_prepared_statements = 0\n"
    } else {
        ""
    }
}

impl Drop for PgBouncer {
    /// Stops PgBouncer itself (as root, `runuser` is the child and would leave it running).
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("pgbouncer.pid")) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
