//! Cluster keys on Postgres: one row per key, only its keyed hash stored.

use async_trait::async_trait;

use super::PostgresStore;
use crate::cluster::ClusterName;
use crate::store::{KeyStore, LimitReached, StoreError, StoredKey, MAX_KEYS_PER_CLUSTER};

type KeyRow = (String, String, Vec<String>, String, Vec<u8>, i64);

const COLUMNS: &str = "id, cluster, scopes, label, hash, created_at_ms";

fn stored_key(
    (id, cluster, scopes, label, hash, created_at_ms): KeyRow,
) -> Result<StoredKey, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt(format!("key {id}: {what}"));
    let cluster = ClusterName::parse(&cluster).map_err(|e| corrupt(e.to_string()))?;
    Ok(StoredKey {
        id,
        cluster,
        scopes,
        label,
        hash,
        created_at_ms,
    })
}

impl PostgresStore {
    async fn try_insert_key(&self, key: StoredKey) -> Result<StoredKey, StoreError> {
        // The count and the insert are one statement; two admins issuing the cluster's last
        // allowed key at the same instant may both succeed, which the limit can bear.
        let scopes: Vec<&str> = key.scopes.iter().map(String::as_str).collect();
        let row: Option<KeyRow> = sqlx::query_as(&format!(
            "INSERT INTO cluster_keys ({COLUMNS})
             SELECT $1, $2, $3, $4, $5, COALESCE($6::int8, oracle_now_ms())
              WHERE (SELECT count(*) FROM cluster_keys WHERE cluster = $2) < $7
             RETURNING {COLUMNS}"
        ))
        .bind(&key.id)
        .bind(key.cluster.as_str())
        .bind(&scopes)
        .bind(&key.label)
        .bind(&key.hash)
        .bind(self.now())
        .bind(MAX_KEYS_PER_CLUSTER as i64)
        .fetch_optional(&self.db)
        .await?;
        match row {
            Some(row) => stored_key(row),
            None => Err(LimitReached::Keys {
                cluster: key.cluster.to_string(),
                max: MAX_KEYS_PER_CLUSTER,
            }
            .into()),
        }
    }

    async fn try_key(&self, id: &str) -> Result<Option<StoredKey>, StoreError> {
        let row: Option<KeyRow> =
            sqlx::query_as(&format!("SELECT {COLUMNS} FROM cluster_keys WHERE id = $1"))
                .bind(id)
                .fetch_optional(&self.db)
                .await?;
        row.map(stored_key).transpose()
    }

    async fn try_keys(&self, cluster: &ClusterName) -> Result<Vec<StoredKey>, StoreError> {
        let rows: Vec<KeyRow> = sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM cluster_keys WHERE cluster = $1 ORDER BY created_at_ms, id"
        ))
        .bind(cluster.as_str())
        .fetch_all(&self.db)
        .await?;
        rows.into_iter().map(stored_key).collect()
    }

    async fn try_revoke_key(&self, cluster: &ClusterName, id: &str) -> Result<bool, StoreError> {
        let deleted = sqlx::query("DELETE FROM cluster_keys WHERE id = $1 AND cluster = $2")
            .bind(id)
            .bind(cluster.as_str())
            .execute(&self.db)
            .await?;
        Ok(deleted.rows_affected() == 1)
    }
}

#[async_trait]
impl KeyStore for PostgresStore {
    async fn insert_key(&self, key: StoredKey) -> Result<StoredKey, StoreError> {
        self.guard(self.try_insert_key(key)).await
    }

    async fn key(&self, id: &str) -> Result<Option<StoredKey>, StoreError> {
        self.guard(self.try_key(id)).await
    }

    async fn keys(&self, cluster: &ClusterName) -> Result<Vec<StoredKey>, StoreError> {
        self.guard(self.try_keys(cluster)).await
    }

    async fn revoke_key(&self, cluster: &ClusterName, id: &str) -> Result<bool, StoreError> {
        self.guard(self.try_revoke_key(cluster, id)).await
    }
}
