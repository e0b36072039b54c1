//! The single-activation promise under clock skew, races, retries, restarts and hostile load:
//! one test per hole a review found, each failing on the code before its fix.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use placement_oracle::clock::ManualClock;
use placement_oracle::cluster::lease;
use placement_oracle::store::{StoreSettings, RELEASE_CHUNK};
use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};

use crate::helpers::{unique_cluster, Backend, TestApp, TestDatabase, START_MS, TTL_MS};
use crate::proxy::FaultyLink;

for_each_store!(
    a_heartbeat_stamp_never_moves_back_with_the_clock,
    a_dead_silo_id_stays_refused_after_its_listing_is_forgotten,
    an_older_generation_is_refused_at_once_and_a_silo_told_it_is_dead_is_dead,
    a_cluster_takes_no_more_silos_and_the_oracle_no_more_clusters_than_allowed,
    a_large_silo_leaves_at_once_and_its_entries_are_never_live_again,
    live_membership_skips_the_dead_and_silo_listings_are_paged,
);

/// Item 1: a clock stepping back (an NTP correction on the database host) must not shorten a
/// silo's life by moving its stamp back.
async fn a_heartbeat_stamp_never_moves_back_with_the_clock(backend: Backend) {
    let app = TestApp::new(backend).await;
    let first = app.heartbeat("a@1", json!({})).await;
    app.clock.advance_ms(-5_000);
    let second = app.heartbeat("a@1", json!({})).await;
    assert_eq!(
        second["last_heartbeat_at_ms"],
        first["last_heartbeat_at_ms"]
    );
}

/// Item 2: the tombstone of a dead silo used to expire after an hour, and then its id was welcome
/// again — a zombie could come back and run grains the directory had given away.
async fn a_dead_silo_id_stays_refused_after_its_listing_is_forgotten(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("10.0.0.9:11111@5", json!({})).await;
    app.clock.advance_ms(TTL_MS);
    app.oracle.members.sweep().await.unwrap();
    app.oracle.members.sweep().await.unwrap();
    assert_eq!(
        app.get("/silos/10.0.0.9:11111@5").await.body["status"],
        "dead"
    );

    app.clock.advance_ms(2 * 60 * 60 * 1000);
    app.oracle.members.sweep().await.unwrap();
    app.oracle.members.sweep().await.unwrap();
    app.get("/silos/10.0.0.9:11111@5")
        .await
        .problem(StatusCode::NOT_FOUND);

    for zombie in ["10.0.0.9:11111@5", "10.0.0.9:11111@4"] {
        let refused = app.try_heartbeat(zombie, json!({})).await;
        assert_eq!(
            refused.problem(StatusCode::CONFLICT)["type"],
            "urn:placement-oracle:problem:silo-declared-dead",
            "{zombie}"
        );
    }
    app.heartbeat("10.0.0.9:11111@6", json!({})).await;
}

/// Item 2, also within the hour: an older generation never seen before is refused as soon as a
/// newer one at its address died; and a silo told it is dead is made dead, so no replica (one still
/// forgiving an outage, say) welcomes it back.
async fn an_older_generation_is_refused_at_once_and_a_silo_told_it_is_dead_is_dead(
    backend: Backend,
) {
    let app = TestApp::new(backend).await;
    app.heartbeat("10.0.0.7:11111@5", json!({})).await;
    app.delete("/silos/10.0.0.7:11111@5").await;
    let older = app.try_heartbeat("10.0.0.7:11111@3", json!({})).await;
    older.problem(StatusCode::CONFLICT);

    app.heartbeat("10.0.0.8:11111@1", json!({})).await;
    app.clock.advance_ms(TTL_MS);
    let late = app.try_heartbeat("10.0.0.8:11111@1", json!({})).await;
    late.problem(StatusCode::CONFLICT);
    assert_eq!(
        app.get("/silos/10.0.0.8:11111@1").await.body["status"],
        "dead"
    );
    app.clock.advance_ms(-TTL_MS);
    let revived = app.try_heartbeat("10.0.0.8:11111@1", json!({})).await;
    assert_eq!(
        revived.problem(StatusCode::CONFLICT)["type"],
        "urn:placement-oracle:problem:silo-declared-dead",
        "marked dead, not merely judged so"
    );
}

