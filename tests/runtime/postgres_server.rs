//! A Postgres server of the test's own, which the test may stop, crash and start again: made with
//! the machine's `initdb` into a temporary folder and run with `pg_ctl` on a free port. The server
//! the other tests share is never touched.
//!
//! As root (CI, this project's machines), Postgres refuses to run, so the commands run as the
//! `postgres` user through `runuser`. `PG_BIN_DIR` names the binaries' folder when they are not in
//! `/usr/lib/postgresql/<version>/bin`.

use std::path::PathBuf;
use std::process::Command;

/// How a server is stopped: `Fast` ends every session with 57P01 (a planned restart); `Immediate`
/// is a crash (no goodbye; crash recovery at the next start).
#[derive(Debug, Clone, Copy)]
pub enum StopMode {
    Fast,
    Immediate,
}

impl StopMode {
    fn as_arg(self) -> &'static str {
        match self {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        }
    }
}

pub struct OwnPostgres {
    dir: PathBuf,
    bin: PathBuf,
    pub port: u16,
    as_postgres: bool,
}

impl OwnPostgres {
    /// Creates a cluster in a new temporary folder and starts it. Panics with what is missing:
    /// these tests are never skipped.
    pub fn start() -> Self {
        let server = Self::new_folder();
        run(server.command("initdb").arg("-D").arg(server.data()).args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        ]));
        server.start_again();
        server
    }

    /// A streaming standby of `primary` (asynchronous), made with `pg_basebackup` and started.
    pub fn standby_of(primary: &OwnPostgres) -> Self {
        let server = Self::new_folder();
        run(server
            .command("pg_basebackup")
            .args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
            .args(["-U", "postgres", "-X", "stream", "-R", "--no-sync", "-D"])
            .arg(server.data()));
        server.start_again();
        server
    }

    /// Promotes this standby and waits until it takes writes.
    pub fn promote(&self) {
        run(self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-w", "-t", "60", "promote"]));
    }

    /// The connection string of `database` on this server.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Starts the (stopped) server and waits until it accepts connections.
    pub fn start_again(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.dir.display()
        );
        run(self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-o")
            .arg(options)
            .arg("-l")
            .arg(self.dir.join("server.log"))
            .args(["-w", "-t", "60", "start"]));
    }

    /// Stops the server the way `mode` says and waits until it is down.
    pub fn stop(&self, mode: StopMode) {
        run(self.command("pg_ctl").arg("-D").arg(self.data()).args([
            "-m",
            mode.as_arg(),
            "-w",
            "-t",
            "60",
            "stop",
        ]));
    }

    /// A server not yet made: its folder (owned by the user the server runs as) and a port.
    fn new_folder() -> Self {
        let bin = binaries();
        let as_postgres = running_as_root();
        let dir = std::env::temp_dir().join(format!(
            "oracle-harness-pg-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("create the server's folder");
        if as_postgres {
            run(Command::new("chown").arg("postgres:postgres").arg(&dir));
        }
        Self {
            port: free_port(),
            dir,
            bin,
            as_postgres,
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        }
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The folder of `initdb` and `pg_ctl`: `PG_BIN_DIR`, or the newest `/usr/lib/postgresql/*/bin`.
pub fn binaries() -> PathBuf {
    if let Ok(dir) = std::env::var("PG_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!(
            "\n\nThe runtime harness starts and stops a Postgres server of its own and found no \
             initdb under /usr/lib/postgresql/*/bin. Install the server binaries (Debian: \
             postgresql-15) or set PG_BIN_DIR to the folder holding initdb and pg_ctl.\n\n"
        )
    })
}

/// Whether this process runs as root (and Postgres must run as another user).
pub fn running_as_root() -> bool {
    let out = Command::new("id").arg("-u").output().expect("run id -u");
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

/// A port nothing listens on now (the kernel's choice for a socket bound to port 0).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().unwrap().port()
}

fn run(command: &mut Command) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("could not run {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
