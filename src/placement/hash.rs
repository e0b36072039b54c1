//! Orleans' grain hash and silo order, reproduced exactly so that `hash_based` placement picks the
//! same silo Orleans would (reference §1.7, quirks 1–2): a cluster can move its placement to the
//! oracle without remapping a single grain.

use std::cmp::Ordering;
use std::net::IpAddr;

use crate::cluster::SiloId;

/// Orleans' `StableHash` of a byte string: xxHash32 with seed 0, its digest bytes read back in the
/// opposite order (Orleans writes the digest big-endian and reads it little-endian).
pub fn stable_hash(bytes: &[u8]) -> u32 {
    xxhash_rust::xxh32::xxh32(bytes, 0).swap_bytes()
}

/// `GrainId.UniformHash`: `hash(type) · 31 + hash(key)`, wrapping at 2^32.
pub fn grain_hash(grain_type: &str, key: &str) -> u32 {
    stable_hash(grain_type.as_bytes())
        .wrapping_mul(31)
        .wrapping_add(stable_hash(key.as_bytes()))
}

/// The parts of an `ip:port@generation` silo id that Orleans orders by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SiloAddress {
    generation: i64,
    port: u16,
    ip: IpAddr,
}

impl SiloAddress {
    /// Parses `10.0.0.5:11111@139000` or `[::1]:11111@7`.
    fn parse(id: &str) -> Option<Self> {
        let (endpoint, generation) = id.rsplit_once('@')?;
        let address: std::net::SocketAddr = endpoint.parse().ok()?;
        Some(Self {
            generation: generation.parse().ok()?,
            port: address.port(),
            ip: address.ip(),
        })
    }

    /// Orleans' `SiloAddress.CompareTo`: generation, then port, then address family (IPv4 first),
    /// then the address — IPv4 as its octets read as a little-endian number (so the last octet
    /// weighs most: 10.0.1.1 < 10.0.0.2), IPv6 byte by byte.
    fn orleans_cmp(&self, other: &Self) -> Ordering {
        self.generation
            .cmp(&other.generation)
            .then(self.port.cmp(&other.port))
            .then_with(|| match (self.ip, other.ip) {
                (IpAddr::V4(a), IpAddr::V4(b)) => {
                    u32::from_le_bytes(a.octets()).cmp(&u32::from_le_bytes(b.octets()))
                }
                (IpAddr::V6(a), IpAddr::V6(b)) => a.octets().cmp(&b.octets()),
                (IpAddr::V4(_), IpAddr::V6(_)) => Ordering::Less,
                (IpAddr::V6(_), IpAddr::V4(_)) => Ordering::Greater,
            })
    }
}

/// Orders silo ids as Orleans orders silo addresses. Ids not of the `ip:port@generation` form come
/// after all that are, in byte order, so every replica agrees on the order whatever the ids.
pub fn orleans_order(a: &SiloId, b: &SiloId) -> Ordering {
    match (
        SiloAddress::parse(a.as_str()),
        SiloAddress::parse(b.as_str()),
    ) {
        (Some(x), Some(y)) => x.orleans_cmp(&y).then_with(|| a.cmp(b)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_orleans_conformance_vector_holds() {
        // GrainReferenceTest: grain type "simple", integer key 1234 (hex "4D2").
        assert_eq!(grain_hash("simple", "4D2"), 3_643_965_955);
        assert_eq!(stable_hash(b"simple"), 2_874_038_452);
        assert_eq!(stable_hash(b"4D2"), 448_119_863);
    }

    #[test]
    fn the_reference_table_of_grain_hashes_holds() {
        let table = [
            ("simple", "4D2", 3_643_965_955_u32, [1, 2, 3, 2]),
            ("user", "alice", 324_261_179, [1, 2, 3, 4]),
            ("user", "bob", 2_109_887_944, [0, 1, 0, 4]),
            ("order", "12345", 454_847_334, [0, 0, 2, 4]),
            ("device", "0", 547_996_111, [1, 1, 3, 1]),
            ("chat", "room-42", 1_949_740_917, [1, 0, 1, 2]),
        ];
        for (grain_type, key, hash, mods) in table {
            assert_eq!(grain_hash(grain_type, key), hash, "{grain_type}/{key}");
            let masked = hash & 0x7FFF_FFFF;
            for (n, expected) in (2..=5).zip(mods) {
                assert_eq!(masked % n, expected, "{grain_type}/{key} mod {n}");
            }
        }
        assert_eq!(stable_hash(b"user"), 2_713_515_130);
        assert_eq!(stable_hash(b"alice"), 2_104_638_069);
    }

    fn id(s: &str) -> SiloId {
        SiloId::parse("silo", s).unwrap()
    }

    #[test]
    fn silos_order_by_generation_then_port_then_little_endian_ipv4() {
        let mut silos = [
            id("10.0.0.2:11111@2"),
            id("10.0.0.2:11112@1"),
            id("10.0.0.2:11111@1"),
            id("10.0.1.1:11111@1"),
            id("[::1]:11111@1"),
            id("custom-silo"),
        ];
        silos.sort_by(orleans_order);
        let order: Vec<&str> = silos.iter().map(SiloId::as_str).collect();
        assert_eq!(
            order,
            [
                "10.0.1.1:11111@1", // 0x0101000A < 0x0200000A: the last octet weighs most
                "10.0.0.2:11111@1",
                "[::1]:11111@1", // IPv6 after IPv4 at the same generation and port
                "10.0.0.2:11112@1",
                "10.0.0.2:11111@2",
                "custom-silo", // not an Orleans address: after all that are
            ]
        );
    }
}
