//! The integration tests: one binary, the app driven in-process through its router.
//!
//! `store_suite` runs every behaviour against both stores; `replicas` races several oracle
//! instances on one Postgres; `single_activation` holds one test per way the single-activation
//! promise was found broken; `faults` runs two replicas through store outages (via `proxy`);
//! `inputs` checks that bad input always gets a 4xx problem; `openapi` keeps the committed spec in
//! step with the code; `ops` covers health, readiness, metrics and graceful shutdown; `webhooks`
//! the fences on the `webhook` strategy's outbound calls (allowed hosts, redirects, answer size);
//! `limits` covers load shedding and per-cluster rate limits; `views` what operators' tools read
//! (the clusters list, distributions, placement previews, the live page); `leases` the silo lease
//! and the rule that counts no silence a replica could not see; `pgbouncer` the oracle behind a real PgBouncer; `tls` the listener's TLS and certificate reload; `layout` the shape of the code
//! (layers, no import circle, sizes) and that the docs' map and paths are true. The runtime's side of those rules,
//! under real faults, is a binary of its own: `tests/runtime/`.

/// Runs each listed test once per store: `<module>::memory::…`, `<module>::postgres::…`,
/// `<module>::pgbouncer::…` (Postgres through a real PgBouncer in transaction mode), and
/// `<module>::partitioned::…` (Postgres with every cluster table hash-partitioned by its
/// cluster, as a distributed engine shards them).
macro_rules! for_each_store {
    ($($test:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test] async fn $test() { super::$test(super::Backend::Memory).await })*
        }
        mod postgres {
            $(#[tokio::test] async fn $test() { super::$test(super::Backend::Postgres).await })*
        }
        mod pgbouncer {
            $(#[tokio::test] async fn $test() { super::$test(super::Backend::PgBouncer).await })*
        }
        mod partitioned {
            $(#[tokio::test] async fn $test() { super::$test(super::Backend::Partitioned).await })*
        }
    };
}

mod auth;
mod dashboard;
mod dns;
mod drains;
mod faults;
mod helpers;
mod host_list;
mod inputs;
mod layout;
mod leases;
mod limits;
mod migrations;
mod openapi;
mod ops;
mod packaging;
mod partitioned;
mod pgbouncer;
mod pgbouncer_process;
mod proxy;
mod rebalancing;
mod repartitioning;
mod replicas;
mod single_activation;
mod store_parts;
mod store_suite;
mod strategies;
mod tls;
mod views;
mod webhooks;
