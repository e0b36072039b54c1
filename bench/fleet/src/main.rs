//! `fleet`: an open-loop load of a fleet of clusters on the placement oracle.
//!
//! Every silo of every cluster heartbeats on its own phase once per `--beat-every-ms` (load figures
//! drifting), new grains are placed at `--new` a second and known grains at `--known` a second,
//! spread over every cluster. Each request is sent at its scheduled time whatever the answers to
//! the others (open loop: a slow oracle does not slow the load down, it shows up in the latency),
//! and its latency is counted from that time. Measured windows follow a warm-up, each at a factor
//! of the rates (`--windows 1x:20,3x:30,1x:20` puts three times the load on for 30 s); per window
//! and stream: offered and served rates, p50/p99/p99.9, refusals with `Retry-After`, failures by
//! status, and the oracle's and Postgres' CPU per served request. At the end, every silo's status:
//! none may be dead. `--floor R` adds `GET /healthz` at R a second: run alone at a stream's rate
//! (`--clusters 0 --new 0 --known 0 --floor 20000`), it is the floor that stream's CPU a request is
//! judged against, measured open loop as the stream is (a closed loop's floor batches more work a
//! wake-up and costs less a request).
//!
//!   fleet --url http://127.0.0.1:18080 --clusters 1000 --silos 20 --new 2000 --known 5000 \
//!         --oracle-pid 1234
//!
//! `bench/fleet/run.sh` starts an oracle on a fresh database and runs this against it.

#![forbid(unsafe_code)]

mod cpu;
mod http;
mod stats;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use http::Connection;
use stats::{Outcome, Stream};

/// The load's shape, from the command line.
#[derive(Debug, Clone)]
struct Options {
    address: String,
    token: Option<String>,
    clusters: usize,
    silos: usize,
    beat_every: Duration,
    new_per_second: f64,
    known_per_second: f64,
    known_per_cluster: usize,
    floor_per_second: f64,
    warmup: Duration,
    /// Measured windows: a factor of every rate, and how long.
    windows: Vec<(f64, Duration)>,
    connections: usize,
    timeout: Duration,
    oracle_pid: Option<u32>,
}

impl Options {
    fn parse() -> Result<Self, String> {
        let mut flags: BTreeMap<String, String> = BTreeMap::new();
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let name = flag
                .strip_prefix("--")
                .ok_or_else(|| format!("unexpected {flag}"))?;
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            flags.insert(name.to_owned(), value);
        }
        let take = |name: &str, default: &str| flags.get(name).cloned().unwrap_or(default.into());
        let number = |name: &str, default: &str| -> Result<f64, String> {
            take(name, default)
                .parse()
                .map_err(|_| format!("--{name} must be a number"))
        };
        let url = take("url", "http://127.0.0.1:18080");
        let address = url
            .strip_prefix("http://")
            .ok_or("--url must be http://host:port")?
            .trim_end_matches('/')
            .to_owned();
        let windows = take("windows", "1x:30")
            .split(',')
            .map(|w| {
                let (factor, seconds) =
                    w.split_once("x:").ok_or("--windows is FACTORx:SECONDS,…")?;
                Ok((
                    factor.parse().map_err(|_| "bad factor")?,
                    Duration::from_secs_f64(seconds.parse().map_err(|_| "bad seconds")?),
                ))
            })
            .collect::<Result<Vec<_>, &str>>()?;
        Ok(Self {
            address,
            token: flags.get("token").cloned(),
            clusters: number("clusters", "1000")? as usize,
            silos: number("silos", "20")? as usize,
            beat_every: Duration::from_millis(number("beat-every-ms", "1000")? as u64),
            new_per_second: number("new", "2000")?,
            known_per_second: number("known", "5000")?,
            known_per_cluster: number("known-per-cluster", "20")? as usize,
            floor_per_second: number("floor", "0")?,
            warmup: Duration::from_secs_f64(number("warmup", "10")?),
            windows,
            connections: number("connections", "256")? as usize,
            timeout: Duration::from_secs_f64(number("timeout", "60")?),
            oracle_pid: flags.get("oracle-pid").and_then(|p| p.parse().ok()),
        })
    }
}

/// The streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Heartbeat,
    New,
    Known,
    /// `GET /healthz`, the floor.
    Floor,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Heartbeat, Kind::New, Kind::Known, Kind::Floor];

    fn name(self) -> &'static str {
        match self {
            Kind::Heartbeat => "heartbeat",
            Kind::New => "new grain",
            Kind::Known => "known",
            Kind::Floor => "floor",
        }
    }
}

/// One request, sent at `scheduled` (or as soon after as a connection is free).
struct Job {
    kind: Kind,
    /// The measured window it belongs to (`None`: warm-up).
    window: Option<usize>,
    scheduled: Instant,
    path: String,
    body: Vec<u8>,
}

/// Per window and stream, what came back.
type Record = Arc<Mutex<Vec<BTreeMap<Kind, Stream>>>>;

