//! The plain TCP listener the replica serves on, and what a failed accept means.
//!
//! A replica out of file descriptors (or kernel memory for sockets) cannot accept a connection:
//! the peer's handshake completed in the kernel's backlog, and its request waits there unread —
//! perhaps a silo's heartbeat. That silence is the replica's doing, as much as a request it shed,
//! so each failed accept tells the replica it could not keep up (its silos' silence then counts
//! again from now, `StallWatch::could_not_keep_up`) and the loop waits a moment for descriptors to
//! be freed instead of spinning.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// How long to wait after a failed accept before the next (it fails again at once until
/// connections close).
pub const AFTER_FAILED_ACCEPT: Duration = Duration::from_millis(100);

/// Called on every failed accept.
pub type OnRefused = Arc<dyn Fn() + Send + Sync>;

/// Accepts the next connection; a failure is logged, told to `on_refused`, and waited out.
pub async fn accept(listener: &TcpListener, on_refused: &OnRefused) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(error) => {
                on_refused();
                tracing::warn!(%error, "accepting a connection failed; the replica could not keep up");
                tokio::time::sleep(AFTER_FAILED_ACCEPT).await;
            }
        }
    }
}

/// A plain listener for `axum::serve` that tells the replica when it cannot accept.
pub struct Listener {
    listener: TcpListener,
    on_refused: OnRefused,
}

impl Listener {
    pub fn new(listener: TcpListener, on_refused: OnRefused) -> Self {
        Self {
            listener,
            on_refused,
        }
    }
}

impl axum::serve::Listener for Listener {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        accept(&self.listener, &self.on_refused).await
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}
