//! Counters on rio-rs servers placed and fenced by the placement oracle.
//!
//! With an oracle running (`cargo run --release` at the repository's root) and Postgres on
//! 127.0.0.1:5432, one command runs three servers and a client on loopback:
//!
//! ```sh
//! cargo run -p placement-oracle-rio --example counter -- demo
//! ```
//!
//! The demo starts three server processes (`counter server`, each a rio-rs server whose silo
//! joins the oracle's cluster), sends increments to 50 counters through rio-rs's own client
//! (which finds the servers through the oracle's membership), shows where the oracle placed
//! them, drains one server (its counters are handed over and carry on elsewhere), sends more
//! increments, and checks every counter's value against the increments acknowledged.
//!
//! Options (each subcommand): `--oracle URL` (default http://127.0.0.1:8080), `--cluster NAME`
//! (default `rio-demo`), `--state-url URL` (default postgres://postgres@127.0.0.1:5432/postgres;
//! the state is in table `rio_counters`), `--key KEY` (a cluster key, when the oracle has an admin
//! token). `server` also takes `--listen ADDR` (default 127.0.0.1:0); `client` takes
//! `--counters N` and `--increments N`.

mod app;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use app::{CounterError, CounterStore, Increment, Incremented};
use placement_oracle_rio::{NodeOptions, OracleMembership, OracleNode};
use placement_oracle_sdk::{ClientOptions, OracleClient};
use rio_rs::app_data::AppData;
use rio_rs::client::ClientBuilder;
use std::io::{BufRead, BufReader};

struct Args(HashMap<String, String>);

impl Args {
    /// `--name value` pairs; anything else is a usage error.
    fn parse(words: &[String]) -> Result<Self, String> {
        let mut map = HashMap::new();
        for pair in words.chunks(2) {
            match pair {
                [name, value] if name.starts_with("--") && !value.starts_with("--") => {
                    map.insert(name.trim_start_matches("--").to_owned(), value.clone());
                }
                _ => return Err(format!("expected `--name value`, got {pair:?}")),
            }
        }
        Ok(Self(map))
    }

    fn get(&self, name: &str, default: &str) -> String {
        self.0
            .get(name)
            .cloned()
            .unwrap_or_else(|| default.to_owned())
    }

    fn oracle(&self) -> String {
        self.get("oracle", "http://127.0.0.1:8080")
    }

    fn cluster(&self) -> String {
        self.get("cluster", "rio-demo")
    }

    fn state_url(&self) -> String {
        self.get("state-url", "postgres://postgres@127.0.0.1:5432/postgres")
    }

    fn key(&self) -> Option<String> {
        self.0.get("key").cloned()
    }

    /// The options every subcommand passes on to the servers it starts.
    fn shared(&self) -> Vec<String> {
        let mut words = vec![
            "--oracle".into(),
            self.oracle(),
            "--cluster".into(),
            self.cluster(),
            "--state-url".into(),
            self.state_url(),
        ];
        if let Some(key) = self.key() {
            words.extend(["--key".into(), key]);
        }
        words
    }

    fn oracle_client(&self) -> OracleClient {
        let options = ClientOptions {
            key: self.key(),
            ..ClientOptions::default()
        };
        OracleClient::new(&[self.oracle()], &self.cluster(), options).expect("an oracle URL")
    }
}

// More worker threads than calls a server has in flight: rio-rs 0.7.2 can block a worker while
// it activates an object (see the integration's README).
#[tokio::main(flavor = "multi_thread", worker_threads = 16)]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,rio_rs=error,netlink_packet_route=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let words: Vec<String> = std::env::args().skip(1).collect();
    let (command, rest) = words
        .split_first()
        .map_or(("demo", &[][..]), |(c, r)| (c.as_str(), r));
    let args = Args::parse(rest).unwrap_or_else(|usage| {
        eprintln!("{usage}");
        std::process::exit(2);
    });
    match command {
        "server" => server(&args).await,
        "client" => {
            let counters = args.get("counters", "50").parse().expect("--counters N");
            let increments = args
                .get("increments", "500")
                .parse()
                .expect("--increments N");
            let acked = client(&args, counters, increments, 0).await;
            println!(
                "{} increments acknowledged",
                acked.values().map(BTreeSet::len).sum::<usize>()
            );
        }
        "demo" => demo(&args).await,
        other => {
            eprintln!("unknown command {other}: server, client or demo");
            std::process::exit(2);
        }
    }
}

/// A rio-rs server on the oracle: joins, serves until SIGTERM or Ctrl-C, then drains (its
/// counters are handed over to the other servers) and leaves.
async fn server(args: &Args) {
    let store = CounterStore::connect(&args.state_url()).expect("a Postgres URL");
    store
        .create_table()
        .await
        .expect("create the counters table");
    let node = OracleNode::join(NodeOptions {
        oracle_urls: vec![args.oracle()],
        cluster: args.cluster(),
        key: args.key(),
        listen: args.get("listen", "127.0.0.1:0"),
        object_types: vec!["Counter".into()],
        ..NodeOptions::default()
    })
    .await
    .unwrap_or_else(|e| panic!("could not join the oracle's cluster: {e}"));
    let handle = node.handle();
    println!(
        "listening {} as silo {}",
        node.address(),
        handle.silo().id()
    );
    let app_data = AppData::new();
    app_data.set(store);
    let serving = tokio::spawn(node.run(app::registry(), app_data));
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    match handle.drain(Duration::from_secs(20)).await {
        Ok(remaining) => println!("drained ({remaining} left) and left"),
        Err(e) => println!("drain failed: {e}"),
    }
    let _ = serving.await;
}

