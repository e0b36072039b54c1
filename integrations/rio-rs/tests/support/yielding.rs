//! rio-rs's own Postgres backends with one yield to the runtime after each call its service
//! makes just before it activates an object, as the oracle's placement does
//! (`yield_before_activation` in src/placement.rs says why). Without it, rio-rs 0.7.2's servers
//! stall for good under this test's load in most runs (a worker blocked activating an object
//! on a registry shard whose reader waits in that worker's LIFO slot), and the comparison would
//! measure that stall instead of the directory. Nothing else changes: every call goes to
//! rio-rs's backend as it is.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rio_rs::cluster::storage::{Member, MembershipResult, MembershipStorage, MembershipUnitResult};
use rio_rs::errors::ObjectPlacementError;
use rio_rs::object_placement::{ObjectPlacement, ObjectPlacementItem};
use rio_rs::ObjectId;

#[derive(Clone, Debug)]
pub struct Yielding<T>(pub T);

#[async_trait]
impl<P: ObjectPlacement> ObjectPlacement for Yielding<P> {
    async fn prepare(&self) -> Result<(), ObjectPlacementError> {
        self.0.prepare().await
    }

    async fn update(&self, item: ObjectPlacementItem) -> Result<(), ObjectPlacementError> {
        let updated = self.0.update(item).await;
        tokio::task::yield_now().await;
        updated
    }

    async fn lookup(&self, object_id: &ObjectId) -> Result<Option<String>, ObjectPlacementError> {
        let found = self.0.lookup(object_id).await;
        tokio::task::yield_now().await;
        found
    }

    async fn clean_server(&self, address: String) -> Result<(), ObjectPlacementError> {
        self.0.clean_server(address).await
    }

    async fn remove(&self, object_id: &ObjectId) -> Result<(), ObjectPlacementError> {
        self.0.remove(object_id).await
    }
}

#[async_trait]
impl<S: MembershipStorage> MembershipStorage for Yielding<S> {
    async fn prepare(&self) {
        self.0.prepare().await
    }

    async fn push(&self, member: Member) -> MembershipUnitResult {
        self.0.push(member).await
    }

    async fn remove(&self, ip: &str, port: &str) -> MembershipUnitResult {
        self.0.remove(ip, port).await
    }

    async fn set_is_active(&self, ip: &str, port: &str, active: bool) -> MembershipUnitResult {
        self.0.set_is_active(ip, port, active).await
    }

    async fn members(&self) -> MembershipResult<Vec<Member>> {
        self.0.members().await
    }

    async fn notify_failure(&self, ip: &str, port: &str) -> MembershipUnitResult {
        self.0.notify_failure(ip, port).await
    }

    async fn member_failures(&self, ip: &str, port: &str) -> MembershipResult<Vec<DateTime<Utc>>> {
        self.0.member_failures(ip, port).await
    }

    async fn active_members(&self) -> MembershipResult<Vec<Member>> {
        self.0.active_members().await
    }

    async fn is_active(&self, ip: &str, port: &str) -> MembershipResult<bool> {
        let active = self.0.is_active(ip, port).await;
        tokio::task::yield_now().await;
        active
    }
}
