//! The clients: increments to 500 counters through any server, counted exactly.
//!
//! A client of the test's own speaks rio-rs's wire protocol (bincode `RequestEnvelope`s in
//! length-delimited frames), because rio-rs's own client cannot be counted on here: it never
//! follows a redirect (its placement cache is written and read under different keys), resends
//! a request after it was sent, has no request timeout, and keeps a broken connection for
//! good. This one sends each increment with an op id, waits at most 2 s for an answer, follows
//! up to 5 redirects, starts a fresh connection after any error, and retries the same op id
//! (elsewhere) until it is acknowledged or 8 s have passed. An increment is acknowledged when
//! an answer carries its op id.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rio_rs::protocol::{RequestEnvelope, ResponseEnvelope, ResponseError};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::app::{CounterError, Increment, Incremented};

pub const COUNTERS: usize = 500;
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
const GIVE_UP_AFTER: Duration = Duration::from_secs(8);
const MAX_REDIRECTS: usize = 5;

pub fn counter_id(n: usize) -> String {
    format!("c-{n}")
}

/// An acknowledged increment.
#[derive(Debug, Clone)]
pub struct Ack {
    pub counter: usize,
    pub op: u64,
    pub at: Instant,
    pub latency: Duration,
}

/// What the clients saw.
#[derive(Default)]
pub struct Log {
    pub acked: Vec<Ack>,
    /// Increments never acknowledged (each may or may not have been applied).
    pub unacknowledged: u64,
    /// Answers of each kind that were not an acknowledgement (retried).
    pub refusals: HashMap<String, u64>,
    /// Which server acknowledged each counter last.
    pub last_server: HashMap<usize, String>,
}

/// A connection per server, made on demand and dropped on any error.
struct Wire {
    connections: HashMap<String, Framed<TcpStream, LengthDelimitedCodec>>,
}

impl Wire {
    async fn call(
        &mut self,
        address: &str,
        request: &RequestEnvelope,
    ) -> Result<ResponseEnvelope, String> {
        if !self.connections.contains_key(address) {
            let stream = tokio::time::timeout(ANSWER_TIMEOUT, TcpStream::connect(address))
                .await
                .map_err(|_| "connect timed out".to_owned())?
                .map_err(|e| format!("connect: {}", e.kind()))?;
            stream.set_nodelay(true).ok();
            let framed = Framed::new(stream, LengthDelimitedCodec::new());
            self.connections.insert(address.to_owned(), framed);
        }
        let connection = self.connections.get_mut(address).unwrap();
        let frame = bincode::serialize(request).map_err(|e| e.to_string())?;
        let exchange = async {
            connection
                .send(frame.into())
                .await
                .map_err(|e| format!("send: {e}"))?;
            match connection.next().await {
                Some(Ok(bytes)) => bincode::deserialize::<ResponseEnvelope>(&bytes)
                    .map_err(|e| format!("decode: {e}")),
                Some(Err(e)) => Err(format!("read: {e}")),
                None => Err("closed".into()),
            }
        };
        let answer = tokio::time::timeout(ANSWER_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| Err("no answer in time".into()));
        if answer.is_err() {
            // Never reuse a connection that may still deliver a late answer.
            self.connections.remove(address);
        }
        answer
    }
}

/// One client: its wire, its randomness, the servers it knows and where counters were last.
pub struct Client {
    wire: Wire,
    rng: ChaCha8Rng,
    servers: Vec<String>,
    cache: HashMap<usize, String>,
    next_op: u64,
    log: Arc<Mutex<Log>>,
}

/// What one increment came to.
pub enum Sent {
    Acked,
    GaveUp,
}

impl Client {
    pub fn new(id: u64, servers: Vec<String>, log: Arc<Mutex<Log>>) -> Self {
        Self {
            wire: Wire {
                connections: HashMap::new(),
            },
            rng: ChaCha8Rng::seed_from_u64(id),
            servers,
            cache: HashMap::new(),
            next_op: id << 40,
            log,
        }
    }

    fn any_server(&mut self) -> String {
        let pick = self.rng.gen_range(0..self.servers.len());
        self.servers[pick].clone()
    }

