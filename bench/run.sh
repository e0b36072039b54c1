#!/usr/bin/env bash
# Load benchmark: builds release, starts the oracle on Postgres and drives it with wrk over loopback.
#
#   bench/run.sh                      # 64 connections, 10 s per scenario
#   CONNECTIONS=128 DURATION=20 bench/run.sh
#
# Reports requests/s, p50 and p99 for a trivial endpoint (the floor), heartbeats, placements of
# existing grains and placements of new grains, each also as a ratio to the floor measured in the
# same run. Needs wrk (apt-get install wrk) and a Postgres (BENCH_DATABASE_SERVER, default
# postgres://postgres@127.0.0.1:5432). The table is printed and written to bench/results/.
set -euo pipefail
cd "$(dirname "$0")/.."

CONNECTIONS=${CONNECTIONS:-64}
DURATION=${DURATION:-10}
THREADS=${THREADS:-2}
PORT=${PORT:-18080}
SERVER=${BENCH_DATABASE_SERVER:-postgres://postgres@127.0.0.1:5432}
DATABASE=placement_oracle_bench
export BENCH_CLUSTER=bench BENCH_SILOS=10 BENCH_GRAINS=20000 BENCH_RUN=$$
export BENCH_HEARTBEAT_CLUSTER=heartbeats BENCH_HEARTBEAT_SILOS=1000

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
psql "$SERVER/postgres" -qAtc 'SELECT 1' >/dev/null || { echo "no Postgres at $SERVER" >&2; exit 1; }

cargo build --release --quiet
psql "$SERVER/postgres" -qc "DROP DATABASE IF EXISTS $DATABASE WITH (FORCE)" -c "CREATE DATABASE $DATABASE"

DATABASE_URL="$SERVER/$DATABASE" ORACLE_LISTEN="127.0.0.1:$PORT" ORACLE_SILO_TTL_MS=3600000 \
  RUST_LOG=${RUST_LOG:-info} ./target/release/placement-oracle serve &
ORACLE=$!
trap 'kill $ORACLE 2>/dev/null; wait $ORACLE 2>/dev/null || true' EXIT
BASE="http://127.0.0.1:$PORT"
for _ in $(seq 50); do curl -fs "$BASE/readyz" >/dev/null && break; sleep 0.2; done

# Ten silos, and BENCH_GRAINS grains placed in batches of 1000 for the "existing" scenario.
for i in $(seq 0 $((BENCH_SILOS - 1))); do
  curl -fs -o /dev/null -X POST "$BASE/v1/clusters/$BENCH_CLUSTER/heartbeats" -H 'content-type: application/json' \
    -d "{\"silo\":\"10.0.0.$i:11111@1\",\"cpu_usage\":10}"
done
python3 - "$BASE" <<'PY'
import json, os, sys, urllib.request
base, cluster, grains = sys.argv[1], os.environ["BENCH_CLUSTER"], int(os.environ["BENCH_GRAINS"])
for start in range(0, grains, 1000):
    body = {"placements": [{"grain": f"user/g{i}"} for i in range(start, min(start + 1000, grains))]}
    request = urllib.request.Request(f"{base}/v1/clusters/{cluster}/placements/batch",
        data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    urllib.request.urlopen(request).read()
PY

# wrk's latency lines look like "     50%    1.23ms"; turn a duration into milliseconds.
to_ms() { awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); print v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v); print v} else if (v ~ /s$/) {sub(/s$/,"",v); print v*1000} else print v}'; }

run() { # name script
  # Each scenario starts from a clean table: no autovacuum of the previous scenario's churn in it.
  psql "$SERVER/$DATABASE" -qc 'VACUUM (ANALYZE)' >/dev/null
  # A fresh run id per wrk invocation, so "new" grains of the measured run are never ones the
  # warm-up already placed.
  export BENCH_RUN="$$-$1-warmup"
  wrk -t"$THREADS" -c"$CONNECTIONS" -d2s -s "bench/wrk/$2.lua" "$BASE" >/dev/null  # warm-up
  export BENCH_RUN="$$-$1-measured"
  local out; out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "bench/wrk/$2.lua" "$BASE")
  local rps p50 p99 errors
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out" | to_ms)
  p99=$(awk '$1=="99%" {print $2}' <<<"$out" | to_ms)
  errors=$(awk '/Non-2xx/ {print $NF}' <<<"$out"); errors=${errors:-0}
  echo "$1 $rps $p50 $p99 $errors"
}

results=$(
  run floor floor
  run heartbeats heartbeats
  run existing existing
  run new new
)
floor=$(awk '$1=="floor" {print $2}' <<<"$results")
mkdir -p bench/results
report="bench/results/$(date -u +%Y%m%dT%H%M%SZ).md"
{
  echo "placement-oracle load benchmark — $(date -u +%F), $(nproc) cores, ${CONNECTIONS} connections, ${THREADS} wrk threads, ${DURATION} s per scenario, Postgres store"
  echo
  echo "| scenario | requests/s | ÷ floor | p50 ms | p99 ms | non-2xx |"
  echo "|---|---:|---:|---:|---:|---:|"
  awk -v floor="$floor" '{printf "| %s | %.0f | %.3f | %.2f | %.2f | %s |\n", $1, $2, $2/floor, $3, $4, $5}' <<<"$results"
} | tee "$report"
echo
echo "written to $report"