/// Item 5: any caller could mint silo ids (and clusters) without bound, and every replica's maps
/// grew with them.
async fn a_cluster_takes_no_more_silos_and_the_oracle_no_more_clusters_than_allowed(
    backend: Backend,
) {
    let settings = StoreSettings {
        max_clusters: 2,
        max_silos_per_cluster: 3,
        ..StoreSettings::with_ttl(TTL_MS)
    };
    let app = TestApp::builder(backend)
        .store_settings(settings)
        .build()
        .await;
    for silo in ["a@1", "b@1", "c@1"] {
        app.heartbeat(silo, json!({})).await;
    }
    let full = app.try_heartbeat("d@1", json!({})).await;
    assert_eq!(
        full.problem(StatusCode::TOO_MANY_REQUESTS)["type"],
        "urn:placement-oracle:problem:silo-limit-reached"
    );
    assert!(full.headers.contains_key("retry-after"));
    app.heartbeat("a@1", json!({})).await; // known silos still beat
    app.delete("/silos/c@1").await;
    app.heartbeat("d@1", json!({})).await;

    let heartbeat = |cluster: &str| {
        let app = app.clone();
        let uri = format!("/v1/clusters/{cluster}/heartbeats");
        async move {
            app.send(Method::POST, &uri, Some(json!({ "silo": "x@1" })))
                .await
        }
    };
    assert_eq!(heartbeat("second").await.status, StatusCode::OK);
    let refused = heartbeat("third").await;
    assert_eq!(
        refused.problem(StatusCode::CONFLICT)["type"],
        "urn:placement-oracle:problem:cluster-limit-reached"
    );
}

/// Item 6: a graceful leave deleted all of a silo's entries in one statement inside the request
/// timeout; a silo with enough grains timed out and rolled back for ever. Now it is dead at once,
/// and its entries go in chunks, never live meanwhile.
async fn a_large_silo_leaves_at_once_and_its_entries_are_never_live_again(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("big@1", json!({})).await;
    let grains = RELEASE_CHUNK as usize + 1_000;
    for start in (0..grains).step_by(1_000) {
        let batch: Vec<Value> = (start..start + 1_000)
            .map(|i| json!({ "grain": format!("user/g{i}") }))
            .collect();
        let placed = app
            .post("/placements/batch", json!({ "placements": batch }))
            .await;
        assert_eq!(placed.status, StatusCode::OK, "{}", placed.body);
    }
    app.heartbeat("small@1", json!({})).await;

    let left = app.delete("/silos/big@1").await;
    assert_eq!(left.status, StatusCode::OK, "{}", left.body);
    let released = left.body["released_activations"].as_u64().unwrap();
    let pending = left.body["release_pending"].as_bool().unwrap();
    assert_eq!(
        (released, pending),
        match backend {
            Backend::Postgres | Backend::PgBouncer | Backend::Partitioned => {
                (u64::from(RELEASE_CHUNK), true)
            }
            Backend::Memory => (grains as u64, false),
        }
    );
    // Whatever is not yet released is not live: every grain is placed anew, on the other silo.
    app.get(&format!("/activations/user/g{}", grains - 1))
        .await
        .problem(StatusCode::NOT_FOUND);
    assert_eq!(
        app.place(&format!("user/g{}", grains - 2)).await["silo"],
        "small@1"
    );

    app.oracle.members.sweep().await.unwrap();
    let left_over = app.get("/activations?silo=big@1&limit=10").await;
    assert_eq!(left_over.body["activations"], json!([]));
}

/// Item 8: every membership read loaded every silo, the dead of the last hour included, and the
/// listing was one unpaged answer.
async fn live_membership_skips_the_dead_and_silo_listings_are_paged(backend: Backend) {
    let app = TestApp::new(backend).await;
    for i in 0..150 {
        app.heartbeat(&format!("dead-{i:03}@1"), json!({})).await;
    }
    app.clock.advance_ms(TTL_MS);
    for i in 0..5 {
        app.heartbeat(&format!("live-{i}@1"), json!({})).await;
    }
    app.oracle.members.sweep().await.unwrap();

    let explained = app
        .post("/placements", json!({ "grain": "user/x", "explain": true }))
        .await;
    assert_eq!(explained.status, StatusCode::OK);
    assert!(
        !explained.body.to_string().contains("dead-"),
        "a decision never reads the dead: {}",
        explained.body["explanation"]
    );

    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = match &cursor {
            Some(cursor) => app.get(&format!("/silos?limit=100&cursor={cursor}")).await,
            None => app.get("/silos?limit=100").await,
        };
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let silos = page.body["silos"].as_array().unwrap();
        assert!(silos.len() <= 100);
        listed.extend(silos.iter().map(|s| s["silo"].as_str().unwrap().to_owned()));
        match page.body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(listed.len(), 155, "dead silos stay listed, once each");
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted);
    assert_eq!(app.get("/silos?limit=0").await.invalid_fields(), ["limit"]);
}

