//! Migrations as the silos see them: a source polls what it should send away, and says whether
//! it did (the directory entry moves to the target in the same transaction) or could not.

use super::{Movers, OracleError};
use crate::cluster::{ClusterName, SiloId};
use crate::store::{Completion, Ending, Failure, Migration, Refusal};
use crate::telemetry::metric;

/// One page of a silo's open migrations.
#[derive(Debug, Clone)]
pub struct MigrationListing {
    pub migrations: Vec<Migration>,
    /// Pass as `cursor` for the next page; `None` on the last page.
    pub next_cursor: Option<i64>,
}

/// A migration the source carried out: the grain is now activation `epoch` on the target.
#[derive(Debug, Clone)]
pub struct Moved {
    pub migration: Migration,
    pub epoch: i64,
}

impl Movers {
    /// The open migrations whose source is `silo`, by id, after `cursor`.
    pub async fn pending_migrations(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        cursor: Option<i64>,
        limit: u32,
    ) -> Result<MigrationListing, OracleError> {
        self.views.read(cluster).await?;
        let mut migrations = self
            .store
            .pending_migrations(cluster, silo, cursor, limit + 1)
            .await
            .inspect_err(|_| metric::store_error("pending_migrations"))?;
        let more = migrations.len() > limit as usize;
        migrations.truncate(limit as usize);
        let next_cursor = more.then(|| migrations.last().map(|m| m.id)).flatten();
        Ok(MigrationListing {
            migrations,
            next_cursor,
        })
    }

    /// Completes a migration: the entry moves to the target as a new activation, or — if the
    /// grain, a silo or the time no longer allow it — the migration is cancelled and the error
    /// says why.
    pub async fn complete_migration(
        &self,
        cluster: &ClusterName,
        id: i64,
    ) -> Result<Moved, OracleError> {
        let membership = self.views.read(cluster).await?;
        let ttl_ms = membership.policy.migration_ttl_ms();
        let completion = self
            .store
            .complete_migration(cluster, id, ttl_ms)
            .await
            .inspect_err(|_| metric::store_error("complete_migration"))?;
        match completion {
            Completion::Moved { migration, epoch } => {
                metric::migrations(migration.reason.as_str(), "completed", 1);
                // The grain's silo changed: this replica's next decision and answer must see it.
                self.views.forget(cluster);
                self.cache.forget(cluster.as_str(), &migration.grain, epoch);
                Ok(Moved { migration, epoch })
            }
            Completion::Refused { migration, refusal } => {
                metric::migrations(migration.reason.as_str(), "cancelled", 1);
                Err(OracleError::MigrationRefused {
                    id,
                    why: refusal_text(&migration, &refusal),
                })
            }
            // A retry: the first call's answer again, counted once.
            Completion::Ended { migration, ending } => match ending {
                Ending::Moved { epoch } => Ok(Moved { migration, epoch }),
                Ending::Refused { refusal } => Err(OracleError::MigrationRefused {
                    id,
                    why: refusal_text(&migration, &refusal),
                }),
                Ending::Failed => Err(OracleError::MigrationEnded {
                    id,
                    how: format!(
                        "failed by its source already: grain `{}` stayed on `{}`",
                        migration.grain, migration.from
                    ),
                }),
            },
            Completion::NotFound => Err(OracleError::MigrationNotFound(id)),
        }
    }

    /// Removes a migration its source could not carry out; the grain stays where it is. A retry
    /// gets the first answer; failing a migration that was completed is refused.
    pub async fn fail_migration(
        &self,
        cluster: &ClusterName,
        id: i64,
    ) -> Result<Migration, OracleError> {
        self.views.read(cluster).await?;
        let failure = self
            .store
            .fail_migration(cluster, id)
            .await
            .inspect_err(|_| metric::store_error("fail_migration"))?;
        match failure {
            Failure::Failed(failed) => {
                metric::migrations(failed.reason.as_str(), "failed", 1);
                Ok(failed)
            }
            // Refused completions cancelled it, and the grain was not moved: as if failed.
            Failure::Ended {
                migration,
                ending: Ending::Failed | Ending::Refused { .. },
            } => Ok(migration),
            Failure::Ended {
                migration,
                ending: Ending::Moved { epoch },
            } => Err(OracleError::MigrationEnded {
                id,
                how: format!(
                    "completed already: grain `{}` is activation {epoch} on `{}`",
                    migration.grain, migration.to
                ),
            }),
            Failure::NotFound => Err(OracleError::MigrationNotFound(id)),
        }
    }
}

fn refusal_text(migration: &Migration, refusal: &Refusal) -> String {
    let grain = &migration.grain;
    match refusal {
        Refusal::GrainGone => format!("grain `{grain}` has no activation any more"),
        Refusal::GrainMoved { silo, epoch } => format!(
            "grain `{grain}` is now activation {epoch} on `{silo}`, not activation {} on `{}`",
            migration.epoch, migration.from
        ),
        Refusal::SourceDead => format!("source silo `{}` is dead", migration.from),
        Refusal::TargetUnavailable => {
            format!(
                "target silo `{}` is not active and alive, or does not host the grain's type",
                migration.to
            )
        }
        Refusal::Expired => "the migration outlived the cluster's migration_ttl_ms".to_owned(),
    }
}
