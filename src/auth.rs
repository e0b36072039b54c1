//! Who may do what: cluster keys, the admin token, and the access each route asks for. Pure: no
//! I/O; the caller brings randomness, the stored keys and the configured token.
//!
//! A cluster key reads `pok_<id>_<secret>`: the `pok_` prefix lets secret scanners and people
//! recognise a leaked key, the id (public, 16 hex digits) finds its record without trying every
//! hash, and the secret is 256 random bits. Only a keyed hash (HMAC-SHA-256) of the whole key is
//! stored: a copy of the keys table alone lets no one call the oracle, and with 256-bit secrets
//! a fast keyed hash is as strong as a slow one while costing the request path a microsecond.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use utoipa::ToSchema;

use crate::cluster::ClusterName;
use crate::secret::Secret;

/// What a cluster key may do besides reading its cluster.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// What a silo does: heartbeats, placements, lookups, deactivations, edges, its migrations,
    /// connections.
    Silo,
    /// What an operator does: policy, pools, drains, rebalancer and repartitioner control, silo
    /// removal.
    Operator,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Silo => "silo",
            Self::Operator => "operator",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "silo" => Some(Self::Silo),
            "operator" => Some(Self::Operator),
            _ => None,
        }
    }
}

/// What a route asks of its caller. Declared per operation in the OpenAPI document (the
/// `bearer` security requirement's roles), which is where the HTTP layer reads it from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone (health, metrics, the spec).
    Public,
    /// Any key of the cluster.
    Read,
    /// A key of the cluster with this scope.
    Scoped(Scope),
    /// The admin token only.
    Admin,
}

impl Access {
    /// The roles of the route's `bearer` security requirement, as the spec spells them.
    pub fn from_roles(roles: &[&str]) -> Option<Self> {
        match roles {
            [] => Some(Self::Read),
            ["admin"] => Some(Self::Admin),
            [scope] => Scope::parse(scope).map(Self::Scoped),
            _ => None,
        }
    }
}

/// Who is calling, once their credential is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Open mode: no credential is configured, everyone may do everything.
    Open,
    Admin,
    Key {
        id: String,
        cluster: ClusterName,
        scopes: Vec<Scope>,
    },
}

impl Caller {
    /// How the caller is named in logs: never a secret.
    pub fn log_name(&self) -> String {
        match self {
            Self::Open => "open".to_owned(),
            Self::Admin => "admin".to_owned(),
            Self::Key { id, .. } => format!("key:{id}"),
        }
    }
}

/// Why a caller may not do what it asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// No credential, or one that is not valid (401).
    Unauthenticated(&'static str),
    /// A valid credential that does not allow this (403).
    Forbidden(String),
}

/// Whether `caller` may use a route asking `access` on `cluster`.
pub fn authorize(caller: &Caller, cluster: &ClusterName, access: Access) -> Result<(), Denial> {
    match (caller, access) {
        (Caller::Open | Caller::Admin, _) | (_, Access::Public) => Ok(()),
        (Caller::Key { .. }, Access::Admin) => authorize_admin(caller),
        (Caller::Key { cluster: own, .. }, _) if own != cluster => Err(Denial::Forbidden(format!(
            "this key belongs to another cluster, not `{cluster}`"
        ))),
        (Caller::Key { .. }, Access::Read) => Ok(()),
        (Caller::Key { scopes, .. }, Access::Scoped(scope)) if scopes.contains(&scope) => Ok(()),
        (Caller::Key { .. }, Access::Scoped(scope)) => Err(Denial::Forbidden(format!(
            "this needs a key with the `{}` scope",
            scope.as_str()
        ))),
    }
}

/// Whether `caller` may use a route that is about no one cluster: only the admin may (anyone in
/// open mode).
pub fn authorize_admin(caller: &Caller) -> Result<(), Denial> {
    match caller {
        Caller::Open | Caller::Admin => Ok(()),
        Caller::Key { .. } => Err(Denial::Forbidden(
            "this needs the admin token; cluster keys cannot do it".to_owned(),
        )),
    }
}

/// The prefix of every cluster key.
pub const KEY_PREFIX: &str = "pok_";
const ID_HEX: usize = 16;
const SECRET_HEX: usize = 64;

