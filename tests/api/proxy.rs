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
        let task = tokio::spawn({
            let down = down.clone();
            let generation = generation.clone();
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
                    let born = *cut.borrow();
                    let upstream = upstream.lock().unwrap().clone();
                    tokio::spawn(async move {
                        let Ok(server) = TcpStream::connect(&upstream).await else {
                            return;
                        };
                        let (mut client, mut server) = (client, server);
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            _ = cut.wait_for(|g| *g != born) => {}
                        }
                    });
                }
            }
        });
        Self {
            port,
            down,
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
}

impl Drop for FaultyLink {
    fn drop(&mut self) {
        self.task.abort();
    }
}
