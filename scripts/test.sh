#!/usr/bin/env bash
# Every test, as the README runs it: the Rust suite (`cargo test`: unit and property tests, the
# API suite on the embedded store and on Postgres three ways, the runtime harness through faults),
# then the contract suite (contract/run.sh: generated clients, schemathesis, the simulator and the
# live page, the SDKs, rio-rs side by side).
#
# Under the loopback guard (scripts/loopback-guard.sh): a test process that sends anything to an
# address other than loopback or a network namespace a test made fails the run, naming where it
# went. The guard is first shown to catch a connection to this machine's own non-loopback address
# (where rio-rs names its servers). Crates are fetched before it is armed; the suite's npm and pip
# steps leave it through scripts/unguarded.sh.
#
# Needs what scripts/prerequisites.sh installs and starts (Postgres on 127.0.0.1:5432, …), and
# root or sudo for the guard (nftables and a cgroup).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fetch --locked --quiet
scripts/loopback-guard.sh --check-leaks
exec scripts/loopback-guard.sh bash -c 'cargo test --locked && contract/run.sh'
