//! Building the app in-process against either store, with an injected clock.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use placement_oracle::clock::ManualClock;
use placement_oracle::clock::MonotonicClock;
use placement_oracle::cluster::ClusterName;
use placement_oracle::oracle::{AdminCredentials, Oracle, OracleSettings, Replica};
use placement_oracle::placement::webhook_hosts::WebhookHosts;
use placement_oracle::rate_limit::{RateLimits, Rates};
use placement_oracle::secret::Secret;
use placement_oracle::store::memory::MemoryStore;
use placement_oracle::store::postgres::{Pooling, PostgresStore};
use placement_oracle::store::stalls::StallWatch;
use placement_oracle::store::{Due, Store, StoreSettings, StoreTime};
use placement_oracle::{app, telemetry, AppState, Limits};
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection};
use tower::ServiceExt;

use crate::pgbouncer_process::PgBouncer;

/// The admin token of [`TestApp::secured`] apps.
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef";
/// The silo TTL every test app uses.
pub const TTL_MS: i64 = 10_000;
/// How long a test replica's cluster lease lasts.
pub const LEASE_TTL_MS: i64 = 2_000;
/// Where every test clock starts (2023-11-14T22:13:20Z).
pub const START_MS: i64 = 1_700_000_000_000;
/// Requests in flight before a test app sheds load: production's default.
pub const MAX_CONCURRENT_REQUESTS: usize = 1_024;
/// Which store an app runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Postgres,
    /// Postgres through a real PgBouncer in transaction mode, with fewer server sessions than
    /// the store has connections (`ORACLE_DB_TRANSACTION_POOLING`).
    PgBouncer,
    /// Postgres with every cluster table hash-partitioned by its cluster
    /// ([`crate::partitioned`]).
    Partitioned,
}

/// One oracle replica, driven in-process, working in one cluster.
#[derive(Clone)]
pub struct TestApp {
    pub router: Router,
    pub oracle: Oracle,
    /// The store under the oracle: what a test reads or writes directly (as another replica
    /// would), and what a sibling replica shares.
    pub store: Arc<dyn Store>,
    pub clock: ManualClock,
    /// The clock of the replica's own process, which its store's [`StallWatch`] looks at: it
    /// stands still (looks are never far apart), so the replica never stalls unless a test moves
    /// it to freeze the replica. Only apps built with a new store have one that matters.
    pub process: ManualClock,
    pub cluster: String,
    /// Keeps a Postgres test's database until the last replica using it is dropped.
    pub _database: Option<Arc<TestDatabase>>,
}

/// A fresh cluster name per test, so tests sharing a database never see each other.
pub fn unique_cluster() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos() % 1_000_000_000_000;
    format!(
        "t{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The server URL of the test Postgres (without a database name).
fn server_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned())
        .trim_end_matches('/')
        .to_owned()
}

/// Test databases are named `po_test_<pid>_<n>`, so leftovers of a crashed run can be told apart.
const DATABASE_PREFIX: &str = "po_test_";

/// A database of its own for one test (like `#[sqlx::test]`): nothing another test does — not even
/// a membership sweep, which spans every cluster — can reach it. Dropped with the last reference.
pub struct TestDatabase {
    pub name: String,
    server: String,
    /// The transaction-mode PgBouncer the store reaches it through, for [`Backend::PgBouncer`].
    bouncer: Option<PgBouncer>,
}

impl TestDatabase {
    /// Creates an empty database. Panics with instructions when no Postgres is reachable: these
    /// tests never pass by skipping.
    pub async fn create_empty() -> Arc<Self> {
        Arc::new(Self::new_database().await)
    }

    async fn new_database() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let server = server_url();
        let mut admin = admin_connection(&server).await;
        drop_leftovers(&mut admin).await;
        let name = format!(
            "{DATABASE_PREFIX}{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        sqlx::query(&format!("CREATE DATABASE {name} TEMPLATE template0"))
            .execute(&mut admin)
            .await
            .expect("create a test database");
        Self {
            name,
            server,
            bouncer: None,
        }
    }

    /// Creates a database with the oracle's schema. (Migrated before any store reaches it: the
    /// store's readiness probe writes to a table of that schema.)
    pub async fn create() -> Arc<Self> {
        let database = Self::new_database().await;
        database.migrate().await;
        Arc::new(database)
    }