    fn refused(&self, what: String) {
        *self.log.lock().unwrap().refusals.entry(what).or_default() += 1;
    }

    /// Increments counter `counter` once (a new op id), retrying until acknowledged or 8 s.
    pub async fn increment(&mut self, counter: usize) -> Sent {
        self.next_op += 1;
        let op = self.next_op;
        let payload = bincode::serialize(&Increment { op }).unwrap();
        let request = RequestEnvelope::new(
            "Counter".into(),
            counter_id(counter),
            "Increment".into(),
            payload,
        );
        let started = Instant::now();
        let mut target = match self.cache.get(&counter) {
            Some(known) => known.clone(),
            None => self.any_server(),
        };
        let mut redirects = 0;
        while started.elapsed() < GIVE_UP_AFTER {
            let answer = self.wire.call(&target, &request).await;
            let refusal = match answer.map(|a| a.body) {
                Ok(Ok(body)) => match bincode::deserialize::<Incremented>(&body) {
                    Ok(done) if done.op == op => {
                        let latency = started.elapsed();
                        self.cache.insert(counter, target.clone());
                        let mut log = self.log.lock().unwrap();
                        log.acked.push(Ack {
                            counter,
                            op,
                            at: Instant::now(),
                            latency,
                        });
                        log.last_server.insert(counter, target);
                        return Sent::Acked;
                    }
                    other => format!("unexpected answer {:?}", other.map(|d| d.op)),
                },
                Ok(Err(ResponseError::Redirect(to))) if redirects < MAX_REDIRECTS => {
                    redirects += 1;
                    target = to;
                    continue;
                }
                Ok(Err(ResponseError::ApplicationError(bytes))) => {
                    match bincode::deserialize::<CounterError>(&bytes) {
                        Ok(CounterError::NotHere(why)) => format!("not here: {why}"),
                        Ok(CounterError::StateUnavailable(_)) => "state unavailable".into(),
                        Err(_) => "undecodable application error".into(),
                    }
                }
                Ok(Err(error)) => format!("{error:?}")
                    .split('(')
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
                Err(io) => io.split(':').next().unwrap_or_default().to_owned(),
            };
            self.refused(refusal);
            self.cache.remove(&counter);
            redirects = 0;
            tokio::time::sleep(Duration::from_millis(20)).await;
            target = self.any_server();
        }
        self.log.lock().unwrap().unacknowledged += 1;
        Sent::GaveUp
    }
}

/// Clients sending increments to random counters until stopped.
pub struct Workload {
    pub log: Arc<Mutex<Log>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Workload {
    pub fn start(clients: u64, servers: &[String]) -> Self {
        let log = Arc::new(Mutex::new(Log::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (1..=clients)
            .map(|id| {
                let mut client = Client::new(id, servers.to_vec(), log.clone());
                let stop = stop.clone();
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let counter = client.rng.gen_range(0..COUNTERS);
                        client.increment(counter).await;
                    }
                })
            })
            .collect();
        Self { log, stop, tasks }
    }

    /// Stops the clients; each finishes the increment it is sending (8 s at most).
    pub async fn stop(self) -> Arc<Mutex<Log>> {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            let _ = task.await;
        }
        self.log
    }

    /// Counters the server at `address` acknowledged last.
    pub fn last_on(&self, address: &str) -> Vec<usize> {
        let log = self.log.lock().unwrap();
        let mut counters: Vec<usize> = log
            .last_server
            .iter()
            .filter(|(_, server)| *server == address)
            .map(|(counter, _)| *counter)
            .collect();
        counters.sort_unstable();
        counters
    }
}

/// Increments each of `counters` once, in turn, each until acknowledged (30 s at most): when
/// each was served again, counted from `since`.
pub async fn probe(
    counters: &[usize],
    servers: &[String],
    log: Arc<Mutex<Log>>,
    since: Instant,
) -> Vec<Option<Duration>> {
    let mut client = Client::new(0xFF, servers.to_vec(), log);
    let mut served = Vec::new();
    for &counter in counters {
        let mut when = None;
        while since.elapsed() < Duration::from_secs(30) {
            if let Sent::Acked = client.increment(counter).await {
                when = Some(since.elapsed());
                break;
            }
        }
        served.push(when);
    }
    served
}
