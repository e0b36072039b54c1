//! Cluster keys: stored as keyed hashes, at most [`MAX_KEYS_PER_CLUSTER`] per cluster.

use async_trait::async_trait;

use super::StoreError;
use crate::clock::Millis;
use crate::cluster::ClusterName;

/// Most keys one cluster may hold: enough for a key per team and rotation overlap, few enough
/// that a runaway script issuing keys is stopped.
pub const MAX_KEYS_PER_CLUSTER: u64 = 100;

/// A cluster key as stored: everything but the key itself, of which only a keyed hash is kept.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredKey {
    /// Public: the part of the key after `pok_` and before the secret.
    pub id: String,
    pub cluster: ClusterName,
    /// The names of the scopes it was issued with, sorted, without duplicates. The store keeps
    /// them as given: what a scope allows is the credentials' business (`auth::Scope`).
    pub scopes: Vec<String>,
    /// Who or what the key is for, as the admin wrote it.
    pub label: String,
    pub hash: Vec<u8>,
    pub created_at_ms: Millis,
}

impl std::fmt::Debug for StoredKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredKey")
            .field("id", &self.id)
            .field("cluster", &self.cluster)
            .field("scopes", &self.scopes)
            .field("label", &self.label)
            .field("created_at_ms", &self.created_at_ms)
            .finish_non_exhaustive()
    }
}

/// Cluster keys. A key names its cluster by name; the cluster itself comes into being with its
/// first heartbeat, policy or pool, as without keys.
#[async_trait]
pub trait KeyStore: Send + Sync + 'static {
    /// Stores a new key (its `created_at_ms` is the store's clock), unless its cluster already
    /// holds [`MAX_KEYS_PER_CLUSTER`].
    async fn insert_key(&self, key: StoredKey) -> Result<StoredKey, StoreError>;

    /// The key with this id, of whatever cluster.
    async fn key(&self, id: &str) -> Result<Option<StoredKey>, StoreError>;

    /// The cluster's keys, oldest first.
    async fn keys(&self, cluster: &ClusterName) -> Result<Vec<StoredKey>, StoreError>;

    /// Deletes the cluster's key `id`; `false` when it has no such key.
    async fn revoke_key(&self, cluster: &ClusterName, id: &str) -> Result<bool, StoreError>;
}