/// Item 1: replicas stamped and judged liveness with their own clocks and their own default
/// TTLs. Here two replicas run as in production — on the database's clock — with default TTLs
/// twenty-fold apart; replica b's default (500 ms) passes while the silo keeps beating through
/// replica a, whose cluster TTL (10 s, stored with the cluster) is what both judge by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_the_database_clock_agree_on_liveness_whatever_their_own_configs() {
    let database = TestDatabase::create().await;
    let cluster = unique_cluster();
    let clock = ManualClock::starting_at(START_MS); // unused by stores on the database's clock
    let replica = |store, seed| {
        TestApp::builder(Backend::Postgres)
            .on(store, &database)
            .cluster(cluster.clone())
            .seed(seed)
            .clock(clock.clone())
            .build()
    };
    let a = replica(
        database
            .store_on_database_clock(4, StoreSettings::with_ttl(10_000))
            .await,
        1,
    )
    .await;
    let b = replica(
        database
            .store_on_database_clock(4, StoreSettings::with_ttl(500))
            .await,
        2,
    )
    .await;
    a.heartbeat("s@1", json!({})).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    a.heartbeat("s@1", json!({})).await;
    b.oracle.members.sweep().await.unwrap();
    let seen_by_b = b.get("/silos/s@1").await.body;
    assert_eq!(seen_by_b["status"], "active", "{seen_by_b}");
    assert_eq!(seen_by_b["silo_ttl_ms"], 10_000);
    let placed = b
        .post("/placements", json!({ "grain": "user/u", "hint": "s@1" }))
        .await;
    assert_eq!(placed.body["silo"], "s@1", "{}", placed.body);
    b.heartbeat("s@1", json!({})).await;
}

