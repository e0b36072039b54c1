//! Where the store's statements run, and how they are prepared.
//!
//! Directly or through a session-mode pooler, each of the oracle's connections is one server
//! session for its whole life, so each statement is prepared once per connection under a name
//! and re-used: one round trip per call. Through a transaction-mode pooler (PgBouncer
//! `pool_mode = transaction` before 1.21, which does not carry prepared statements across server
//! sessions) consecutive transactions may land on different sessions, so a name prepared on one
//! is missing, or means another client's statement, on the next. There every statement is
//! unnamed and runs inside a transaction (the pooler keeps one session for a transaction; sqlx
//! parses and executes a statement with a sync between, where the pooler would otherwise be
//! free to switch sessions): four round trips instead of one, measured in `bench/pgbouncer.sh`.
//!
//! [`Db`] and [`Tx`] are the store's executors; every statement goes through one of them, so the
//! choice is made here once and not at each of the store's statements. They also count the calls
//! waiting for a connection (`oracle_store_pool_waiters`) and how long each waited, and note that
//! a call sent something ([`sent_anything`]).

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::time::Instant;

use futures_util::future::BoxFuture;
use futures_util::stream::{self, BoxStream, StreamExt, TryStreamExt};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{Describe, Either, Execute, Executor, PgPool, Postgres, Transaction};

use crate::telemetry::metric;

tokio::task_local! {
    /// Whether the call [`sent_anything`] runs took a connection.
    static SENT: Cell<bool>;
}

/// Runs `call` and says whether it took a connection to send a statement. A call that answered
/// from this replica's own copies (heartbeats held back, a flush with nothing due) says nothing of
/// whether the database answers. Statements of tasks the call spawned are not seen unless it
/// calls [`note_sent`]; unnoted, such a call reads as one that sent nothing, which tells the
/// store's health nothing, never too much.
pub async fn sent_anything<T>(call: impl Future<Output = T>) -> (T, bool) {
    SENT.scope(Cell::new(false), async move {
        let output = call.await;
        (output, SENT.with(Cell::get))
    })
    .await
}

/// Notes, for [`sent_anything`], that the call under way sends a statement (one sent from a task
/// of its own says so here).
pub fn note_sent() {
    let _ = SENT.try_with(|sent| sent.set(true));
}

/// How the database URL's connections reach Postgres sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooling {
    /// Each connection is one session for its life (direct, or a session-mode pooler).
    #[default]
    Session,
    /// Consecutive transactions of one connection may run on different sessions.
    Transaction,
}

/// The pool the store's statements run on, prepared as [`Pooling`] allows.
#[derive(Clone)]
pub struct Db {
    pool: PgPool,
    pooling: Pooling,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db")
            .field("pooling", &self.pooling)
            .finish()
    }
}

impl Db {
    pub fn new(pool: PgPool, pooling: Pooling) -> Self {
        Self { pool, pooling }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Begins a transaction whose statements are prepared as [`Pooling`] allows.
    pub async fn begin(&self) -> Result<Tx, sqlx::Error> {
        let connection = self.acquire().await?;
        Ok(Tx {
            // What `PgPool::begin` does, on a connection whose wait was counted.
            inner: Transaction::begin(connection, None).await?,
            pooling: self.pooling,
        })
    }

    /// A connection of the pool, the wait for it counted.
    async fn acquire(&self) -> Result<PoolConnection<Postgres>, sqlx::Error> {
        note_sent();
        let waiting = metric::pool_waiter();
        let started = Instant::now();
        let connection = self.pool.acquire().await;
        drop(waiting);
        metric::pool_wait(started.elapsed());
        connection
    }

    /// Runs `query` (unnamed inside a transaction of its own, behind a transaction pooler) and
    /// collects what it returned: the store's statements return a few rows at most.
    async fn run<'q, E: 'q + Execute<'q, Postgres>>(
        &self,
        query: E,
    ) -> Result<Results, sqlx::Error> {
        match self.pooling {
            Pooling::Session => self.acquire().await?.fetch_many(query).try_collect().await,
            Pooling::Transaction => {
                let mut tx = self.begin().await?;
                let results: Results = (&mut tx).fetch_many(query).try_collect().await?;
                tx.commit().await?;
                Ok(results)
            }
        }
    }
}

/// A transaction of the store's, whose statements are prepared as [`Pooling`] allows.
pub struct Tx {
    inner: Transaction<'static, Postgres>,
    pooling: Pooling,
}

impl fmt::Debug for Tx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tx")
            .field("pooling", &self.pooling)
            .finish()
    }
}

impl Tx {
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.inner.commit().await
    }

    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.inner.rollback().await
    }
}

/// A statement run unnamed: parsed for this execution only, never cached on the connection.
struct Unnamed<E>(E);

impl<'q, E: Execute<'q, Postgres>> Execute<'q, Postgres> for Unnamed<E> {
    fn sql(&self) -> &'q str {
        self.0.sql()
    }

    fn statement(&self) -> Option<&PgStatement<'q>> {
        self.0.statement()
    }

    fn take_arguments(
        &mut self,
    ) -> Result<Option<sqlx::postgres::PgArguments>, sqlx::error::BoxDynError> {
        self.0.take_arguments()
    }

    fn persistent(&self) -> bool {
        false
    }
}

type Results = Vec<Either<PgQueryResult, PgRow>>;

impl<'c> Executor<'c> for &'c Db {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        stream::once(self.run(query))
            .flat_map(|outcome| {
                stream::iter(match outcome {
                    Ok(results) => results.into_iter().map(Ok).collect(),
                    Err(error) => vec![Err(error)],
                })
            })
            .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        Box::pin(async move {
            match self.pooling {
                Pooling::Session => self.acquire().await?.fetch_optional(query).await,
                Pooling::Transaction => {
                    let results = self.run(query).await?;
                    Ok(results.into_iter().find_map(|r| r.right()))
                }
            }
        })
    }

    /// Named statements are what a transaction pooler cannot carry: refused there.
    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        match self.pooling {
            Pooling::Session => self.pool.prepare_with(sql, parameters),
            Pooling::Transaction => Box::pin(async { Err(named_statement_refused()) }),
        }
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        match self.pooling {
            Pooling::Session => self.pool.describe(sql),
            Pooling::Transaction => Box::pin(async { Err(named_statement_refused()) }),
        }
    }
}

fn named_statement_refused() -> sqlx::Error {
    sqlx::Error::Configuration(
        "no statement is prepared by name behind a transaction pooler".into(),
    )
}

impl<'c> Executor<'c> for &'c mut Tx {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.pooling {
            Pooling::Session => (&mut *self.inner).fetch_many(query),
            Pooling::Transaction => (&mut *self.inner).fetch_many(Unnamed(query)),
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.pooling {
            Pooling::Session => (&mut *self.inner).fetch_optional(query),
            Pooling::Transaction => (&mut *self.inner).fetch_optional(Unnamed(query)),
        }
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        match self.pooling {
            Pooling::Session => (&mut *self.inner).prepare_with(sql, parameters),
            Pooling::Transaction => Box::pin(async { Err(named_statement_refused()) }),
        }
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        match self.pooling {
            Pooling::Session => (&mut *self.inner).describe(sql),
            Pooling::Transaction => Box::pin(async { Err(named_statement_refused()) }),
        }
    }
}