    /// Creates a database with the oracle's schema (migrated directly, as a transaction-mode
    /// pooler requires) that stores reach through a PgBouncer of its own in transaction mode.
    pub async fn create_behind_pgbouncer() -> Arc<Self> {
        let mut database = Self::new_database().await;
        database.migrate().await;
        database.bouncer = Some(PgBouncer::start(
            &database.server_address(),
            "transaction",
            2,
        ));
        Arc::new(database)
    }

    /// Makes every new session of the database read-only (`default_transaction_read_only`), as
    /// a primary set read-only is, or takes that back.
    pub async fn set_read_only(&self, read_only: bool) {
        let mut admin = admin_connection(&self.server).await;
        sqlx::query(&format!(
            "ALTER DATABASE {} SET default_transaction_read_only = {}",
            self.name,
            if read_only { "on" } else { "off" }
        ))
        .execute(&mut admin)
        .await
        .expect("set the database read-only");
    }

    /// A migrated database for `backend`, none for the embedded store.
    pub async fn for_backend(backend: Backend) -> Option<Arc<Self>> {
        match backend {
            Backend::Memory => None,
            Backend::Postgres => Some(Self::create().await),
            Backend::PgBouncer => Some(Self::create_behind_pgbouncer().await),
            Backend::Partitioned => Some(Self::create_partitioned().await),
        }
    }

    /// Creates a database with the oracle's schema, its cluster tables then partitioned by their
    /// cluster ([`crate::partitioned::partition`]).
    pub async fn create_partitioned() -> Arc<Self> {
        let database = Self::new_database().await;
        database.migrate().await;
        let mut connection = sqlx::PgConnection::connect(&database.url())
            .await
            .expect("connect to the test database");
        crate::partitioned::partition(&mut connection).await;
        sqlx::query(&format!(
            "ALTER DATABASE {} SET default_transaction_isolation TO 'serializable'",
            database.name
        ))
        .execute(&mut connection)
        .await
        .expect("make transactions serializable");
        Arc::new(database)
    }

    async fn migrate(&self) {
        let clock = ManualClock::starting_at(START_MS);
        let direct = PgPoolOptions::new()
            .max_connections(1)
            .connect(&self.url())
            .await
            .expect("connect to the test database");
        store_on(
            direct,
            Pooling::Session,
            StoreSettings::with_ttl(TTL_MS),
            Some(&clock),
            never_stalls(),
        )
        .migrate()
        .await
        .expect("apply migrations");
    }

    /// How stores reach this database's sessions.
    fn pooling(&self) -> Pooling {
        match self.bouncer {
            Some(_) => Pooling::Transaction,
            None => Pooling::Session,
        }
    }

    pub fn url(&self) -> String {
        format!("{}/{}", self.server, self.name)
    }

    /// The same database reached through `127.0.0.1:{port}` (a proxy in front of the server).
    pub fn url_via(&self, port: u16) -> String {
        let (scheme, rest) = self.server.split_once("://").unwrap();
        let user = rest.rsplit_once('@').map_or("", |(user, _)| user);
        let at = if user.is_empty() { "" } else { "@" };
        format!("{scheme}://{user}{at}127.0.0.1:{port}/{}", self.name)
    }

    /// The server's `host:port`.
    pub fn server_address(&self) -> String {
        let rest = self.server.split_once("://").unwrap().1;
        rest.rsplit_once('@')
            .map_or(rest, |(_, host)| host)
            .to_owned()
    }

    /// A store with its own pool on this database: one per oracle replica. Its time is `clock`
    /// (the test's stand-in for the database clock: replicas of one test share it), which also
    /// measures how long the database has been reachable.
    pub async fn store(&self, pool_size: u32, clock: &ManualClock) -> PostgresStore {
        self.store_with(pool_size, clock, StoreSettings::with_ttl(TTL_MS))
            .await
    }

    /// [`Self::store`] with other settings.
    pub async fn store_with(
        &self,
        pool_size: u32,
        clock: &ManualClock,
        settings: StoreSettings,
    ) -> PostgresStore {
        reached(store_on(
            self.pool(pool_size).await,
            self.pooling(),
            settings,
            Some(clock),
            never_stalls(),
        ))
        .await
    }

    /// A store on the database's own clock, as in production.
    pub async fn store_on_database_clock(
        &self,
        pool_size: u32,
        settings: StoreSettings,
    ) -> PostgresStore {
        reached(store_on(
            self.pool(pool_size).await,
            self.pooling(),
            settings,
            None,
            never_stalls(),
        ))
        .await
    }