/// A replica folds a silo's heartbeat onto the row it wrote last, without reading the database's
/// clock: the stamp it names must still be no earlier than that clock when the heartbeat was sent
/// (the silo's lease counts from its send, the store's judgement from the stamp), and no later
/// than the write's check allows (250 ms past the database's clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_folded_without_a_read_are_stamped_no_earlier_than_the_database_clock() {
    let database = TestDatabase::create().await;
    let app = TestApp::builder(Backend::Postgres)
        .on(
            database
                .store_on_database_clock(2, StoreSettings::with_ttl(TTL_MS))
                .await,
            &database,
        )
        .build()
        .await;
    let mut clock = PgConnection::connect(&database.url()).await.unwrap();
    let copies_used = || async {
        app.metric(r#"oracle_heartbeat_copies_total{result="written"}"#)
            .await
            + app
                .metric(r#"oracle_heartbeat_copies_total{result="held"}"#)
                .await
    };
    let used_before = copies_used().await;
    let mut ahead = 0;
    for _ in 0..20 {
        let before: i64 = sqlx::query_scalar("SELECT oracle_now_ms()")
            .fetch_one(&mut clock)
            .await
            .unwrap();
        let answer = app.heartbeat("s@1", json!({ "cpu_usage": 10 })).await;
        let after: i64 = sqlx::query_scalar("SELECT oracle_now_ms()")
            .fetch_one(&mut clock)
            .await
            .unwrap();
        let stamp = answer["last_heartbeat_at_ms"].as_i64().unwrap();
        assert!(stamp >= before, "stamped {stamp}, sent at {before}");
        assert!(stamp <= after + 250, "stamped {stamp}, answered at {after}");
        if stamp > after {
            ahead += 1;
        }
        // Written or held back, the lease it grants ends, with the margin, within the
        // protection the database holds.
        let protected_until: i64 = sqlx::query_scalar(
            "SELECT protected_until_ms FROM silos WHERE cluster = $1 AND silo = 's@1'",
        )
        .bind(&app.cluster)
        .fetch_one(&mut clock)
        .await
        .unwrap();
        let lease = answer["lease_ms"].as_i64().unwrap();
        assert!(
            stamp + lease + lease::margin_ms(TTL_MS) <= protected_until,
            "stamped {stamp}, lease {lease}, protected until {protected_until}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A stamp past the answer's instant was named by the replica, not read: the copies were used.
    assert!(ahead > 0, "no heartbeat was folded onto the replica's copy");
    assert!(copies_used().await >= used_before + ahead as f64);
}

/// Item 3: the registration checked the silo's status in its snapshot without locking the silo
/// row, so a placement could answer `placed` on a silo whose death was committing at that moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_waits_for_a_death_under_way_and_never_lands_on_the_dead_silo() {
    let app = TestApp::new(Backend::Postgres).await;
    app.heartbeat("doomed@1", json!({})).await;
    app.heartbeat("other@1", json!({})).await;
    app.place("user/warm-up").await; // the membership read is cached with both alive

    // A death as the oracle's own death paths make it: the silo row taken FOR UPDATE, marked dead,
    // its entries deleted — held open while the placement runs.
    let database = app._database.as_ref().unwrap();
    let mut death = PgConnection::connect(&database.url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut death).await.unwrap();
    sqlx::query("SELECT 1 FROM silos WHERE cluster = $1 AND silo = 'doomed@1' FOR UPDATE")
        .bind(&app.cluster)
        .execute(&mut death)
        .await
        .unwrap();
    sqlx::query("UPDATE silos SET status = 'dead', dead_since_ms = $2 WHERE cluster = $1 AND silo = 'doomed@1'")
        .bind(&app.cluster)
        .bind(START_MS)
        .execute(&mut death)
        .await
        .unwrap();
    sqlx::query("DELETE FROM activations WHERE cluster = $1 AND silo = 'doomed@1'")
        .bind(&app.cluster)
        .execute(&mut death)
        .await
        .unwrap();

    let placing = tokio::spawn({
        let app = app.clone();
        async move {
            app.post(
                "/placements",
                json!({ "grain": "user/racer", "hint": "doomed@1" }),
            )
            .await
        }
    });
    // The placement must be seen waiting for the death's lock (not merely started): only then does
    // committing the death exercise the wait.
    let mut watch = PgConnection::connect(&database.url()).await.unwrap();
    let mut waited = false;
    for _ in 0..500 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut watch)
        .await
        .unwrap();
        if waiting > 0 {
            waited = true;
            break;
        }
        assert!(
            !placing.is_finished(),
            "the placement did not wait for the death"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(waited, "the placement never waited for the death's lock");
    sqlx::query("COMMIT").execute(&mut death).await.unwrap();
    let placed = placing.await.unwrap();
    assert_eq!(placed.status, StatusCode::OK, "{}", placed.body);
    assert_eq!(placed.body["silo"], "other@1", "{}", placed.body);
    assert_eq!(
        app.get("/activations/user/racer").await.body["silo"],
        "other@1"
    );
}

/// Item 7: while the store was unreachable no heartbeat could be stored, and when it came back the
/// sweep declared every healthy silo dead and released every grain. Silence while the store is
/// unreachable is not silence now; requests during the outage fail fast with 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_longer_than_the_ttl_kills_no_silo_and_releases_no_grain() {
    let database = TestDatabase::create().await;
    let link = FaultyLink::start(database.server_address()).await;
    let clock = ManualClock::starting_at(START_MS);
    let store = database.store_via(link.port, &clock).await;
    let app = TestApp::builder(Backend::Postgres)
        .on(store, &database)
        .cluster(unique_cluster())
        .seed(7)
        .clock(clock)
        .build()
        .await;
    for silo in ["a@1", "b@1", "c@1"] {
        app.heartbeat(silo, json!({})).await;
    }
    let mut placed = Vec::new();
    for i in 0..30 {
        placed.push(app.place(&format!("user/p{i}")).await);
    }

    link.cut();
    for _ in 0..3 {
        app.clock.advance_ms(TTL_MS);
        for silo in ["a@1", "b@1", "c@1"] {
            let refused = app.try_heartbeat(silo, json!({})).await;
            assert_eq!(
                refused.problem(StatusCode::SERVICE_UNAVAILABLE)["type"],
                "urn:placement-oracle:problem:store-unavailable"
            );
        }
        assert!(app.oracle.members.sweep().await.is_err());
        let ready = app.send(Method::GET, "/readyz", None).await;
        ready.problem(StatusCode::SERVICE_UNAVAILABLE);
    }
    link.restore();
    app.clock
        .advance_ms(placement_oracle::store::postgres::health::PROBE_INTERVAL_MS);
    // The first sweep after the outage finds everyone silent for three TTLs, and must not judge.
    let mut back = app.oracle.members.sweep().await;
    while back.is_err() {
        tokio::time::sleep(Duration::from_millis(50)).await;
        app.clock
            .advance_ms(placement_oracle::store::postgres::health::PROBE_INTERVAL_MS);
        back = app.oracle.members.sweep().await;
    }
    assert_eq!(back.unwrap(), 0, "no silo declared dead");
    for silo in ["a@1", "b@1", "c@1"] {
        app.heartbeat(silo, json!({})).await;
    }
    for answer in &placed {
        let now = app.place(answer["grain"].as_str().unwrap()).await;
        assert_eq!(
            (&now["silo"], &now["epoch"], &now["outcome"]),
            (&answer["silo"], &answer["epoch"], &json!("existing"))
        );
    }
}

/// Item 11: stored policies were decoded refusing unknown fields, so a policy written by a newer
/// version made every placement of that cluster fail on older replicas during a rolling upgrade.
#[tokio::test]
async fn a_policy_with_fields_from_a_newer_version_is_read_and_they_are_kept() {
    let app = TestApp::new(Backend::Postgres).await;
    app.heartbeat("a@1", json!({})).await;
    let newer = json!({
        "default_strategy": "random",
        "from_the_future": { "x": 1 },
        "grain_types": { "user": { "strategy": "hash_based", "also_new": true } }
    });
    let database = app._database.as_ref().unwrap();
    let mut raw = PgConnection::connect(&database.url()).await.unwrap();
    sqlx::query(
        "UPDATE clusters SET policy = $2, policy_version = policy_version + 1 WHERE name = $1",
    )
    .bind(&app.cluster)
    .bind(&newer)
    .execute(&mut raw)
    .await
    .unwrap();

    let policy = app.get("/policy").await;
    assert_eq!(policy.status, StatusCode::OK, "{}", policy.body);
    assert_eq!(
        policy.body["policy"]["grain_types"]["user"]["strategy"],
        "hash_based"
    );
    assert_eq!(app.place("user/u").await["strategy"], "hash_based");
    let stored: Value = sqlx::query_scalar("SELECT policy FROM clusters WHERE name = $1")
        .bind(&app.cluster)
        .fetch_one(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        stored["from_the_future"],
        json!({ "x": 1 }),
        "kept as written"
    );

    let refused = app.put_policy(None, newer).await;
    assert_eq!(
        refused.invalid_fields(),
        ["grain_types.user.also_new", "from_the_future"]
    );
}

/// Item 6: every heartbeat rewrote an index entry (the liveness index held the stamp), so none
/// was a HOT update. Now the row changes in place.
#[tokio::test]
async fn heartbeats_are_hot_updates() {
    let database = TestDatabase::create().await;
    let clock = ManualClock::starting_at(START_MS);
    let store = database.store(2, &clock).await;
    let pool = store.pool().clone();
    let app = TestApp::builder(Backend::Postgres)
        .on(store, &database)
        .cluster(unique_cluster())
        .seed(1)
        .clock(clock)
        .build()
        .await;
    // Two seconds apart, CPU usage moving by 20 points: each one written by its own request (the
    // replica holds back, unwritten, a heartbeat of load alone within twice
    // ORACLE_HEARTBEAT_WRITE_AFTER_MS of the one stored, or a third of the TTL for load that
    // hardly moved).
    for n in 0..200 {
        let cpu_usage = if n % 2 == 0 { 12.5 } else { 32.5 };
        app.heartbeat("a@1", json!({ "cpu_usage": cpu_usage }))
            .await;
        app.clock.advance_ms(2_000);
    }
    // Backends report their table statistics when they exit, which under a busy suite can take
    // seconds after the pool has let them go.
    pool.close().await;
    let mut check = PgConnection::connect(&database.url()).await.unwrap();
    let mut counts = (0i64, 0i64);
    for _ in 0..600 {
        counts = sqlx::query_as(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'silos'",
        )
        .fetch_one(&mut check)
        .await
        .unwrap();
        if counts.0 >= 199 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (updates, hot) = counts;
    assert!(updates >= 199, "statistics arrived: {counts:?}");
    // With an indexed column written by every heartbeat, none would be; a page that cannot be
    // pruned in time under a busy suite (seen: 189 of 199) makes a few not, which is no regression.
    assert!(
        hot * 100 >= updates * 90,
        "{hot} of {updates} updates were HOT"
    );
}
