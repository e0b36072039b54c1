//! The integration tests: one binary, the app driven in-process through its router.
//!
//! `store_suite` runs every behaviour against both stores; `replicas` races several oracle
//! instances on one Postgres; `inputs` checks that bad input always gets a 4xx problem; `openapi`
//! keeps the committed spec in step with the code; `ops` covers health, readiness, metrics and
//! graceful shutdown.

mod dns;
mod helpers;
mod inputs;
mod openapi;
mod ops;
mod replicas;
mod store_suite;
mod strategies;
