//! The DNS listener: connection pools answered the way SmartConnect answers, over DNS.
//!
//! A site delegates a zone (say `oracle.example.com`) to this listener; an A or AAAA query for
//! `{pool}.{cluster}.{zone}` is one new client connection, answered with one node's address chosen by
//! the pool's rule (the same decision as `POST …/pools/{pool}/connections`) and the pool's TTL.
//! Unknown pools and clusters get NXDOMAIN; names outside the zone REFUSED; a pool with no available
//! member SERVFAIL. It is a thin shell over [`Oracle::connect`]: it parses, asks, and encodes, and a
//! malformed packet gets FORMERR (or nothing, when not even its id can be read) — never a crash.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use tokio::net::UdpSocket;

use crate::cluster::{ClusterName, PoolName};
use crate::connect::{node_ip, IpFamily};
use crate::oracle::{Connections, OracleError};

/// Largest UDP message read (plain DNS is 512; EDNS clients may send more).
const MAX_PACKET: usize = 4_096;
/// Queries answered at once. Each costs store calls shared with the HTTP API, and UDP sources can
/// be forged, so beyond this the listener drops packets (clients retry) rather than starve the API.
const MAX_QUERIES_IN_FLIGHT: usize = 256;

/// Answers DNS queries on `socket` until `shutdown` completes.
pub async fn serve_dns(
    oracle: Arc<Connections>,
    socket: UdpSocket,
    zone: String,
    shutdown: impl Future<Output = ()>,
) {
    let socket = Arc::new(socket);
    let zone: Arc<str> = zone.to_ascii_lowercase().trim_end_matches('.').into();
    let mut buffer = vec![0u8; MAX_PACKET];
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_QUERIES_IN_FLIGHT));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            received = socket.recv_from(&mut buffer) => {
                let Ok((length, peer)) = received else { continue };
                let Ok(slot) = in_flight.clone().try_acquire_owned() else { continue };
                let packet = buffer[..length].to_vec();
                let (oracle, socket, zone) = (oracle.clone(), socket.clone(), zone.clone());
                tokio::spawn(async move {
                    if let Some(reply) = answer(&oracle, &zone, &packet).await {
                        let _ = socket.send_to(&reply, peer).await;
                    }
                    drop(slot);
                });
            }
        }
    }
}

/// The reply to one packet, or `None` to stay silent (unreadable packets, or responses).
pub async fn answer(oracle: &Connections, zone: &str, packet: &[u8]) -> Option<Vec<u8>> {
    let request = match Message::from_vec(packet) {
        Ok(request) => request,
        Err(_) => {
            let id = u16::from_be_bytes([*packet.first()?, *packet.get(1)?]);
            return Message::error_msg(id, OpCode::Query, ResponseCode::FormErr)
                .to_vec()
                .ok();
        }
    };
    if request.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut response = Message::response(request.metadata.id, request.metadata.op_code);
    response.metadata.authoritative = true;
    response.metadata.recursion_desired = request.metadata.recursion_desired;
    response.queries = request.queries.clone();
    response.metadata.response_code = match (request.metadata.op_code, request.queries.as_slice()) {
        (OpCode::Query, [query]) => match resolve(oracle, zone, query).await {
            Ok(records) => {
                response.answers = records;
                ResponseCode::NoError
            }
            Err(code) => code,
        },
        (OpCode::Query, _) => ResponseCode::FormErr,
        _ => ResponseCode::NotImp,
    };
    response.to_vec().ok()
}

/// The answer records for one question, or the response code that says why there are none.
async fn resolve(
    oracle: &Connections,
    zone: &str,
    query: &Query,
) -> Result<Vec<Record>, ResponseCode> {
    let name = query.name().to_ascii().to_ascii_lowercase();
    let name = name.trim_end_matches('.');
    let inside = if name == zone {
        ""
    } else {
        match name
            .strip_suffix(zone)
            .and_then(|rest| rest.strip_suffix('.'))
        {
            Some(inside) => inside,
            None => return Err(ResponseCode::Refused),
        }
    };
    // The zone apex and `{cluster}.{zone}` exist (pools live below them): no data, not NXDOMAIN,
    // so resolvers that minimise query names still find the pools.
    if inside.is_empty() || !inside.contains('.') {
        return Ok(Vec::new());
    }
    let (Some((pool, cluster)), true) = (inside.split_once('.'), inside.matches('.').count() == 1)
    else {
        return Err(ResponseCode::NXDomain);
    };
    let (Ok(cluster), Ok(pool)) = (ClusterName::parse(cluster), PoolName::parse(pool)) else {
        return Err(ResponseCode::NXDomain);
    };
    let family = match query.query_type() {
        RecordType::A => IpFamily::V4,
        RecordType::AAAA => IpFamily::V6,
        // Another type for a pool that exists: no data (NOERROR, no answer).
        _ => {
            return match oracle.pool(&cluster, &pool).await {
                Ok(_) => Ok(Vec::new()),
                Err(error) => Err(failure_code(&error)),
            }
        }
    };
    let connection = match oracle.connect(&cluster, &pool, false, Some(family)).await {
        Ok(connection) => connection,
        // Members exist, just none with an address of this family: no data.
        Err(OracleError::NoNodeOfFamily { .. }) => return Ok(Vec::new()),
        Err(error) => return Err(failure_code(&error)),
    };
    let ttl = u32::try_from(connection.valid_for_ms / 1_000).unwrap_or(u32::MAX);
    let record = match node_ip(&connection.address) {
        Some(IpAddr::V4(ip)) => RData::A(A(ip)),
        Some(IpAddr::V6(ip)) => RData::AAAA(AAAA(ip)),
        None => return Ok(Vec::new()),
    };
    Ok(vec![Record::from_rdata(query.name().clone(), ttl, record)])
}

fn failure_code(error: &OracleError) -> ResponseCode {
    match error {
        OracleError::PoolNotFound { .. } | OracleError::ClusterNotFound(_) => {
            ResponseCode::NXDomain
        }
        _ => ResponseCode::ServFail,
    }
}
