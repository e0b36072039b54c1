//! A connection pool: which silos are its members, the rule that picks one, and how long a client
//! may cache the answer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ConnectRule;
use crate::cluster::names::MAX_SILO_ID_CHARS;
use crate::cluster::{SiloRecord, SiloStatus};
use crate::placement::ClusterView;
use crate::validation::{self, Invalid, Violations};

/// Which silos belong to a pool: the listed ones, those with a role, or those whose metadata
/// matches every given pair. None of them: every silo of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Members {
    pub silos: Option<Vec<String>>,
    pub role: Option<String>,
    pub metadata: Option<BTreeMap<String, String>>,
}

/// A pool's definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
#[schema(example = json!({
    "members": { "role": "frontend" },
    "rule": "connection_count",
    "burst_aware": true,
    "ttl_seconds": 5
}))]
pub struct Pool {
    pub members: Members,
    pub rule: ConnectRule,
    /// Spread bursts: prefer the node given the fewest connections since the last sample.
    pub burst_aware: bool,
    /// How long a client (or DNS resolver) may reuse an answer, 0 to 3600 s.
    pub ttl_seconds: u32,
}

impl Default for Pool {
    fn default() -> Self {
        Self {
            members: Members::default(),
            rule: ConnectRule::RoundRobin,
            burst_aware: false,
            ttl_seconds: 0,
        }
    }
}

/// A pool's bounds, declared once: the published schema states them and [`Pool::validate`]
/// checks them.
pub mod bounds {
    use crate::validation::Bound;

    /// Silos a pool may list by id.
    pub const SILOS: Bound = Bound::new(1.0, 1_000.0);
    pub const MAX_ROLE_CHARS: usize = 128;
    /// Metadata pairs a pool may select by.
    pub const METADATA: Bound = Bound::new(1.0, 16.0);
    pub const MAX_METADATA_KEY_CHARS: usize = 128;
    pub const MAX_METADATA_VALUE_CHARS: usize = 1_024;
    /// How long an answer may be reused.
    pub const TTL_SECONDS: Bound = Bound::new(0.0, 3_600.0);
}

impl Pool {
    /// Checks every field, naming each bad one.
    pub fn validate(&self) -> Result<(), Invalid> {
        let mut v = Violations::default();
        let selectors = [
            self.members.silos.is_some(),
            self.members.role.is_some(),
            self.members.metadata.is_some(),
        ];
        if selectors.iter().filter(|&&s| s).count() > 1 {
            v.add("members", "give at most one of silos, role and metadata");
        }
        if let Some(silos) = &self.members.silos {
            bounds::SILOS.check_count(&mut v, "members.silos", silos.len());
            for (i, silo) in silos.iter().enumerate() {
                v.check(validation::token(
                    &format!("members.silos[{i}]"),
                    silo,
                    MAX_SILO_ID_CHARS,
                ));
            }
        }
        if let Some(role) = &self.members.role {
            v.check(validation::label(
                "members.role",
                role,
                bounds::MAX_ROLE_CHARS,
            ));
        }
        if let Some(metadata) = &self.members.metadata {
            bounds::METADATA.check_count(&mut v, "members.metadata", metadata.len());
            for (key, value) in metadata {
                v.check(validation::token(
                    &format!("members.metadata.{key}"),
                    key,
                    bounds::MAX_METADATA_KEY_CHARS,
                ));
                v.check(validation::label(
                    &format!("members.metadata.{key}"),
                    value,
                    bounds::MAX_METADATA_VALUE_CHARS,
                ));
            }
        }
        bounds::TTL_SECONDS.check(&mut v, "ttl_seconds", f64::from(self.ttl_seconds));
        v.finish(|| ())
    }

    fn selects(&self, silo: &SiloRecord) -> bool {
        let m = &self.members;
        m.silos
            .as_ref()
            .is_none_or(|ids| ids.iter().any(|id| id == silo.id.as_str()))
            && m.role
                .as_ref()
                .is_none_or(|role| silo.profile.role.as_ref() == Some(role))
            && m.metadata.as_ref().is_none_or(|pairs| {
                pairs
                    .iter()
                    .all(|(k, v)| silo.profile.metadata.get(k) == Some(v))
            })
    }

    /// The members a client may be sent to: selected, active and alive, in silo-id order. Dead,
    /// joining, shutting-down and unknown silos are never among them.
    pub fn available<'v>(&self, view: &'v ClusterView) -> Vec<&'v SiloRecord> {
        view.silos
            .iter()
            .filter(|s| view.status(s) == SiloStatus::Active && self.selects(s))
            .collect()
    }
}

/// An address family a DNS query asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpFamily {
    V4,
    V6,
}

/// The IP of a node address: `10.0.0.5:11111`, `[::1]:11111` or a bare IP; `None` for a host name.
pub fn node_ip(address: &str) -> Option<std::net::IpAddr> {
    address
        .parse::<std::net::SocketAddr>()
        .map(|socket| socket.ip())
        .or_else(|_| address.parse::<std::net::IpAddr>())
        .ok()
}

/// Whether a silo's address is an IP of `family`.
pub fn has_family(silo: &SiloRecord, family: IpFamily) -> bool {
    matches!(
        (node_ip(&silo.profile.address), family),
        (Some(std::net::IpAddr::V4(_)), IpFamily::V4)
            | (Some(std::net::IpAddr::V6(_)), IpFamily::V6)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::testing::{silo, view};

    #[test]
    fn only_selected_active_alive_silos_are_available() {
        let mut a = silo("a", SiloStatus::Active, None);
        a.profile.role = Some("storage".into());
        let mut b = silo("b", SiloStatus::ShuttingDown, None);
        b.profile.role = Some("storage".into());
        let c = silo("c", SiloStatus::Active, None);
        let mut dead = silo("d", SiloStatus::Dead, None);
        dead.profile.role = Some("storage".into());
        let v = view(vec![a, b, c, dead]);
        let by_role = Pool {
            members: Members {
                role: Some("storage".into()),
                ..Members::default()
            },
            ..Pool::default()
        };
        assert_eq!(
            by_role
                .available(&v)
                .iter()
                .map(|s| s.id.as_str())
                .collect::<Vec<_>>(),
            ["a"]
        );
        let listed = Pool {
            members: Members {
                silos: Some(vec!["c".into(), "b".into(), "nobody".into()]),
                ..Members::default()
            },
            ..Pool::default()
        };
        assert_eq!(
            listed
                .available(&v)
                .iter()
                .map(|s| s.id.as_str())
                .collect::<Vec<_>>(),
            ["c"]
        );
        assert_eq!(
            Pool::default().available(&v).len(),
            2,
            "no selector: every active silo"
        );
    }

    #[test]
    fn node_addresses_yield_their_ip() {
        assert_eq!(node_ip("10.0.0.5:11111"), Some("10.0.0.5".parse().unwrap()));
        assert_eq!(node_ip("[::1]:11111"), Some("::1".parse().unwrap()));
        assert_eq!(node_ip("10.0.0.9"), Some("10.0.0.9".parse().unwrap()));
        assert_eq!(node_ip("node-7.internal:11111"), None);
    }

    #[test]
    fn selectors_are_exclusive_and_every_field_is_checked() {
        let pool: Pool = serde_json::from_value(serde_json::json!({
            "members": { "role": "x", "silos": [] },
            "ttl_seconds": 7200
        }))
        .unwrap();
        let fields: Vec<String> = pool
            .validate()
            .unwrap_err()
            .0
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(fields, ["members", "members.silos", "ttl_seconds"]);
    }
}
