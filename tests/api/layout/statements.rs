//! Every SQL statement the Postgres store can send finds its rows by their cluster: read from the
//! store's source (`src/store/postgres/`, the only place the oracle writes SQL), each statement
//! that touches a cluster table must restrict it to one cluster — a `cluster = $n` (or, on
//! `clusters`, `name = $n`) condition, or an insert whose cluster column takes one parameter — or
//! find every row of it by a cluster from the statement's own list of keys (an `UNNEST` of
//! parameters whose first column is `cluster`: the batched heartbeats, which span clusters), so
//! that a distributed engine sharding these tables by `cluster` sends every row's work to the one
//! shard holding it. The few that read across clusters are admin listings and start-up upkeep,
//! named below with why each may.

use std::path::Path;

use super::source::{collect, repository};

/// The tables whose rows belong to one cluster each (their key leads with it).
const CLUSTER_TABLES: &[&str] = &[
    "clusters",
    "silos",
    "activations",
    "retired_generations",
    "pools",
    "cluster_leases",
    "migrations",
    "migration_endings",
    "cluster_work_state",
    "edge_intake",
    "edge_buffer",
    "cluster_keys",
];

/// Statements that may read across clusters, by a piece of their text, and why.
const ACROSS_CLUSTERS: &[(&str, &str)] = &[
    (
        "SELECT name FROM clusters WHERE $1::text IS NULL OR name > $1",
        "the admin listing of clusters (and the background work's, every five seconds)",
    ),
    (
        "SELECT status, count(*) AS n FROM silos GROUP BY status",
        "the gauges: counts over every cluster, like an admin listing",
    ),
    ("FROM activations LIMIT $1", "the gauges"),
    (
        "SELECT cluster, silo FROM silos WHERE drained_at_ms IS NOT NULL AND status <> 'dead'",
        "the flush of held heartbeats, every 250 ms while a replica keeps copies of silo rows, \
         finds the silos drained through other replicas: the few rows of the partial index \
         `silos_draining`, where a statement per cluster would cost an idle fleet one per \
         cluster four times a second",
    ),
    ("SELECT count(*) FROM migrations", "the gauges"),
    (
        "UPDATE clusters SET silo_ttl_ms = $1 WHERE silo_ttl_ms IS NULL",
        "start-up upkeep: clusters made before TTLs were stored get the default",
    ),
    (
        "FROM cluster_keys WHERE id = $1",
        "a key is found by its id (the request's credential names no cluster before it is \
         read); each replica reads a key once and keeps it, and on a distributed engine \
         `cluster_keys` (a few rows per cluster, written by admins) is a reference table",
    ),
    (
        "SELECT count(*) FROM clusters) < $4",
        "creating a cluster checks the clusters limit: a count over every shard of \
         `clusters` (distributed by name, docs/scaling.md), paid once per cluster created, \
         which is rare next to the cluster's own traffic",
    ),
];

/// A statement's text, its SQL comments dropped and its whitespace folded.
fn folded(text: &str) -> String {
    text.lines()
        .map(|line| line.split_once("--").map_or(line, |(code, _)| code))
        .flat_map(str::split_whitespace)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every SQL statement in the Postgres store's source, whitespace folded (for `crate::partitioned`,
/// which explains the hot ones).
pub fn store_statements() -> Vec<String> {
    let mut files = Vec::new();
    collect(&repository().join("src/store/postgres"), "rs", &mut files);
    files
        .iter()
        .flat_map(|file| statements(&std::fs::read_to_string(file).unwrap()))
        .map(|(_, statement)| statement)
        .collect()
}

/// The string literals of a Rust file that are SQL statements, with the line each starts on.
fn statements(source: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut rest = source;
    let mut offset = 0;
    while let Some(start) = rest.find('"') {
        let after = &rest[start + 1..];
        let Some(end) = closing_quote(after) else {
            break;
        };
        let literal = &after[..end];
        let line = source[..offset + start].matches('\n').count() + 1;
        let text = folded(literal);
        let keyword = ["SELECT ", "INSERT ", "UPDATE ", "DELETE ", "WITH "]
            .iter()
            .any(|k| text.starts_with(k) || text.contains(&format!(" {k}")));
        if keyword {
            found.push((line, text));
        }
        let consumed = start + 1 + end + 1;
        rest = &rest[consumed..];
        offset += consumed;
    }
    found
}

/// Where the literal starting just after a `"` ends (escapes skipped).
fn closing_quote(text: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => return Some(i),
            _ => escaped = false,
        }
    }
    None
}

