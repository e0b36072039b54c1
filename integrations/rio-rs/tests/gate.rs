//! The gate, the placement and the membership against a scripted oracle replica (the SDK's own
//! `fake_oracle`): what is admitted when, what a lookup answers, what a death, a pause and a
//! hand-over do; and the record of activations on its own. The same parts against the real oracle, under faults, are
//! `tests/side_by_side.rs`.

#[allow(dead_code)]
#[path = "../../../sdk/rust/tests/fake_oracle.rs"]
mod fake_oracle;

use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_oracle::{FakeOracle, Reply, Request};
use placement_oracle_rio::{
    Activations, Fence, Gate, Observer, OracleMembership, OraclePlacement, Refusal, Token,
};
use placement_oracle_sdk::{
    ClientOptions, HandOver, Migration, Migrator, OracleClient, Placement, Silo, SiloOptions,
};
use rio_rs::cluster::storage::MembershipStorage;
use rio_rs::object_placement::{ObjectPlacement, ObjectPlacementItem};
use rio_rs::ObjectId;
use serde_json::json;

const ME: &str = "127.0.0.1:7001";
const SERVICE: &str = "192.0.2.9:7001";
/// The lease the scripted replica grants: long beside the 50 ms heartbeats, so that it lapses
/// only when the script refuses them.
const LEASE_MS: u64 = 1_000;

/// What the scripted replica answers: heartbeats (with a lease of [`LEASE_MS`], refused as dead
/// for the incarnation it holds dead, or refused with a status) and claims (for the silo named).
#[derive(Clone)]
struct Script {
    refuse_heartbeats: Arc<AtomicU16>,
    /// The incarnation held dead: its heartbeats are refused with 409 as a real replica refuses
    /// them, while a later generation's are answered.
    dead: Arc<Mutex<Option<String>>>,
    placed_on: Arc<Mutex<String>>,
}

impl Script {
    fn new() -> Self {
        Self {
            refuse_heartbeats: Arc::default(),
            dead: Arc::default(),
            placed_on: Arc::new(Mutex::new(format!("{ME}@1"))),
        }
    }

    fn answer(&self, request: &Request) -> Reply {
        if request.path.ends_with("/heartbeats") {
            if self.dead.lock().unwrap().as_deref() == request.body["silo"].as_str() {
                return Reply::problem(409, "silo-declared-dead");
            }
            return match self.refuse_heartbeats.load(Ordering::SeqCst) {
                0 => Reply::ok(json!({ "lease_ms": LEASE_MS })),
                status => Reply::problem(status, "store-unavailable"),
            };
        }
        if request.path.ends_with("/placements") {
            let silo = self.placed_on.lock().unwrap().clone();
            let address = silo.split('@').next().unwrap().to_owned();
            return Reply::ok(json!({
                "grain": request.body["grain"], "silo": silo, "address": address,
                "epoch": 42, "outcome": "placed", "strategy": "random"
            }));
        }
        if request.path.contains("/silos?") {
            let page = if request.path.contains("cursor=") {
                json!({ "cluster": "c1", "next_cursor": null, "silos": [
                    { "silo": "127.0.0.1:7003@1", "address": "127.0.0.1:7003", "status": "active" }
                ]})
            } else {
                json!({ "cluster": "c1", "next_cursor": "127.0.0.1:7002@2", "silos": [
                    { "silo": "127.0.0.1:7001@1", "address": "127.0.0.1:7001", "status": "active" },
                    { "silo": "127.0.0.1:7002@1", "address": "127.0.0.1:7002", "status": "dead" }
                ]})
            };
            return Reply::ok(page);
        }
        Reply::problem(404, "not-found")
    }
}

#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

impl Observer for Seen {
    fn started(&self, object: &str, token: &Token) {
        self.0
            .lock()
            .unwrap()
            .push(format!("start {object} era {}", token.era));
    }
    fn ended(&self, object: &str, token: &Token) {
        self.0
            .lock()
            .unwrap()
            .push(format!("end {object} era {}", token.era));
    }
}

struct Node {
    gate: Arc<Gate>,
    placement: OraclePlacement,
    silo: Silo,
    seen: Arc<Seen>,
    script: Script,
    _oracle: FakeOracle,
}