    /// A pool of `pool_size` connections, through the PgBouncer if there is one (sending no
    /// startup parameter it refuses and caching no statement, as the store's own connect does
    /// there; only the store's executor runs statements on it, unnamed).
    async fn pool(&self, pool_size: u32) -> sqlx::PgPool {
        let options = match &self.bouncer {
            None => PgConnectOptions::from_str(&self.url()).unwrap(),
            Some(bouncer) => PgConnectOptions::from_str(&self.url_via(bouncer.port()))
                .unwrap()
                .extra_float_digits(None)
                .statement_cache_capacity(0),
        };
        PgPoolOptions::new()
            .max_connections(pool_size)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .unwrap_or_else(|e| panic!("connect to the test database: {e}"))
    }

    /// A store reaching the database through the proxy on `port`, with a short connection wait (as
    /// production's default) so that an outage is noticed quickly; its time is `clock`.
    pub async fn store_via(&self, port: u16, clock: &ManualClock) -> PostgresStore {
        reached(store_on(
            self.pool_via(port).await,
            Pooling::Session,
            StoreSettings::with_ttl(TTL_MS),
            Some(clock),
            never_stalls(),
        ))
        .await
    }

    /// A store reaching the database through the proxy on `port`, on the database's clock.
    pub async fn store_via_on_database_clock(
        &self,
        port: u16,
        settings: StoreSettings,
    ) -> PostgresStore {
        reached(store_on(
            self.pool_via(port).await,
            Pooling::Session,
            settings,
            None,
            never_stalls(),
        ))
        .await
    }

    async fn pool_via(&self, port: u16) -> sqlx::PgPool {
        PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_millis(500))
            .test_before_acquire(false)
            .connect(&self.url_via(port))
            .await
            .expect("connect through the proxy")
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        // Drop runs inside a test's runtime, which cannot be blocked on; a thread of its own can.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let mut admin = admin_connection(&server).await;
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut admin)
                    .await;
            });
        });
        let _ = dropped.join();
    }
}

async fn admin_connection(server: &str) -> PgConnection {
    PgConnection::connect(&format!("{server}/postgres"))
        .await
        .unwrap_or_else(|error| {
            panic!(
                "\n\nThe Postgres tests need a server and none answered at {server} ({error}).\n\
                 Start one (`sudo scripts/prerequisites.sh` installs and starts it on Debian, or \
                 `docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:16`),\n\
                 or point TEST_DATABASE_URL at a server whose user may create databases \
                 (e.g. postgres://postgres@127.0.0.1:5432).\n\n"
            )
        })
}

/// Drops test databases left behind by test processes that no longer run.
async fn drop_leftovers(admin: &mut PgConnection) {
    let names: Vec<String> =
        sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE $1")
            .bind(format!("{DATABASE_PREFIX}%"))
            .fetch_all(&mut *admin)
            .await
            .unwrap_or_default();
    for name in names {
        let pid = name[DATABASE_PREFIX.len()..]
            .split('_')
            .next()
            .unwrap_or_default();
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut *admin)
                .await;
        }
    }
}

/// A Postgres store on `pool`: its time is `clock` (a test's stand-in for the database's clock,
/// also measuring how long the database has been reachable), or the database's own without one.
fn store_on(
    pool: sqlx::PgPool,
    pooling: Pooling,
    settings: StoreSettings,
    clock: Option<&ManualClock>,
    stalls: Arc<StallWatch>,
) -> PostgresStore {
    match clock {
        Some(clock) => PostgresStore::from_pool(
            pool,
            pooling,
            settings,
            StoreTime::Clock(Arc::new(clock.clone())),
            Arc::new(clock.clone()),
            stalls,
        ),
        None => PostgresStore::from_pool(
            pool,
            pooling,
            settings,
            StoreTime::Database,
            Arc::new(MonotonicClock::default()),
            stalls,
        ),
    }
}

/// A replica process that never stalls (its watch's clock stands still): what every test store
/// runs on unless the test stages a stall, so that no test judges by how the machine ran it.
pub fn never_stalls() -> Arc<StallWatch> {
    StallWatch::on(Arc::new(ManualClock::starting_at(0)))
}