/// The cluster tables a statement reads or writes.
fn tables(statement: &str) -> Vec<&'static str> {
    let words: Vec<&str> = statement
        .split(|c: char| c.is_whitespace() || c == '(' || c == ',')
        .filter(|w| !w.is_empty())
        .collect();
    let mut found = Vec::new();
    for pair in words.windows(2) {
        let [verb, table] = pair else { continue };
        let touches = matches!(
            verb.to_ascii_uppercase().as_str(),
            "FROM" | "JOIN" | "INTO" | "UPDATE" | "USING"
        );
        if let Some(t) = CLUSTER_TABLES.iter().find(|t| **t == *table) {
            if touches && !found.contains(t) {
                found.push(*t);
            }
        }
    }
    found
}

/// Whether a statement restricts what it touches to one cluster: a `cluster = $n` condition
/// (qualified or not, not part of a longer column name) that is not one side of an `OR`, which
/// would let the statement read every cluster.
fn names_one_cluster(statement: &str) -> bool {
    let condition = ["cluster = $", "name = $"].iter().any(|c| {
        statement.match_indices(c).any(|(i, found)| {
            let qualifier =
                statement[..i].trim_end_matches(|c: char| c.is_alphanumeric() || c == '.');
            let after = statement[i + found.len()..]
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start_matches(')');
            !qualifier.ends_with('_')
                && !qualifier.trim_end().ends_with(" OR")
                && !after.starts_with(" OR ")
        })
    });
    // An insert of one row (or one cluster's rows) whose cluster column is one parameter.
    let insert = statement.contains("INSERT INTO")
        && (statement.contains("(cluster, ") || statement.contains("(name, "))
        && (statement.contains("VALUES ($1") || statement.contains("SELECT $1,"));
    condition || insert
}

/// Whether every cluster table a statement touches is found by a cluster from the statement's own
/// list of keys: the list is an `UNNEST` of parameters named `AS x(cluster, …)` (or
/// `AS x(cluster)`), and each access (`FROM`, `JOIN`, `UPDATE` a table under an alias) has a
/// condition `alias.cluster = x.cluster` (`alias.name = x.cluster` on `clusters`); an insert
/// (`INTO`) selects `x.cluster` as its first column.
fn finds_rows_by_listed_clusters(statement: &str) -> bool {
    if !statement.contains("UNNEST($") {
        return false;
    }
    let lists: Vec<&str> = ["(cluster,", "(cluster)"]
        .iter()
        .flat_map(|opening| statement.match_indices(opening))
        .filter_map(|(i, _)| {
            statement[..i]
                .strip_suffix(|c: char| c.is_alphanumeric())
                .map(|_| i)
        })
        .filter_map(|i| statement[..i].rsplit_once("AS ").map(|(_, alias)| alias))
        .filter(|alias| alias.chars().all(|c| c.is_alphanumeric() || c == '_'))
        .collect();
    // The parameters the lists' clusters come from (an `UNNEST`'s first argument).
    let listed_parameters: Vec<&str> = statement
        .match_indices("UNNEST($")
        .filter_map(|(i, found)| {
            let rest = &statement[i + found.len() - 1..];
            rest.split_once("::text[]").map(|(parameter, _)| parameter)
        })
        .filter(|p| p.len() > 1 && p[1..].chars().all(|c| c.is_ascii_digit()))
        .collect();
    let words: Vec<&str> = statement
        .split(|c: char| c.is_whitespace() || c == '(' || c == ',')
        .filter(|w| !w.is_empty())
        .collect();
    let mut accesses = 0;
    for access in words.windows(3) {
        let [verb, table, alias] = access else {
            continue;
        };
        let touches = matches!(*verb, "FROM" | "JOIN" | "UPDATE" | "INTO" | "USING");
        if !touches || !CLUSTER_TABLES.contains(table) {
            continue;
        }
        accesses += 1;
        if *verb == "INTO" {
            // An insert's rows are those it selects: keyed by the list when the cluster column
            // takes the list's cluster.
            if !lists
                .iter()
                .any(|list| statement.contains(&format!("SELECT {list}.cluster,")))
            {
                return false;
            }
            continue;
        }
        let column = if *table == "clusters" {
            "name"
        } else {
            "cluster"
        };
        let found = lists
            .iter()
            .any(|list| statement.contains(&format!("{alias}.{column} = {list}.cluster")))
            || listed_parameters
                .iter()
                .any(|p| statement.contains(&format!("{alias}.{column} = ANY({p}::text[])")));
        if !found {
            return false;
        }
    }
    accesses > 0
}

#[test]
fn every_statement_of_the_postgres_store_names_one_cluster() {
    let root = repository();
    let mut files = Vec::new();
    collect(&root.join("src/store/postgres"), "rs", &mut files);
    files.sort();
    let mut checked = 0;
    let mut across = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        for (line, statement) in statements(&source) {
            let touched = tables(&statement);
            if touched.is_empty() {
                continue;
            }
            checked += 1;
            let allowed = ACROSS_CLUSTERS
                .iter()
                .any(|(piece, _)| statement.contains(piece));
            if !allowed
                && !names_one_cluster(&statement)
                && !finds_rows_by_listed_clusters(&statement)
            {
                across.push(format!(
                    "{}:{line} touches {touched:?} across clusters: {statement}",
                    relative(&root, file)
                ));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} statements found: is the reader broken?"
    );
    assert!(across.is_empty(), "{across:#?}");
}

