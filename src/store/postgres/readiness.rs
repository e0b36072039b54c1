//! Readiness: whether this replica's database takes writes now, which is what serving needs. A
//! database can answer `SELECT 1` and still be useless to the oracle: a standby not yet promoted
//! or a primary set read-only refuses every heartbeat, and a primary whose commits wait for a
//! synchronous standby that is gone never acknowledges one. So the probe is a small write (one
//! row per replica in `readiness_probes`) that must commit within [`WRITE_DEADLINE`].
//!
//! A write that does not commit in time may also mean the database cannot be reached at all (a
//! frozen server, a network that drops packets): then reads get no answer either. So a stalled
//! write is followed by a read with the same deadline, and only a read that answers makes the
//! answer `store-writes-stalled`; otherwise the store is unreachable, which is what it is.
//!
//! `/readyz` may be asked by every kubelet and load balancer at once; one probe runs at a time and
//! its answer stands for [`ANSWER_FOR`], so the database sees at most a few writes a second. A
//! write that did not commit in time is left to finish on its own, and no other is started until
//! it has: a backend waiting for a synchronous standby keeps its session (and the row's lock)
//! whatever the client does, so a new write per probe would pile up one stuck backend each.

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::statements::Db;

use crate::store::StoreError;

/// How long the probe's write may take to commit. Far above a healthy commit (a millisecond or
/// two), and short enough that a replica whose commits hang leaves its Service within a second.
pub const WRITE_DEADLINE: Duration = Duration::from_millis(500);

/// How long one probe's answer stands.
pub const ANSWER_FOR: Duration = Duration::from_millis(250);

/// Rows of replicas that probed no longer than this ago are kept (a day).
const KEEP_ROWS_MS: i64 = 86_400_000;

/// The probe's state: this replica's row and the last answer.
#[derive(Debug)]
pub struct Readiness {
    /// This process's row: random, so that replicas never share one (a shared row would queue
    /// their probes on its lock).
    replica: String,
    last: Mutex<Option<(Instant, Result<(), StoreError>)>>,
    probing: tokio::sync::Mutex<()>,
    /// The write an earlier probe gave up waiting for, while it has not finished.
    outstanding: Mutex<Option<tokio::task::JoinHandle<Result<(), StoreError>>>>,
}

impl Default for Readiness {
    fn default() -> Self {
        Self {
            replica: format!("{:016x}", rand::random::<u64>()),
            last: Mutex::default(),
            probing: tokio::sync::Mutex::default(),
            outstanding: Mutex::default(),
        }
    }
}

impl Readiness {
    /// The last answer if it still stands, else the answer of `probe` (run once however many
    /// callers ask meanwhile).
    pub async fn answer<F>(&self, probe: impl FnOnce() -> F) -> Result<(), StoreError>
    where
        F: Future<Output = Result<(), StoreError>>,
    {
        if let Some(answer) = self.standing() {
            return answer;
        }
        let _probing = self.probing.lock().await;
        if let Some(answer) = self.standing() {
            return answer;
        }
        let answer = probe().await;
        *self.lock() = Some((Instant::now(), answer.clone()));
        answer
    }

    fn standing(&self) -> Option<Result<(), StoreError>> {
        self.lock()
            .as_ref()
            .filter(|(at, _)| at.elapsed() < ANSWER_FOR)
            .map(|(_, answer)| answer.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Instant, Result<(), StoreError>)>> {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes this replica's row on a connection of `db`, waiting at most [`WRITE_DEADLINE`];
    /// while an earlier write is still outstanding, starts none. A write that did not commit in
    /// time is told apart by a read ([`stalled_or_unreachable`]).
    pub async fn write(&self, db: &Db) -> Result<(), StoreError> {
        let earlier = self.lock_outstanding().take();
        let mut write = match earlier {
            Some(earlier) if !earlier.is_finished() => {
                *self.lock_outstanding() = Some(earlier);
                return Err(stalled_or_unreachable(db).await);
            }
            _ => {
                // Sent from a task of its own, so that a stalled commit outlives this call.
                super::statements::note_sent();
                tokio::spawn(write_row(db.clone(), self.replica.clone()))
            }
        };
        match tokio::time::timeout(WRITE_DEADLINE, &mut write).await {
            Ok(Ok(written)) => written,
            Ok(Err(join)) => Err(StoreError::Failed(format!("the readiness write: {join}"))),
            Err(_) => {
                *self.lock_outstanding() = Some(write);
                Err(stalled_or_unreachable(db).await)
            }
        }
    }

    fn lock_outstanding(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<tokio::task::JoinHandle<Result<(), StoreError>>>> {
        self.outstanding
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Why a write did not commit in time: writes are stalled if a read is answered within
/// [`WRITE_DEADLINE`], and the store cannot be reached if not.
async fn stalled_or_unreachable(db: &Db) -> StoreError {
    let deadline = WRITE_DEADLINE.as_millis();
    let read = sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(db);
    match tokio::time::timeout(WRITE_DEADLINE, read).await {
        Ok(Ok(_)) => StoreError::WritesStalled(format!(
            "a one-row write did not commit within {deadline} ms, though a read was answered"
        )),
        Ok(Err(error)) => StoreError::from(error),
        Err(_) => StoreError::Unreachable(format!(
            "neither a one-row write nor a read was answered within {deadline} ms"
        )),
    }
}

/// The write itself, on a connection of its own that it keeps until the commit returns.
async fn write_row(db: Db, replica: String) -> Result<(), StoreError> {
    sqlx::query(
        "WITH pruned AS (DELETE FROM readiness_probes WHERE probed_ms < oracle_now_ms() - $2)
         INSERT INTO readiness_probes (replica, probed_ms) VALUES ($1, oracle_now_ms())
         ON CONFLICT (replica) DO UPDATE SET probed_ms = EXCLUDED.probed_ms",
    )
    .bind(replica)
    .bind(KEEP_ROWS_MS)
    .execute(&db)
    .await?;
    Ok(())
}
