//! rio-rs's `MembershipStorage` and `ClusterProvider`, answered by the oracle.
//!
//! Membership is the oracle's: a server is a member because its silo heartbeats (with the
//! server's load), and it stops being one when it leaves or the oracle declares it dead after
//! the cluster's TTL of silence. So the writes rio-rs's peer-to-peer provider makes (`push`,
//! `set_is_active`, `remove`) are refused, and a peer's failed ping (`notify_failure`) is logged
//! and otherwise ignored: the oracle has no failure votes, its verdict is the heartbeat's
//! (a server that peers cannot reach but that still heartbeats keeps its objects, which is
//! safe: it runs them only under its lease). Reads come from the oracle's membership list.
//!
//! On a server, `is_active` answers yes without asking: rio-rs asks it about the address a
//! lookup returned, and that address is the oracle's answer already (this server, or the silo
//! holding the registration). A holder that has died since costs the caller one more redirect.

use std::fmt;

use async_trait::async_trait;
use placement_oracle_sdk::{segment, OracleClient};
use reqwest::Method;
use rio_rs::cluster::membership_protocol::ClusterProvider;
use rio_rs::cluster::storage::{Member, MembershipResult, MembershipStorage, MembershipUnitResult};
use rio_rs::errors::{ClusterProviderServeError, MembershipError};
use serde::Deserialize;
use std::sync::Arc;

use crate::gate::Gate;

/// The oracle's membership of one cluster, as rio-rs's membership storage; cheap to clone.
#[derive(Clone)]
pub struct OracleMembership {
    client: OracleClient,
    /// Set on a server (`for_server`): `is_active` trusts the placement it was asked about.
    on_server: bool,
}

impl OracleMembership {
    /// For clients (rio-rs's `ClientBuilder::members_storage`): the active servers, read from
    /// the oracle.
    pub fn for_clients(client: OracleClient) -> Self {
        Self {
            client,
            on_server: false,
        }
    }

    /// For a server that places through [`crate::OraclePlacement`].
    pub fn for_server(client: OracleClient) -> Self {
        Self {
            client,
            on_server: true,
        }
    }
}

impl fmt::Debug for OracleMembership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OracleMembership")
            .field("cluster", &self.client.cluster())
            .field("on_server", &self.on_server)
            .finish()
    }
}

#[derive(Deserialize)]
struct SiloPage {
    silos: Vec<SiloEntry>,
    next_cursor: Option<String>,
}

#[derive(Deserialize)]
struct SiloEntry {
    address: String,
    status: String,
}

fn read_only(what: &str) -> MembershipError {
    MembershipError::ReadOnly(format!(
        "{what}: membership is the oracle's (a server joins by heartbeating and leaves through the SDK's Silo)"
    ))
}

/// A member per address, active if any incarnation at that address is.
fn members_of(silos: Vec<SiloEntry>) -> Vec<Member> {
    let mut by_address: Vec<(String, bool)> = Vec::new();
    for silo in silos {
        let active = silo.status == "active";
        match by_address.iter_mut().find(|(a, _)| *a == silo.address) {
            Some((_, was)) => *was |= active,
            None => by_address.push((silo.address, active)),
        }
    }
    by_address
        .into_iter()
        .filter_map(|(address, active)| {
            let (ip, port) = address.rsplit_once(':')?;
            let mut member = Member::new(ip.to_owned(), port.to_owned());
            member.set_active(active);
            Some(member)
        })
        .collect()
}

#[async_trait]
impl MembershipStorage for OracleMembership {
    async fn push(&self, _member: Member) -> MembershipUnitResult {
        Err(read_only("push"))
    }

    async fn remove(&self, _ip: &str, _port: &str) -> MembershipUnitResult {
        Err(read_only("remove"))
    }

    async fn set_is_active(&self, _ip: &str, _port: &str, _active: bool) -> MembershipUnitResult {
        Err(read_only("set_is_active"))
    }

    async fn members(&self) -> MembershipResult<Vec<Member>> {
        let mut silos = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = "/silos?limit=1000".to_owned();
            if let Some(after) = &cursor {
                path.push_str(&format!("&cursor={}", segment(after)));
            }
            let page: SiloPage = self
                .client
                .call(Method::GET, &path, None)
                .await
                .map_err(|e| MembershipError::Upstream(e.to_string()))?;
            silos.extend(page.silos);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(members_of(silos)),
            }
        }
    }

    async fn notify_failure(&self, ip: &str, port: &str) -> MembershipUnitResult {
        tracing::info!(%ip, %port, "a peer could not be reached; the oracle judges liveness by heartbeats");
        Ok(())
    }

    async fn member_failures(
        &self,
        _ip: &str,
        _port: &str,
    ) -> MembershipResult<Vec<chrono::DateTime<chrono::Utc>>> {
        Ok(Vec::new())
    }

    async fn is_active(&self, ip: &str, port: &str) -> MembershipResult<bool> {
        if self.on_server {
            return Ok(true);
        }
        let address = format!("{ip}:{port}");
        Ok(self
            .active_members()
            .await?
            .iter()
            .any(|m| m.address() == address))
    }
}

/// rio-rs's cluster provider for a server whose silo the SDK runs: joined before the server
/// runs, it has nothing to do but wait until the silo leaves (rio-rs stops its server when the
/// provider returns, so it must not return earlier).
#[derive(Clone)]
pub struct OracleClusterProvider {
    membership: OracleMembership,
    gate: Arc<Gate>,
}

impl OracleClusterProvider {
    pub fn new(membership: OracleMembership, gate: Arc<Gate>) -> Self {
        Self { membership, gate }
    }
}

#[async_trait]
impl ClusterProvider<OracleMembership> for OracleClusterProvider {
    fn members_storage(&self) -> &OracleMembership {
        &self.membership
    }

    async fn serve(&self, _address: &str) -> Result<(), ClusterProviderServeError> {
        self.gate.until_left().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(address: &str, status: &str) -> SiloEntry {
        SiloEntry {
            address: address.into(),
            status: status.into(),
        }
    }

    #[test]
    fn an_address_is_one_member_active_if_any_incarnation_there_is() {
        let members = members_of(vec![
            entry("127.0.0.1:7001", "dead"),
            entry("127.0.0.1:7001", "active"),
            entry("127.0.0.1:7002", "shutting_down"),
        ]);
        let seen: Vec<(String, bool)> = members.iter().map(|m| (m.address(), m.active())).collect();
        assert_eq!(
            seen,
            [
                ("127.0.0.1:7001".to_owned(), true),
                ("127.0.0.1:7002".to_owned(), false)
            ]
        );
    }
}
