//! Validated names: clusters, silos and grains.
//!
//! Each type can only be built through `parse`, so code that holds one never re-checks it.

use std::fmt;

use crate::validation::{self, Invalid};

/// A cluster name: `[a-z0-9][a-z0-9-]{0,62}`, as the API contract fixes it (it also makes a valid
/// DNS label, which the connection pools' DNS answers rely on).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterName(String);

/// The rule of cluster and pool names, as the published contract states it.
pub const DNS_LABEL_PATTERN: &str = "^[a-z0-9][a-z0-9-]{0,62}$";

/// Checks a DNS-label-like name: `[a-z0-9][a-z0-9-]{0,62}`.
fn check_dns_label(field: &str, value: &str) -> Result<(), Invalid> {
    let valid_first = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let valid_rest = |c: char| valid_first(c) || c == '-';
    let mut chars = value.chars();
    let ok = matches!(chars.next(), Some(c) if valid_first(c))
        && value.len() <= 63
        && chars.all(valid_rest);
    if ok {
        Ok(())
    } else {
        Err(Invalid::one(
            field,
            "must match [a-z0-9][a-z0-9-]{0,62}: lower-case letters, digits and '-', starting with a letter or digit, at most 63 characters",
        ))
    }
}

impl ClusterName {
    pub fn parse(value: &str) -> Result<Self, Invalid> {
        check_dns_label("cluster", value)?;
        Ok(Self(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A connection pool's name, a DNS label like a cluster's (answers are served as
/// `{pool}.{cluster}.{zone}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolName(String);

impl PoolName {
    pub fn parse(value: &str) -> Result<Self, Invalid> {
        check_dns_label("pool", value)?;
        Ok(Self(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PoolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Longest silo id accepted, in characters.
pub const MAX_SILO_ID_CHARS: usize = 255;

/// A silo incarnation's id, conventionally `address@generation` (e.g. `10.0.0.5:11111@139000`).
/// Any printable token is accepted; the Orleans form matters only to strategies that order silos.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiloId(String);

impl SiloId {
    pub fn parse(field: &str, value: &str) -> Result<Self, Invalid> {
        validation::token(field, value, MAX_SILO_ID_CHARS)?;
        Ok(Self(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Which incarnation of which silo this id names: `address@generation` with a numeric
    /// generation gives `(address, generation)`; any other id is its own address with generation 0.
    /// A dead incarnation retires every id at its address whose generation is not greater.
    pub fn incarnation(&self) -> (&str, i64) {
        match self.0.rsplit_once('@') {
            Some((address, generation))
                if !generation.is_empty() && generation.bytes().all(|b| b.is_ascii_digit()) =>
            {
                (address, generation.parse().unwrap_or(i64::MAX))
            }
            _ => (&self.0, 0),
        }
    }

    /// The address part of an `address@generation` id: what clients reach when no address is given.
    pub fn default_address(&self) -> &str {
        self.0
            .rsplit_once('@')
            .map_or(&self.0, |(address, _)| address)
    }
}

impl fmt::Display for SiloId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Longest grain type accepted, in characters.
pub const MAX_GRAIN_TYPE_CHARS: usize = 128;
/// Longest grain id (`type/key`) accepted, in characters. With a silo id of 255 characters, at
/// most four bytes each, it keeps a directory index entry under Postgres' 2704-byte limit.
pub const MAX_GRAIN_ID_CHARS: usize = 400;
/// Longest grain id a directory may hold: versions before the 400-character limit took up to 1024
/// bytes. Such grains are released as ever; only cursors still need to name them.
pub const MAX_STORED_GRAIN_ID_CHARS: usize = 1024;

/// The rule of grain types, as the published contract states it.
pub fn grain_type_pattern() -> String {
    validation::token_pattern("/")
}

/// The rule of grain ids, as the published contract states it: a grain type, '/', a key of
/// printable characters.
pub fn grain_id_pattern() -> String {
    format!(
        "^{}/{}$",
        validation::token_class("/", &format!("{{1,{MAX_GRAIN_TYPE_CHARS}}}")),
        validation::label_pattern()
            .trim_start_matches('^')
            .trim_end_matches('$')
    )
}

/// Checks a grain type name: a token without '/', since '/' separates type from key.
pub fn check_grain_type(field: &str, value: &str) -> Result<(), Invalid> {
    validation::token(field, value, MAX_GRAIN_TYPE_CHARS)?;
    if value.contains('/') {
        return Err(Invalid::one(field, "must not contain '/'"));
    }
    Ok(())
}

/// A grain id `type/key`. The type (before the first '/') selects placement policy and decides
/// which silos can host it; the key may contain anything printable, '/' included.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GrainId {
    id: String,
    type_len: usize,
}

impl GrainId {
    pub fn parse(field: &str, value: &str) -> Result<Self, Invalid> {
        validation::label(field, value, MAX_GRAIN_ID_CHARS)?;
        let Some((grain_type, key)) = value.split_once('/') else {
            return Err(Invalid::one(
                field,
                "must be `type/key`, e.g. `user/alice`: the type, a '/', then the key",
            ));
        };
        check_grain_type(field, grain_type).map_err(|_| {
            Invalid::one(
                field,
                format!("the grain type (before the first '/') must be 1 to {MAX_GRAIN_TYPE_CHARS} characters without white space"),
            )
        })?;
        if key.is_empty() {
            return Err(Invalid::one(field, "the key after '/' must not be empty"));
        }
        Ok(Self {
            id: value.to_owned(),
            type_len: grain_type.len(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.id
    }

    pub fn grain_type(&self) -> &str {
        &self.id[..self.type_len]
    }

    pub fn key(&self) -> &str {
        &self.id[self.type_len + 1..]
    }
}

impl fmt::Display for GrainId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_incarnation_is_the_address_and_numeric_generation_else_the_whole_id() {
        let id = |s: &str| SiloId::parse("silo", s).unwrap();
        assert_eq!(
            id("10.0.0.5:11111@139000").incarnation(),
            ("10.0.0.5:11111", 139_000)
        );
        assert_eq!(id("a@b@7").incarnation(), ("a@b", 7));
        assert_eq!(id("worker-1").incarnation(), ("worker-1", 0));
        assert_eq!(id("x@y").incarnation(), ("x@y", 0));
        assert_eq!(id("x@").incarnation(), ("x@", 0));
        assert_eq!(id("x@99999999999999999999").incarnation(), ("x", i64::MAX));
    }

    #[test]
    fn cluster_names_follow_the_contract() {
        for good in ["prod", "a", "eu-west-1", "0abc", &"a".repeat(63)] {
            assert!(ClusterName::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "-a", "Prod", "a_b", "a.b", &"a".repeat(64), "é"] {
            assert!(ClusterName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn grain_ids_split_type_from_key_at_the_first_slash() {
        let grain = GrainId::parse("grain", "user/alice/inbox").unwrap();
        assert_eq!(grain.grain_type(), "user");
        assert_eq!(grain.key(), "alice/inbox");
        for bad in ["user", "/alice", "user/", "us er/alice", "user/a\0"] {
            assert!(GrainId::parse("grain", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_silo_address_defaults_to_the_part_before_the_generation() {
        let silo = SiloId::parse("silo", "10.0.0.5:11111@139000").unwrap();
        assert_eq!(silo.default_address(), "10.0.0.5:11111");
        assert_eq!(
            SiloId::parse("silo", "plain").unwrap().default_address(),
            "plain"
        );
    }
}
