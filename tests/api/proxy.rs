//! A TCP proxy in front of the real Postgres that can cut the connection, as a database restart or
//! a network partition does to a client: every open connection is dropped and new ones are refused
//! (accepted and closed at once) until it is restored. Postgres itself stays real; only the path
//! to it fails, so the suite's other tests, which share the server, are unaffected.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct FaultyLink {
    pub port: u16,
    down: Arc<AtomicBool>,
    /// Frozen: connections are held open and nothing crosses, as with a server that does not run.
    frozen: watch::Sender<bool>,
    /// Where new connections go (host:port).
    upstream: Arc<Mutex<String>>,
    /// Bumped on every cut; connections of an earlier generation end.
    generation: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultyLink {
    /// Starts forwarding 127.0.0.1:{port} to `upstream` (host:port).
    pub async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let down = Arc::new(AtomicBool::new(false));
        let upstream = Arc::new(Mutex::new(upstream));
        let (generation, _) = watch::channel(0u64);
        let (frozen, _) = watch::channel(false);
        let task = tokio::spawn({
            let down = down.clone();
            let generation = generation.clone();
            let frozen = frozen.clone();
            let upstream = upstream.clone();
            async move {
                let counter = AtomicU64::new(0);
                while let Ok((client, _)) = listener.accept().await {
                    if down.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    counter.fetch_add(1, Ordering::Relaxed);
                    let mut cut = generation.subscribe();
                    let mut freezing = frozen.subscribe();
                    let born = *cut.borrow();
                    let upstream = upstream.lock().unwrap().clone();
                    tokio::spawn(async move {
                        // Frozen: accepted, and held until the link is cut or reset.
                        if *freezing.borrow() {
                            let _ = cut.wait_for(|g| *g != born).await;
                            return;
                        }
                        let Ok(server) = TcpStream::connect(&upstream).await else {
                            return;
                        };
                        let (mut client, mut server) = (client, server);
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            _ = cut.wait_for(|g| *g != born) => return,
                            _ = freezing.wait_for(|f| *f) => {}
                        }
                        // Frozen mid-way: both ends stay open, and nothing crosses.
                        let _ = cut.wait_for(|g| *g != born).await;
                        drop((client, server));
                    });
                }
            }
        });
        Self {
            port,
            down,
            frozen,
            upstream,
            generation,
            task,
        }
    }

    /// Drops every open connection and refuses new ones.
    pub fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Drops every open connection once (a restart); new ones are accepted at once.
    pub fn reset(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    /// Sends new connections to `upstream` from now on and drops the open ones, as a service
    /// address moved to another server does.
    #[allow(dead_code)] // the runtime harness's failover test moves it
    pub fn switch_to(&self, upstream: String) {
        *self.upstream.lock().unwrap() = upstream;
        self.reset();
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    /// Nothing crosses any more, on the connections open and on new ones, which are accepted and
    /// held: what a client sees of a frozen server (SIGSTOP, a paused VM) or a network that drops
    /// every packet.
    #[allow(dead_code)] // the readiness test freezes it
    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    /// Ends the freeze: the connections held are dropped (as a server thawed after its clients
    /// timed out would find them), new ones cross again.
    #[allow(dead_code)]
    pub fn thaw(&self) {
        self.frozen.send_replace(false);
        self.reset();
    }
}

impl Drop for FaultyLink {
    fn drop(&mut self) {
        self.task.abort();
    }
}
