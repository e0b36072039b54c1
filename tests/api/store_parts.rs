//! Each part of the store interface, called directly (no HTTP, no oracle) on both stores: what
//! the oracle relies on from membership, the directory, the policy and the pools.

use std::sync::Arc;

use placement_oracle::clock::Millis;
use placement_oracle::clock::{Clock, ManualClock};
use placement_oracle::cluster::heartbeat::{self, Heartbeat, HeartbeatRejection};
use placement_oracle::cluster::lease;
use placement_oracle::cluster::{
    ClusterName, GrainId, LoadReport, PoolName, SiloId, SiloRecord, SiloStatus,
};
use placement_oracle::connect::{ConnectRule, Pool};
use placement_oracle::placement::Strategy;
use placement_oracle::policy::Policy;
use placement_oracle::store::memory::MemoryStore;
use placement_oracle::store::{
    Completion, Due, EdgeReport, Ending, Failure, HeartbeatOutcome, Lease, LeaseClaim,
    MigrationReason, NewActivation, NewMigration, Proposal, Refusal, Registration, SilenceLook,
    Store, StoreError, StoreSettings, DEAD_SILO_RETENTION_MS, ENDING_KEPT_MS,
};

use crate::helpers::{due_now, never_stalls, Backend, TestDatabase, START_MS, TTL_MS};

/// A store of its own, on a manual clock; the database is kept alive with it.
async fn direct(backend: Backend) -> (Arc<dyn Store>, ManualClock, Option<Arc<TestDatabase>>) {
    direct_with(backend, StoreSettings::with_ttl(TTL_MS)).await
}

/// [`direct`] with other settings.
async fn direct_with(
    backend: Backend,
    settings: StoreSettings,
) -> (Arc<dyn Store>, ManualClock, Option<Arc<TestDatabase>>) {
    let clock = ManualClock::starting_at(START_MS);
    match TestDatabase::for_backend(backend).await {
        None => {
            let store = MemoryStore::new(settings, Arc::new(clock.clone()), never_stalls());
            (Arc::new(store), clock, None)
        }
        Some(database) => {
            let store = database.store_with(2, &clock, settings).await;
            (Arc::new(store), clock, Some(database))
        }
    }
}

fn cluster() -> ClusterName {
    ClusterName::parse("parts").unwrap()
}

fn silo(id: &str) -> SiloId {
    SiloId::parse("silo", id).unwrap()
}

async fn beat(store: &dyn Store, id: &str) {
    beat_hosting(store, id, None).await
}

/// A heartbeat from a silo that hosts only `grain_types` (all types with `None`).
async fn beat_hosting(store: &dyn Store, id: &str, grain_types: Option<&[&str]>) {
    beat_in(store, &cluster(), id, grain_types).await
}

/// [`beat_hosting`] in `cluster`.
async fn beat_in(store: &dyn Store, cluster: &ClusterName, id: &str, grain_types: Option<&[&str]>) {
    let heartbeat = Heartbeat {
        silo: silo(id),
        address: id.split('@').next().unwrap().to_owned(),
        status: SiloStatus::Active,
        role: None,
        metadata: Default::default(),
        grain_types: grain_types.map(|types| types.iter().map(|t| t.to_string()).collect()),
        load: LoadReport::default(),
    };
    let update =
        |previous: Option<&_>, liveness: &_| heartbeat::apply(&heartbeat, previous, liveness);
    store
        .record_heartbeat(cluster, &heartbeat.silo, &update)
        .await
        .unwrap()
        .expect("accepted");
}

fn entry(grain: &str, on: &str) -> NewActivation {
    NewActivation {
        grain: GrainId::parse("grain", grain).unwrap(),
        silo: silo(on),
        strategy: Strategy::Random.as_str(),
        replaces_epoch: None,
    }
}

async fn membership_records_lists_and_retires_silos(backend: Backend) {
    let (store, clock, _db) = direct(backend).await;
    assert!(
        store.membership(&cluster()).await.unwrap().is_none(),
        "no cluster before a heartbeat"
    );
    for id in ["a@1", "b@1", "c@1"] {
        beat(&*store, id).await;
    }
    let membership = store.membership(&cluster()).await.unwrap().unwrap();
    let ids: Vec<&str> = membership.silos.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["a@1", "b@1", "c@1"]);
    let page = store
        .silos(&cluster(), Some(&silo("a@1")), 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.silos.len(), 1);
    assert_eq!(page.silos[0].id.as_str(), "b@1");

    let left = store
        .remove_silo(&cluster(), &silo("a@1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((left.released, left.release_pending), (0, false));
    let (record, liveness) = store.silo(&cluster(), &silo("a@1")).await.unwrap().unwrap();
    assert_eq!(record.status_at(&liveness), SiloStatus::Dead);

    // b keeps beating; c falls silent past the TTL and the sweep's step declares it dead.
    clock.advance_ms(TTL_MS / 2);
    beat(&*store, "b@1").await;
    clock.advance_ms(TTL_MS / 2 + 1);
    assert!(
        due_now(&*store, &cluster()).await.silent,
        "c is due to be judged"
    );
    let reaped = store.reap(&cluster()).await.unwrap();
    assert_eq!(
        reaped
            .dead
            .iter()
            .map(|r| r.silo.as_str())
            .collect::<Vec<_>>(),
        ["c@1"]
    );
    let membership = store.membership(&cluster()).await.unwrap().unwrap();
    let ids: Vec<&str> = membership.silos.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        ids,
        ["b@1"],
        "the membership holds only silos not marked dead"
    );
}

async fn the_directory_registers_once_looks_up_and_deactivates_by_epoch(backend: Backend) {
    let (store, _clock, _db) = direct(backend).await;
    beat(&*store, "a@1").await;
    let first = store
        .register(&cluster(), &[entry("user/alice", "a@1")])
        .await
        .unwrap();
    let Registration::Registered(activation) = &first[0] else {
        panic!("registered: {first:?}");
    };
    let again = store
        .register(&cluster(), &[entry("user/alice", "a@1")])
        .await
        .unwrap();
    assert!(
        matches!(&again[0], Registration::Existing(l) if l.activation.epoch == activation.epoch && l.live),
        "first writer wins: {again:?}"
    );
    let grain = GrainId::parse("grain", "user/alice").unwrap();
    let found = store
        .lookup(&cluster(), std::slice::from_ref(&grain))
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].activation.silo, "a@1");

    assert!(
        !store
            .deactivate(&cluster(), &grain, &silo("a@1"), activation.epoch + 1)
            .await
            .unwrap(),
        "another epoch is not this activation"
    );
    assert!(store
        .deactivate(&cluster(), &grain, &silo("a@1"), activation.epoch)
        .await
        .unwrap());
    assert!(store.lookup(&cluster(), &[grain]).await.unwrap().is_empty());

    let many: Vec<NewActivation> = (0..5)
        .map(|i| entry(&format!("order/{i}"), "a@1"))
        .collect();
    store.register(&cluster(), &many).await.unwrap();
    let page = store
        .activations_on(&cluster(), &silo("a@1"), Some("order/1"), 2)
        .await
        .unwrap();
    assert_eq!(
        page.iter().map(|a| a.grain.as_str()).collect::<Vec<_>>(),
        ["order/2", "order/3"]
    );
}

async fn the_policy_is_replaced_only_at_the_expected_version(backend: Backend) {
    let (store, _clock, _db) = direct(backend).await;
    let policy = Policy {
        default_strategy: Strategy::HashBased,
        ..Policy::default()
    };
    assert_eq!(
        store.put_policy(&cluster(), &policy, None).await.unwrap(),
        Ok(1)
    );
    assert_eq!(
        store
            .put_policy(&cluster(), &policy, Some(0))
            .await
            .unwrap(),
        Err(1),
        "a writer that read version 0 lost the race"
    );
    assert_eq!(
        store
            .put_policy(&cluster(), &policy, Some(1))
            .await
            .unwrap(),
        Ok(2)
    );
    let membership = store.membership(&cluster()).await.unwrap().unwrap();
    assert_eq!(membership.policy_version, 2);
    assert_eq!(membership.policy.default_strategy, Strategy::HashBased);
}

