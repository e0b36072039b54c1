#!/usr/bin/env bash
# The fleet benchmark: an oracle (release build) on a fresh Postgres database, driven by the
# open-loop generator `fleet` (bench/fleet/src/main.rs) with the flags given, e.g.
#
#   bench/fleet/run.sh                                         # 1,000 clusters × 20 silos, 2,000 new
#                                                              # and 5,000 known grains a second
#   bench/fleet/run.sh --clusters 100 --new 0 --known 0        # heartbeats of 2,000 silos alone
#   bench/fleet/run.sh --clusters 300 --windows 1x:20,3x:30,1x:20   # three times the load for 30 s
#   bench/fleet/run.sh --clusters 0 --new 0 --known 0 --floor 20000 # the floor at a fleet's pace
#
# ORACLE_BIN=… measures that binary instead of building one; ORACLE_ENV="A=1 B=2" sets more of
# the oracle's settings. Prints the generator's report; the oracle's log is kept in
# bench/results/fleet-<time>.log. Needs a Postgres that lets the user create databases
# (BENCH_DATABASE_SERVER, default postgres://postgres@127.0.0.1:5432).
set -euo pipefail
cd "$(dirname "$0")/../.."

PORT=${PORT:-18080}
SERVER=${BENCH_DATABASE_SERVER:-postgres://postgres@127.0.0.1:5432}
DATABASE=placement_oracle_fleet

say() { echo "[$(date +%T)] $*" >&2; }
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
  echo "bench/fleet/run.sh: port $PORT is in use (PORT=…)" >&2; exit 1
fi
if [ -z "${ORACLE_BIN:-}" ]; then
  cargo build --release --quiet -p placement-oracle
  ORACLE_BIN=./target/release/placement-oracle
fi
cargo build --release --quiet -p placement-oracle-fleet

psql "$SERVER/postgres" -v ON_ERROR_STOP=1 -qc "DROP DATABASE IF EXISTS $DATABASE WITH (FORCE)" \
  -c "CREATE DATABASE $DATABASE"
mkdir -p bench/results
LOG=bench/results/fleet-$(date +%Y%m%d-%H%M%S).log
# shellcheck disable=SC2086
env DATABASE_URL="$SERVER/$DATABASE" ORACLE_LISTEN="127.0.0.1:$PORT" RUST_LOG=warn \
  ${ORACLE_ENV:-} "$ORACLE_BIN" > "$LOG" 2>&1 &
ORACLE=$!
trap 'kill $ORACLE 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$PORT/readyz" > /dev/null && break
  sleep 0.2
done
say "oracle $ORACLE ready on :$PORT (log $LOG)"
./target/release/fleet --url "http://127.0.0.1:$PORT" --oracle-pid "$ORACLE" "$@"
echo "oracle's warnings and errors: $(grep -cE '"?(WARN|ERROR)' "$LOG" || true) lines in $LOG"