/// `store` once it has reached its database: as a replica whose sweeper has run since it started.
/// (A store that never reached its database judges no silence at all: it did not see it.)
async fn reached(store: PostgresStore) -> PostgresStore {
    // A read through the circuit, not `ping`: the readiness answer it leaves would stand for a
    // moment, and tests that break the store right after must see `/readyz` find out.
    store.stats().await.expect("the test database answers");
    store
}

/// A store given to a builder, with the database (if any) it must keep alive.
type GivenStore = (Arc<dyn Store>, Option<Arc<TestDatabase>>);

/// How a [`TestApp`] is made: every test app comes from [`TestApp::builder`] (or its shorthand
/// [`TestApp::new`]), or from [`TestApp::sibling`] for another replica on the same store.
pub struct AppBuilder {
    backend: Backend,
    /// A store (and the database it keeps alive) to run on instead of a new one.
    store: Option<GivenStore>,
    store_settings: StoreSettings,
    cluster: Option<String>,
    clock: Option<ManualClock>,
    seed: u64,
    limits: Limits,
    rates: Rates,
    oracle: OracleSettings,
}

impl AppBuilder {
    /// Runs on `store` of `database` (a Postgres store a test made itself: through a proxy, on the
    /// database's clock, with a pool of its own).
    pub fn on(self, store: PostgresStore, database: &Arc<TestDatabase>) -> Self {
        self.on_shared(Arc::new(store), database)
    }

    /// On `store` (as `open_store` returns it), whose database is `database`.
    pub fn on_shared(mut self, store: Arc<dyn Store>, database: &Arc<TestDatabase>) -> Self {
        self.store = Some((store, Some(database.clone())));
        self
    }

    /// A new store with these settings (limits, default TTL).
    pub fn store_settings(mut self, settings: StoreSettings) -> Self {
        self.store_settings = settings;
        self
    }

    /// Works in `cluster` (a fresh name by default).
    pub fn cluster(mut self, cluster: impl Into<String>) -> Self {
        self.cluster = Some(cluster.into());
        self
    }

    /// The store's clock (also what rate limits measure): what the test moves.
    pub fn clock(mut self, clock: ManualClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Seeds the replica's random decisions; also its name in cluster leases (`replica-<seed>`).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Answers every request within `timeout`.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.limits.request_timeout = timeout;
        self
    }

    pub fn body_limit_bytes(mut self, bytes: usize) -> Self {
        self.limits.body_limit_bytes = bytes;
        self
    }

    pub fn rates(mut self, rates: Rates) -> Self {
        self.rates = rates;
        self
    }

    /// Lets webhooks call only `hosts` (as configured with an admin token).
    pub fn webhook_hosts(mut self, hosts: WebhookHosts) -> Self {
        self.oracle.webhook_hosts = hosts;
        self
    }

    /// Asks every cluster route for a credential: [`ADMIN_TOKEN`] or a key it issued, trusting a
    /// key it looked up for `key_ttl`.
    pub fn credentials(self, key_ttl: Duration) -> Self {
        self.admin(AdminCredentials {
            admin_token: Secret::new(ADMIN_TOKEN),
            key_hash_secret: None,
            key_cache_ttl: key_ttl,
        })
    }

    /// Asks for credentials as `admin` says.
    pub fn admin(mut self, admin: AdminCredentials) -> Self {
        self.oracle.credentials = Some(admin);
        self
    }

    pub async fn build(self) -> TestApp {
        let clock = self
            .clock
            .unwrap_or_else(|| ManualClock::starting_at(START_MS));
        let process = ManualClock::starting_at(0);
        let stalls = StallWatch::on(Arc::new(process.clone()));
        let (store, database): (Arc<dyn Store>, _) = match (self.store, self.backend) {
            (Some(given), _) => given,
            (None, Backend::Memory) => (
                Arc::new(MemoryStore::new(
                    self.store_settings,
                    Arc::new(clock.clone()),
                    stalls,
                )),
                None,
            ),
            (None, Backend::Postgres | Backend::PgBouncer | Backend::Partitioned) => {
                let database = TestDatabase::for_backend(self.backend).await.unwrap();
                let pool = database.pool(4).await;
                let store = reached(store_on(
                    pool,
                    database.pooling(),
                    self.store_settings,
                    Some(&clock),
                    stalls,
                ))
                .await;
                (Arc::new(store), Some(database))
            }
        };
        // Each replica of a test has a name of its own in cluster leases (its seed), and a lease
        // of two seconds of the test's clock.
        let settings = OracleSettings {
            seed: Some(self.seed),
            replica: Replica {
                id: format!("replica-{}", self.seed),
                lease_ttl_ms: LEASE_TTL_MS,
            },
            ..self.oracle
        };
        let oracle = Oracle::new(store.clone(), settings);
        let rate_limits = RateLimits::new(self.rates, 10_000, Arc::new(clock.clone()));
        let state = AppState {
            oracle: Arc::new(oracle.clone()),
            metrics: telemetry::metrics_handle(),
            rate_limits: Arc::new(rate_limits),
        };
        TestApp {
            router: app(state, self.limits),
            oracle,
            store,
            clock,
            process,
            cluster: self.cluster.unwrap_or_else(unique_cluster),
            _database: database,
        }
    }
}

