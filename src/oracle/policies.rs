//! Each cluster's placement policy: read with its version, and replaced under optimistic
//! concurrency.

use std::sync::Arc;

use super::views::ClusterViews;
use super::OracleError;
use crate::cluster::ClusterName;
use crate::placement::webhook_hosts::WebhookHosts;
use crate::policy::Policy;
use crate::store::Store;
use crate::telemetry::metric;

/// Reads and writes policies.
pub struct Policies {
    store: Arc<dyn Store>,
    views: Arc<ClusterViews>,
    /// The hosts a policy's webhook URLs may name (checked when a policy is written).
    webhook_hosts: WebhookHosts,
}

impl Policies {
    pub(super) fn new(
        store: Arc<dyn Store>,
        views: Arc<ClusterViews>,
        webhook_hosts: WebhookHosts,
    ) -> Self {
        Self {
            store,
            views,
            webhook_hosts,
        }
    }

    /// The cluster's policy and its version.
    pub async fn policy(&self, cluster: &ClusterName) -> Result<(Policy, i64), OracleError> {
        let membership = self.views.read(cluster).await?;
        Ok((
            Arc::unwrap_or_clone(membership.policy),
            membership.policy_version,
        ))
    }

    /// Replaces the cluster's policy if it is still at version `expected` (`None`: any), creating
    /// the cluster if needed. Returns the new version. Other replicas decide with it within
    /// [`super::views::MEMBERSHIP_MAX_AGE`]; this one at once. A webhook URL whose host this replica may not
    /// call is refused here, in the use case, so no way of writing a policy can skip the check.
    pub async fn put_policy(
        &self,
        cluster: &ClusterName,
        policy: &Policy,
        expected: Option<i64>,
    ) -> Result<i64, OracleError> {
        policy.validate_webhook_hosts(&self.webhook_hosts)?;
        let written = self
            .store
            .put_policy(cluster, policy, expected)
            .await
            .inspect_err(|_| metric::store_error("put_policy"))?;
        self.views.forget(cluster);
        match written {
            Ok(version) => {
                tracing::info!(%cluster, version, "placement policy changed");
                Ok(version)
            }
            Err(current) => Err(OracleError::PolicyVersionMismatch { current }),
        }
    }
}
