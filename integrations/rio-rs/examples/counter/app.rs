//! The example application: counters whose state lives in Postgres.
//!
//! Each increment carries an operation id chosen by its client; a counter applies an id once
//! (so a retry after a lost answer is safe), saves before it answers, and answers with the id,
//! so that a client knows exactly which increments were acknowledged. A counter's value is the
//! number of ids it holds.
//!
//! Every handler asks the server's fence first ([`placement_oracle_rio::admit`]): on the oracle
//! that admits a call only under a registration the server holds while it holds its lease. The
//! counter loads its state again whenever the activation it runs under changes (rio-rs keeps an
//! object in its registry after it moved away, and would otherwise serve it again from
//! memory), bounds each save by the lease, and saves conditionally: with the registration's
//! epoch as a fence token (a write from an older registration never overwrites a newer one's)
//! and the version it read (a write of its own that timed out and landed late is never taken
//! for the current state). Without an epoch (rio-rs's own directory has none) it saves as
//! rio-rs's own state backends do: whatever is in the row is overwritten.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use placement_oracle_rio::{admit, Admission, Token};
use rio_rs::app_data::AppData;
use rio_rs::derive::{Message, TypeName, WithId};
use rio_rs::errors::ServiceObjectLifeCycleError;
use rio_rs::registry::{Handler, IdentifiableType, Registry};
use rio_rs::{LifecycleMessage, ServiceObject, ServiceObjectStateLoad, WithId as _};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

/// Adds one to a counter, once per `op`.
#[derive(Debug, Clone, Message, TypeName, Serialize, Deserialize)]
pub struct Increment {
    pub op: u64,
}

/// The increment `op` is applied and saved; the counter now holds `value`.
#[derive(Debug, Clone, Message, TypeName, Serialize, Deserialize)]
pub struct Incremented {
    pub op: u64,
    pub value: u64,
}

/// Why an increment was not applied. Both may be retried (the op id makes that safe).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum CounterError {
    /// The fence refused the call: not here, or not now.
    #[error("not served here now: {0}")]
    NotHere(String),
    /// The state could not be read or saved (in time).
    #[error("state unavailable: {0}")]
    StateUnavailable(String),
}

/// A counter (rio-rs object type `Counter`).
#[derive(Default, WithId, TypeName)]
pub struct Counter {
    id: String,
    ops: BTreeSet<u64>,
    /// The row's version the state was read at (0: no row).
    version: i64,
    /// The activation the state was loaded under.
    loaded: Option<Token>,
}

impl ServiceObject for Counter {}

impl Counter {
    /// Loads the state unless it was loaded under this admission's activation already.
    async fn ensure_loaded(
        &mut self,
        admission: &Admission,
        store: &CounterStore,
    ) -> Result<(), CounterError> {
        if self.loaded.as_ref() == Some(admission.token()) {
            return Ok(());
        }
        let read = tokio::time::timeout(admission.remaining(), store.load(&self.id)).await;
        let (ops, version) = match read {
            Ok(Ok(row)) => row,
            Ok(Err(e)) => return Err(CounterError::StateUnavailable(e.to_string())),
            Err(_) => return Err(CounterError::StateUnavailable("load timed out".into())),
        };
        self.ops = ops;
        self.version = version;
        self.loaded = Some(admission.token().clone());
        admission.loaded();
        Ok(())
    }
}

/// The lifecycle's load: rio-rs sends it when the object enters the registry.
#[async_trait]
impl ServiceObjectStateLoad for Counter {
    async fn load(&mut self, app_data: &AppData) -> Result<(), ServiceObjectLifeCycleError> {
        let admission = admit(app_data, Self::user_defined_type_id(), self.id())
            .map_err(|_| ServiceObjectLifeCycleError::Unknown)?;
        let store = app_data.get::<CounterStore>();
        self.ensure_loaded(&admission, store)
            .await
            .map_err(|_| ServiceObjectLifeCycleError::Unknown)
    }
}

#[async_trait]
impl Handler<Increment> for Counter {
    type Returns = Incremented;
    type Error = CounterError;

    async fn handle(
        &mut self,
        message: Increment,
        app_data: Arc<AppData>,
    ) -> Result<Incremented, CounterError> {
        let admission = admit(&app_data, Self::user_defined_type_id(), self.id())
            .map_err(|refusal| CounterError::NotHere(refusal.to_string()))?;
        let store = app_data.get::<CounterStore>();
        self.ensure_loaded(&admission, store).await?;
        if !self.ops.insert(message.op) {
            return Ok(self.answer(message.op));
        }
        let condition = admission.token().epoch.map(|epoch| Condition {
            epoch,
            version: self.version,
        });
        let saved = tokio::time::timeout(
            admission.remaining(),
            store.save(&self.id, &self.ops, condition),
        )
        .await;
        let refusal = match saved {
            Ok(Ok(Some(version))) => {
                self.version = version;
                return Ok(self.answer(message.op));
            }
            Ok(Ok(None)) => CounterError::NotHere(
                "the counter was saved since this activation read it (fenced out)".into(),
            ),
            Ok(Err(e)) => CounterError::StateUnavailable(e.to_string()),
            Err(_) => CounterError::StateUnavailable("save timed out".into()),
        };
        // Not acknowledged: the memory goes back to what the store may hold, and the next call
        // reads the store again (the save may have landed after all).
        self.ops.remove(&message.op);
        self.loaded = None;
        Err(refusal)
    }
}

