//! TLS on the listener (`ORACLE_TLS_CERT_FILE`, `ORACLE_TLS_KEY_FILE`): the API answers over
//! https only, and a renewed certificate written over the files is served to new connections
//! without a restart, while files that do not load (mid-rotation, broken) leave the last good
//! certificate in place.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use placement_oracle::clock::ManualClock;
use placement_oracle::config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::{memory_store, START_MS};

/// The name the certificates are for; the test resolves it to the listener.
const HOST: &str = "oracle.test";

struct Identity {
    certificate: String,
    key: String,
}

fn identity() -> Identity {
    let made = rcgen::generate_simple_self_signed(vec![HOST.to_owned()]).unwrap();
    Identity {
        certificate: made.cert.pem(),
        key: made.key_pair.serialize_pem(),
    }
}

/// A client that trusts `identity`'s certificate alone, with no connection kept from before.
fn client_trusting(identity: &Identity, address: SocketAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(
            reqwest::Certificate::from_pem(identity.certificate.as_bytes()).unwrap(),
        )
        .resolve(HOST, address)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

async fn healthz(identity: &Identity, address: SocketAddr) -> Result<u16, String> {
    client_trusting(identity, address)
        .get(format!("https://{HOST}:{}/healthz", address.port()))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| format!("{e:?}"))
}

fn write(dir: &Path, identity: &Identity) {
    std::fs::write(dir.join("tls.key"), &identity.key).unwrap();
    std::fs::write(dir.join("tls.crt"), &identity.certificate).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_is_served_over_tls_and_a_renewed_certificate_without_a_restart() {
    let dir = std::env::temp_dir().join(format!("oracle-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (first, renewed) = (identity(), identity());
    write(&dir, &first);
    let mut config = Config::defaults();
    config.tls_cert_file = Some(dir.join("tls.crt"));
    config.tls_key_file = Some(dir.join("tls.key"));
    config.tls_reload_check_ms = 100;
    config.validate().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(placement_oracle::serve(
        config,
        memory_store(&ManualClock::starting_at(START_MS)),
        listener,
        std::future::pending(),
    ));

    assert_eq!(healthz(&first, address).await, Ok(200));
    assert!(
        healthz(&renewed, address).await.is_err(),
        "a client that does not trust the served certificate is refused"
    );
    let mut plain = tokio::net::TcpStream::connect(address).await.unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: oracle.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(11), plain.read_to_end(&mut answer)).await;
    assert!(
        !String::from_utf8_lossy(&answer).contains("200 OK"),
        "plain HTTP gets no answer"
    );

    // Broken files do not replace the certificate being served.
    std::fs::write(dir.join("tls.crt"), "not a certificate").unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        healthz(&first, address).await,
        Ok(200),
        "the last good one stays"
    );

    write(&dir, &renewed);
    let written = Instant::now();
    while healthz(&renewed, address).await != Ok(200) {
        assert!(
            written.elapsed() < Duration::from_secs(5),
            "the renewed certificate was not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        healthz(&first, address).await.is_err(),
        "new connections get the renewed certificate only"
    );
    server.abort();
    let _ = std::fs::remove_dir_all(&dir);
}
