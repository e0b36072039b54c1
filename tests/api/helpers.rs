//! Building the app in-process against either store, with an injected clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use placement_oracle::clock::ManualClock;
use placement_oracle::clock::MonotonicClock;
use placement_oracle::config::Secret;
use placement_oracle::oracle::{Credentials, Oracle, Replica};
use placement_oracle::placement::webhook_hosts::WebhookHosts;
use placement_oracle::rate_limit::{RateLimits, Rates};
use placement_oracle::store::memory::MemoryStore;
use placement_oracle::store::postgres::PostgresStore;
use placement_oracle::store::{Store, StoreSettings, StoreTime};
use placement_oracle::{app, telemetry, AppState, Limits};
use serde_json::{json, Value};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};
use tower::ServiceExt;

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
}

/// One oracle replica, driven in-process, working in one cluster.
#[derive(Clone)]
pub struct TestApp {
    pub router: Router,
    pub oracle: Arc<Oracle>,
    pub clock: ManualClock,
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
}

impl TestDatabase {
    /// Creates an empty database. Panics with instructions when no Postgres is reachable: these
    /// tests never pass by skipping.
    pub async fn create_empty() -> Arc<Self> {
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
        Arc::new(Self { name, server })
    }

    /// Creates a database with the oracle's schema.
    pub async fn create() -> Arc<Self> {
        let database = Self::create_empty().await;
        database
            .store(1, &ManualClock::starting_at(START_MS))
            .await
            .migrate()
            .await
            .expect("apply migrations");
        database
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
        reached(store_on(
            self.pool(pool_size).await,
            StoreSettings::with_ttl(TTL_MS),
            Some(clock),
        ))
        .await
    }

    /// A store on the database's own clock, as in production.
    pub async fn store_on_database_clock(
        &self,
        pool_size: u32,
        settings: StoreSettings,
    ) -> PostgresStore {
        reached(store_on(self.pool(pool_size).await, settings, None)).await
    }

    async fn pool(&self, pool_size: u32) -> sqlx::PgPool {
        PgPoolOptions::new()
            .max_connections(pool_size)
            .acquire_timeout(Duration::from_secs(30))
            .connect(&self.url())
            .await
            .expect("connect to the test database")
    }

    /// A store reaching the database through the proxy on `port`, with a short connection wait (as
    /// production's default) so that an outage is noticed quickly; its time is `clock`.
    pub async fn store_via(&self, port: u16, clock: &ManualClock) -> PostgresStore {
        reached(store_on(
            self.pool_via(port).await,
            StoreSettings::with_ttl(TTL_MS),
            Some(clock),
        ))
        .await
    }

    /// A store reaching the database through the proxy on `port`, on the database's clock.
    pub async fn store_via_on_database_clock(
        &self,
        port: u16,
        settings: StoreSettings,
    ) -> PostgresStore {
        reached(store_on(self.pool_via(port).await, settings, None)).await
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
                 Start one (e.g. `pg_ctlcluster 15 main start`, or \
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
    settings: StoreSettings,
    clock: Option<&ManualClock>,
) -> PostgresStore {
    match clock {
        Some(clock) => PostgresStore::from_pool(
            pool,
            settings,
            StoreTime::Clock(Arc::new(clock.clone())),
            Arc::new(clock.clone()),
        ),
        None => PostgresStore::from_pool(
            pool,
            settings,
            StoreTime::Database,
            Arc::new(MonotonicClock::default()),
        ),
    }
}

/// `store` once it has reached its database: as a replica whose sweeper has run since it started.
/// (A store that never reached its database judges no silence at all: it did not see it.)
async fn reached(store: PostgresStore) -> PostgresStore {
    store.ping().await.expect("the test database answers");
    store
}

/// An embedded store on `clock`.
pub fn memory_store(clock: &ManualClock) -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new(
        StoreSettings::with_ttl(TTL_MS),
        Arc::new(clock.clone()),
    ))
}

impl TestApp {
    /// An app whose store has these settings (limits, default TTL).
    pub async fn with_settings(backend: Backend, settings: StoreSettings) -> Self {
        let clock = ManualClock::starting_at(START_MS);
        let (store, database): (Arc<dyn Store>, _) = match backend {
            Backend::Memory => (
                Arc::new(MemoryStore::new(settings, Arc::new(clock.clone()))),
                None,
            ),
            Backend::Postgres => {
                let database = TestDatabase::create().await;
                let store = reached(store_on(database.pool(4).await, settings, Some(&clock))).await;
                (Arc::new(store), Some(database))
            }
        };
        Self::with_store(store, database, unique_cluster(), 42, 1_048_576, clock)
    }

    /// An app whose oracle lets webhooks call only `hosts` (as configured with an admin token).
    pub async fn with_webhook_hosts(backend: Backend, hosts: WebhookHosts) -> Self {
        Self::new(backend)
            .await
            .reconfigured(|oracle| oracle.with_webhook_hosts(hosts))
    }

    pub async fn new(backend: Backend) -> Self {
        Self::with_settings(backend, StoreSettings::with_ttl(TTL_MS)).await
    }

