//! TLS on the API's listener, for networks without a mesh that encrypts for us: a certificate
//! chain and its key from PEM files, read again whenever they change, so that a renewed
//! certificate (cert-manager rewriting a mounted Secret, say) is served without a restart.
//!
//! Handshakes run apart from the accept loop, each with a deadline, so a client that never
//! finishes one holds up nobody else; only finished connections reach the HTTP server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::listener::{self, OnRefused};
use crate::telemetry::metric;

/// Longest a client may take over its handshake.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// Finished handshakes waiting for the HTTP server to take them.
const ACCEPTED_QUEUE: usize = 1_024;

/// Where the certificate chain and its private key are, and how often to look for new ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub certificate: PathBuf,
    pub key: PathBuf,
    pub check_every: Duration,
}

/// The files' bytes as last loaded, and the configuration made of them.
struct Loaded {
    certificate: Vec<u8>,
    key: Vec<u8>,
    config: Arc<ServerConfig>,
}

impl TlsFiles {
    /// Reads and checks both files (a chain of at least one certificate, one private key that
    /// matches it).
    fn load(&self) -> Result<Loaded, String> {
        self.read().and_then(|read| self.check(read))
    }

    /// Both files' bytes: the certificate chain's, then the key's.
    fn read(&self) -> Result<(Vec<u8>, Vec<u8>), String> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
        };
        Ok((read(&self.certificate)?, read(&self.key)?))
    }

    /// The configuration made of the files' bytes, if they hold a chain and its key.
    fn check(&self, (certificate, key): (Vec<u8>, Vec<u8>)) -> Result<Loaded, String> {
        let config = server_config(&certificate, &key).map_err(|e| {
            format!(
                "{} and {}: {e}",
                self.certificate.display(),
                self.key.display()
            )
        })?;
        Ok(Loaded {
            certificate,
            key,
            config: Arc::new(config),
        })
    }
}

/// A TLS server configuration from a PEM chain and key (HTTP/1.1 only, as the API serves).
fn server_config(certificate: &[u8], key: &[u8]) -> Result<ServerConfig, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(certificate)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("not a PEM certificate chain: {e}"))?;
    if chain.is_empty() {
        return Err("no certificate in the certificate file".to_owned());
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("no PEM private key: {e}"))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("the key does not fit the certificate: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A listener whose connections are TLS, for `axum::serve`.
pub struct TlsListener {
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local_addr: SocketAddr,
}

impl TlsListener {
    /// Serves TLS on `listener` with the certificate in `files`, which must load now; later
    /// changes are loaded when they are valid (an invalid one is logged and the last good one
    /// kept). Both tasks end when the listener is dropped.
    pub fn new(
        listener: TcpListener,
        files: TlsFiles,
        on_refused: OnRefused,
    ) -> Result<Self, String> {
        let local_addr = listener.local_addr().map_err(|e| e.to_string())?;
        let loaded = files.load()?;
        let current = Arc::new(RwLock::new(loaded.config.clone()));
        let (sender, accepted) = mpsc::channel(ACCEPTED_QUEUE);
        tokio::spawn(reload_on_change(
            files,
            loaded,
            current.clone(),
            sender.clone(),
        ));
        tokio::spawn(accept_loop(listener, on_refused, current, sender));
        Ok(Self {
            accepted,
            local_addr,
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(connection) => connection,
            // The accept loop ended (its listener failed for good): nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}

/// Accepts connections and hands each to a handshake of its own, with the configuration current
/// at that moment.
async fn accept_loop(
    listener: TcpListener,
    on_refused: OnRefused,
    current: Arc<RwLock<Arc<ServerConfig>>>,
    sender: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener::accept(&listener, &on_refused) => accepted,
            () = sender.closed() => return,
        };
        let config = current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let sender = sender.clone();
        tokio::spawn(async move {
            let handshake = TlsAcceptor::from(config).accept(stream);
            match tokio::time::timeout(HANDSHAKE_DEADLINE, handshake).await {
                Ok(Ok(tls)) => {
                    let _ = sender.send((tls, peer)).await;
                }
                Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

/// Looks at the files every `check_every` and serves new contents once they load.
async fn reload_on_change(
    files: TlsFiles,
    mut last: Loaded,
    current: Arc<RwLock<Arc<ServerConfig>>>,
    sender: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    // The contents that failed to load last: counted once, however many checks find them again.
    let mut failed: Option<(Vec<u8>, Vec<u8>)> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(files.check_every) => {}
            () = sender.closed() => return,
        }
        let read = files.read();
        if read
            .as_ref()
            .is_ok_and(|(certificate, key)| *certificate == last.certificate && *key == last.key)
        {
            continue;
        }
        let contents = read.as_ref().ok().cloned();
        match read.and_then(|read| files.check(read)) {
            Ok(loaded) => {
                *current
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = loaded.config.clone();
                last = loaded;
                failed = None;
                metric::tls_reload("reloaded");
                tracing::info!(
                    certificate = %files.certificate.display(),
                    "TLS certificate reloaded; new connections get it"
                );
            }
            // Mid-rotation (one file written, not the other) or broken: keep serving the last
            // good one, and look again next time.
            Err(problem) => {
                if contents.is_none() || failed != contents {
                    metric::tls_reload("failed");
                    tracing::warn!(%problem, "TLS files changed but do not load; keeping the last good certificate");
                }
                failed = contents;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused() {
        let one = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let cert = one.cert.pem();
        assert!(server_config(cert.as_bytes(), one.key_pair.serialize_pem().as_bytes()).is_ok());
        let refused =
            server_config(cert.as_bytes(), other.key_pair.serialize_pem().as_bytes()).unwrap_err();
        assert!(refused.contains("does not fit"), "{refused}");
        let refused = server_config(b"", one.key_pair.serialize_pem().as_bytes()).unwrap_err();
        assert!(refused.contains("no certificate"), "{refused}");
        let refused = server_config(cert.as_bytes(), b"").unwrap_err();
        assert!(refused.contains("no PEM private key"), "{refused}");
    }
}
