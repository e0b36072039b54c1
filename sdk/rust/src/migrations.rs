//! Carrying out the migrations the oracle issues for a silo (rebalancer, repartitioner, drain).
//!
//! Each round reads the silo's open migrations and hands each grain over through the runtime's
//! [`Migrator`] (state transfer is the runtime's), then completes the migration (the target holds
//! the registration from then on, under the epoch the completion returns) or fails it. Retries
//! are safe: the oracle answers a repeated completion with its first answer, and one it ended
//! otherwise (`migration-ended`, `migration-refused`, gone) is done with.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;

use crate::client::{segment, OracleClient};
use crate::error::OracleError;
use crate::periodic::Periodic;
use crate::silo::Silo;
use crate::types::{Migration, MigrationCompleted, MigrationPage};

/// How a completion whose answer was lost ended, read from the registration (`GET
/// …/activations/{grain}` reads the store): held by the target, it moved; still the source's
/// activation, it is open and comes back; anything else, the oracle ended it otherwise.
async fn registration_after(
    client: &OracleClient,
    migration: &Migration,
    lost: OracleError,
) -> Ending {
    let path = format!("/activations/{}", segment(&migration.grain));
    match client.call::<Registration>(Method::GET, &path, None).await {
        Ok(now) if now.silo == migration.to => Ending::Moved { epoch: now.epoch },
        Ok(now) if now.silo == migration.from && now.epoch == migration.epoch => {
            Ending::Unsettled { error: lost }
        }
        Ok(_) => Ending::Closed {
            problem: "registered-elsewhere".into(),
        },
        Err(error) if error.status == 404 => Ending::Closed {
            problem: "not-found".into(),
        },
        Err(_) => Ending::Unsettled { error: lost },
    }
}

#[derive(serde::Deserialize)]
struct Registration {
    silo: String,
    epoch: i64,
}

/// What became of a hand-over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandOver {
    /// The grain stopped here and the target can take it: complete the migration.
    Moved,
    /// It cannot move (state transfer failed): fail the migration, the grain stays registered
    /// here.
    Failed,
    /// Not now (busy, or not this activation): leave the migration open for a later round.
    Later,
}

/// How a migration ended, as the runtime is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The target holds the registration, under `epoch`.
    Moved { epoch: i64 },
    /// Failed: the registration stays here.
    Failed,
    /// The oracle had ended it already or refused it (`migration-ended`, `migration-refused`,
    /// `not-found`): nothing more to do.
    Closed { problem: String },
    /// The oracle could not be told, or its answer was lost and the store could not be read:
    /// the completion may have landed. Keep the grain out of service here; the migration comes
    /// back next round if it is still open.
    Unsettled { error: OracleError },
}

/// The runtime's side of a migration.
pub trait Migrator: Send + Sync + 'static {
    /// Hands `migration.grain` (activation `migration.epoch`) over to `migration.to`: stop it
    /// here, transfer its state. Called again for the same migration if its ending did not
    /// reach the oracle, so it must be idempotent.
    fn hand_over(&self, migration: &Migration) -> impl Future<Output = HandOver> + Send;

    /// After the oracle was told (or could not be).
    fn ended(&self, _migration: &Migration, _ending: &Ending) {}
}

#[derive(Debug, Default)]
pub struct MigrationStats {
    pub completed: AtomicU64,
    pub failed: AtomicU64,
    /// Ended or refused by the oracle before this silo's answer.
    pub closed: AtomicU64,
}

/// Carries out one silo's migrations; cheap to clone.
pub struct MigrationWorker<M> {
    inner: Arc<Inner<M>>,
}

impl<M> Clone for MigrationWorker<M> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<M> {
    silo: Silo,
    migrator: Arc<M>,
    stats: MigrationStats,
    periodic: Periodic,
}

impl<M: Migrator> MigrationWorker<M> {
    pub fn new(silo: &Silo, migrator: Arc<M>) -> Self {
        Self {
            inner: Arc::new(Inner {
                silo: silo.clone(),
                migrator,
                stats: MigrationStats::default(),
                periodic: Periodic::default(),
            }),
        }
    }

    pub fn stats(&self) -> &MigrationStats {
        &self.inner.stats
    }

    /// Polls every `interval` until [`Self::stop`] (or every handle is dropped).
    pub fn start(&self, interval: Duration) {
        let owner = Arc::downgrade(&self.inner);
        self.inner
            .periodic
            .start("migrations", interval, owner, |inner| async move {
                MigrationWorker { inner }.poll_once().await
            });
    }

    pub fn stop(&self) {
        self.inner.periodic.stop();
    }

    /// Carries out every open migration of the silo; returns how many it ended. A silo without
    /// its lease moves nothing (it runs nothing to hand over).
    pub async fn poll_once(&self) -> Result<usize, OracleError> {
        let silo = &self.inner.silo;
        let id = silo.id();
        if !silo.may_run_grains_as(&id) {
            return Ok(0);
        }
        let client = silo.client();
        let page: MigrationPage = client
            .call(
                Method::GET,
                &format!("/migrations?silo={}", segment(&id)),
                None,
            )
            .await?;
        let mut ended = 0;
        for migration in &page.migrations {
            if silo.id() != id {
                break; // rejoined meanwhile: these were the old incarnation's
            }
            if self.carry_out(client, migration).await {
                ended += 1;
            }
        }
        Ok(ended)
    }

    async fn carry_out(&self, client: &OracleClient, migration: &Migration) -> bool {
        let (migrator, stats) = (&self.inner.migrator, &self.inner.stats);
        let verb = match migrator.hand_over(migration).await {
            HandOver::Later => return false,
            HandOver::Moved => "complete",
            HandOver::Failed => "fail",
        };
        let path = format!("/migrations/{}/{verb}", migration.id);
        // No body: these routes take none, and the oracle closes a keep-alive connection whose
        // request body it did not read, which fails the next call sent on it.
        let ending = match client
            .call::<serde_json::Value>(Method::POST, &path, None)
            .await
        {
            Ok(answer) if verb == "complete" => {
                match serde_json::from_value::<MigrationCompleted>(answer) {
                    Ok(done) => Ending::Moved { epoch: done.epoch },
                    Err(e) => {
                        let error = OracleError::unexpected(e.to_string());
                        registration_after(client, migration, error).await
                    }
                }
            }
            Ok(_) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                Ending::Failed
            }
            Err(error)
                if error.status == 404
                    || matches!(
                        error.problem.as_str(),
                        "migration-ended" | "migration-refused"
                    ) =>
            {
                tracing::info!(migration = migration.id, grain = %migration.grain, %error, "migration closed by the oracle");
                stats.closed.fetch_add(1, Ordering::Relaxed);
                Ending::Closed {
                    problem: error.problem,
                }
            }
            // The completion may have landed although its answer was lost (a timeout): the store
            // says whether it did.
            Err(error) if verb == "complete" => registration_after(client, migration, error).await,
            Err(error) => Ending::Unsettled { error },
        };
        if let Ending::Moved { .. } = ending {
            stats.completed.fetch_add(1, Ordering::Relaxed);
        }
        let settled = !matches!(ending, Ending::Unsettled { .. });
        migrator.ended(migration, &ending);
        settled
    }
}
