//! Credentials: issuing, listing and revoking cluster keys, and telling who a request comes from.
//!
//! A replica keeps the keys it has looked up for a short while (`ORACLE_KEY_CACHE_TTL_MS`), so
//! checking a key costs a request a map lookup and one HMAC, not a database round trip. A key
//! revoked through this replica stops working at once; through another replica, within that TTL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::OracleError;
use crate::auth::{self, AdminToken, Caller, Denial, KeyHasher, Scope};
use crate::cluster::ClusterName;
use crate::secret::Secret;
use crate::store::{Store, StoredKey};
use crate::telemetry::metric;

/// Most keys a replica keeps looked up; past it the cache starts again empty (keys are few, so
/// only a flood of distinct valid ids could get there).
const CACHED_KEYS: usize = 100_000;

/// The admin credential of a replica that asks for credentials (no admin token is open mode).
#[derive(Debug, Clone)]
pub struct AdminCredentials {
    pub admin_token: Secret,
    /// What keys are hashed under; the admin token when absent.
    pub key_hash_secret: Option<Secret>,
    /// How long a key looked up stays trusted on this replica.
    pub key_cache_ttl: Duration,
}

/// Who calls, and the cluster keys: the admin token, the key hasher, and the keys this replica
/// looked up lately.
pub struct Credentials {
    store: Arc<dyn Store>,
    admin: Option<(AdminToken, KeyHasher)>,
    ttl: Duration,
    /// Shared with the requests that present them: a hit clones a pointer, not the record.
    cache: Mutex<HashMap<String, (Instant, Arc<StoredKey>)>>,
    /// Grows with every revocation through this replica. A lookup that began before one does not
    /// fill the cache: it may have read the key just before the revocation deleted it.
    revocations: AtomicU64,
}

impl Credentials {
    /// Credentials checked against `admin`'s token, keys hashed under its key hash secret (else
    /// the token) and trusted for its TTL once looked up; `None` is open mode.
    pub(super) fn new(store: Arc<dyn Store>, admin: Option<AdminCredentials>) -> Self {
        let (admin, ttl) = match admin {
            Some(admin) => {
                let hasher =
                    KeyHasher::new(admin.key_hash_secret.as_ref().unwrap_or(&admin.admin_token));
                (
                    Some((AdminToken::new(&admin.admin_token), hasher)),
                    admin.key_cache_ttl,
                )
            }
            None => (None, Duration::ZERO),
        };
        Self {
            store,
            admin,
            ttl,
            cache: Mutex::default(),
            revocations: AtomicU64::new(0),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Arc<StoredKey>)>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn cached(&self, id: &str) -> Option<Arc<StoredKey>> {
        let cache = self.cache();
        let (at, key) = cache.get(id)?;
        (at.elapsed() < self.ttl).then(|| Arc::clone(key))
    }

    /// Keeps `key`, read by a lookup that began at revocation count `seen`, unless a revocation
    /// happened since (checked under the cache's lock, which revocations take too).
    fn remember(&self, key: &Arc<StoredKey>, seen: u64) {
        if self.ttl.is_zero() {
            return;
        }
        let mut cache = self.cache();
        if self.revocations.load(Ordering::SeqCst) != seen {
            return;
        }
        if cache.len() >= CACHED_KEYS {
            cache.clear();
        }
        cache.insert(key.id.clone(), (Instant::now(), Arc::clone(key)));
    }
}

/// A key just issued: its record and the key itself, shown this once.
#[derive(Debug)]
pub struct IssuedKey {
    pub record: StoredKey,
    pub key: Secret,
}

/// Why a request's caller could not be established.
#[derive(Debug)]
pub enum Unidentified {
    Denied(Denial),
    /// The key could not be looked up (the store failed).
    Failed(OracleError),
}

impl Credentials {
    /// No admin token is configured: every request may do everything.
    pub fn open_mode(&self) -> bool {
        self.admin.is_none()
    }

    /// Who presents `bearer` (the `Authorization: Bearer …` value, if any).
    pub async fn identify(&self, bearer: Option<&str>) -> Result<Caller, Unidentified> {
        let Some((admin, hasher)) = &self.admin else {
            return Ok(Caller::Open);
        };
        let Some(presented) = bearer else {
            metric::auth_denied("missing");
            return Err(Unidentified::Denied(Denial::Unauthenticated(
                "send `Authorization: Bearer <key>` with a cluster key or the admin token",
            )));
        };
        if admin.may_be(presented) && admin.matches(presented) {
            return Ok(Caller::Admin);
        }
        let invalid = || {
            metric::auth_denied("invalid");
            Unidentified::Denied(Denial::Unauthenticated(
                "the credential is not a valid key (revoked, mistyped or never issued) nor the admin token",
            ))
        };
        let Some(id) = auth::key_id(presented) else {
            return Err(invalid());
        };
        let key = match self.cached(id) {
            Some(key) => key,
            None => {
                let seen = self.revocations.load(Ordering::SeqCst);
                let found = self
                    .store
                    .key(id)
                    .await
                    .map_err(|e| Unidentified::Failed(e.into()))?;
                let Some(key) = found else {
                    return Err(invalid());
                };
                let key = Arc::new(key);
                self.remember(&key, seen);
                key
            }
        };
        if !hasher.matches(presented, &key.hash) {
            return Err(invalid());
        }
        Ok(Caller::Key {
            id: key.id.clone(),
            cluster: key.cluster.clone(),
            scopes: scopes_of(&key),
        })
    }

    /// Issues a key for `cluster` with `scopes`. Needs the admin token to be configured: in open
    /// mode there is nothing to hash keys with, and no request would need them.
    pub async fn issue_key(
        &self,
        cluster: &ClusterName,
        mut scopes: Vec<Scope>,
        label: String,
    ) -> Result<Option<IssuedKey>, OracleError> {
        let Some((_, hasher)) = &self.admin else {
            return Ok(None);
        };
        scopes.sort();
        scopes.dedup();
        let (id, key) = auth::new_key(&mut rand::rngs::OsRng);
        let record = StoredKey {
            id,
            cluster: cluster.clone(),
            scopes: scopes.iter().map(|s| s.as_str().to_owned()).collect(),
            label,
            hash: hasher.hash(key.expose()),
            created_at_ms: 0,
        };
        let record = self.store.insert_key(record).await?;
        tracing::info!(cluster = %cluster, key = %record.id, scopes = ?record.scopes, "cluster key issued");
        Ok(Some(IssuedKey { record, key }))
    }

    /// The cluster's keys (records only), oldest first.
    pub async fn keys(&self, cluster: &ClusterName) -> Result<Vec<StoredKey>, OracleError> {
        Ok(self.store.keys(cluster).await?)
    }

    /// Revokes the cluster's key `id`: at once on this replica. `false` when there is no such key.
    pub async fn revoke_key(&self, cluster: &ClusterName, id: &str) -> Result<bool, OracleError> {
        let revoked = self.store.revoke_key(cluster, id).await?;
        let mut cache = self.cache();
        self.revocations.fetch_add(1, Ordering::SeqCst);
        cache.remove(id);
        drop(cache);
        if revoked {
            tracing::info!(cluster = %cluster, key = %id, "cluster key revoked");
        }
        Ok(revoked)
    }
}

/// What a stored key may do: the scopes its names stand for (a name this version does not know,
/// written by a newer one, grants nothing here).
pub fn scopes_of(key: &StoredKey) -> Vec<Scope> {
    key.scopes
        .iter()
        .filter_map(|name| Scope::parse(name))
        .collect()
}
