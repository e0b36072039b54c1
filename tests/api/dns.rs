//! The DNS listener, queried by a real resolver (hickory-resolver) over UDP on loopback.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;
use serde_json::json;
use tokio::net::UdpSocket;

use crate::helpers::{Backend, TestApp};

const ZONE: &str = "oracle.test";

/// A resolver that asks only the listener at `port`, caches nothing and does not retry long.
fn resolver(port: u16) -> TokioResolver {
    let mut server = NameServerConfig::udp(IpAddr::from([127, 0, 0, 1]));
    for connection in &mut server.connections {
        connection.port = port;
    }
    let mut options = ResolverOpts::default();
    options.cache_size = 0;
    options.attempts = 1;
    options.timeout = Duration::from_secs(2);
    TokioResolver::builder_with_config(
        ResolverConfig::from_name_servers(vec![server]),
        TokioRuntimeProvider::default(),
    )
    .with_options(options)
    .build()
    .unwrap()
}

#[tokio::test]
async fn a_resolver_gets_one_node_per_lookup_by_the_pools_rule_and_nxdomain_for_unknown_names() {
    let app = TestApp::new(Backend::Memory).await;
    for i in 1..=3 {
        app.heartbeat(&format!("10.0.0.{i}:11111@1"), json!({ "role": "storage" }))
            .await;
    }
    app.heartbeat("10.0.0.9:11111@1", json!({ "role": "web" }))
        .await;
    let pool = json!({ "members": { "role": "storage" }, "ttl_seconds": 0 });
    let created = app
        .send(axum::http::Method::PUT, &app.path("/pools/rr"), Some(pool))
        .await;
    assert_eq!(created.status, 200);

    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = socket.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listener = tokio::spawn(placement_oracle::dns::serve_dns(
        app.oracle.connections.clone(),
        socket,
        ZONE.to_owned(),
        async {
            let _ = stopped.await;
        },
    ));

    let resolver = resolver(port);
    let name = format!("rr.{}.{ZONE}.", app.cluster);
    let mut seen: HashMap<IpAddr, usize> = HashMap::new();
    for _ in 0..6 {
        let answer = resolver.lookup_ip(name.as_str()).await.unwrap();
        let ips: Vec<IpAddr> = answer.iter().collect();
        assert_eq!(ips.len(), 1, "one node per answer: {ips:?}");
        *seen.entry(ips[0]).or_default() += 1;
    }
    let expected: HashMap<IpAddr, usize> =
        (1..=3).map(|i| (IpAddr::from([10, 0, 0, i]), 2)).collect();
    assert_eq!(seen, expected, "round robin over the storage nodes only");

    for unknown in [
        format!("nowhere.{}.{ZONE}.", app.cluster),
        format!("rr.no-such-cluster.{ZONE}."),
        format!("too.many.labels.{ZONE}."),
    ] {
        let error = resolver.lookup_ip(unknown.as_str()).await.unwrap_err();
        assert!(error.is_nx_domain(), "{unknown}: {error}");
    }

    // An AAAA question for an IPv4-only pool: no data, and no turn of the round robin spent.
    let no_v6 = resolver.ipv6_lookup(name.as_str()).await.unwrap_err();
    assert!(!no_v6.is_nx_domain(), "the name exists: {no_v6}");
    let after: Vec<IpAddr> = {
        let mut ips = Vec::new();
        for _ in 0..3 {
            ips.extend(resolver.lookup_ip(name.as_str()).await.unwrap().iter());
        }
        ips
    };
    assert_eq!(
        after,
        [1, 2, 3].map(|i| IpAddr::from([10, 0, 0, i])),
        "the cycle goes on where it was"
    );
    // The cluster level exists too (pools live below it): no data, not NXDOMAIN.
    let cluster_level = resolver
        .lookup_ip(format!("{}.{ZONE}.", app.cluster).as_str())
        .await
        .unwrap_err();
    assert!(!cluster_level.is_nx_domain(), "{cluster_level}");

    // Garbage does not take the listener down: it answers FORMERR (or nothing) and keeps serving.
    let probe = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for garbage in [&[0x12u8, 0x34, 0xff][..], &[0u8; 1][..], &[0xffu8; 600][..]] {
        probe.send_to(garbage, ("127.0.0.1", port)).await.unwrap();
    }
    let mut reply = [0u8; 512];
    let got = tokio::time::timeout(Duration::from_secs(2), probe.recv_from(&mut reply)).await;
    if let Ok(Ok((length, _))) = got {
        assert!(length >= 4);
        assert_eq!(&reply[..2], &[0x12, 0x34], "the reply carries the query id");
        assert_eq!(reply[3] & 0x0f, 1, "FORMERR");
    }
    assert_eq!(
        resolver
            .lookup_ip(name.as_str())
            .await
            .unwrap()
            .iter()
            .count(),
        1
    );

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), listener)
        .await
        .unwrap()
        .unwrap();
}