    /// Two replicas (seeds 1 and 2, each with a pool of its own) on one fresh Postgres database,
    /// working in one new cluster on a shared manual clock: the database, A and B.
    pub async fn two_replicas() -> (Arc<TestDatabase>, Self, Self) {
        let database = TestDatabase::create().await;
        let clock = ManualClock::starting_at(START_MS);
        let cluster = unique_cluster();
        let a = Self::replica(
            database.store(4, &clock).await,
            &database,
            cluster.clone(),
            1,
            clock.clone(),
        );
        let b = Self::replica(
            database.store(4, &clock).await,
            &database,
            cluster,
            2,
            clock,
        );
        (database, a, b)
    }

    /// A replica on a Postgres `store` of `database`, working in `cluster`, its random decisions
    /// seeded with `seed`; `clock` is the store's (unused by a store on the database's clock).
    pub fn replica(
        store: PostgresStore,
        database: &Arc<TestDatabase>,
        cluster: String,
        seed: u64,
        clock: ManualClock,
    ) -> Self {
        Self::with_store(
            Arc::new(store),
            Some(database.clone()),
            cluster,
            seed,
            1 << 20,
            clock,
        )
    }

    /// A replica on `store` working in `cluster`, its random decisions seeded with `seed`; `clock`
    /// is the store's (what the test moves). Several on one Postgres database act as several
    /// oracle replicas.
    pub fn with_store(
        store: Arc<dyn Store>,
        database: Option<Arc<TestDatabase>>,
        cluster: String,
        seed: u64,
        body_limit_bytes: usize,
        clock: ManualClock,
    ) -> Self {
        let limits = Limits {
            request_timeout: Duration::from_secs(30),
            body_limit_bytes,
            max_concurrent_requests: MAX_CONCURRENT_REQUESTS,
        };
        Self::build(
            store,
            database,
            cluster,
            seed,
            (limits, Rates::DEFAULT),
            clock,
            |oracle| oracle,
        )
    }

    /// An app that asks every cluster route for a credential: [`ADMIN_TOKEN`] or a key it issued,
    /// trusting a key it looked up for `key_ttl`.
    pub async fn secured(backend: Backend, key_ttl: Duration) -> Self {
        let plain = Self::new(backend).await;
        plain.with_credentials(key_ttl)
    }

    /// The same store, cluster and clock, served by an oracle that asks for credentials.
    pub fn with_credentials(&self, key_ttl: Duration) -> Self {
        let credentials = Credentials::new(Secret::new(ADMIN_TOKEN), None, key_ttl);
        self.reconfigured(|oracle| oracle.with_credentials(credentials))
    }

    /// The same store, cluster and clock, served by a new oracle that `configure` sets up.
    pub fn reconfigured(&self, configure: impl FnOnce(Oracle) -> Oracle) -> Self {
        let limits = Limits {
            request_timeout: Duration::from_secs(30),
            body_limit_bytes: 1 << 20,
            max_concurrent_requests: MAX_CONCURRENT_REQUESTS,
        };
        Self::build(
            self.oracle.store_handle(),
            self._database.clone(),
            self.cluster.clone(),
            7,
            (limits, Rates::DEFAULT),
            self.clock.clone(),
            configure,
        )
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

    /// An embedded-store app that answers every request within `timeout`.
    pub fn with_request_timeout(timeout: Duration) -> Self {
        Self::limited(
            Limits {
                request_timeout: timeout,
                body_limit_bytes: 1 << 20,
                max_concurrent_requests: MAX_CONCURRENT_REQUESTS,
            },
            Rates::DEFAULT,
        )
    }

    /// An embedded-store app with these limits and per-cluster rates; its rate limits run on the
    /// app's manual clock, so a test decides exactly when buckets refill.
    pub fn limited(limits: Limits, rates: Rates) -> Self {
        let clock = ManualClock::starting_at(START_MS);
        Self::build(
            memory_store(&clock),
            None,
            unique_cluster(),
            1,
            (limits, rates),
            clock,
            |oracle| oracle,
        )
    }

    fn build(
        store: Arc<dyn Store>,
        database: Option<Arc<TestDatabase>>,
        cluster: String,
        seed: u64,
        (limits, rates): (Limits, Rates),
        clock: ManualClock,
        configure: impl FnOnce(Oracle) -> Oracle,
    ) -> Self {
        // Each replica of a test has a name of its own in cluster leases (its seed), and a lease
        // of two seconds of the test's clock.
        let replica = Replica {
            id: format!("replica-{seed}"),
            lease_ttl_ms: LEASE_TTL_MS,
        };
        let oracle = Arc::new(configure(
            Oracle::new(store, Some(seed)).with_replica(replica),
        ));
        let rate_limits = RateLimits::new(rates, 10_000, Arc::new(clock.clone()));
        let state = AppState {
            oracle: oracle.clone(),
            metrics: telemetry::metrics_handle(),
            rate_limits: Arc::new(rate_limits),
        };
        Self {
            router: app(state, limits),
            oracle,
            clock,
            cluster,
            _database: database,
        }
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
        self.oracle.replica().id.clone()
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
