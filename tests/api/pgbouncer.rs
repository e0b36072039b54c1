//! The oracle behind PgBouncer: Debian's, started by the test as a process of its own (never a
//! shared one) in session mode with its default rules for startup parameters, in front of the
//! test's database. Nothing about the oracle's connections may need a pooler configured for it:
//! it connects, migrates, keeps `plan_cache_mode` (set per connection, not as a startup option a
//! pooler drops), and serves heartbeats, placements, lookups, deactivations and policies through
//! it. (Transaction pooling is not supported yet; see docs/CONFIGURATION.md.)

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use placement_oracle::store::postgres::PostgresStore;
use placement_oracle::store::StoreSettings;
use serde_json::json;

use crate::helpers::{Backend, TestApp, TestDatabase, TTL_MS};

/// A PgBouncer process on a free port, pooling connections to the test server.
struct PgBouncer {
    dir: PathBuf,
    port: u16,
    child: Child,
}

impl PgBouncer {
    /// Starts it with `pool_mode`; everything else is PgBouncer's default but what it needs to
    /// run here (addresses, trust authentication, its files in a folder of its own). Panics with
    /// what is missing: this test is never skipped.
    fn start(database: &TestDatabase, pool_mode: &str) -> Self {
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
        let (host, server_port) = database.server_address().rsplit_once(':').map_or_else(
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
                 logfile = {log}\npidfile = {pid}\n",
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

    /// `database` reached through PgBouncer.
    fn url(&self, database: &TestDatabase) -> String {
        database.url_via(self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
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

#[tokio::test]
async fn the_oracle_connects_migrates_and_serves_through_pgbouncer_in_session_mode() {
    let database = TestDatabase::create_empty().await;
    let bouncer = PgBouncer::start(&database, "session");
    let url = bouncer.url(&database);
    let connect = || {
        PostgresStore::connect(
            &url,
            4,
            Duration::from_secs(5),
            StoreSettings::with_ttl(TTL_MS),
        )
    };
    let migrator = connect()
        .await
        .unwrap_or_else(|e| panic!("connecting through pgbouncer: {e}\n{}", bouncer.log()));
    migrator.migrate().await.expect("migrate through pgbouncer");
    let store = connect().await.unwrap();
    assert_eq!(
        store.pending_migrations().await.unwrap(),
        Vec::<String>::new()
    );
    let plan_cache_mode: String = sqlx::query_scalar("SHOW plan_cache_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(plan_cache_mode, "force_generic_plan");

    let app = TestApp::builder(Backend::Postgres)
        .on(store, &database)
        .build()
        .await;
    for silo in ["10.0.0.1:11111@1", "10.0.0.2:11111@1"] {
        app.heartbeat(silo, json!({"cpu_usage": 20.0})).await;
    }
    let grains: Vec<String> = (0..50).map(|i| format!("user/{i}")).collect();
    let batch = app
        .post(
            "/placements/batch",
            json!({"placements": grains.iter().map(|g| json!({"grain": g})).collect::<Vec<_>>()}),
        )
        .await;
    assert_eq!(batch.status, StatusCode::OK, "{}", batch.body);
    for (grain, result) in grains.iter().zip(batch.body["results"].as_array().unwrap()) {
        let placed = &result["placement"];
        let again = app.place(grain).await;
        assert_eq!(
            again["silo"], placed["silo"],
            "{grain} stays where it was placed"
        );
        let found = app.get(&format!("/activations/{grain}")).await;
        assert_eq!(found.status, StatusCode::OK);
        assert_eq!(found.body["epoch"], placed["epoch"]);
    }
    let first = &batch.body["results"][0]["placement"];
    let gone = app
        .send(
            Method::DELETE,
            &app.path(&format!(
                "/activations/user/0?silo={}&epoch={}",
                first["silo"].as_str().unwrap(),
                first["epoch"]
            )),
            None,
        )
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT, "{}", gone.body);
    assert_eq!(
        app.get("/activations/user/0").await.status,
        StatusCode::NOT_FOUND
    );
    let policy = app
        .put_policy(Some("*"), json!({"default_strategy": "activation_count"}))
        .await;
    assert_eq!(policy.status, StatusCode::OK, "{}", policy.body);
    let silos = app.get("/silos").await;
    assert_eq!(silos.body["silos"].as_array().unwrap().len(), 2);
    let ready = app.send(Method::GET, "/readyz", None).await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.body);
}