/// A new key: its public id and the whole key, which is shown once and then only its hash kept.
pub fn new_key(rng: &mut impl rand::RngCore) -> (String, Secret) {
    let mut id = [0u8; ID_HEX / 2];
    let mut secret = [0u8; SECRET_HEX / 2];
    rng.fill_bytes(&mut id);
    rng.fill_bytes(&mut secret);
    let id = hex(&id);
    let key = Secret::new(format!("{KEY_PREFIX}{id}_{}", hex(&secret)));
    (id, key)
}

/// The id of a presented key, when it has a key's shape.
pub fn key_id(presented: &str) -> Option<&str> {
    let rest = presented.strip_prefix(KEY_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    (is_key_id(id) && is_lower_hex(secret, SECRET_HEX)).then_some(id)
}

/// Whether `id` could name a key (16 lower-case hex digits).
pub fn is_key_id(id: &str) -> bool {
    is_lower_hex(id, ID_HEX)
}

fn is_lower_hex(text: &str, len: usize) -> bool {
    text.len() == len
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hashes keys with HMAC-SHA-256 under a secret of the deployment (`ORACLE_KEY_HASH_SECRET`, else
/// the admin token): every replica computes the same hash, and the stored hashes are useless
/// without that secret.
#[derive(Clone)]
pub struct KeyHasher {
    mac: Hmac<Sha256>,
}

impl KeyHasher {
    pub fn new(secret: &Secret) -> Self {
        let mut derive = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes())
            .expect("HMAC takes a key of any length");
        derive.update(b"placement-oracle cluster key hashing v1");
        let pepper = derive.finalize().into_bytes();
        Self {
            mac: Hmac::<Sha256>::new_from_slice(&pepper).expect("HMAC takes a key of any length"),
        }
    }

    pub fn hash(&self, key: &str) -> Vec<u8> {
        let mut mac = self.mac.clone();
        mac.update(key.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    /// Whether `presented` hashes to `stored`, in time that does not depend on where they differ.
    pub fn matches(&self, presented: &str, stored: &[u8]) -> bool {
        self.hash(presented).ct_eq(stored).into()
    }
}

impl std::fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyHasher(***)")
    }
}

/// The admin token as requests are checked against it: its digest, computed once, so a request
/// costs one hash of what it presents.
#[derive(Clone)]
pub struct AdminToken {
    digest: [u8; 32],
    /// Whether the token itself has a cluster key's shape (then a key-shaped credential may be it).
    key_shaped: bool,
}

impl AdminToken {
    pub fn new(token: &Secret) -> Self {
        Self {
            digest: Sha256::digest(token.expose().as_bytes()).into(),
            key_shaped: key_id(token.expose()).is_some(),
        }
    }

    /// Whether `presented` is the admin token, in time that does not depend on either (both are
    /// hashed, so not even their lengths are compared directly).
    pub fn matches(&self, presented: &str) -> bool {
        let given = Sha256::digest(presented.as_bytes());
        self.digest.ct_eq(given.as_slice()).into()
    }

    /// Whether `presented` needs comparing with the token: a credential with a cluster key's shape
    /// is a key, unless the token has that shape too. (What this tells a caller, that the token is
    /// not key-shaped, is no secret.)
    pub fn may_be(&self, presented: &str) -> bool {
        self.key_shaped || key_id(presented).is_none()
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn cluster(name: &str) -> ClusterName {
        ClusterName::parse(name).unwrap()
    }

    fn key(cluster_name: &str, scopes: &[Scope]) -> Caller {
        Caller::Key {
            id: "0123456789abcdef".into(),
            cluster: cluster(cluster_name),
            scopes: scopes.to_vec(),
        }
    }

    #[test]
    fn keys_reach_their_own_cluster_within_their_scopes_only() {
        let prod = cluster("prod");
        let silo = key("prod", &[Scope::Silo]);
        let operator = key("prod", &[Scope::Operator]);
        let both = key("prod", &[Scope::Silo, Scope::Operator]);
        let other = key("staging", &[Scope::Silo, Scope::Operator]);
        let silo_access = Access::Scoped(Scope::Silo);
        let operator_access = Access::Scoped(Scope::Operator);

        assert_eq!(authorize(&silo, &prod, Access::Read), Ok(()));
        assert_eq!(authorize(&silo, &prod, silo_access), Ok(()));
        assert!(matches!(
            authorize(&silo, &prod, operator_access),
            Err(Denial::Forbidden(_))
        ));
        assert!(matches!(
            authorize(&operator, &prod, silo_access),
            Err(Denial::Forbidden(_))
        ));
        assert_eq!(authorize(&operator, &prod, operator_access), Ok(()));
        assert_eq!(authorize(&both, &prod, operator_access), Ok(()));
        assert!(matches!(
            authorize(&both, &prod, Access::Admin),
            Err(Denial::Forbidden(_))
        ));
        for access in [Access::Read, silo_access, operator_access] {
            assert!(matches!(
                authorize(&other, &prod, access),
                Err(Denial::Forbidden(_))
            ));
            assert_eq!(authorize(&Caller::Admin, &prod, access), Ok(()));
            assert_eq!(authorize(&Caller::Open, &prod, access), Ok(()));
        }
        assert_eq!(authorize(&other, &prod, Access::Public), Ok(()));
    }

    #[test]
    fn a_new_key_has_the_recognisable_shape_and_its_hash_checks_it() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let (id, key) = new_key(&mut rng);
        let (other_id, other) = new_key(&mut rng);
        assert_ne!(id, other_id);
        assert!(key.expose().starts_with("pok_"));
        assert_eq!(key_id(key.expose()), Some(id.as_str()));
        assert_eq!(
            key.expose().len(),
            KEY_PREFIX.len() + ID_HEX + 1 + SECRET_HEX
        );

        let hasher = KeyHasher::new(&Secret::new("an-admin-token-of-enough-length"));
        let stored = hasher.hash(key.expose());
        assert!(hasher.matches(key.expose(), &stored));
        assert!(!hasher.matches(other.expose(), &stored));
        let elsewhere = KeyHasher::new(&Secret::new("another-admin-token-entirely"));
        assert!(
            !elsewhere.matches(key.expose(), &stored),
            "the hash is keyed"
        );
        assert!(!format!("{hasher:?}").contains("admin"));
    }

    #[test]
    fn only_well_formed_keys_have_an_id() {
        let id = "0123456789abcdef";
        let secret = "ab".repeat(32);
        assert_eq!(key_id(&format!("pok_{id}_{secret}")), Some(id));
        assert_eq!(key_id(&format!("pok_{id}_{secret}0")), None);
        assert_eq!(
            key_id(&format!("pok_{}_{secret}", "0123456789ABCDEF")),
            None
        );
        assert_eq!(key_id(&format!("xyz_{id}_{secret}")), None);
        assert_eq!(key_id(&format!("pok_{id}{secret}")), None);
        assert_eq!(key_id(""), None);
    }

    #[test]
    fn the_admin_token_matches_only_itself() {
        let admin = AdminToken::new(&Secret::new("an-admin-token-of-enough-length"));
        assert!(admin.matches("an-admin-token-of-enough-length"));
        assert!(!admin.matches("an-admin-token-of-enough-lengt"));
        assert!(!admin.matches(""));
        assert!(!format!("{admin:?}").contains("admin-token"));
    }

    #[test]
    fn a_key_shaped_credential_is_compared_with_the_token_only_when_the_token_is_key_shaped() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let (_, key) = new_key(&mut rng);
        let plain = AdminToken::new(&Secret::new("an-admin-token-of-enough-length"));
        assert!(!plain.may_be(key.expose()));
        assert!(plain.may_be("an-admin-token-of-enough-length"));
        let (_, shaped_token) = new_key(&mut rng);
        let shaped = AdminToken::new(&shaped_token);
        assert!(shaped.may_be(key.expose()));
        assert!(shaped.may_be(shaped_token.expose()) && shaped.matches(shaped_token.expose()));
    }

    #[test]
    fn only_the_admin_and_open_mode_reach_routes_about_no_cluster() {
        assert_eq!(authorize_admin(&Caller::Admin), Ok(()));
        assert_eq!(authorize_admin(&Caller::Open), Ok(()));
        let key = key("prod", &[Scope::Silo, Scope::Operator]);
        assert!(matches!(authorize_admin(&key), Err(Denial::Forbidden(_))));
    }

    #[test]
    fn roles_name_the_access() {
        assert_eq!(Access::from_roles(&[]), Some(Access::Read));
        assert_eq!(
            Access::from_roles(&["silo"]),
            Some(Access::Scoped(Scope::Silo))
        );
        assert_eq!(
            Access::from_roles(&["operator"]),
            Some(Access::Scoped(Scope::Operator))
        );
        assert_eq!(Access::from_roles(&["admin"]), Some(Access::Admin));
        assert_eq!(Access::from_roles(&["root"]), None);
        assert_eq!(Access::from_roles(&["silo", "operator"]), None);
    }
}