/// An embedded store on `clock`.
/// What is due in `cluster` now, its silos looked at whatever an earlier look said (the look
/// itself left out: nothing due is `Due::default()`).
pub async fn due_now(store: &dyn Store, cluster: &ClusterName) -> Due {
    let mut due = store.due(&[(cluster.clone(), None)]).await.unwrap();
    due.remove(cluster).map_or_else(Due::default, |due| Due {
        looked: None,
        ..due
    })
}

pub fn memory_store(clock: &ManualClock) -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new(
        StoreSettings::with_ttl(TTL_MS),
        Arc::new(clock.clone()),
        never_stalls(),
    ))
}

impl TestApp {
    /// A builder with the defaults: a new store of `backend` on a clock at [`START_MS`] with the
    /// TTL [`TTL_MS`], a fresh cluster, seed 42, production's limits and rates, open mode.
    pub fn builder(backend: Backend) -> AppBuilder {
        AppBuilder {
            backend,
            store: None,
            store_settings: StoreSettings::with_ttl(TTL_MS),
            cluster: None,
            clock: None,
            seed: 42,
            limits: Limits {
                request_timeout: Duration::from_secs(30),
                body_limit_bytes: 1 << 20,
                max_concurrent_requests: MAX_CONCURRENT_REQUESTS,
                // A fixed limit: in-process tests of other things must not be shed because a
                // debug build on a busy machine answered slowly (`limits.rs` tests the moving one).
                admission_target: Duration::ZERO,
            },
            rates: Rates::DEFAULT,
            oracle: OracleSettings::default(),
        }
    }

    /// An app with the defaults.
    pub async fn new(backend: Backend) -> Self {
        Self::builder(backend).build().await
    }

    /// A builder for another replica on this app's store, in its cluster, on its clock (seed 7):
    /// the same service configured otherwise, or a second replica.
    pub fn sibling(&self) -> AppBuilder {
        let mut builder = Self::builder(Backend::Memory)
            .cluster(self.cluster.clone())
            .clock(self.clock.clone())
            .seed(7);
        builder.store = Some((self.store.clone(), self._database.clone()));
        builder
    }

    /// Two replicas (seeds 1 and 2, each with a pool of its own) on one fresh Postgres database,
    /// working in one new cluster on a shared manual clock: the database, A and B.
    pub async fn two_replicas() -> (Arc<TestDatabase>, Self, Self) {
        let database = TestDatabase::create().await;
        let clock = ManualClock::starting_at(START_MS);
        let cluster = unique_cluster();
        let mut replicas = Vec::new();
        for seed in [1, 2] {
            let replica = Self::builder(Backend::Postgres)
                .on(database.store(8, &clock).await, &database)
                .cluster(cluster.clone())
                .clock(clock.clone())
                .seed(seed)
                .build()
                .await;
            replicas.push(replica);
        }
        let b = replicas.pop().unwrap();
        let a = replicas.pop().unwrap();
        (database, a, b)
    }