#[test]
fn the_reader_finds_what_names_one_cluster_and_what_does_not() {
    let one = "SELECT silo FROM silos WHERE cluster = $1 AND status = 'dead'";
    let all = "SELECT silo FROM silos WHERE status = 'dead' LIMIT 1";
    let batch = "SELECT * FROM UNNEST($1::text[], $2::text[]) AS k(cluster, silo) \
                 JOIN silos s ON s.cluster = k.cluster";
    let insert = "INSERT INTO pools (cluster, pool, definition) VALUES ($1, $2, $3)";
    assert_eq!(tables(one), ["silos"]);
    assert!(names_one_cluster(one));
    assert!(!names_one_cluster(all));
    assert!(!names_one_cluster(batch));
    assert!(finds_rows_by_listed_clusters(batch));
    assert!(names_one_cluster(insert));
    let rust = "let q = sqlx::query(\"SELECT 1 FROM clusters\n  WHERE name = $1\");";
    assert_eq!(
        statements(rust),
        [(1, "SELECT 1 FROM clusters WHERE name = $1".to_owned())]
    );
}

#[test]
fn a_cluster_condition_counts_only_when_it_binds_the_statement_to_one_cluster() {
    let one = [
        "SELECT silo FROM silos WHERE cluster = $1 AND silo = $2",
        "SELECT s.silo FROM silos s WHERE s.cluster = $1",
        "UPDATE clusters SET policy = $2 WHERE name = $1",
        "INSERT INTO silos (cluster, silo) VALUES ($1, $2)",
    ];
    let across = [
        "SELECT silo FROM silos WHERE from_cluster = $1",
        "SELECT silo FROM silos WHERE $1::text IS NULL OR cluster = $1",
        "SELECT silo FROM silos WHERE (cluster = $1 OR silo = $2)",
        "SELECT silo FROM silos",
    ];
    for statement in one {
        assert!(names_one_cluster(statement), "{statement}");
    }
    for statement in across {
        assert!(!names_one_cluster(statement), "{statement}");
    }
}

#[test]
fn a_list_of_keys_counts_only_when_every_table_is_found_by_a_cluster_of_it() {
    let keyed = [
        "SELECT * FROM UNNEST($1::text[], $2::text[]) AS k(cluster, silo) \
         JOIN silos s ON s.cluster = k.cluster AND s.silo = k.silo",
        "WITH u AS (SELECT * FROM UNNEST($1::text[]) AS u(cluster, silo)) \
         UPDATE silos s SET status = u.status FROM u WHERE s.cluster = u.cluster",
        "SELECT k.cluster FROM UNNEST($1::text[]) AS k(cluster) \
         WHERE EXISTS (SELECT 1 FROM migrations m WHERE m.cluster = k.cluster)",
        "INSERT INTO cluster_leases AS l (cluster, holder) SELECT k.cluster, $2 \
         FROM UNNEST($1::text[]) AS k(cluster) JOIN clusters c ON c.name = k.cluster",
        "WITH d AS (SELECT s.cluster FROM silos s WHERE s.cluster = ANY($1::text[])) \
         SELECT * FROM UNNEST($1::text[], $2::int8[]) AS k(cluster, until) JOIN d USING (cluster)",
    ];
    let across = [
        // A table joined without the list's cluster.
        "SELECT * FROM UNNEST($1::text[]) AS k(cluster, silo) JOIN silos s ON s.silo = k.silo",
        // One table by the list, another by nothing.
        "SELECT * FROM UNNEST($1::text[]) AS k(cluster, silo) \
         JOIN silos s ON s.cluster = k.cluster JOIN activations a ON a.silo = s.silo",
        // A list that is not of parameters.
        "SELECT * FROM (SELECT cluster FROM silos) AS k(cluster, silo) \
         JOIN silos s ON s.cluster = k.cluster",
        // Rows found by a list of clusters that is not the statement's list.
        "WITH d AS (SELECT s.cluster FROM silos s WHERE s.cluster = ANY($2::text[])) \
         SELECT * FROM UNNEST($1::text[], $2::text[]) AS k(cluster, other) JOIN d USING (cluster)",
        // An insert whose cluster is not the list's.
        "INSERT INTO cluster_leases AS l (cluster, holder) SELECT $3, $2 \
         FROM UNNEST($1::text[]) AS k(cluster)",
    ];
    for statement in keyed {
        assert!(finds_rows_by_listed_clusters(statement), "{statement}");
    }
    for statement in across {
        assert!(!finds_rows_by_listed_clusters(statement), "{statement}");
    }
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap()
        .to_string_lossy()
        .replace('\\', "/")
}
