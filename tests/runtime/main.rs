//! The runtime harness: the oracle as runtimes meet it, under faults.
//!
//! Real oracle processes (the built binary, two replicas) on real Postgres; silo hosts
//! ([`host`]) built on the Rust SDK (`sdk/rust`), so that it keeps every rule docs/runtimes.md gives a
//! runtime, the silo lease included; callers
//! ([`callers`]) that ask either replica and call the host named; and a referee ([`registry`])
//! that records every activation's start and end and counts two hosts running one grain at once.
//! [`faults`] holds one test per fault: Postgres stopped and crashed for three TTLs (on a server
//! of the test's own, [`postgres_server`]), a silo cut off from the oracle, a replica killed and
//! restarted, a host killed, a drain, and rebalancer sessions; [`store_states`] a read-only
//! database and hung commits; [`failover`] a promoted standby that lacks the log's tail;
//! [`spread`] the clusters' background work shared by three replicas, taken over and handed back;
//! [`overload`] the only replica offered three times its capacity for three TTLs;
//! [`patroni`] a real Patroni cluster ([`patroni_cluster`]) through a switchover, a killed and a
//! frozen primary and etcd stopped, in synchronous and asynchronous mode. [`faults`] also freezes
//! a replica (SIGSTOP) for three TTLs, alone and beside another.
//!
//! A binary of its own, apart from `tests/api`: its runs need both cores to keep their timing, so
//! they go one at a time, and the other suite's tests do not share the machine with them.

mod api;
mod callers;
mod cluster_run;
mod failover;
mod faults;
mod host;
mod oracle_process;
mod overload;
mod patroni;
mod patroni_cluster;
mod postgres_server;
// The same proxy the API suite cuts the database with (this binary cuts hosts off with it).
#[allow(dead_code)]
#[path = "../api/proxy.rs"]
mod proxy;
mod registry;
mod spread;
mod store_states;