async fn pools_are_stored_and_share_one_round_robin_counter(backend: Backend) {
    let (store, _clock, _db) = direct(backend).await;
    let name = PoolName::parse("front").unwrap();
    assert!(store.pool(&cluster(), &name).await.unwrap().is_none());
    assert!(store
        .next_round_robin(&cluster(), &name)
        .await
        .unwrap()
        .is_none());
    let pool = Pool {
        rule: ConnectRule::RoundRobin,
        ..Pool::default()
    };
    store.put_pool(&cluster(), &name, &pool).await.unwrap();
    assert_eq!(
        store.pool(&cluster(), &name).await.unwrap(),
        Some(pool.clone())
    );
    let mut counters = Vec::new();
    for _ in 0..3 {
        counters.push(
            store
                .next_round_robin(&cluster(), &name)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert_eq!(counters, [0, 1, 2]);
    // Replacing the pool keeps the counter going.
    store.put_pool(&cluster(), &name, &pool).await.unwrap();
    assert_eq!(
        store.next_round_robin(&cluster(), &name).await.unwrap(),
        Some(3)
    );
}

/// A replica renews the leases of every cluster it runs in one claim: each is claimed as alone
/// (taken, renewed with its token, or left to the replica holding it), unknown ones left out.
async fn the_leases_of_many_clusters_are_claimed_at_once(backend: Backend) {
    let (store, clock, _db) = direct(backend).await;
    let names: Vec<ClusterName> = ["east", "north", "south"]
        .iter()
        .map(|n| ClusterName::parse(n).unwrap())
        .collect();
    let beats: Vec<(ClusterName, Heartbeat)> = names
        .iter()
        .map(|c| (c.clone(), heartbeat_of("s@1", 1.0, SiloStatus::Active)))
        .collect();
    beat_batch_across(&*store, &beats).await;
    let other = match store.claim_lease(&names[1], "b", 10_000).await.unwrap() {
        LeaseClaim::Held(lease) => lease,
        claim => panic!("{claim:?}"),
    };
    let mut asked = names.clone();
    asked.push(ClusterName::parse("nowhere").unwrap());
    let held = store.claim_leases(&asked, "a", 10_000).await.unwrap();
    assert_eq!(
        held.keys().map(ClusterName::as_str).collect::<Vec<_>>(),
        ["east", "south"],
        "north is b's, nowhere is no cluster"
    );
    for lease in held.values() {
        assert_eq!(
            (lease.holder.as_str(), lease.token, lease.expires_at_ms),
            ("a", 1, START_MS + 10_000)
        );
    }
    // Renewed with their tokens; north, once b's lease runs out, taken with a new one.
    clock.advance_ms(10_000);
    let again = store.claim_leases(&asked, "a", 10_000).await.unwrap();
    let tokens: Vec<(&str, i64, Millis)> = again
        .iter()
        .map(|(c, l)| (c.as_str(), l.token, l.expires_at_ms - clock.now_ms()))
        .collect();
    assert_eq!(
        tokens,
        [
            ("east", 2, 10_000),
            ("north", other.token + 1, 10_000),
            ("south", 2, 10_000)
        ],
        "east and south expired at this very instant: taken anew"
    );
    clock.advance_ms(1_000);
    let renewed = store.claim_leases(&names, "a", 10_000).await.unwrap();
    assert!(renewed.iter().all(|(c, l)| l.token == again[c].token));
}

async fn a_lease_is_held_by_one_replica_and_its_token_grows_on_every_takeover(backend: Backend) {
    let (store, clock, _db) = direct(backend).await;
    let held = |claim: LeaseClaim| match claim {
        LeaseClaim::Held(lease) => lease,
        other => panic!("expected to hold the lease: {other:?}"),
    };
    assert_eq!(
        store.claim_lease(&cluster(), "a", 10_000).await.unwrap(),
        LeaseClaim::NoCluster
    );
    beat(&*store, "s@1").await;
    let a = held(store.claim_lease(&cluster(), "a", 10_000).await.unwrap());
    assert_eq!(
        (a.holder.as_str(), a.token, a.expires_at_ms),
        ("a", 1, START_MS + 10_000)
    );
    // B is refused while A's lease runs; A renews with the same token.
    clock.advance_ms(4_000);
    assert_eq!(
        store.claim_lease(&cluster(), "b", 10_000).await.unwrap(),
        LeaseClaim::HeldByOther(a.clone())
    );
    let renewed = held(store.claim_lease(&cluster(), "a", 10_000).await.unwrap());
    assert_eq!(
        (renewed.token, renewed.expires_at_ms),
        (1, START_MS + 14_000)
    );
    // A stops renewing: once it expires, B takes over with a larger token.
    clock.advance_ms(10_000);
    let b = held(store.claim_lease(&cluster(), "b", 10_000).await.unwrap());
    assert_eq!((b.holder.as_str(), b.token), ("b", 2));
    assert_eq!(store.lease(&cluster()).await.unwrap(), Some(b.clone()));
    // A's old lease cannot be given up any more; B's can, and A comes back with token 3.
    assert!(!store.release_lease(&cluster(), &renewed).await.unwrap());
    assert!(store.release_lease(&cluster(), &b).await.unwrap());
    let again = held(store.claim_lease(&cluster(), "a", 10_000).await.unwrap());
    assert_eq!((again.holder.as_str(), again.token), ("a", 3));

    // An operator's request at B takes the lease over while A's runs: a new token, and A's
    // writes fenced by the old one are refused from then on. A taking over its own lease renews it.
    let taken = held(
        store
            .take_over_lease(&cluster(), "b", 10_000)
            .await
            .unwrap(),
    );
    assert_eq!((taken.holder.as_str(), taken.token), ("b", 4));
    let state = serde_json::json!({"cycle": 1});
    assert!(!store
        .save_work_state(&cluster(), &again, "rebalancer", &state)
        .await
        .unwrap());
    assert!(store
        .save_work_state(&cluster(), &taken, "rebalancer", &state)
        .await
        .unwrap());
    let renewed = held(
        store
            .take_over_lease(&cluster(), "b", 10_000)
            .await
            .unwrap(),
    );
    assert_eq!(renewed.token, 4);
    assert_eq!(
        store
            .take_over_lease(&ClusterName::parse("nope").unwrap(), "b", 10_000)
            .await
            .unwrap(),
        LeaseClaim::NoCluster
    );
}

async fn racing_claims_give_the_lease_to_exactly_one(backend: Backend) {
    let (store, clock, _db) = direct(backend).await;
    beat(&*store, "s@1").await;
    for round in 0..3 {
        let racers: Vec<_> = ["a", "b", "c", "d", "e", "f", "g", "h"]
            .into_iter()
            .map(|holder| {
                let store = store.clone();
                tokio::spawn(async move { store.claim_lease(&cluster(), holder, 1_000).await })
            })
            .collect();
        let mut claims = Vec::new();
        for racer in racers {
            claims.push(racer.await.unwrap());
        }
        let holders: Vec<Lease> = claims
            .into_iter()
            .filter_map(|claim| match claim.unwrap() {
                LeaseClaim::Held(lease) => Some(lease),
                LeaseClaim::HeldByOther(_) => None,
                LeaseClaim::NoCluster => panic!("the cluster exists"),
            })
            .collect();
        assert_eq!(holders.len(), 1, "round {round}: {holders:?}");
        assert_eq!(holders[0].token, round + 1);
        clock.advance_ms(1_001);
    }
}

fn migration(grain: &str, from: &str, to: &str, epoch: i64) -> NewMigration {
    NewMigration {
        grain: GrainId::parse("grain", grain).unwrap(),
        from: silo(from),
        to: silo(to),
        epoch,
        reason: MigrationReason::Rebalancer,
    }
}

/// Registers `grain` on `on` and returns its epoch.
async fn placed(store: &dyn Store, grain: &str, on: &str) -> i64 {
    match &store
        .register(&cluster(), &[entry(grain, on)])
        .await
        .unwrap()[0]
    {
        Registration::Registered(a) => a.epoch,
        other => panic!("{other:?}"),
    }
}

/// The lease, for eight seconds (less than the silos' TTL, so a test can outlive it).
async fn lease_for(store: &dyn Store, holder: &str) -> Lease {
    match store.claim_lease(&cluster(), holder, 8_000).await.unwrap() {
        LeaseClaim::Held(lease) => lease,
        other => panic!("{other:?}"),
    }
}

async fn migrations_are_issued_only_under_the_current_lease_once_per_grain(backend: Backend) {
    let (store, clock, _db) = direct(backend).await;
    for id in ["a@1", "b@1"] {
        beat(&*store, id).await;
    }
    let alice = placed(&*store, "user/alice", "a@1").await;
    let bob = placed(&*store, "user/bob", "a@1").await;
    let a = lease_for(&*store, "replica-a").await;
    let issued = store
        .issue_migrations(
            &cluster(),
            &a,
            &[
                migration("user/alice", "a@1", "b@1", alice),
                migration("user/bob", "a@1", "b@1", bob + 1000), // not that activation
                migration("user/carol", "a@1", "b@1", 1),        // no such grain
            ],
        )
        .await
        .unwrap()
        .expect("the lease holds");
    assert_eq!(
        issued.iter().map(|m| m.grain.as_str()).collect::<Vec<_>>(),
        ["user/alice"]
    );
    assert_eq!(
        (
            issued[0].from.as_str(),
            issued[0].to.as_str(),
            issued[0].epoch
        ),
        ("a@1", "b@1", alice)
    );
    // One open migration per grain.
    let again = store
        .issue_migrations(
            &cluster(),
            &a,
            &[migration("user/alice", "a@1", "b@1", alice)],
        )
        .await
        .unwrap()
        .unwrap();
    assert!(again.is_empty());
    // The source polls what it must send.
    let pending = store
        .pending_migrations(&cluster(), &silo("a@1"), None, 10)
        .await
        .unwrap();
    assert_eq!(pending, issued);
    assert!(store
        .pending_migrations(&cluster(), &silo("b@1"), None, 10)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .pending_migrations(&cluster(), &silo("a@1"), Some(issued[0].id), 10)
        .await
        .unwrap()
        .is_empty());

    // A's lease expires and B takes over: A's token writes nothing any more.
    clock.advance_ms(4_000);
    beat(&*store, "a@1").await;
    beat(&*store, "b@1").await;
    clock.advance_ms(4_001);
    beat(&*store, "a@1").await;
    beat(&*store, "b@1").await;
    let b = lease_for(&*store, "replica-b").await;
    assert!(b.token > a.token);
    let fenced = store
        .issue_migrations(&cluster(), &a, &[migration("user/bob", "a@1", "b@1", bob)])
        .await
        .unwrap();
    assert_eq!(fenced, None, "a stale token is refused");
    let by_b = store
        .issue_migrations(&cluster(), &b, &[migration("user/bob", "a@1", "b@1", bob)])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(by_b.len(), 1);
}

async fn completing_moves_the_entry_as_a_new_activation_or_says_why_not(backend: Backend) {
    let (store, clock, _db) = direct(backend).await;
    for id in ["a@1", "b@1", "c@1"] {
        beat(&*store, id).await;
    }
    let lease = lease_for(&*store, "r").await;
    let mut epochs = std::collections::HashMap::new();
    for grain in ["user/1", "user/2", "user/3", "user/4"] {
        epochs.insert(grain, placed(&*store, grain, "a@1").await);
    }
    let issued = store
        .issue_migrations(
            &cluster(),
            &lease,
            &[
                migration("user/1", "a@1", "b@1", epochs["user/1"]),
                migration("user/2", "a@1", "b@1", epochs["user/2"]),
                migration("user/3", "a@1", "c@1", epochs["user/3"]),
                migration("user/4", "a@1", "b@1", epochs["user/4"]),
            ],
        )
        .await
        .unwrap()
        .unwrap();
    let id = |grain: &str| issued.iter().find(|m| m.grain == grain).unwrap().id;

    // Completed: the entry is on b, with a larger epoch; completing again (a retry) gets the same
    // answer and moves nothing, and failing it is told it was completed.
    let Completion::Moved {
        epoch,
        migration: moved,
    } = store
        .complete_migration(&cluster(), id("user/1"), 60_000)
        .await
        .unwrap()
    else {
        panic!("moved");
    };
    assert!(epoch > epochs["user/1"]);
    let found = store
        .lookup(&cluster(), &[GrainId::parse("grain", "user/1").unwrap()])
        .await
        .unwrap();
    assert_eq!(
        (found[0].activation.silo.as_str(), found[0].activation.epoch),
        ("b@1", epoch)
    );
    assert_eq!(
        store
            .complete_migration(&cluster(), id("user/1"), 60_000)
            .await
            .unwrap(),
        Completion::Ended {
            migration: moved.clone(),
            ending: Ending::Moved { epoch }
        }
    );
    assert_eq!(
        store
            .fail_migration(&cluster(), id("user/1"))
            .await
            .unwrap(),
        Failure::Ended {
            migration: moved,
            ending: Ending::Moved { epoch }
        }
    );
    let found = store
        .lookup(&cluster(), &[GrainId::parse("grain", "user/1").unwrap()])
        .await
        .unwrap();
    assert_eq!(found[0].activation.epoch, epoch, "a retry moves nothing");

    // The grain was deactivated meanwhile: refused, and cancelled.
    let grain2 = GrainId::parse("grain", "user/2").unwrap();
    assert!(store
        .deactivate(&cluster(), &grain2, &silo("a@1"), epochs["user/2"])
        .await
        .unwrap());
    assert!(matches!(
        store
            .complete_migration(&cluster(), id("user/2"), 60_000)
            .await
            .unwrap(),
        Completion::Refused {
            refusal: Refusal::GrainGone,
            ..
        }
    ));
    assert!(matches!(
        store
            .complete_migration(&cluster(), id("user/2"), 60_000)
            .await
            .unwrap(),
        Completion::Ended {
            ending: Ending::Refused {
                refusal: Refusal::GrainGone
            },
            ..
        }
    ));

    // The target left: refused. Too old: refused. Failing removes it.
    store.remove_silo(&cluster(), &silo("c@1")).await.unwrap();
    assert!(matches!(
        store
            .complete_migration(&cluster(), id("user/3"), 60_000)
            .await
            .unwrap(),
        Completion::Refused {
            refusal: Refusal::TargetUnavailable,
            ..
        }
    ));
    clock.advance_ms(5_000);
    assert!(matches!(
        store
            .complete_migration(&cluster(), id("user/4"), 4_999)
            .await
            .unwrap(),
        Completion::Refused {
            refusal: Refusal::Expired,
            ..
        }
    ));
    assert!(store
        .pending_migrations(&cluster(), &silo("a@1"), None, 10)
        .await
        .unwrap()
        .is_empty());
    let more = store
        .issue_migrations(
            &cluster(),
            &lease,
            &[migration("user/4", "a@1", "b@1", epochs["user/4"])],
        )
        .await
        .unwrap()
        .unwrap();
    let Failure::Failed(failed) = store.fail_migration(&cluster(), more[0].id).await.unwrap()
    else {
        panic!("failed");
    };
    assert_eq!(failed.grain, "user/4");
    assert_eq!(
        store.fail_migration(&cluster(), more[0].id).await.unwrap(),
        Failure::Ended {
            migration: failed.clone(),
            ending: Ending::Failed
        }
    );
    assert_eq!(
        store
            .complete_migration(&cluster(), more[0].id, 60_000)
            .await
            .unwrap(),
        Completion::Ended {
            migration: failed,
            ending: Ending::Failed
        }
    );

    // Endings are kept an hour: then nothing is known of them.
    clock.advance_ms(ENDING_KEPT_MS + 1);
    assert_eq!(
        store.fail_migration(&cluster(), more[0].id).await.unwrap(),
        Failure::NotFound
    );
    assert_eq!(
        store
            .complete_migration(&cluster(), id("user/1"), 60_000)
            .await
            .unwrap(),
        Completion::NotFound
    );
}

async fn stale_migrations_are_cancelled(backend: Backend) {
    let (store, clock, _db) = direct(backend).await;
    for id in ["a@1", "b@1", "c@1"] {
        beat(&*store, id).await;
    }
    let lease = lease_for(&*store, "r").await;
    let one = placed(&*store, "user/1", "a@1").await;
    let two = placed(&*store, "user/2", "a@1").await;
    let three = placed(&*store, "user/3", "a@1").await;
    store
        .issue_migrations(
            &cluster(),
            &lease,
            &[
                migration("user/1", "a@1", "b@1", one),
                migration("user/2", "a@1", "c@1", two),
                migration("user/3", "a@1", "b@1", three),
            ],
        )
        .await
        .unwrap()
        .unwrap();
    assert!(store
        .cancel_stale_migrations(&cluster(), 60_000)
        .await
        .unwrap()
        .is_empty());
    // c leaves (its target dies) and user/1 is deactivated: both cancelled; user/3 stays.
    store.remove_silo(&cluster(), &silo("c@1")).await.unwrap();
    let grain1 = GrainId::parse("grain", "user/1").unwrap();
    store
        .deactivate(&cluster(), &grain1, &silo("a@1"), one)
        .await
        .unwrap();
    let mut cancelled: Vec<String> = store
        .cancel_stale_migrations(&cluster(), 60_000)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.grain)
        .collect();
    cancelled.sort();
    assert_eq!(cancelled, ["user/1", "user/2"]);
    // Past the TTL, the last one goes too.
    clock.advance_ms(2_001);
    let expired = store
        .cancel_stale_migrations(&cluster(), 2_000)
        .await
        .unwrap();
    assert_eq!(
        expired.iter().map(|m| m.grain.as_str()).collect::<Vec<_>>(),
        ["user/3"]
    );
}

async fn a_migration_to_a_silo_that_does_not_host_the_grain_type_is_refused(backend: Backend) {
    let (store, _clock, _db) = direct(backend).await;
    beat(&*store, "a@1").await;
    beat_hosting(&*store, "orders@1", Some(&["order"])).await;
    beat_hosting(&*store, "users@1", Some(&["order", "user"])).await;
    let lease = lease_for(&*store, "r").await;
    let epoch = placed(&*store, "user/1", "a@1").await;
    let other_epoch = placed(&*store, "user/2", "a@1").await;
    let issued = store
        .issue_migrations(
            &cluster(),
            &lease,
            &[
                migration("user/1", "a@1", "orders@1", epoch),
                migration("user/2", "a@1", "users@1", other_epoch),
            ],
        )
        .await
        .unwrap()
        .unwrap();
    let id_of = |grain: &str| issued.iter().find(|m| m.grain == grain).unwrap().id;
    // A target listing the grain's type among others takes it.
    assert!(matches!(
        store
            .complete_migration(&cluster(), id_of("user/2"), 60_000)
            .await
            .unwrap(),
        Completion::Moved { .. }
    ));
    assert!(matches!(
        store
            .complete_migration(&cluster(), id_of("user/1"), 60_000)
            .await
            .unwrap(),
        Completion::Refused {
            refusal: Refusal::TargetUnavailable,
            ..
        }
    ));
    let found = store
        .lookup(&cluster(), &[GrainId::parse("grain", "user/1").unwrap()])
        .await
        .unwrap();
    assert_eq!(found[0].activation.silo, "a@1", "the grain stays");
}

async fn work_state_is_written_only_under_the_current_lease(backend: Backend) {
    let (store, clock, _db) = direct(backend).await;
    beat(&*store, "a@1").await;
    assert_eq!(
        store.work_state(&cluster(), "rebalancer").await.unwrap(),
        None
    );
    let a = lease_for(&*store, "a").await;
    let first = serde_json::json!({ "cycle": 1 });
    assert!(store
        .save_work_state(&cluster(), &a, "rebalancer", &first)
        .await
        .unwrap());
    assert_eq!(
        store.work_state(&cluster(), "rebalancer").await.unwrap(),
        Some(first.clone())
    );
    // A's lease runs out and B takes it: A's saves are refused and change nothing.
    clock.advance_ms(8_001);
    beat(&*store, "a@1").await;
    let b = lease_for(&*store, "b").await;
    let stale = serde_json::json!({ "cycle": 99 });
    assert!(!store
        .save_work_state(&cluster(), &a, "rebalancer", &stale)
        .await
        .unwrap());
    assert_eq!(
        store.work_state(&cluster(), "rebalancer").await.unwrap(),
        Some(first)
    );
    // The same holder with an old token is refused too (a replica that lost and retook it).
    let b_again = lease_for(&*store, "b").await;
    assert_eq!(b_again.token, b.token, "renewed, not retaken");
    let old_token = Lease {
        token: b.token - 1,
        ..b.clone()
    };
    assert!(!store
        .save_work_state(&cluster(), &old_token, "rebalancer", &stale)
        .await
        .unwrap());
    assert!(store
        .save_work_state(&cluster(), &b, "rebalancer", &stale)
        .await
        .unwrap());
}

async fn movable_activations_are_the_oldest_placed_of_movable_types(backend: Backend) {
    let (store, clock, _db) = direct(backend).await;
    beat(&*store, "a@1").await;
    beat(&*store, "b@1").await;
    let lease = lease_for(&*store, "r").await;
    for grain in ["user/3", "order/1", "user/1", "user/2"] {
        placed(&*store, grain, "a@1").await;
        clock.advance_ms(10);
    }
    let movable = |immovable: Vec<String>, since: i64| {
        let store = store.clone();
        async move {
            store
                .movable_activations(&cluster(), &silo("a@1"), &immovable, since, 10)
                .await
                .unwrap()
                .into_iter()
                .map(|a| a.grain)
                .collect::<Vec<_>>()
        }
    };
    let now = START_MS + 40;
    // Least recently placed first; an immovable type never.
    assert_eq!(
        movable(vec![], now).await,
        ["user/3", "order/1", "user/1", "user/2"]
    );
    assert_eq!(
        movable(vec!["order".into()], now).await,
        ["user/3", "user/1", "user/2"]
    );
    // A grain with an open migration is not offered again.
    let user3 = store
        .lookup(&cluster(), &[GrainId::parse("grain", "user/3").unwrap()])
        .await
        .unwrap()[0]
        .activation
        .epoch;
    let issued = store
        .issue_migrations(
            &cluster(),
            &lease,
            &[migration("user/3", "a@1", "b@1", user3)],
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(movable(vec![], now).await, ["order/1", "user/1", "user/2"]);
    // Once moved to b, it is not offered from b until `moved_since` has passed its arrival.
    store
        .complete_migration(&cluster(), issued[0].id, 60_000)
        .await
        .unwrap();
    let from_b = |since: i64| {
        let store = store.clone();
        async move {
            store
                .movable_activations(&cluster(), &silo("b@1"), &[], since, 10)
                .await
                .unwrap()
                .len()
        }
    };
    assert_eq!(
        from_b(START_MS).await,
        0,
        "it arrived after START_MS: kept where it is"
    );
    assert_eq!(
        from_b(START_MS + 1_000).await,
        1,
        "arrived before: movable again"
    );
}

async fn a_drained_silo_stays_shutting_down_and_its_cluster_is_driven(backend: Backend) {
    let (store, clock, _db) = direct(backend).await;
    for id in ["a@1", "b@1", "c@1"] {
        beat(&*store, id).await;
    }
    assert!(
        !due_now(&*store, &cluster()).await.moving,
        "nothing to move: no rebalancer, no drain, no migration"
    );
    let one = placed(&*store, "user/1", "a@1").await;
    placed(&*store, "user/2", "a@1").await;
    assert_eq!(
        store.drain_silo(&cluster(), &silo("x@1")).await.unwrap(),
        None,
        "unknown silo"
    );
    let (drained, _) = store
        .drain_silo(&cluster(), &silo("a@1"))
        .await
        .unwrap()
        .expect("known");
    assert_eq!(drained.status, SiloStatus::ShuttingDown);
    assert_eq!(drained.drained_at_ms, Some(START_MS));
    assert!(
        due_now(&*store, &cluster()).await.moving,
        "a drain moves grains"
    );
    // Asked again later, the first time stays; a heartbeat saying `active` keeps it shutting down.
    clock.advance_ms(1_000);
    let (again, _) = store
        .drain_silo(&cluster(), &silo("a@1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.drained_at_ms, Some(START_MS));
    beat(&*store, "a@1").await;
    let (after, _) = store.silo(&cluster(), &silo("a@1")).await.unwrap().unwrap();
    assert_eq!(
        (after.status, after.drained_at_ms, after.heartbeat_count),
        (SiloStatus::ShuttingDown, Some(START_MS), 2)
    );
    // Its counts: two entries, one of them migrating.
    let lease = lease_for(&*store, "r").await;
    store
        .issue_migrations(
            &cluster(),
            &lease,
            &[migration("user/1", "a@1", "b@1", one)],
        )
        .await
        .unwrap()
        .unwrap();
    let counts = store.silo_counts(&cluster(), &silo("a@1")).await.unwrap();
    assert_eq!((counts.activations, counts.migrating), (2, 1));
    placed(&*store, "user/3", "b@1").await;
    let all = store.activation_counts(&cluster()).await.unwrap();
    assert_eq!(
        all,
        std::collections::HashMap::from([("a@1".to_owned(), 2), ("b@1".to_owned(), 1)]),
        "silos without entries are left out"
    );
    // A dead silo is not marked (it is returned dead), and a dead drained silo no longer counts.
    store.remove_silo(&cluster(), &silo("c@1")).await.unwrap();
    let (dead, _) = store
        .drain_silo(&cluster(), &silo("c@1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((dead.status, dead.drained_at_ms), (SiloStatus::Dead, None));
    // Nor is one silent past its TTL before any sweep: b last beat at the start.
    clock.advance_ms(TTL_MS);
    let (silent, _) = store
        .drain_silo(&cluster(), &silo("b@1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(silent.drained_at_ms, None, "{silent:?}");
    store.remove_silo(&cluster(), &silo("a@1")).await.unwrap();
    store
        .cancel_stale_migrations(&cluster(), 60_000)
        .await
        .unwrap();
    assert!(!due_now(&*store, &cluster()).await.moving);
}

async fn edge_reports_are_numbered_read_in_pages_bounded_and_forgotten(backend: Backend) {
    let (store, _clock, _db) = direct(backend).await;
    beat(&*store, "a@1").await;
    let report = |n: usize, tag: &str| -> Vec<EdgeReport> {
        (0..n)
            .map(|i| EdgeReport {
                from: GrainId::parse("grain", &format!("{tag}/{i}")).unwrap(),
                to: GrainId::parse("grain", "user/hub").unwrap(),
                count: i as u64 + 1,
            })
            .collect()
    };
    let unknown = ClusterName::parse("nowhere").unwrap();
    assert_eq!(
        store
            .append_edges(&unknown, &report(1, "x"), 10)
            .await
            .unwrap(),
        None
    );
    for (n, tag) in [(2, "a"), (3, "b"), (4, "c")] {
        assert_eq!(
            store
                .append_edges(&cluster(), &report(n, tag), 100)
                .await
                .unwrap(),
            Some(0)
        );
    }
    // A page cuts through reports: edges 2 to 5, in order.
    let page = store.pending_edges(&cluster(), 1, 4).await.unwrap();
    let seen: Vec<(i64, &str)> = page.iter().map(|e| (e.seq, e.from.as_str())).collect();
    assert_eq!(seen, [(2, "a/1"), (3, "b/0"), (4, "b/1"), (5, "b/2")]);
    assert_eq!(page[0].count, 2);
    // Forgetting through 5 leaves the last report's four; the bound then drops the oldest.
    store.forget_edges(&cluster(), 5).await.unwrap();
    let intake = store.edge_intake(&cluster()).await.unwrap();
    assert_eq!((intake.last_seq, intake.pending, intake.dropped), (9, 4, 0));
    assert_eq!(
        store
            .append_edges(&cluster(), &report(3, "d"), 5)
            .await
            .unwrap(),
        Some(2)
    );
    let left: Vec<i64> = store
        .pending_edges(&cluster(), 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(left, [8, 9, 10, 11, 12]);
    // Past a gap the bound left (1 to 7 are gone), a page still starts at the first waiting edge.
    let page: Vec<i64> = store
        .pending_edges(&cluster(), 0, 2)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(page, [8, 9]);
    let intake = store.edge_intake(&cluster()).await.unwrap();
    assert_eq!((intake.pending, intake.dropped), (5, 2));
}

/// A heartbeat of silo `id` reporting `cpu` percent, in `status`.
fn heartbeat_of(id: &str, cpu: f64, status: SiloStatus) -> Heartbeat {
    Heartbeat {
        silo: silo(id),
        address: id.split('@').next().unwrap().to_owned(),
        status,
        role: None,
        metadata: Default::default(),
        grain_types: None,
        load: LoadReport {
            cpu_usage: Some(cpu),
            ..LoadReport::default()
        },
    }
}

/// What each heartbeat of `beats` came to through `record_heartbeats`: the heartbeat count it
/// wrote with its smoothed CPU, or the rejection.
async fn beat_batch(store: &dyn Store, beats: &[Heartbeat]) -> Vec<Result<(i64, f64), String>> {
    let beats: Vec<(ClusterName, Heartbeat)> =
        beats.iter().map(|b| (cluster(), b.clone())).collect();
    beat_batch_across(store, &beats)
        .await
        .into_iter()
        .map(|outcome| outcome.map(|(count, cpu, _)| (count, cpu)))
        .collect()
}

/// What each heartbeat of `beats`, each of its own cluster, came to through one
/// `record_heartbeats`: the heartbeat count it wrote, its smoothed CPU and the TTL it was judged
/// under, or the rejection.
async fn beat_batch_across(
    store: &dyn Store,
    beats: &[(ClusterName, Heartbeat)],
) -> Vec<Result<(i64, f64, Millis), String>> {
    let update = |i: usize, previous: Option<&_>, liveness: &_| {
        heartbeat::apply(&beats[i].1, previous, liveness)
    };
    let silos: Vec<(ClusterName, SiloId)> = beats
        .iter()
        .map(|(cluster, b)| (cluster.clone(), b.silo.clone()))
        .collect();
    store
        .record_heartbeats(&silos, &update)
        .await
        .unwrap()
        .into_iter()
        .map(|outcome| match outcome.unwrap() {
            Ok((record, liveness)) => Ok((
                record.heartbeat_count,
                record.profile.smoothing.cpu_usage.unwrap_or(-1.0),
                liveness.silo_ttl_ms,
            )),
            Err(rejection) => Err(rejection.to_string()),
        })
        .collect()
}

/// Silos joining in one batch (a Postgres replica inserts them in one statement) keep each
/// cluster's silo limit and retired generations as one by one: of three new silos in a cluster
/// with room for two, two join and one is refused, whichever the store takes first; a retired
/// generation is refused; a silo of another cluster does not count against this one.
async fn silos_joining_in_one_batch_keep_the_silo_limit_and_retired_generations(backend: Backend) {
    let settings = StoreSettings {
        max_silos_per_cluster: 3,
        ..StoreSettings::with_ttl(TTL_MS)
    };
    let (store, clock, _db) = direct_with(backend, settings).await;
    beat(store.as_ref(), "gone@1").await;
    store
        .remove_silo(&cluster(), &silo("gone@1"))
        .await
        .unwrap();
    clock.advance_ms(DEAD_SILO_RETENTION_MS + 1);
    store.forget_expired(&cluster()).await.unwrap();
    beat(store.as_ref(), "old@1").await;
    let other = ClusterName::parse("other").unwrap();
    let beats = [
        (cluster(), "c@1"),
        (other.clone(), "x@1"),
        (cluster(), "a@1"),
        (cluster(), "gone@1"),
        (cluster(), "b@1"),
        (cluster(), "a@1"),
    ];
    let update = |i: usize, previous: Option<&_>, liveness: &_| {
        heartbeat::apply(
            &heartbeat_of(beats[i].1, i as f64, SiloStatus::Active),
            previous,
            liveness,
        )
    };
    let silos: Vec<(ClusterName, SiloId)> = beats
        .iter()
        .map(|(cluster, id)| (cluster.clone(), silo(id)))
        .collect();
    let answers: Vec<String> = store
        .record_heartbeats(&silos, &update)
        .await
        .unwrap()
        .into_iter()
        .map(|answer| match answer {
            Ok(Ok((record, _))) => format!("count {}", record.heartbeat_count),
            Ok(Err(HeartbeatRejection::Retired { .. })) => "retired".into(),
            Err(StoreError::Limit(_)) => "full".into(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(answers[1], "count 1", "another cluster's silo: {answers:?}");
    assert_eq!(answers[3], "retired", "{answers:?}");
    let new = [&answers[0], &answers[2], &answers[4]];
    assert_eq!(
        new.iter().filter(|a| a.as_str() == "count 1").count(),
        2,
        "two of the three join: {answers:?}"
    );
    assert_eq!(new.iter().filter(|a| a.as_str() == "full").count(), 1);
    let second_a = if answers[2] == "full" {
        "full"
    } else {
        "count 2"
    };
    assert_eq!(
        answers[5], second_a,
        "a's second heartbeat follows its first"
    );
    let members = store.membership(&cluster()).await.unwrap().unwrap();
    assert_eq!(members.silos.len(), 3, "the limit holds");
}

/// A batch naming many clusters answers each heartbeat as its own cluster alone would: silos new
/// and known, with copies and without, clusters of different TTLs, one of them changed between
/// batches (a copy folded under the old TTL must not be written under the new one).
async fn a_batch_across_clusters_answers_each_as_its_cluster_alone_would(backend: Backend) {
    let (batched, clock, _db) = direct(backend).await;
    let (single, single_clock, _db2) = direct(backend).await;
    let named = |name: &str| ClusterName::parse(name).unwrap();
    let (north, south, west) = (named("north"), named("south"), named("west"));
    let longer = TTL_MS * 3;
    let policy = |ttl: Millis| Policy {
        silo_ttl_ms: Some(ttl as u64),
        ..Policy::default()
    };
    let beats = |round: f64, silos: &[(&ClusterName, &str)]| -> Vec<(ClusterName, Heartbeat)> {
        silos
            .iter()
            .enumerate()
            .map(|(n, (cluster, id))| {
                let cpu = round * 10.0 + n as f64;
                (
                    (*cluster).clone(),
                    heartbeat_of(id, cpu, SiloStatus::Active),
                )
            })
            .collect()
    };
    let mut answers = Vec::new();
    for round in 0..4 {
        let south_ttl = match round {
            1 => Some(longer),
            3 => Some(TTL_MS),
            _ => None,
        };
        if let Some(ttl) = south_ttl {
            for store in [&batched, &single] {
                store
                    .put_policy(&south, &policy(ttl), None)
                    .await
                    .unwrap()
                    .unwrap();
            }
        }
        let mut silos = vec![
            (&north, "a@1"),
            (&south, "a@1"),
            (&north, "b@1"),
            (&west, "c@1"),
        ];
        if round >= 2 {
            // A silo new to a cluster whose other silos this replica wrote last.
            silos.push((&south, "d@1"));
        }
        let beats = beats(round as f64, &silos);
        let together = beat_batch_across(batched.as_ref(), &beats).await;
        let mut apart = Vec::new();
        for beat in &beats {
            apart.extend(beat_batch_across(single.as_ref(), std::slice::from_ref(beat)).await);
        }
        assert_eq!(
            together, apart,
            "round {round}: a batch answers as one by one"
        );
        answers.push(together);
        clock.advance_ms(1_000);
        single_clock.advance_ms(1_000);
    }
    let south_ttls: Vec<Millis> = answers
        .iter()
        .map(|round| round[1].as_ref().unwrap().2)
        .collect();
    assert_eq!(
        south_ttls,
        [TTL_MS, longer, longer, TTL_MS],
        "south's silo is judged under south's TTL as it is at each batch"
    );
    assert!(
        answers.iter().flatten().all(Result::is_ok),
        "every heartbeat is accepted: {answers:?}"
    );
    for (cluster, id) in [
        (&north, "a@1"),
        (&south, "a@1"),
        (&north, "b@1"),
        (&west, "c@1"),
        (&south, "d@1"),
    ] {
        let (stored_batched, _) = batched.silo(cluster, &silo(id)).await.unwrap().unwrap();
        let (stored_single, _) = single.silo(cluster, &silo(id)).await.unwrap().unwrap();
        assert_eq!(
            stored_batched, stored_single,
            "{cluster}/{id} is stored as one by one would"
        );
    }
}

/// What `beats` came to as one batch through `batched`, checked to be what they come to one by one
/// through `single`.
async fn batched_and_one_by_one(
    batched: &Arc<dyn Store>,
    single: &Arc<dyn Store>,
    beats: &[Heartbeat],
) -> Vec<Result<(i64, f64), String>> {
    let together = beat_batch(batched.as_ref(), beats).await;
    let mut apart = Vec::new();
    for beat in beats {
        apart.extend(beat_batch(single.as_ref(), std::slice::from_ref(beat)).await);
    }
    assert_eq!(together, apart, "a batch answers exactly as one by one");
    together
}

async fn a_batch_of_heartbeats_is_applied_in_order_like_one_by_one(backend: Backend) {
    let (batched, clock, _db) = direct(backend).await;
    let (single, single_clock, _db2) = direct(backend).await;
    for store in [&batched, &single] {
        beat(store.as_ref(), "a@1").await;
        beat(store.as_ref(), "b@1").await;
    }
    clock.advance_ms(1_000);
    single_clock.advance_ms(1_000);
    let beats = [
        heartbeat_of("a@1", 10.0, SiloStatus::Active),
        heartbeat_of("b@1", 50.0, SiloStatus::Active),
        heartbeat_of("a@1", 30.0, SiloStatus::Active),
        heartbeat_of("c@1", 5.0, SiloStatus::Active),
        heartbeat_of("a@1", 90.0, SiloStatus::Joining),
        heartbeat_of("a@1", 70.0, SiloStatus::Active),
        heartbeat_of("c@1", 15.0, SiloStatus::Active),
    ];
    let together = batched_and_one_by_one(&batched, &single, &beats).await;
    let counts: Vec<Option<i64>> = together
        .iter()
        .map(|r| r.as_ref().ok().map(|r| r.0))
        .collect();
    assert_eq!(
        counts,
        [Some(2), Some(2), Some(3), Some(1), None, Some(4), Some(2)],
        "each silo's heartbeats apply in order; the regression is refused and skipped"
    );
    // Again, now that the batch's store wrote a, b and c last (a Postgres replica folds their
    // heartbeats onto its copies of their rows) and d is new: one batch mixing both.
    clock.advance_ms(1_000);
    single_clock.advance_ms(1_000);
    let beats = [
        heartbeat_of("b@1", 20.0, SiloStatus::Active),
        heartbeat_of("d@1", 60.0, SiloStatus::Active),
        heartbeat_of("a@1", 40.0, SiloStatus::Active),
        heartbeat_of("c@1", 25.0, SiloStatus::Active),
        heartbeat_of("b@1", 80.0, SiloStatus::Joining),
    ];
    batched_and_one_by_one(&batched, &single, &beats).await;
    // What a Postgres replica held back (load alone, a second after the stored heartbeat) its
    // flush writes, as it does every quarter of a second.
    for store in [&batched, &single] {
        store.flush_held_heartbeats().await.unwrap();
    }
    for id in ["a@1", "b@1", "c@1", "d@1"] {
        let (stored_batched, _) = batched.silo(&cluster(), &silo(id)).await.unwrap().unwrap();
        let (stored_single, _) = single.silo(&cluster(), &silo(id)).await.unwrap().unwrap();
        assert_eq!(
            stored_batched, stored_single,
            "{id} is stored as one by one would store it"
        );
    }
}

async fn concurrent_batches_beating_for_one_silo_lose_no_heartbeat(backend: Backend) {
    let (store, _clock, _db) = direct(backend).await;
    beat(store.as_ref(), "a@1").await;
    let mut batches = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let store = store.clone();
        batches.spawn(async move {
            let beats = [
                heartbeat_of("a@1", 20.0, SiloStatus::Active),
                heartbeat_of("a@1", 40.0, SiloStatus::Active),
            ];
            let update = |i: usize, previous: Option<&_>, liveness: &_| {
                heartbeat::apply(&beats[i], previous, liveness)
            };
            let silos = vec![(cluster(), silo("a@1")); 2];
            store.record_heartbeats(&silos, &update).await.unwrap()
        });
    }
    // A silo racing itself this hard may be told to retry (`Contended`); every heartbeat that was
    // acknowledged wrote a version of its own, and none was lost.
    let mut written = Vec::new();
    while let Some(answers) = batches.join_next().await {
        for answer in answers.unwrap() {
            match answer {
                Ok(Ok((record, _))) => written.push(record.heartbeat_count),
                Err(StoreError::Contended(_)) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    written.sort_unstable();
    let expected: Vec<i64> = (2..2 + written.len() as i64).collect();
    assert_eq!(
        written, expected,
        "every acknowledged heartbeat wrote its own version"
    );
    assert!(written.len() >= 2, "at least the first batch got through");
    let (stored, _) = store.silo(&cluster(), &silo("a@1")).await.unwrap().unwrap();
    assert_eq!(stored.heartbeat_count, 1 + written.len() as i64);
}

/// Two replicas of one store, on one manual clock: for Postgres two stores on one database, for
/// the embedded store (which has no replicas) the store itself twice.
async fn two_replicas(
    backend: Backend,
) -> (
    Arc<dyn Store>,
    Arc<dyn Store>,
    ManualClock,
    Option<Arc<TestDatabase>>,
) {
    let (first, clock, database) = direct(backend).await;
    let second: Arc<dyn Store> = match &database {
        None => first.clone(),
        Some(database) => Arc::new(database.store(2, &clock).await),
    };
    (first, second, clock, database)
}

/// A replica folds a silo's heartbeat onto the row it wrote last without reading it; a heartbeat
/// that went through another replica meanwhile is neither lost nor overwritten: each heartbeat
/// comes to what it would through one store. The silo beats every second; each replica's flush
/// of held heartbeats runs between (as it does every quarter of a second).
async fn a_heartbeat_through_another_replica_meanwhile_is_not_overwritten(backend: Backend) {
    let (a, b, clock, _db) = two_replicas(backend).await;
    let (single, single_clock, _db2) = direct(backend).await;
    let through = [&a, &a, &a, &b, &a, &a, &b, &b, &a];
    for (n, replica) in through.into_iter().enumerate() {
        clock.advance_ms(1_000);
        single_clock.advance_ms(1_000);
        let beat = [heartbeat_of("a@1", 10.0 * n as f64, SiloStatus::Active)];
        assert_eq!(
            beat_batch(replica.as_ref(), &beat).await,
            beat_batch(single.as_ref(), &beat).await,
            "heartbeat {n}"
        );
        for flushed in [&a, &b, &single] {
            flushed.flush_held_heartbeats().await.unwrap();
        }
    }
    let (on_replicas, _) = b.silo(&cluster(), &silo("a@1")).await.unwrap().unwrap();
    let (alone, _) = single
        .silo(&cluster(), &silo("a@1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(on_replicas, alone);
    assert_eq!(on_replicas.heartbeat_count, through.len() as i64);
}

/// A cluster's TTL changed after a replica wrote a silo's row: the silo's next heartbeat is judged,
/// and its lease granted, under the new TTL.
async fn a_new_ttl_reaches_the_next_heartbeat_of_a_silo_a_replica_wrote_last(backend: Backend) {
    let (store, clock, _db) = direct(backend).await;
    for cpu in [10.0, 20.0, 30.0] {
        beat_batch(
            store.as_ref(),
            &[heartbeat_of("a@1", cpu, SiloStatus::Active)],
        )
        .await;
        clock.advance_ms(1_000);
    }
    let (before, _) = store.silo(&cluster(), &silo("a@1")).await.unwrap().unwrap();
    let longer = TTL_MS * 3;
    let policy = Policy {
        silo_ttl_ms: Some(longer as u64),
        ..Policy::default()
    };
    store
        .put_policy(&cluster(), &policy, None)
        .await
        .unwrap()
        .unwrap();
    let beat = heartbeat_of("a@1", 40.0, SiloStatus::Active);
    let (record, liveness) = beat_batched(store.as_ref(), &beat).await.unwrap();
    assert_eq!(liveness.silo_ttl_ms, longer);
    assert_eq!(
        record.protected_until_ms,
        lease::protected_until_ms(before.protected_until_ms, clock.now_ms(), longer)
    );
    let (stored, _) = store.silo(&cluster(), &silo("a@1")).await.unwrap().unwrap();
    assert_eq!(stored, record);
}

/// One heartbeat through `store`'s batch path, as answered.
async fn beat_batched(store: &dyn Store, beat: &Heartbeat) -> HeartbeatOutcome {
    let update =
        |_: usize, previous: Option<&_>, liveness: &_| heartbeat::apply(beat, previous, liveness);
    let mut answers = store
        .record_heartbeats(&[(cluster(), beat.silo.clone())], &update)
        .await
        .unwrap();
    assert_eq!(answers.len(), 1, "{answers:?}");
    answers.pop().unwrap().unwrap()
}

/// One heartbeat through `store`'s batch path: the record it answered with and the lease that
/// answer grants.
async fn beat_for_lease(store: &dyn Store, beat: &Heartbeat) -> (SiloRecord, Millis) {
    let (record, liveness) = beat_batched(store, beat).await.unwrap();
    let granted = lease::granted_ms(
        liveness.silo_ttl_ms,
        record.protected_until_ms,
        liveness.now,
    );
    (record, granted)
}

/// One heartbeat through `store`'s one-by-one path, which reads the row and writes every
/// heartbeat: the record it answered with and the lease that answer grants.
async fn beat_one_by_one(store: &dyn Store, beat: &Heartbeat) -> (SiloRecord, Millis) {
    let update = |previous: Option<&_>, liveness: &_| heartbeat::apply(beat, previous, liveness);
    let (record, liveness) = store
        .record_heartbeat(&cluster(), &beat.silo, &update)
        .await
        .unwrap()
        .unwrap();
    let granted = lease::granted_ms(
        liveness.silo_ttl_ms,
        record.protected_until_ms,
        liveness.now,
    );
    (record, granted)
}

/// A replica that wrote a silo's row answers heartbeats that change only load figures without
/// writing them while the stored one is young (the embedded store writes every one). Each answer
/// is what one written heartbeat would have been, but for its lease: that ends a margin before the
/// protection the database holds, so no silo runs on a lease the database does not know of. A new
/// status is written at once; the flush of held heartbeats writes those whose stored heartbeat is
/// within its period (a quarter of a second) of the write-after age (a second), and a heartbeat's
/// own request writes it once the stored one is twice that age old (the flush fell behind).
/// Meanwhile the replica's own membership reads show the figures it holds; another replica's
/// show the row.
async fn heartbeats_of_load_alone_are_held_back_and_flushed_within_the_stored_protection(
    backend: Backend,
) {
    let (store, clock, db) = direct(backend).await;
    let (single, single_clock, _db2) = direct(backend).await;
    // Another replica on the same database.
    let other = match &db {
        Some(db) => {
            let other = db
                .store_with(2, &clock, StoreSettings::with_ttl(TTL_MS))
                .await;
            Some(Arc::new(other) as Arc<dyn Store>)
        }
        None => None,
    };
    let holds = !matches!(backend, Backend::Memory);
    #[derive(Debug, PartialEq)]
    enum Then {
        /// Written by its own request.
        Written,
        /// Answered from the copy, not written.
        Held,
        /// Answered from the copy, then written by the flush.
        Flushed,
    }
    // (ms since the last, status, whether the flush runs after it, what becomes of it)
    let beats = [
        (0, SiloStatus::Joining, true, Then::Written), // a new silo: the replica's copy
        (1_000, SiloStatus::Joining, true, Then::Flushed), // load alone, a second later
        (300, SiloStatus::Active, true, Then::Written), // a new status
        (300, SiloStatus::Active, true, Then::Held),   // load alone, 300 ms after the stored one
        (300, SiloStatus::Active, true, Then::Held),   // 600 ms: not yet the flush's
        (399, SiloStatus::Active, true, Then::Flushed), // 999 ms
        (200, SiloStatus::Active, false, Then::Held),
        (1_000, SiloStatus::Active, false, Then::Held), // no flush ran
        (799, SiloStatus::Active, false, Then::Held),   // 1,999 ms
        (1, SiloStatus::Active, false, Then::Written),  // twice the write-after age
        (0, SiloStatus::Active, true, Then::Held),      // stored just now: the flush leaves it
    ];
    let (mut stored_count, mut stored_stamp) = (0, 0);
    for (n, (after, status, flush, then)) in beats.into_iter().enumerate() {
        clock.advance_ms(after);
        single_clock.advance_ms(after);
        let beat = heartbeat_of("a@1", 10.0 * n as f64, status);
        let (answer, granted) = beat_for_lease(store.as_ref(), &beat).await;
        let (alone, whole) = beat_one_by_one(single.as_ref(), &beat).await;
        let flushed = if flush {
            store.flush_held_heartbeats().await.unwrap()
        } else {
            0
        };
        let (stored, _) = store.silo(&cluster(), &silo("a@1")).await.unwrap().unwrap();
        let membership = store.membership(&cluster()).await.unwrap().unwrap();
        let decided_on = &membership.silos[0];
        assert_eq!(
            (
                &decided_on.profile,
                decided_on.heartbeat_count,
                decided_on.last_heartbeat_ms
            ),
            (
                &answer.profile,
                stored.heartbeat_count,
                stored.last_heartbeat_ms
            ),
            "heartbeat {n}: this replica decides on the figures it holds, judged by the row"
        );
        if let Some(other) = &other {
            let membership = other.membership(&cluster()).await.unwrap().unwrap();
            assert_eq!(
                membership.silos[0], stored,
                "heartbeat {n}: another replica decides on the row"
            );
        }
        assert_eq!(
            (answer.heartbeat_count, &answer.profile, answer.status),
            (alone.heartbeat_count, &alone.profile, alone.status),
            "heartbeat {n} answers as written"
        );
        assert_eq!(
            whole,
            lease::lease_ms(TTL_MS),
            "a written heartbeat's lease"
        );
        let then = if holds { then } else { Then::Written };
        assert_eq!(
            flushed,
            usize::from(then == Then::Flushed),
            "heartbeat {n}: rows the flush wrote"
        );
        match then {
            Then::Written => {
                stored_count = answer.heartbeat_count;
                stored_stamp = answer.last_heartbeat_ms;
                assert_eq!(stored, answer, "heartbeat {n} is stored as answered");
                assert_eq!(granted, whole, "heartbeat {n}");
            }
            Then::Held | Then::Flushed => {
                let age = clock.now_ms() - stored_stamp;
                assert_eq!(
                    granted,
                    whole - age,
                    "heartbeat {n}: the lease less the stored one's age"
                );
            }
        }
        if then == Then::Flushed {
            stored_count = answer.heartbeat_count;
            stored_stamp = answer.last_heartbeat_ms;
            assert_eq!(
                (
                    stored.heartbeat_count,
                    &stored.profile,
                    stored.last_heartbeat_ms
                ),
                (
                    alone.heartbeat_count,
                    &alone.profile,
                    alone.last_heartbeat_ms
                ),
                "heartbeat {n} is stored as its own write would have stored it"
            );
            assert_eq!(stored.protected_until_ms, alone.protected_until_ms);
        } else if then == Then::Held {
            assert_eq!(
                stored.heartbeat_count, stored_count,
                "heartbeat {n} held back"
            );
        }
        assert!(
            clock.now_ms() + granted + lease::margin_ms(TTL_MS) <= answer.protected_until_ms,
            "heartbeat {n}: its lease and the margin end within the protection it was answered with"
        );
        assert!(
            answer.protected_until_ms <= stored.protected_until_ms,
            "heartbeat {n}: which the database holds"
        );
    }
}

/// Load figures that hardly moved from the stored ones (CPU within five points, counts within a
/// twentieth) are held back until the silo's protection needs extending: the flush writes them
/// once the stored heartbeat is a third of the TTL old less two of its periods, a heartbeat's own
/// request at a third of the TTL. Figures that moved are written once it is the write-after age
/// old (a second), as before; the embedded store writes every one.
async fn load_that_hardly_moved_waits_for_the_protection_and_load_that_moved_does_not(
    backend: Backend,
) {
    let (store, clock, _db) = direct(backend).await;
    let holds = !matches!(backend, Backend::Memory);
    // (ms since the last, CPU usage, whether the flush runs after it, then: 0 held, 1 flushed,
    // 2 written by its own request)
    let beats = [
        (0, 10.0, true, 2),      // a new silo: the replica's copy
        (1_000, 11.0, true, 0),  // hardly moved, a second after the stored one
        (1_000, 12.0, true, 0),  // two seconds
        (832, 13.0, true, 0),    // 2,832 ms: not yet
        (1, 13.5, true, 1),      // 2,833 ms: a third of the TTL less two flush periods
        (1_000, 30.0, true, 1),  // moved by 16.5 points, a second after the stored one
        (300, 30.5, true, 0),    // hardly moved, 300 ms
        (3_032, 31.0, false, 0), // 3,332 ms, no flush
        (1, 31.5, false, 2),     // a third of the TTL: written by its own request
    ];
    for (n, (after, cpu, flush, then)) in beats.into_iter().enumerate() {
        clock.advance_ms(after);
        let beat = heartbeat_of("a@1", cpu, SiloStatus::Active);
        let (answer, _) = beat_for_lease(store.as_ref(), &beat).await;
        let flushed = if flush {
            store.flush_held_heartbeats().await.unwrap()
        } else {
            0
        };
        let (stored, _) = store.silo(&cluster(), &silo("a@1")).await.unwrap().unwrap();
        let then = if holds { then } else { 2 };
        assert_eq!(
            flushed,
            usize::from(then == 1),
            "heartbeat {n}: rows the flush wrote"
        );
        assert_eq!(
            stored.heartbeat_count == answer.heartbeat_count,
            then != 0,
            "heartbeat {n}: stored ({then})"
        );
    }
}

/// A silo whose heartbeats were held back and that then fell silent is dead once the stored
/// protection passes, as every reader of the row sees it: its next heartbeat is refused, not
/// judged by the later protection the held heartbeats would have written (which brought the silo
/// back after readers had placed its grains elsewhere).
async fn a_silo_silent_after_heartbeats_held_back_is_dead_when_the_stored_protection_passes(
    backend: Backend,
) {
    let (store, clock, _db) = direct(backend).await;
    // A new silo, its row read and written (the replica's copy), then three held back.
    for (n, after) in [0, 1_000, 300, 300, 399].into_iter().enumerate() {
        clock.advance_ms(after);
        beat_for_lease(
            store.as_ref(),
            &heartbeat_of("a@1", n as f64, SiloStatus::Active),
        )
        .await;
    }
    let last_beat = clock.now_ms();
    let (stored, _) = store.silo(&cluster(), &silo("a@1")).await.unwrap().unwrap();
    clock.advance_ms(stored.protected_until_ms - clock.now_ms() + 1);
    if !matches!(backend, Backend::Memory) {
        assert!(
            clock.now_ms() < last_beat + TTL_MS,
            "within the protection the last heartbeat would have written"
        );
    }
    let (read, liveness) = store.silo(&cluster(), &silo("a@1")).await.unwrap().unwrap();
    assert_eq!(read.status_at(&liveness), SiloStatus::Dead, "read as dead");
    let answer = beat_batched(
        store.as_ref(),
        &heartbeat_of("a@1", 9.0, SiloStatus::Active),
    )
    .await;
    assert!(
        matches!(answer, Err(HeartbeatRejection::DeclaredDead { .. })),
        "{answer:?}"
    );
    let (after, liveness) = store.silo(&cluster(), &silo("a@1")).await.unwrap().unwrap();
    assert_eq!(after.status_at(&liveness), SiloStatus::Dead, "still dead");
}

/// A drain reaches its silo's next heartbeat through the replica that was asked for it, and
/// through any other replica after that replica's next flush of held heartbeats (every quarter of
/// a second), which drops its copies of silos drained elsewhere, so the next heartbeat reads the
/// row (a silo whose figures hold steady goes up to a third of the TTL without a write that would
/// read the drain back).
async fn a_drain_reaches_the_silo_at_once_here_and_within_a_second_through_another_replica(
    backend: Backend,
) {
    let (a, b, clock, _db) = two_replicas(backend).await;
    let active = |cpu| heartbeat_of("a@1", cpu, SiloStatus::Active);
    let status = |store: Arc<dyn Store>, cpu| async move {
        beat_for_lease(store.as_ref(), &active(cpu)).await.0.status
    };
    status(a.clone(), 1.0).await;
    clock.advance_ms(1_000);
    status(a.clone(), 2.0).await; // a's copy
    b.drain_silo(&cluster(), &silo("a@1"))
        .await
        .unwrap()
        .unwrap();
    clock.advance_ms(500);
    let meanwhile = status(a.clone(), 3.0).await;
    assert!(
        meanwhile == SiloStatus::ShuttingDown || !matches!(backend, Backend::Memory),
        "{meanwhile:?}"
    );
    clock.advance_ms(500);
    a.flush_held_heartbeats().await.unwrap();
    assert_eq!(status(a.clone(), 4.0).await, SiloStatus::ShuttingDown);

    // Through the replica asked: at once.
    status(a.clone(), 5.0).await;
    let other = heartbeat_of("b@1", 1.0, SiloStatus::Active);
    beat_for_lease(a.as_ref(), &other).await;
    clock.advance_ms(1_000);
    beat_for_lease(a.as_ref(), &other).await; // a's copy
    clock.advance_ms(100);
    a.drain_silo(&cluster(), &silo("b@1"))
        .await
        .unwrap()
        .unwrap();
    let (answer, _) = beat_for_lease(a.as_ref(), &other).await;
    assert_eq!(answer.status, SiloStatus::ShuttingDown);
}

async fn lookup_or_register_answers_each_grain_by_what_the_store_holds(backend: Backend) {
    let (store, clock, _db) = direct(backend).await;
    beat(&*store, "a@1").await;
    beat(&*store, "quiet@1").await;
    clock.advance_ms(TTL_MS / 2);
    beat(&*store, "a@1").await;
    clock.advance_ms(TTL_MS / 2 + 1);
    store
        .register(&cluster(), &[entry("user/known", "a@1")])
        .await
        .unwrap();
    let proposal = |grain: &str, silo_id: Option<&str>| Proposal {
        grain: GrainId::parse("grain", grain).unwrap(),
        silo: silo_id.map(silo),
        strategy: Strategy::Random.as_str(),
    };
    // A second cluster in the same call, with a silo and grains of the same names as the
    // first's: each answered by its own cluster's entries and silos.
    let other = ClusterName::parse("parts-other").unwrap();
    beat_in(&*store, &other, "a@1", None).await;
    let answers = store
        .lookup_or_register(&[
            (cluster(), proposal("user/new", Some("a@1"))),
            (other.clone(), proposal("user/known", Some("a@1"))),
            (cluster(), proposal("user/known", Some("quiet@1"))),
            (cluster(), proposal("user/stranded", Some("quiet@1"))),
            (other.clone(), proposal("user/new", None)),
            (cluster(), proposal("user/only-looked-up", None)),
        ])
        .await
        .unwrap();
    assert!(
        matches!(&answers[1], Registration::Registered(a) if a.silo == "a@1"),
        "the other cluster's grain of a known grain's name is new there: {:?}",
        answers[1]
    );
    assert_eq!(
        answers[4],
        Registration::SiloUnavailable,
        "a grain known in the first cluster is not found in the other"
    );
    let answers = [
        answers[0].clone(),
        answers[2].clone(),
        answers[3].clone(),
        answers[5].clone(),
    ];
    assert!(
        matches!(&answers[0], Registration::Registered(a) if a.silo == "a@1"),
        "a new grain on a live silo is registered: {:?}",
        answers[0]
    );
    assert!(
        matches!(&answers[1], Registration::Existing(l) if l.activation.silo == "a@1" && l.live),
        "a known grain is answered as it is, whatever was proposed: {:?}",
        answers[1]
    );
    assert_eq!(
        answers[2],
        Registration::SiloUnavailable,
        "a silo silent past its TTL takes nothing"
    );
    assert_eq!(
        answers[3],
        Registration::SiloUnavailable,
        "nothing proposed, nothing found"
    );
    let stranded = GrainId::parse("grain", "user/stranded").unwrap();
    assert!(store
        .lookup(&cluster(), &[stranded])
        .await
        .unwrap()
        .is_empty());
}

async fn replicas_are_seen_until_their_stamp_is_older_than_the_ttl_or_they_retire(
    backend: Backend,
) {
    let (store, clock, _db) = direct(backend).await;
    assert_eq!(store.announce_replica("r1", 3_000).await.unwrap(), ["r1"]);
    clock.advance_ms(1_000);
    assert_eq!(
        store.announce_replica("r2", 3_000).await.unwrap(),
        ["r1", "r2"]
    );
    clock.advance_ms(2_500);
    assert_eq!(
        store.announce_replica("r2", 3_000).await.unwrap(),
        ["r2"],
        "r1's stamp is 3.5 s old"
    );
    store.announce_replica("r1", 3_000).await.unwrap();
    store.retire_replica("r1").await.unwrap();
    assert_eq!(store.announce_replica("r2", 3_000).await.unwrap(), ["r2"]);
}

/// A look at a cluster's silence says until when none of its silos can fall silent, and the
/// next read skips its silos until then: found silent at that instant, looked at again at once
/// when the TTL is lowered, and a silo joining after the look falls silent no earlier.
async fn a_look_at_silence_holds_until_a_silo_may_fall_silent(backend: Backend) {
    let (store, clock, _db) = direct(backend).await;
    let due = |look: Option<SilenceLook>| {
        let store = store.clone();
        async move {
            let mut found = store.due(&[(cluster(), look)]).await.unwrap();
            assert!(found.len() <= 1, "{found:?}");
            found.remove(&cluster())
        }
    };
    let silent_from = |id: &'static str, ttl: Millis| {
        let store = store.clone();
        async move {
            let (record, _) = store.silo(&cluster(), &silo(id)).await.unwrap().unwrap();
            record.silent_from(ttl)
        }
    };
    beat(&*store, "a@1").await;
    clock.advance_ms(1_000);
    beat(&*store, "b@1").await;
    let first = due(None).await.expect("looked at").looked.unwrap();
    assert_eq!(
        first,
        SilenceLook {
            until_ms: silent_from("a@1", TTL_MS).await,
            ttl_ms: TTL_MS
        },
        "the earliest silo's silence"
    );
    assert!(first.until_ms <= clock.now_ms() + TTL_MS);

    // Until then nothing is read, whoever beats; a silo joining falls silent later.
    clock.advance_ms(first.until_ms - clock.now_ms() - 1);
    beat(&*store, "c@1").await;
    assert!(silent_from("c@1", TTL_MS).await > first.until_ms);
    assert_eq!(
        due(Some(first)).await,
        None,
        "nothing due, nothing looked at"
    );

    // At that instant a@1 is found silent.
    clock.advance_ms(1);
    let found = due(Some(first)).await.expect("looked at");
    assert!(found.silent, "{found:?}");
    assert!(found.looked.unwrap().until_ms <= clock.now_ms());

    // Once a@1 is declared dead, the next silence is b@1's; a lower TTL calls for a look at
    // once, under the new TTL.
    assert_eq!(store.reap(&cluster()).await.unwrap().dead.len(), 1);
    store.release_dead(&cluster(), 10).await.unwrap();
    let calm = due(None).await.unwrap();
    assert!(!calm.silent);
    let calm = calm.looked.unwrap();
    assert!(calm.until_ms > clock.now_ms());
    assert_eq!(due(Some(calm)).await, None);
    let shorter = TTL_MS / 4;
    let policy = Policy {
        silo_ttl_ms: Some(shorter as u64),
        ..Policy::default()
    };
    store
        .put_policy(&cluster(), &policy, None)
        .await
        .unwrap()
        .unwrap();
    let lowered = due(Some(calm)).await.expect("looked at").looked.unwrap();
    assert_eq!(lowered.ttl_ms, shorter);
    assert!(lowered.until_ms <= clock.now_ms() + shorter);
}

async fn what_is_due_in_a_cluster_is_read_in_one_go(backend: Backend) {
    let (store, clock, _db) = direct(backend).await;
    let unknown = ClusterName::parse("nowhere").unwrap();
    assert_eq!(due_now(&*store, &unknown).await, Due::default());
    beat(&*store, "a@1").await;
    beat(&*store, "b@1").await;
    placed(&*store, "user/1", "a@1").await;
    assert_eq!(due_now(&*store, &cluster()).await, Due::default());

    // a falls silent past the TTL: it is due to be judged, then dead and its entry released.
    clock.advance_ms(TTL_MS / 2);
    beat(&*store, "b@1").await;
    clock.advance_ms(TTL_MS / 2 + 1);
    assert!(due_now(&*store, &cluster()).await.silent);
    assert_eq!(store.reap(&cluster()).await.unwrap().dead.len(), 1);
    let after_death = due_now(&*store, &cluster()).await;
    assert!(!after_death.silent);
    store.release_dead(&cluster(), 10).await.unwrap();
    assert!(!due_now(&*store, &cluster()).await.unreleased);

    // An hour on, its record is due to be forgotten, and then gone.
    clock.advance_ms(DEAD_SILO_RETENTION_MS + 1);
    assert!(due_now(&*store, &cluster()).await.expired);
    store.forget_expired(&cluster()).await.unwrap();
    assert!(!due_now(&*store, &cluster()).await.expired);
    assert!(store
        .silo(&cluster(), &silo("a@1"))
        .await
        .unwrap()
        .is_none());
}

for_each_store!(
    replicas_are_seen_until_their_stamp_is_older_than_the_ttl_or_they_retire,
    what_is_due_in_a_cluster_is_read_in_one_go,
    a_look_at_silence_holds_until_a_silo_may_fall_silent,
    lookup_or_register_answers_each_grain_by_what_the_store_holds,
    a_batch_of_heartbeats_is_applied_in_order_like_one_by_one,
    a_batch_across_clusters_answers_each_as_its_cluster_alone_would,
    silos_joining_in_one_batch_keep_the_silo_limit_and_retired_generations,
    concurrent_batches_beating_for_one_silo_lose_no_heartbeat,
    a_heartbeat_through_another_replica_meanwhile_is_not_overwritten,
    a_new_ttl_reaches_the_next_heartbeat_of_a_silo_a_replica_wrote_last,
    heartbeats_of_load_alone_are_held_back_and_flushed_within_the_stored_protection,
    load_that_hardly_moved_waits_for_the_protection_and_load_that_moved_does_not,
    a_silo_silent_after_heartbeats_held_back_is_dead_when_the_stored_protection_passes,
    a_drain_reaches_the_silo_at_once_here_and_within_a_second_through_another_replica,
    edge_reports_are_numbered_read_in_pages_bounded_and_forgotten,
    a_drained_silo_stays_shutting_down_and_its_cluster_is_driven,
    work_state_is_written_only_under_the_current_lease,
    movable_activations_are_the_oldest_placed_of_movable_types,
    a_migration_to_a_silo_that_does_not_host_the_grain_type_is_refused,
    migrations_are_issued_only_under_the_current_lease_once_per_grain,
    completing_moves_the_entry_as_a_new_activation_or_says_why_not,
    stale_migrations_are_cancelled,
    racing_claims_give_the_lease_to_exactly_one,
    a_lease_is_held_by_one_replica_and_its_token_grows_on_every_takeover,
    the_leases_of_many_clusters_are_claimed_at_once,
    membership_records_lists_and_retires_silos,
    the_directory_registers_once_looks_up_and_deactivates_by_epoch,
    the_policy_is_replaced_only_at_the_expected_version,
    pools_are_stored_and_share_one_round_robin_counter,
);
