//! The oracle on cluster tables hash-partitioned by their cluster (Postgres' own declarative
//! partitioning), the nearest a single Postgres comes to a distributed engine that shards them by
//! `cluster`: every `for_each_store` test runs on it (`<module>::partitioned::…`), and `EXPLAIN`
//! of the store's own hot statements, taken from its source and bound to one cluster, shows each
//! touching one partition of each table it reads or writes (in its plan, or for the batched
//! heartbeats and placements, which find each row by a cluster from their own list of keys, in
//! its run).

use std::collections::BTreeMap;

use serde_json::{json, Value};
use sqlx::{Connection, PgConnection, Row};

use crate::helpers::{Backend, TestApp};
use crate::layout::statements::store_statements;

/// The cluster tables and the column each is partitioned by. (`cluster_keys`, looked up by key
/// id, stays whole: on a distributed engine it is a reference table.)
const PARTITIONED: &[(&str, &str)] = &[
    ("clusters", "name"),
    ("silos", "cluster"),
    ("activations", "cluster"),
    ("retired_generations", "cluster"),
    ("pools", "cluster"),
    ("cluster_leases", "cluster"),
    ("migrations", "cluster"),
    ("migration_endings", "cluster"),
    ("cluster_work_state", "cluster"),
    ("edge_intake", "cluster"),
    ("edge_buffer", "cluster"),
];
const PARTITIONS: u32 = 4;

async fn run(db: &mut PgConnection, statement: &str) {
    sqlx::query(statement)
        .execute(&mut *db)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
}

/// Rebuilds each cluster table of a freshly migrated (empty) database as a table partitioned by
/// hash of its cluster into [`PARTITIONS`], with the same columns, defaults, checks, indexes and
/// foreign keys.
pub async fn partition(db: &mut PgConnection) {
    let tables: Vec<&str> = PARTITIONED.iter().map(|(t, _)| *t).collect();
    let foreign_keys: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
         WHERE contype = 'f' AND conrelid::regclass::text = ANY($1)",
    )
    .bind(&tables)
    .fetch_all(&mut *db)
    .await
    .unwrap();
    for (table, _) in PARTITIONED {
        run(db, &format!("ALTER TABLE {table} RENAME TO {table}_whole")).await;
    }
    for (table, column) in PARTITIONED {
        run(
            db,
            &format!(
                "CREATE TABLE {table} (LIKE {table}_whole INCLUDING ALL) PARTITION BY HASH ({column})"
            ),
        )
        .await;
        for i in 0..PARTITIONS {
            run(
                db,
                &format!(
                    "CREATE TABLE {table}_p{i} PARTITION OF {table}
                     FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {i})"
                ),
            )
            .await;
        }
    }
    for (table, _) in PARTITIONED {
        run(db, &format!("DROP TABLE {table}_whole CASCADE")).await;
    }
    for (table, name, definition) in foreign_keys {
        run(
            db,
            &format!("ALTER TABLE {table} ADD CONSTRAINT {name} {definition}"),
        )
        .await;
    }
}

/// The store's statement that contains `piece` (exactly one must).
fn statement(piece: &str) -> String {
    let found: Vec<String> = store_statements()
        .into_iter()
        .filter(|s| s.contains(piece))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "statements containing {piece:?}: {found:#?}"
    );
    let found = found[0].replace("{SILO_COLUMNS}", "s.*");
    match found.contains("{HEARTBEAT_WRITE}") {
        true => found.replace("{HEARTBEAT_WRITE}", &statement("written AS (")),
        false => found,
    }
}

/// How a statement's partitions are found.
#[derive(Clone, Copy)]
enum Look {
    /// In its plan: a statement bound to one cluster by a parameter is pruned when planned.
    Plan,
    /// In its run (`EXPLAIN ANALYZE`, in a transaction rolled back): a statement that finds each
    /// row by a cluster from its own list of keys is pruned as it runs, row by row; a partition
    /// it never scanned is not touched.
    Run,
}

/// Each partitioned table's partitions that `statement` reads or writes, `EXPLAIN`ed as prepared
/// with `arguments` (a custom plan for them, as the first executions get).
async fn partitions_touched(
    db: &mut PgConnection,
    statement: &str,
    arguments: &str,
    look: Look,
) -> BTreeMap<String, Vec<String>> {
    run(db, &format!("PREPARE hot AS {statement}")).await;
    let execute = match arguments {
        "" => "EXECUTE hot".to_owned(),
        _ => format!("EXECUTE hot({arguments})"),
    };
    let options = match look {
        Look::Plan => "FORMAT JSON",
        Look::Run => "ANALYZE, FORMAT JSON",
    };
    run(db, "BEGIN").await;
    let plan: Value = sqlx::query(&format!("EXPLAIN ({options}) {execute}"))
        .fetch_one(&mut *db)
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN {statement}: {e}"))
        .get(0);
    run(db, "ROLLBACK").await;
    run(db, "DEALLOCATE hot").await;
    let mut relations = Vec::new();
    relations_of(&plan, look, &mut relations);
    let mut touched: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for relation in relations {
        if let Some((table, _)) = relation.rsplit_once("_p") {
            let partitions = touched.entry(table.to_owned()).or_default();
            if !partitions.contains(&relation) {
                partitions.push(relation);
            }
        }
    }
    touched
}