    /// Sends a request with `Authorization: Bearer <credential>` when one is given.
    pub async fn send_as(
        &self,
        credential: Option<&str>,
        method: Method,
        uri: &str,
        body: Option<Value>,
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(credential) = credential {
            request = request.header(header::AUTHORIZATION, format!("Bearer {credential}"));
        }
        let body = match body {
            Some(value) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Body::from(value.to_string())
            }
            None => Body::empty(),
        };
        self.send_request(request.body(body).unwrap()).await
    }

    /// Issues a key of `cluster` with `scopes` as the admin; returns (id, key).
    pub async fn issue_key(&self, cluster: &str, scopes: &[&str]) -> (String, String) {
        let reply = self
            .send_as(
                Some(ADMIN_TOKEN),
                Method::POST,
                &format!("/v1/clusters/{cluster}/keys"),
                Some(json!({"scopes": scopes, "label": "test"})),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
        (
            reply.body["id"].as_str().unwrap().to_owned(),
            reply.body["key"].as_str().unwrap().to_owned(),
        )
    }

    /// The value of one exported metric series (`name{labels}` exactly as `/metrics` prints it),
    /// 0 when absent. The recorder is the process's, shared by every test: compare a value before
    /// and after, never with a constant.
    pub async fn metric(&self, series: &str) -> f64 {
        let reply = self.send(Method::GET, "/metrics", None).await;
        let text = reply.body.as_str().unwrap_or_default().to_owned();
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }

    /// `/v1/clusters/{cluster}{rest}`.
    pub fn path(&self, rest: &str) -> String {
        format!("/v1/clusters/{}{rest}", self.cluster)
    }

    /// Sends a request; the body, when given, goes as JSON.
    pub async fn send(&self, method: Method, uri: &str, body: Option<Value>) -> Reply {
        let mut request = Request::builder().method(method).uri(uri);
        let body = match body {
            Some(value) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Body::from(value.to_string())
            }
            None => Body::empty(),
        };
        self.send_request(request.body(body).unwrap()).await
    }

    pub async fn send_request(&self, request: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, rest: &str) -> Reply {
        self.send(Method::GET, &self.path(rest), None).await
    }

    pub async fn post(&self, rest: &str, body: Value) -> Reply {
        self.send(Method::POST, &self.path(rest), Some(body)).await
    }

    pub async fn delete(&self, rest: &str) -> Reply {
        self.send(Method::DELETE, &self.path(rest), None).await
    }

    /// A heartbeat for `silo` with `fields` merged in; asserts it was accepted.
    pub async fn heartbeat(&self, silo: &str, fields: Value) -> Value {
        let reply = self.try_heartbeat(silo, fields).await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "heartbeat of {silo}: {}",
            reply.body
        );
        reply.body
    }

    pub async fn try_heartbeat(&self, silo: &str, fields: Value) -> Reply {
        let mut body = json!({ "silo": silo });
        if let Value::Object(extra) = fields {
            body.as_object_mut().unwrap().extend(extra);
        }
        self.post("/heartbeats", body).await
    }

    /// `PUT …/policy` with `If-Match` when given.
    pub async fn put_policy(&self, if_match: Option<&str>, policy: Value) -> Reply {
        let mut request = Request::builder()
            .method(Method::PUT)
            .uri(self.path("/policy"))
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(if_match) = if_match {
            request = request.header(header::IF_MATCH, if_match);
        }
        self.send_request(request.body(Body::from(policy.to_string())).unwrap())
            .await
    }

    /// This app's name in cluster leases.
    pub fn oracle_replica(&self) -> String {
        self.oracle.movers.replica().id.clone()
    }

    /// Places one grain; asserts success and returns the answer.
    pub async fn place(&self, grain: &str) -> Value {
        let reply = self.post("/placements", json!({ "grain": grain })).await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "placing {grain}: {}",
            reply.body
        );
        reply.body
    }
}

/// A response, its body parsed as JSON where it is JSON.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Reply {
    /// Asserts a problem+json answer with this status and returns the problem.
    pub fn problem(&self, status: StatusCode) -> &Value {
        assert_eq!(self.status, status, "body: {}", self.body);
        assert_eq!(
            self.headers
                .get(header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap()),
            Some("application/problem+json"),
            "body: {}",
            self.body
        );
        assert_eq!(self.body["status"], status.as_u16(), "body: {}", self.body);
        assert!(self.body["type"]
            .as_str()
            .unwrap()
            .starts_with("urn:placement-oracle:problem:"));
        &self.body
    }

    /// The fields a 422 problem names.
    pub fn invalid_fields(&self) -> Vec<String> {
        self.problem(StatusCode::UNPROCESSABLE_ENTITY)["errors"]
            .as_array()
            .expect("a 422 problem lists its errors")
            .iter()
            .map(|e| e["field"].as_str().unwrap().to_owned())
            .collect()
    }
}