/// A joined silo with its gate and placement, on a scripted replica.
async fn node() -> Node {
    let script = Script::new();
    let answering = script.clone();
    let oracle = FakeOracle::start(move |request| answering.answer(request)).await;
    let options = ClientOptions {
        timeout: Duration::from_millis(500),
        ..ClientOptions::default()
    };
    let client = OracleClient::new(std::slice::from_ref(&oracle.url), "c1", options).unwrap();
    let seen = Arc::new(Seen::default());
    let gate = Gate::new(Activations::new(seen.clone()), Duration::from_millis(300));
    let silo = Silo::new(
        client,
        ME,
        SiloOptions {
            generation: Some(1),
            interval: Duration::from_millis(50),
            events: gate.events(),
            ..SiloOptions::default()
        },
    );
    gate.attach_silo(silo.clone());
    silo.join(Duration::from_secs(5)).await.unwrap();
    let placement = OraclePlacement::new(gate.clone(), Placement::for_silo(&silo), SERVICE.into());
    Node {
        gate,
        placement,
        silo,
        seen,
        script,
        _oracle: oracle,
    }
}

fn counter(id: &str) -> ObjectId {
    ObjectId::new("Counter", id)
}

async fn until(what: &str, check: impl Fn() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not within 5 s");
}

fn refusal(gate: &Gate, object: &str) -> Option<Refusal> {
    gate.admit(object).err()
}

#[tokio::test]
async fn a_call_is_admitted_only_under_a_registration_claimed_here() {
    let node = node().await;
    assert_eq!(refusal(&node.gate, "Counter/a"), Some(Refusal::NotHere));

    let answer = node.placement.lookup(&counter("a")).await.unwrap();
    assert_eq!(
        answer.as_deref(),
        Some(SERVICE),
        "its own registration runs here"
    );
    let admission = node.gate.admit("Counter/a").unwrap();
    assert_eq!(admission.token().server, format!("{ME}@1"));
    assert_eq!(admission.token().epoch, Some(42));
    admission.loaded();
    assert_eq!(*node.seen.0.lock().unwrap(), ["start Counter/a era 0"]);
}

#[tokio::test]
async fn a_registration_held_elsewhere_is_a_redirect_and_nothing_is_admitted() {
    let node = node().await;
    *node.script.placed_on.lock().unwrap() = "127.0.0.1:7002@3".into();
    let answer = node.placement.lookup(&counter("b")).await.unwrap();
    assert_eq!(answer.as_deref(), Some("127.0.0.1:7002"));
    assert_eq!(refusal(&node.gate, "Counter/b"), Some(Refusal::NotHere));
    // rio-rs's blind write after a miss is refused: only a claim registers an object.
    let update = ObjectPlacementItem::new(counter("b"), Some(SERVICE.into()));
    assert!(node.placement.update(update).await.is_err());
    // and a peer's verdict changes nothing.
    node.placement.clean_server(ME.into()).await.unwrap();
    node.placement.remove(&counter("b")).await.unwrap();
}