/// Sends `increments` increments over `counters` counters through rio-rs's client, op ids from
/// `first_op`; returns the op ids each counter acknowledged.
async fn client(
    args: &Args,
    counters: u64,
    increments: u64,
    first_op: u64,
) -> BTreeMap<String, BTreeSet<u64>> {
    let membership = OracleMembership::for_clients(args.oracle_client());
    let mut client = ClientBuilder::new()
        .members_storage(membership)
        .timeout_millis(2_000)
        .build()
        .expect("a client");
    let mut acked: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for n in 0..increments {
        let id = format!("c-{}", n % counters);
        let op = first_op + n;
        // A refusal (a counter being handed over, a server pausing) is retried: the op id makes
        // that safe.
        for attempt in 0..50 {
            let sent = client
                .send::<Incremented, CounterError>("Counter", &id, &Increment { op })
                .await;
            match sent {
                Ok(done) if done.op == op => {
                    acked.entry(id.clone()).or_default().insert(op);
                    break;
                }
                other if attempt == 49 => eprintln!("{id} op {op} not acknowledged: {other:?}"),
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    acked
}

/// Three servers and a client, a drain, and a check of every counter.
async fn demo(args: &Args) {
    let store = CounterStore::connect(&args.state_url()).expect("a Postgres URL");
    store
        .create_table()
        .await
        .expect("create the counters table");
    let me = std::env::current_exe().expect("the example's own binary");
    let mut servers: Vec<(Child, String)> = (0..3)
        .map(|_| {
            let mut child = Command::new(&me)
                .arg("server")
                .args(args.shared())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start a server");
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let first = lines.next().and_then(Result::ok).unwrap_or_default();
            let address = first
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_owned();
            println!("server: {first}");
            // The rest of what it says, as it says it.
            let prefix = address.clone();
            std::thread::spawn(move || {
                for line in lines.map_while(Result::ok) {
                    println!("server {prefix}: {line}");
                }
            });
            (child, address)
        })
        .collect();

    // Op ids unique to this run, so that a second run's increments are new ones.
    let first_op = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        * 1_000;
    let mut acked = client(args, 50, 500, first_op).await;
    println!("\n500 increments sent to 50 counters; where the oracle placed them:");
    print_placements(args).await;

    let (mut drained, address) = servers.remove(0);
    println!("\ndraining {address} (SIGTERM): its counters are handed over");
    let _ = Command::new("kill").arg(drained.id().to_string()).status();
    let _ = drained.wait();
    for (id, ops) in client(args, 50, 500, first_op + 500).await {
        acked.entry(id).or_default().extend(ops);
    }
    println!("500 more increments; now:");
    print_placements(args).await;

    // Every acknowledged op id must be in its counter's saved state.
    let saved: BTreeMap<String, BTreeSet<u64>> = store
        .all()
        .await
        .expect("read the counters")
        .into_iter()
        .collect();
    let mut lost = 0;
    for (id, ops) in &acked {
        let missing = ops
            .iter()
            .filter(|op| !saved.get(id).is_some_and(|s| s.contains(op)));
        for op in missing {
            lost += 1;
            println!("{id}: acknowledged op {op} is not in its state");
        }
    }
    println!(
        "\n{} increments acknowledged; every one of them is in its counter's state: {}",
        acked.values().map(BTreeSet::len).sum::<usize>(),
        if lost == 0 { "yes" } else { "NO" }
    );
    for (mut child, _) in servers {
        let _ = Command::new("kill").arg(child.id().to_string()).status();
        let _ = child.wait();
    }
    if lost > 0 {
        std::process::exit(1);
    }
}

async fn print_placements(args: &Args) {
    let client = args.oracle_client();
    let silos: serde_json::Value = client
        .call(reqwest::Method::GET, "/silos?limit=100", None)
        .await
        .expect("the oracle's silos");
    for silo in silos["silos"].as_array().into_iter().flatten() {
        if silo["status"] == "dead" {
            continue;
        }
        let id = silo["silo"].as_str().unwrap_or_default();
        let page: serde_json::Value = client
            .call(
                reqwest::Method::GET,
                &format!(
                    "/activations?silo={}&limit=1000",
                    placement_oracle_sdk::segment(id)
                ),
                None,
            )
            .await
            .unwrap_or_default();
        let count = page["activations"].as_array().map_or(0, Vec::len);
        println!(
            "  {id} ({}): {count} counters",
            silo["status"].as_str().unwrap_or("?")
        );
    }
}