#[tokio::main]
async fn main() {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(problem) => {
            eprintln!("fleet: {problem}");
            std::process::exit(2);
        }
    };
    let record: Record = Arc::new(Mutex::new(vec![BTreeMap::new(); options.windows.len()]));
    let (sender, receiver) = mpsc::unbounded_channel::<Job>();
    let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
    for _ in 0..options.connections {
        tokio::spawn(work(options.clone(), receiver.clone(), record.clone()));
    }
    println!(
        "fleet: {} clusters × {} silos beating every {:?} ({:.0} heartbeats/s), {:.0} new and \
         {:.0} known grains/s, floor {:.0}/s, {} connections; warm-up {:?}, then {:?}",
        options.clusters,
        options.silos,
        options.beat_every,
        (options.clusters * options.silos) as f64 / options.beat_every.as_secs_f64(),
        options.new_per_second,
        options.known_per_second,
        options.floor_per_second,
        options.connections,
        options.warmup,
        options.windows
    );
    let samples = schedule(&options, sender, &record).await;
    // Wait for the last answers (an open loop may leave a queue behind).
    let drained = Instant::now();
    while Arc::strong_count(&receiver) > 1 && drained.elapsed() < options.timeout {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    report(&options, &record, &samples);
    silo_statuses(&options).await;
}

