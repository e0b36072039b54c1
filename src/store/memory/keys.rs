//! Cluster keys in the embedded store: a map by id beside the clusters.

use async_trait::async_trait;

use super::MemoryStore;
use crate::cluster::ClusterName;
use crate::store::{KeyStore, LimitReached, StoreError, StoredKey, MAX_KEYS_PER_CLUSTER};

impl MemoryStore {
    fn key_map(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, StoredKey>> {
        // Every change is one insert or remove, so a poisoned lock holds nothing half-done.
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl KeyStore for MemoryStore {
    async fn insert_key(&self, mut key: StoredKey) -> Result<StoredKey, StoreError> {
        let mut keys = self.key_map();
        let held = keys.values().filter(|k| k.cluster == key.cluster).count() as u64;
        if held >= MAX_KEYS_PER_CLUSTER {
            return Err(LimitReached::Keys {
                cluster: key.cluster.to_string(),
                max: MAX_KEYS_PER_CLUSTER,
            }
            .into());
        }
        if keys.contains_key(&key.id) {
            return Err(StoreError::Corrupt(format!("key id {} is taken", key.id)));
        }
        key.created_at_ms = self.clock.now_ms();
        keys.insert(key.id.clone(), key.clone());
        Ok(key)
    }

    async fn key(&self, id: &str) -> Result<Option<StoredKey>, StoreError> {
        Ok(self.key_map().get(id).cloned())
    }

    async fn keys(&self, cluster: &ClusterName) -> Result<Vec<StoredKey>, StoreError> {
        let mut keys: Vec<StoredKey> = self
            .key_map()
            .values()
            .filter(|k| &k.cluster == cluster)
            .cloned()
            .collect();
        keys.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        Ok(keys)
    }

    async fn revoke_key(&self, cluster: &ClusterName, id: &str) -> Result<bool, StoreError> {
        let mut keys = self.key_map();
        if keys.get(id).is_some_and(|k| &k.cluster == cluster) {
            keys.remove(id);
            return Ok(true);
        }
        Ok(false)
    }
}