/// The relations a plan's nodes name. Looking at a run, nodes that never ran (`"Actual Loops":
/// 0`) are left out, and so are an update's `"Target Tables"`: the partitions it may write, which
/// a plan pruned row by row lists whole, while the rows it writes come from the scans below it.
fn relations_of(node: &Value, look: Look, into: &mut Vec<String>) {
    match node {
        Value::Object(map) => {
            let never_ran = map.get("Actual Loops").and_then(Value::as_u64) == Some(0);
            if never_ran {
                return;
            }
            if let Some(Value::String(name)) = map.get("Relation Name") {
                into.push(name.clone());
            }
            for (key, value) in map {
                if !(matches!(look, Look::Run) && key == "Target Tables") {
                    relations_of(value, look, into);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| relations_of(v, look, into)),
        _ => {}
    }
}

#[tokio::test]
async fn the_hot_statements_touch_one_partition_of_each_table() {
    let app = TestApp::new(Backend::Partitioned).await;
    for silo in ["a@1", "b@1"] {
        app.heartbeat(silo, json!({ "cpu_usage": 10.0 })).await;
    }
    for n in 0..20 {
        app.post("/placements", json!({ "grain": format!("user/{n}") }))
            .await;
    }
    let database = app._database.clone().expect("a database");
    let mut db = PgConnection::connect(&database.url()).await.unwrap();
    let cluster = format!("'{}'", app.cluster);
    // One silo's folded record, its version, the TTL and instants it was folded under, and its
    // place among the keys read.
    let one_write = format!(
        "ARRAY[{cluster}], ARRAY['a@1'], ARRAY['a'], ARRAY['active'], ARRAY[1::int8], \
         ARRAY[1::int8], ARRAY['{{}}'], ARRAY[0::int8], ARRAY[1::int8], NULL, \
         ARRAY[10000::int8], ARRAY[0::int8], ARRAY[9223372036854775807::int8], ARRAY[1::int8]"
    );
    let hot = [
        (
            "placing new grains",
            statement("missing AS ("),
            format!("ARRAY[{cluster}, {cluster}], ARRAY['user/1','user/99'], ARRAY['a@1','a@1'], ARRAY['random','random'], NULL, NULL"),
            Look::Run,
        ),
        (
            "looking known grains up",
            statement("CROSS JOIN UNNEST($2::text[]) AS g(grain)"),
            format!("{cluster}, ARRAY['user/1','user/2'], NULL, NULL"),
            Look::Plan,
        ),
        (
            "writing a batch of heartbeats from copies and reading the rest",
            statement("WITH ORDINALITY AS k(cluster, silo, position)"),
            format!("{one_write}, ARRAY[{cluster}, {cluster}], ARRAY['a@1','b@1']"),
            Look::Run,
        ),
        (
            "writing a batch of heartbeats",
            statement("FROM written w CROSS JOIN t"),
            one_write.clone(),
            Look::Run,
        ),
        (
            "inserting silos joining",
            statement("row_number() OVER (PARTITION BY u.cluster ORDER BY u.silo)"),
            format!(
                "ARRAY[{cluster}], ARRAY['n@1'], ARRAY['n'], ARRAY['joining'], ARRAY[1::int8], \
                 ARRAY[1::int8], ARRAY['{{}}'], ARRAY[1::int8], ARRAY['n'], ARRAY[1::int8], 5000"
            ),
            Look::Run,
        ),
        (
            "what is due in a list of one cluster, its silos looked at",
            statement("AS moving"),
            format!("ARRAY[{cluster}], ARRAY[NULL::int8], ARRAY[NULL::int8], NULL, 3600000"),
            Look::Run,
        ),
        (
            "declaring silent silos dead",
            statement("SET status = 'dead', dead_since_ms = (SELECT now FROM t)"),
            format!("NULL, NULL, {cluster}, NULL"),
            Look::Plan,
        ),
    ];
    let mut wide = Vec::new();
    for (what, statement, arguments, look) in &hot {
        let touched = partitions_touched(&mut db, statement, arguments, *look).await;
        println!("{what}: {touched:?}");
        assert!(!touched.is_empty(), "{what} touches no partitioned table?");
        for (table, partitions) in touched {
            if partitions.len() > 1 {
                wide.push(format!("{what}: {table} {partitions:?}"));
            }
        }
    }
    assert!(wide.is_empty(), "{wide:#?}");
    // And the reader sees a statement across clusters for what it is: the gauges' count reads
    // every partition.
    let gauge = statement("SELECT status, count(*) AS n FROM silos GROUP BY status");
    for look in [Look::Plan, Look::Run] {
        let touched = partitions_touched(&mut db, &gauge, "", look).await;
        assert_eq!(touched["silos"].len(), PARTITIONS as usize, "{touched:?}");
    }
}