impl Counter {
    fn answer(&self, op: u64) -> Incremented {
        Incremented {
            op,
            value: self.ops.len() as u64,
        }
    }
}

/// The object types and handlers of the application, for a server's registry.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    registry.add_type::<Counter>();
    registry.add_handler::<Counter, LifecycleMessage>();
    registry.add_handler::<Counter, Increment>();
    registry
}

/// Where counters keep their state: one row per counter, with the op ids it applied, the fence
/// token (epoch) of the activation that saved it last, and a version bumped by every save.
#[derive(Clone)]
pub struct CounterStore {
    pool: PgPool,
}

/// What a conditional save requires of the row: no newer registration wrote it, and it is still
/// at the version the activation read.
#[derive(Debug, Clone, Copy)]
pub struct Condition {
    pub epoch: i64,
    pub version: i64,
}

impl CounterStore {
    /// A pool that waits at most a second for a connection, so that a handler never waits
    /// longer than its lease for one (it connects on first use).
    pub fn connect(url: &str) -> Result<Self, sqlx::Error> {
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(std::time::Duration::from_secs(1))
            .connect_lazy(url)?;
        Ok(Self { pool })
    }

    pub async fn create_table(&self) -> Result<(), sqlx::Error> {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS rio_counters (
                 id      text PRIMARY KEY,
                 ops     bigint[] NOT NULL,
                 fence   bigint NOT NULL DEFAULT 0,
                 version bigint NOT NULL DEFAULT 1
             )",
        )
        .execute(&self.pool)
        .await?;
        // A table made by an earlier version of the example had no version column.
        sqlx::query(
            "ALTER TABLE rio_counters ADD COLUMN IF NOT EXISTS version bigint NOT NULL DEFAULT 1",
        )
        .execute(&self.pool)
        .await
        .map(|_| ())
    }

    /// The op ids a counter applied and the row's version (none and 0 for a counter never
    /// saved). An error is an error, never an empty counter.
    pub async fn load(&self, id: &str) -> Result<(BTreeSet<u64>, i64), sqlx::Error> {
        let row: Option<(Vec<i64>, i64)> =
            sqlx::query_as("SELECT ops, version FROM rio_counters WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map_or((BTreeSet::new(), 0), |(ops, version)| {
            (ops.into_iter().map(|op| op as u64).collect(), version)
        }))
    }

    /// Saves a counter's op ids: under `condition` only if it holds (`None` when it did not),
    /// without one whatever the row holds. Returns the row's new version.
    pub async fn save(
        &self,
        id: &str,
        ops: &BTreeSet<u64>,
        condition: Option<Condition>,
    ) -> Result<Option<i64>, sqlx::Error> {
        let ops: Vec<i64> = ops.iter().map(|&op| op as i64).collect();
        let statement = match condition {
            Some(_) => {
                "INSERT INTO rio_counters (id, ops, fence) VALUES ($1, $2, $3)
                 ON CONFLICT (id) DO UPDATE
                 SET ops = EXCLUDED.ops, fence = EXCLUDED.fence, version = rio_counters.version + 1
                 WHERE rio_counters.fence <= EXCLUDED.fence AND rio_counters.version = $4
                 RETURNING version"
            }
            None => {
                "INSERT INTO rio_counters (id, ops) VALUES ($1, $2)
                 ON CONFLICT (id) DO UPDATE
                 SET ops = EXCLUDED.ops, version = rio_counters.version + 1
                 RETURNING version"
            }
        };
        let mut query = sqlx::query_scalar(statement).bind(id).bind(ops);
        if let Some(condition) = condition {
            query = query.bind(condition.epoch).bind(condition.version);
        }
        query.fetch_optional(&self.pool).await
    }

    /// Every counter's op ids (for checking a run).
    pub async fn all(&self) -> Result<Vec<(String, BTreeSet<u64>)>, sqlx::Error> {
        let rows: Vec<(String, Vec<i64>)> = sqlx::query_as("SELECT id, ops FROM rio_counters")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, ops)| (id, ops.into_iter().map(|op| op as u64).collect()))
            .collect())
    }
}
