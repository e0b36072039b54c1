//! Callers: clients of the grains, which ask either replica where a grain lives and call the host
//! named (a replica that does not answer is given up for the other, as a client behind a load
//! balancer would find).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::{Api, Reply};
use crate::host::{Hosts, Outcome};

/// Pause between one caller's calls.
const CALL_PAUSE: Duration = Duration::from_millis(15);

/// What the calls came to.
#[derive(Debug, Default, Clone)]
pub struct CallStats {
    pub calls: u64,
    /// Outcome → how many: `served`, or `retry: <why>`.
    pub outcomes: BTreeMap<String, u64>,
    /// Answers no runtime should get, with when they came.
    pub unexpected: Vec<(Instant, String)>,
    /// When each served call was served.
    pub served_at: Vec<Instant>,
}

impl CallStats {
    pub fn served(&self) -> u64 {
        self.served_at.len() as u64
    }

    /// The first call served at or after `since`.
    pub fn first_served_after(&self, since: Instant) -> Option<Instant> {
        self.served_at.iter().copied().find(|&at| at >= since)
    }

    fn record(&mut self, outcome: Outcome) {
        self.calls += 1;
        match outcome {
            Outcome::Served => {
                self.served_at.push(Instant::now());
                *self.outcomes.entry("served".into()).or_default() += 1;
            }
            Outcome::Retry(why) => *self.outcomes.entry(format!("retry: {why}")).or_default() += 1,
            Outcome::Unexpected(what) => {
                *self.outcomes.entry("unexpected".into()).or_default() += 1;
                self.unexpected.push((Instant::now(), what));
            }
        }
    }
}

pub struct Callers {
    stats: Arc<Mutex<CallStats>>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Callers {
    /// Starts `count` callers calling grains `user/g0` … `user/g{grains-1}` at random.
    pub fn start(
        count: usize,
        grains: usize,
        api: Api,
        replicas: Vec<String>,
        hosts: Hosts,
    ) -> Self {
        let stats = Arc::new(Mutex::new(CallStats::default()));
        let stop = watch::channel(false).0;
        let tasks = (0..count)
            .map(|seed| {
                let (api, replicas, hosts, stats) =
                    (api.clone(), replicas.clone(), hosts.clone(), stats.clone());
                let mut stopped = stop.subscribe();
                tokio::spawn(async move {
                    let mut rng = ChaCha8Rng::seed_from_u64(seed as u64);
                    while !*stopped.borrow() {
                        let grain = format!("user/g{}", rng.gen_range(0..grains));
                        let first = rng.gen_range(0..replicas.len());
                        let outcome = call(&api, &replicas, first, grain, &hosts).await;
                        stats.lock().unwrap().record(outcome);
                        let _ = tokio::time::timeout(CALL_PAUSE, stopped.changed()).await;
                    }
                })
            })
            .collect();
        Self { stats, stop, tasks }
    }

    pub fn stats(&self) -> CallStats {
        self.stats.lock().unwrap().clone()
    }

    pub async fn stop(self) -> CallStats {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        let stats = self.stats.lock().unwrap().clone();
        stats
    }
}

/// One call: where does `grain` live (asking replica `first`, then the other if it does not
/// answer), then the call to that host.
async fn call(
    api: &Api,
    replicas: &[String],
    first: usize,
    grain: String,
    hosts: &Hosts,
) -> Outcome {
    let mut reply = Reply::Unreachable("not asked".into());
    for i in 0..replicas.len() {
        let replica = &replicas[(first + i) % replicas.len()];
        reply = api
            .post(replica, "/placements", json!({ "grain": grain }))
            .await;
        if !matches!(reply, Reply::Unreachable(_)) {
            break;
        }
    }
    match &reply {
        Reply::Answer {
            status: 200, body, ..
        } => {
            let address = body["address"].as_str().unwrap_or_default();
            match hosts.find(address) {
                Some(host) => host.call(grain, hosts.clone(), false).await,
                None => Outcome::Unexpected(format!("placed on an unknown silo: {body}")),
            }
        }
        reply if reply.is_retryable() => Outcome::Retry(format!(
            "oracle 503 {}",
            reply.problem().unwrap_or_default()
        )),
        Reply::Unreachable(_) => Outcome::Retry("no replica answered".into()),
        other => Outcome::Unexpected(format!("placement: {}", other.describe())),
    }
}