/// Sends every request at its time through the windows; returns the CPU samples at each window's
/// bounds.
async fn schedule(
    options: &Options,
    sender: mpsc::UnboundedSender<Job>,
    record: &Record,
) -> Vec<cpu::Sample> {
    let silos = options.clusters * options.silos;
    let beat_rate = silos as f64 / options.beat_every.as_secs_f64();
    let start = Instant::now();
    let mut bounds = vec![start + options.warmup];
    for (_, length) in &options.windows {
        bounds.push(*bounds.last().unwrap() + *length);
    }
    let end = *bounds.last().unwrap();
    let mut samples = Vec::new();
    // Each stream's next send and how many it sent; rates change with the window.
    let mut next: BTreeMap<Kind, Instant> = Kind::ALL.iter().map(|&k| (k, start)).collect();
    let mut sent: BTreeMap<Kind, u64> = BTreeMap::new();
    let mut random = 0x9E37_79B9_7F4A_7C15u64;
    let mut ticks = tokio::time::interval(Duration::from_millis(1));
    let mut primed = 0usize;
    loop {
        ticks.tick().await;
        let now = Instant::now();
        while samples.len() < bounds.len() && now >= bounds[samples.len()] {
            samples.push(cpu::Sample::take(options.oracle_pid));
        }
        if now >= end {
            return samples;
        }
        let window = bounds.iter().rposition(|&b| now >= b);
        let factor = window.map_or(1.0, |w| options.windows[w].0);
        // Known grains are placed once, in batches, during the warm-up.
        if window.is_none() && primed < options.clusters {
            let cluster = primed;
            primed += 1;
            let grains: Vec<String> = (0..options.known_per_cluster)
                .map(|g| format!(r#"{{"grain":"k/{g}"}}"#))
                .collect();
            let _ = sender.send(Job {
                kind: Kind::New,
                window: None,
                scheduled: now,
                path: format!("/v1/clusters/f{cluster}/placements/batch"),
                body: format!(r#"{{"placements":[{}]}}"#, grains.join(",")).into_bytes(),
            });
        }
        for kind in Kind::ALL {
            let rate = factor
                * match kind {
                    Kind::Heartbeat => beat_rate,
                    Kind::Floor => options.floor_per_second,
                    Kind::New if window.is_none() => 0.0,
                    Kind::Known if window.is_none() => 0.0,
                    Kind::New => options.new_per_second,
                    Kind::Known => options.known_per_second,
                };
            if rate <= 0.0 {
                next.insert(kind, now);
                continue;
            }
            let gap = Duration::from_secs_f64(1.0 / rate);
            while next[&kind] <= now {
                let scheduled = next[&kind];
                let n = *sent.entry(kind).or_default();
                sent.insert(kind, n + 1);
                random ^= random << 13;
                random ^= random >> 7;
                random ^= random << 17;
                let job_window = bounds.iter().rposition(|&b| scheduled >= b);
                if let Some(w) = job_window {
                    record.lock().unwrap()[w].entry(kind).or_default().offered += 1;
                }
                let (path, body) = request(options, kind, n, random, scheduled - start);
                let _ = sender.send(Job {
                    kind,
                    window: job_window,
                    scheduled,
                    path,
                    body,
                });
                next.insert(kind, scheduled + gap);
            }
        }
    }
}

/// The `n`th request of `kind` (`random` picks a known grain), `since` the load began.
fn request(
    options: &Options,
    kind: Kind,
    n: u64,
    random: u64,
    since: Duration,
) -> (String, Vec<u8>) {
    let silos = (options.clusters * options.silos) as u64;
    match kind {
        Kind::Heartbeat => {
            let silo = n % silos;
            let (cluster, index) = (silo / options.silos as u64, silo % options.silos as u64);
            // Load figures drift slowly, each silo on a phase of its own.
            let phase = since.as_secs_f64() / 30.0 + index as f64;
            let cpu = 40.0 + 30.0 * phase.sin();
            let body = format!(
                r#"{{"silo":"10.{index}.0.1:11111@1","cpu_usage":{cpu:.1},"memory_usage_bytes":{},"max_available_memory_bytes":16000000000,"activation_count":{}}}"#,
                4_000_000_000u64 + (index * 10_000_000),
                100 + (n / silos) % 50
            );
            (
                format!("/v1/clusters/f{cluster}/heartbeats"),
                body.into_bytes(),
            )
        }
        Kind::New => {
            let cluster = n % options.clusters as u64;
            (
                format!("/v1/clusters/f{cluster}/placements"),
                format!(r#"{{"grain":"g/{n}"}}"#).into_bytes(),
            )
        }
        Kind::Floor => ("/healthz".to_owned(), Vec::new()),
        Kind::Known => {
            let cluster = random % options.clusters as u64;
            let grain = (random >> 32) % options.known_per_cluster.max(1) as u64;
            (
                format!("/v1/clusters/f{cluster}/placements"),
                format!(r#"{{"grain":"k/{grain}"}}"#).into_bytes(),
            )
        }
    }
}

/// One connection's loop: the next job, sent, and what came back recorded in its window.
async fn work(
    options: Options,
    jobs: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Job>>>,
    record: Record,
) {
    let mut connection = Connection::new(&options.address);
    loop {
        let job = { jobs.lock().await.recv().await };
        let Some(job) = job else { return };
        let answer = connection
            .send(
                if job.kind == Kind::Floor {
                    "GET"
                } else {
                    "POST"
                },
                &job.path,
                &job.body,
                options.token.as_deref(),
                options.timeout,
            )
            .await;
        let latency = job.scheduled.elapsed();
        let outcome = match answer {
            Ok(answer) if answer.status == 200 => Outcome::Served,
            Ok(answer) if answer.retry_after && matches!(answer.status, 429 | 503) => {
                Outcome::Refused(answer.status)
            }
            Ok(answer) => Outcome::Failed(answer.status.to_string()),
            Err(error) if error == "timeout" => Outcome::Failed("timeout".into()),
            Err(_) => Outcome::Failed("io".into()),
        };
        if let Some(window) = job.window {
            let mut record = record.lock().unwrap();
            record[window]
                .entry(job.kind)
                .or_default()
                .record(latency, &outcome);
        }
    }
}

fn report(options: &Options, record: &Record, samples: &[cpu::Sample]) {
    let mut record = record.lock().unwrap();
    for (w, (factor, length)) in options.windows.iter().enumerate() {
        let seconds = length.as_secs_f64();
        println!("\nwindow {} ({factor}× the rates, {seconds:.0} s):", w + 1);
        let mut served = 0;
        for kind in Kind::ALL {
            if let Some(stream) = record[w].get_mut(&kind) {
                served += stream.served.len();
                println!("  {}", stream.line(kind.name(), seconds));
            }
        }
        if let (Some(before), Some(after)) = (samples.get(w), samples.get(w + 1)) {
            let per = |cpu: f64| 1e6 * cpu / served.max(1) as f64;
            println!(
                "  CPU: oracle {:.2} cores, {:.0} µs a served request; Postgres {:.2} cores, {:.0} µs a served request; this generator {:.2} cores",
                (after.oracle - before.oracle) / seconds,
                per(after.oracle - before.oracle),
                (after.postgres - before.postgres) / seconds,
                per(after.postgres - before.postgres),
                (after.generator - before.generator) / seconds,
            );
        }
    }
}

/// Every silo's status at the end, by cluster listings.
async fn silo_statuses(options: &Options) {
    let mut connection = Connection::new(&options.address);
    let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
    for cluster in 0..options.clusters {
        let path = format!(
            "/v1/clusters/f{cluster}/silos?limit={}",
            options.silos.max(1)
        );
        let answer = connection
            .send("GET", &path, b"", options.token.as_deref(), options.timeout)
            .await;
        let Ok(answer) = answer else {
            *statuses.entry("unknown".into()).or_default() += options.silos as u64;
            continue;
        };
        let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap_or_default();
        for silo in body["silos"].as_array().into_iter().flatten() {
            let status = silo["status"].as_str().unwrap_or("unknown").to_owned();
            *statuses.entry(status).or_default() += 1;
        }
    }
    println!("\nsilos at the end, by status: {statuses:?}");
    if statuses.get("dead").copied().unwrap_or(0) > 0 {
        println!("SILOS DECLARED DEAD: {}", statuses["dead"]);
    }
}
