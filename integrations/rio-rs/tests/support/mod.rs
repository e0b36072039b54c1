//! The side-by-side test's parts. Four come from the oracle's own runtime harness, unchanged:
//! a Postgres server of the test's own (stopped for a fault), oracle processes, the TCP link a
//! test can cut, and the referee that counts two servers running one object at once.

pub mod netns;
pub mod run;
pub mod servers;
pub mod workload;
pub mod yielding;

#[allow(dead_code)]
#[path = "../../../../tests/runtime/oracle_process.rs"]
pub mod oracle_process;
#[allow(dead_code)]
#[path = "../../../../tests/runtime/postgres_server.rs"]
pub mod postgres_server;
#[allow(dead_code)]
#[path = "../../../../tests/api/proxy.rs"]
pub mod proxy;
#[allow(dead_code)]
#[path = "../../../../tests/runtime/registry.rs"]
pub mod registry;
