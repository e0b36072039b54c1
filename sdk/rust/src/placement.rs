//! Placement for callers ([`Placement::locate`]) and for the silo a call arrived at
//! ([`Placement::claim`]), and [`Placement::release`].
//!
//! `locate` may answer from a short cache: an answer is one activation (silo and epoch), and a
//! caller told by that silo that it does not run it [`Placement::forget`]s that epoch and asks
//! again. `claim` always asks the oracle as the requesting silo, so it gets the store's answer,
//! and applies the registration rule ([`crate::decide`]).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use tokio::time::Instant;

use crate::claim::{decide, Claim};
use crate::client::{segment, OracleClient};
use crate::error::OracleError;
use crate::silo::Silo;
use crate::types::PlacementAnswer;

pub struct Placement {
    client: OracleClient,
    silo: Option<Silo>,
    cache_ttl: Duration,
    cache_entries: usize,
    cache: Mutex<HashMap<String, (Instant, PlacementAnswer)>>,
}

impl Placement {
    /// For callers that run no grains: `locate` only.
    pub fn for_callers(client: OracleClient) -> Self {
        Self::new(client, None)
    }

    /// For a silo: `locate`, and `claim` and `release` as that silo.
    pub fn for_silo(silo: &Silo) -> Self {
        Self::new(silo.client().clone(), Some(silo.clone()))
    }

    fn new(client: OracleClient, silo: Option<Silo>) -> Self {
        Self {
            client,
            silo,
            cache_ttl: Duration::from_secs(1),
            cache_entries: 10_000,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps `locate`'s answers for `ttl` (zero: not at all), at most `entries` of them.
    pub fn with_cache(mut self, ttl: Duration, entries: usize) -> Self {
        self.cache_ttl = ttl;
        self.cache_entries = entries;
        self
    }

    fn cache(&self) -> MutexGuard<'_, HashMap<String, (Instant, PlacementAnswer)>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where `grain` runs (placing it if it runs nowhere).
    pub async fn locate(&self, grain: &str) -> Result<PlacementAnswer, OracleError> {
        let now = Instant::now();
        if let Some((at, answer)) = self.cache().get(grain) {
            if now.duration_since(*at) < self.cache_ttl {
                return Ok(answer.clone());
            }
        }
        let answer: PlacementAnswer = self
            .client
            .call(
                Method::POST,
                "/placements",
                Some(&json!({ "grain": grain })),
            )
            .await?;
        if !answer.is_stateless() && !self.cache_ttl.is_zero() {
            let mut cache = self.cache();
            if cache.len() >= self.cache_entries {
                cache.clear();
            }
            cache.insert(grain.to_owned(), (now, answer.clone()));
        }
        Ok(answer)
    }

    /// Drops the kept answer for `grain` if it names activation `epoch` (its silo said it does
    /// not run it).
    pub fn forget(&self, grain: &str, epoch: i64) {
        let mut cache = self.cache();
        if cache
            .get(grain)
            .is_some_and(|(_, a)| a.epoch == Some(epoch))
        {
            cache.remove(grain);
        }
    }

    fn silo(&self) -> Result<&Silo, OracleError> {
        self.silo.as_ref().ok_or_else(|| {
            OracleError::unexpected("claim and release need the silo: Placement::for_silo")
        })
    }

    /// For the silo a call arrived at: run the grain here under an epoch, or forward the call.
    /// Run it only while [`Silo::may_run_grains_as`] the claim's silo.
    pub async fn claim(&self, grain: &str) -> Result<Claim, OracleError> {
        let own = self.silo()?.id();
        let body = json!({ "grain": grain, "requesting_silo": own });
        let answer: PlacementAnswer = self
            .client
            .call(Method::POST, "/placements", Some(&body))
            .await?;
        decide(&own, &answer)
    }

    /// Deactivates activation `epoch` of `grain` on this silo (stop running it first). `false`
    /// when the registration was not this one any more (moved, or ended already).
    pub async fn release(&self, grain: &str, epoch: i64) -> Result<bool, OracleError> {
        let own = self.silo()?.id();
        let path = format!(
            "/activations/{}?silo={}&epoch={epoch}",
            segment(grain),
            segment(&own)
        );
        match self.client.call_value(Method::DELETE, &path, None).await {
            Ok(_) => {
                self.forget(grain, epoch);
                Ok(true)
            }
            Err(error) if matches!(error.status, 404 | 409) => Ok(false),
            Err(error) => Err(error),
        }
    }
}