#[tokio::test]
async fn when_the_lease_runs_out_every_activation_ends_and_the_next_call_runs_in_a_new_era() {
    let node = node().await;
    node.placement.lookup(&counter("a")).await.unwrap();
    node.gate.admit("Counter/a").unwrap().loaded();

    node.script.refuse_heartbeats.store(503, Ordering::SeqCst);
    until("the lease runs out", || !node.silo.may_run_grains()).await;
    assert_eq!(refusal(&node.gate, "Counter/a"), Some(Refusal::Paused));
    assert!(
        node.placement.lookup(&counter("a")).await.is_err(),
        "a lookup refuses too: the claim cannot be run"
    );
    until("the gate is told of the pause", || {
        node.gate.stats().pauses.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(
        *node.seen.0.lock().unwrap(),
        ["start Counter/a era 0", "end Counter/a era 0"]
    );

    node.script.refuse_heartbeats.store(0, Ordering::SeqCst);
    until("the lease holds again", || node.silo.may_run_grains()).await;
    let again = node.gate.admit("Counter/a").unwrap();
    assert_eq!(again.token().era, 1, "state is loaded again after a pause");
    assert_eq!(again.token().epoch, Some(42), "under the same registration");
}

#[tokio::test]
async fn a_call_in_flight_when_the_lease_runs_out_ends_its_activation_when_it_is_done() {
    let node = node().await;
    node.placement.lookup(&counter("a")).await.unwrap();
    let in_flight = node.gate.admit("Counter/a").unwrap();
    in_flight.loaded();
    node.script.refuse_heartbeats.store(503, Ordering::SeqCst);
    until("the gate is told of the pause", || {
        node.gate.stats().pauses.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(
        in_flight.remaining(),
        Duration::ZERO,
        "its I/O is out of time"
    );
    assert_eq!(
        node.seen.0.lock().unwrap().len(),
        1,
        "not ended while it runs"
    );
    drop(in_flight);
    assert_eq!(node.seen.0.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn told_dead_the_server_forgets_every_registration_and_rejoins() {
    let node = node().await;
    node.placement.lookup(&counter("a")).await.unwrap();
    node.gate.admit("Counter/a").unwrap().loaded();

    *node.script.dead.lock().unwrap() = Some(format!("{ME}@1"));
    until("rejoined", || {
        node.silo.generation() == 2 && node.silo.may_run_grains()
    })
    .await;
    assert_eq!(node.gate.stats().deaths.load(Ordering::SeqCst), 1);
    assert_eq!(node.gate.held(), 0);
    assert_eq!(refusal(&node.gate, "Counter/a"), Some(Refusal::NotHere));
    assert_eq!(
        *node.seen.0.lock().unwrap(),
        ["start Counter/a era 0", "end Counter/a era 0"]
    );
}

fn migration(epoch: i64) -> Migration {
    Migration {
        id: 9,
        grain: "Counter/a".into(),
        epoch,
        from: format!("{ME}@1"),
        to: "127.0.0.1:7002@1".into(),
        reason: "drain".into(),
    }
}

#[tokio::test]
async fn a_hand_over_waits_for_the_calls_in_flight_and_admits_none_meanwhile() {
    let node = node().await;
    node.placement.lookup(&counter("a")).await.unwrap();
    assert_eq!(
        node.gate.hand_over(&migration(41)).await,
        HandOver::Later,
        "another activation than the one held"
    );

    let in_flight = node.gate.admit("Counter/a").unwrap();
    in_flight.loaded();
    let gate = node.gate.clone();
    let finished = Arc::new(AtomicBool::new(false));
    let done = finished.clone();
    let handing = tokio::spawn(async move {
        let outcome = gate.hand_over(&migration(42)).await;
        done.store(true, Ordering::SeqCst);
        outcome
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !finished.load(Ordering::SeqCst),
        "waits for the call in flight"
    );
    assert_eq!(refusal(&node.gate, "Counter/a"), Some(Refusal::HandingOver));
    assert!(node.placement.lookup(&counter("a")).await.is_err());
    drop(in_flight);
    assert_eq!(handing.await.unwrap(), HandOver::Moved);
    assert_eq!(node.gate.held(), 0);
    assert_eq!(
        *node.seen.0.lock().unwrap(),
        ["start Counter/a era 0", "end Counter/a era 0"]
    );
}

#[tokio::test]
async fn a_hand_over_whose_calls_outlast_the_wait_is_put_off_and_changes_nothing() {
    let node = node().await;
    node.placement.lookup(&counter("a")).await.unwrap();
    let in_flight = node.gate.admit("Counter/a").unwrap();
    assert_eq!(node.gate.hand_over(&migration(42)).await, HandOver::Later);
    drop(in_flight);
    assert!(node.gate.admit("Counter/a").is_ok(), "still held here");
}

#[tokio::test]
async fn clients_see_each_address_once_active_if_an_incarnation_there_is() {
    let node = node().await;
    let membership = OracleMembership::for_clients(node.silo.client().clone());
    let members: Vec<(String, bool)> = membership
        .members()
        .await
        .unwrap()
        .iter()
        .map(|m| (m.address(), m.active()))
        .collect();
    assert_eq!(
        members,
        [
            ("127.0.0.1:7001".to_owned(), true),
            ("127.0.0.1:7002".to_owned(), false),
            ("127.0.0.1:7003".to_owned(), true)
        ],
        "both pages read"
    );
    assert!(membership.is_active("127.0.0.1", "7003").await.unwrap());
    assert!(!membership.is_active("127.0.0.1", "7002").await.unwrap());
    assert!(membership
        .push(rio_rs::cluster::storage::Member::new(
            "a".into(),
            "1".into()
        ))
        .await
        .is_err());
    let on_server = OracleMembership::for_server(node.silo.client().clone());
    assert!(
        on_server.is_active("127.0.0.1", "7002").await.unwrap(),
        "a server trusts the placement"
    );
}

#[tokio::test]
async fn a_claim_answered_before_a_hand_over_and_received_after_it_is_not_held() {
    let node = node().await;
    // The hand-over runs while the claim that names this server is still on its way.
    assert_eq!(node.gate.hand_over(&migration(42)).await, HandOver::Moved);
    let moved = placement_oracle_sdk::Ending::Moved { epoch: 43 };
    node.gate.ended(&migration(42), &moved);
    assert_eq!(
        node.gate.hold("Counter/a", &format!("{ME}@1"), Some(42)),
        Err(Refusal::NotHere),
        "the registration handed over is not taken back"
    );
    assert!(node.gate.admit("Counter/a").is_err());
    // A newer registration (the object placed here again) is held.
    node.gate
        .hold("Counter/a", &format!("{ME}@1"), Some(43))
        .unwrap();
    assert_eq!(
        node.gate.admit("Counter/a").unwrap().token().epoch,
        Some(43)
    );
}

#[tokio::test]
async fn a_registration_held_again_after_a_failed_hand_over_is_a_new_activation() {
    let node = node().await;
    node.placement.lookup(&counter("a")).await.unwrap();
    let first = node.gate.admit("Counter/a").unwrap().token().clone();
    assert_eq!(node.gate.hand_over(&migration(42)).await, HandOver::Moved);
    node.gate
        .ended(&migration(42), &placement_oracle_sdk::Ending::Failed);
    node.placement.lookup(&counter("a")).await.unwrap();
    let again = node.gate.admit("Counter/a").unwrap().token().clone();
    assert_eq!(again.epoch, first.epoch, "the same registration");
    assert_ne!(
        again, first,
        "a new activation: the object loads its state again"
    );
}

// ---- the record of activations, on its own ----

fn token(era: u64) -> Token {
    Token {
        server: "s@1".into(),
        epoch: Some(7),
        claim: 1,
        era,
    }
}

#[test]
fn a_closed_activation_ends_when_its_last_call_is_done() {
    let seen = Arc::new(Seen::default());
    let activations = Activations::new(seen.clone());
    let first = activations.enter("Counter/a", token(0), Duration::from_secs(1));
    first.loaded();
    let second = activations.enter("Counter/a", token(0), Duration::from_secs(1));
    activations.close_all().report();
    drop(first);
    assert_eq!(*seen.0.lock().unwrap(), ["start Counter/a era 0"]);
    drop(second);
    assert_eq!(
        *seen.0.lock().unwrap(),
        ["start Counter/a era 0", "end Counter/a era 0"]
    );
    assert_eq!(activations.in_flight("Counter/a"), 0);
}

#[test]
fn an_idle_activation_ends_when_closed_and_one_never_loaded_is_not_reported() {
    let seen = Arc::new(Seen::default());
    let activations = Activations::new(seen.clone());
    let loaded = activations.enter("Counter/a", token(0), Duration::from_secs(1));
    loaded.loaded();
    drop(loaded);
    drop(activations.enter("Counter/b", token(0), Duration::from_secs(1)));
    activations
        .close(|object, _| object == "Counter/a")
        .report();
    assert_eq!(
        *seen.0.lock().unwrap(),
        ["start Counter/a era 0", "end Counter/a era 0"]
    );
    activations.close_all().report();
    assert_eq!(seen.0.lock().unwrap().len(), 2, "b never loaded");
}

#[test]
fn a_call_that_loads_after_its_activation_closed_does_not_start_it_again() {
    let seen = Arc::new(Seen::default());
    let activations = Activations::new(seen.clone());
    let late = activations.enter("Counter/a", token(0), Duration::from_secs(1));
    activations.close_all().report();
    late.loaded();
    drop(late);
    assert!(seen.0.lock().unwrap().is_empty());
}
