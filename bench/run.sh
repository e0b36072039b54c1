#!/usr/bin/env bash
# Load benchmark: starts the oracle on a freshly created Postgres database and drives it with wrk
# over loopback, every figure beside a floor measured in the same run.
#
#   bench/run.sh                          # builds release, then every scenario (about 10 minutes)
#   ORACLE_BIN=/tmp/oracle-old bench/run.sh   # measures that binary instead (no build)
#   BIG_ROWS=0 SWEEP= bench/run.sh        # without the 10M-row directory and the concurrency sweep
#   PROFILE_DIR=/tmp/profiles bench/run.sh    # also a system-wide perf profile of each scenario
#
# Scenarios (64 connections, 2 wrk threads, 2 s warm-up and 10 s measured unless said otherwise):
#   new-fresh     new grains on the fresh database, before any statistics exist (no ANALYZE)
#   pgbench       pgbench's single-row INSERT … ON CONFLICT DO NOTHING into a table shaped like the
#                 directory, on the same fresh database, same clients: what one statement per new
#                 grain reaches
#   floor         GET /healthz: the cheapest request the service answers
#   heartbeats    1,000 silos in turn, every load field
#   existing      placements of 20,000 known grains (directory hits)
#   new           placements of grains never seen before, after ANALYZE
#   racing        each new grain asked for by four callers at once (two on each wrk thread)
#   existing-10M  the same known grains after BIG_ROWS (10 million) more rows fill the directory
#   uniform-10M   known grains drawn uniformly from all of them (bench/scale/known.lua: nearly no
#                 two requests alike)
#   sweep         floor, existing, new and heartbeats at each concurrency in SWEEP (5 s each): a
#                 heartbeat batch is as full as the callers waiting, so 64 connections do not show
#                 what heartbeats reach when more silos beat at once
# Each scenario also reports the CPU time per request of the oracle process and of the local
# Postgres server's processes (read from /proc before and after the measured run; the Postgres
# figure is "-" when the server is not on this machine, and for pgbench it is per insert).
# The table, the raw figures and a plot (plot.svg: requests/s and p99 per scenario, and over
# concurrency) go to bench/results/<time>/. Needs wrk and pgbench (apt-get install wrk
# postgresql-contrib) and a Postgres that lets the user create databases (BENCH_DATABASE_SERVER,
# default postgres://postgres@127.0.0.1:5432); perf for PROFILE_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

CONNECTIONS=${CONNECTIONS:-64}
DURATION=${DURATION:-10}
THREADS=${THREADS:-2}
PORT=${PORT:-18080}
SERVER=${BENCH_DATABASE_SERVER:-postgres://postgres@127.0.0.1:5432}
BIG_ROWS=${BIG_ROWS:-10000000}
SWEEP=${SWEEP-8 16 32 64 128 256}
SWEEP_DURATION=${SWEEP_DURATION:-5}
DATABASE=placement_oracle_bench
DB="$SERVER/$DATABASE"
export BENCH_CLUSTER=bench BENCH_SILOS=10 BENCH_GRAINS=20000
export BENCH_HEARTBEAT_CLUSTER=heartbeats BENCH_HEARTBEAT_SILOS=1000

fail() { echo "bench/run.sh: $*" >&2; exit 1; }
say() { echo "[$(date +%T)] $*" >&2; }
command -v wrk >/dev/null || fail "wrk is missing: apt-get install wrk"
command -v pgbench >/dev/null || fail "pgbench is missing: apt-get install postgresql-contrib"
[ -z "${PROFILE_DIR:-}" ] || command -v perf >/dev/null || fail "perf is missing (PROFILE_DIR)"
psql "$SERVER/postgres" -qAtc 'SELECT 1' >/dev/null || fail "no Postgres at $SERVER"
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then fail "port $PORT is in use (PORT=…)"; fi

if [ -z "${ORACLE_BIN:-}" ]; then
  cargo build --release --quiet
  ORACLE_BIN=./target/release/placement-oracle
fi
OUT="bench/results/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT" ${PROFILE_DIR:+"$PROFILE_DIR"}
psql "$SERVER/postgres" -qc "DROP DATABASE IF EXISTS $DATABASE WITH (FORCE)" -c "CREATE DATABASE $DATABASE"

# The per-cluster rate limits are lifted: every scenario drives one cluster, and what is measured
# is the service, not its limiter (a replica refuses more than 10,000 heartbeats a second per
# cluster by default, which the heartbeat scenario passes).
DATABASE_URL="$DB" ORACLE_LISTEN="127.0.0.1:$PORT" ORACLE_SILO_TTL_MS=3600000 \
  ORACLE_RATE_LIMIT_HEARTBEATS=0 ORACLE_RATE_LIMIT_PLACEMENTS=0 \
  RUST_LOG=${RUST_LOG:-warn} "$ORACLE_BIN" serve &
ORACLE=$!
trap 'kill $ORACLE 2>/dev/null; wait $ORACLE 2>/dev/null || true' EXIT
BASE="http://127.0.0.1:$PORT"
for _ in $(seq 100); do curl -fs "$BASE/readyz" >/dev/null && break; sleep 0.2; done
curl -fs "$BASE/readyz" >/dev/null || fail "the oracle did not start"

for i in $(seq 0 $((BENCH_SILOS - 1))); do
  curl -fs -o /dev/null -X POST "$BASE/v1/clusters/$BENCH_CLUSTER/heartbeats" -H 'content-type: application/json' \
    -d "{\"silo\":\"10.0.0.$i:11111@1\",\"cpu_usage\":10}"
done

# wrk's latency lines look like "     50%    1.23ms"; turn a duration into milliseconds.
to_ms() { awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); print v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v); print v} else if (v ~ /s$/) {sub(/s$/,"",v); print v*1000} else print v}'; }

# CPU time, in clock ticks (user + system, reaped children's included), of one process, and of every
# process of the Postgres server on this machine (nothing when it runs elsewhere).
HZ=$(getconf CLK_TCK)
ticks_of() { awk '{sub(/^.*\) /, ""); print $12 + $13 + $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
postgres_ticks() {
  local total=0 pid
  for pid in $(pgrep -u postgres 2>/dev/null); do total=$((total + $(ticks_of "$pid"))); done
  echo "$total"
}
# Microseconds of CPU per request: ticks, requests; "-" without requests or without a local server.
per_request() { awk -v t="$1" -v n="$2" -v hz="$HZ" 'BEGIN { if (n > 0 && t > 0) printf "%.1f", t * 1000000 / hz / n; else print "-" }'; }

# Runs one scenario: name, wrk script (under bench/, without .lua), connections, seconds. Prints
# "name rps p50 p99 non2xx conns oracle-cpu-µs-per-request postgres-cpu-µs-per-request".
measure() {
  local name=$1 script=$2 conns=$3 seconds=$4 out perf_pid="" oracle_before db_before
  # New grains are new: every wrk invocation names its own (a name reused from an earlier run of
  # the same scenario would be a directory hit).
  export BENCH_RUN="$$-$name-$conns-$(date +%s%N)"
  wrk -t"$THREADS" -c"$conns" -d2s --timeout 10s -s "bench/$script.lua" "$BASE" >/dev/null
  export BENCH_RUN="$$-$name-$conns-$(date +%s%N)"
  if [ -n "${PROFILE_DIR:-}" ] && [ "$conns" = "$CONNECTIONS" ]; then
    perf record -F 499 -a -g -o "$OUT/$name.perf" -- sleep "$((seconds - 1))" 2>/dev/null &
    perf_pid=$!
  fi
  oracle_before=$(ticks_of "$ORACLE"); db_before=$(postgres_ticks)
  out=$(wrk -t"$THREADS" -c"$conns" -d"${seconds}s" --timeout 10s --latency -s "bench/$script.lua" "$BASE")
  local oracle_ticks=$(($(ticks_of "$ORACLE") - oracle_before)) db_ticks=$(($(postgres_ticks) - db_before))
  if [ -n "$perf_pid" ]; then
    wait "$perf_pid" || true
    bench/profile-summary.sh "$OUT/$name.perf" > "$PROFILE_DIR/$name.txt" 2>/dev/null || true
    rm -f "$OUT/$name.perf"
  fi
  local rps p50 p99 errors requests
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  requests=$(awk '/ requests in / {print $1}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out" | to_ms)
  p99=$(awk '$1=="99%" {print $2}' <<<"$out" | to_ms)
  errors=$(awk '/Non-2xx/ {print $NF}' <<<"$out"); errors=${errors:-0}
  echo "$name $rps $p50 $p99 $errors $conns $(per_request "$oracle_ticks" "$requests") $(per_request "$db_ticks" "$requests")"
}
run() { say "$1"; measure "$1" "$2" "$CONNECTIONS" "$DURATION" | tee -a "$OUT/results.txt"; }
# Each scenario starts analysed and checkpointed: the writes before it (the known grains, pgbench's
# inserts, the scenario before) are flushed now, not in the middle of its measured run.
analyze() { psql "$DB" -qc 'VACUUM (ANALYZE)' -c 'CHECKPOINT' >/dev/null; }

# 1. The fresh database: nothing has ever been analysed.
run new-fresh wrk/new

# 2. pgbench's single-row insert into a directory-shaped table, also never analysed.
psql "$DB" -qc "CREATE TABLE pgbench_directory (cluster text COLLATE \"C\", grain text COLLATE \"C\",
  silo text NOT NULL, strategy text NOT NULL, epoch bigint NOT NULL, created_ms bigint NOT NULL,
  PRIMARY KEY (cluster, grain))" -c "CREATE SEQUENCE pgbench_keys"
cat > "$OUT/insert.sql" <<'SQL'
INSERT INTO pgbench_directory VALUES ('bench', 'fresh/' || :client_id || '-' || nextval('pgbench_keys'),
  '10.0.0.1:11111@1', 'random', currval('pgbench_keys'), 0) ON CONFLICT DO NOTHING;
SQL
say pgbench
pgbench -n -M prepared -c "$CONNECTIONS" -j "$THREADS" -T 2 -f "$OUT/insert.sql" "$DB" >/dev/null 2>&1
psql "$DB" -qc 'TRUNCATE pgbench_directory' -c 'CHECKPOINT'
db_before=$(postgres_ticks)
pgbench_out=$(pgbench -n -M prepared -c "$CONNECTIONS" -j "$THREADS" -T "$DURATION" -f "$OUT/insert.sql" "$DB" 2>&1)
db_ticks=$(($(postgres_ticks) - db_before))
tps=$(awk '/^tps/ {print $3; exit}' <<<"$pgbench_out")
latency=$(awk '/^latency average/ {print $4}' <<<"$pgbench_out")
inserts=$(awk '/^number of transactions actually processed/ {print $NF}' <<<"$pgbench_out")
echo "pgbench $tps $latency - 0 $CONNECTIONS - $(per_request "$db_ticks" "$inserts")" | tee -a "$OUT/results.txt"

# 3. The known grains, then every other scenario on an analysed database.
say "placing $BENCH_GRAINS known grains"
python3 - "$BASE" <<'PY'
import json, os, sys, urllib.request
base, cluster, grains = sys.argv[1], os.environ["BENCH_CLUSTER"], int(os.environ["BENCH_GRAINS"])
for start in range(0, grains, 1000):
    body = {"placements": [{"grain": f"user/g{i}"} for i in range(start, min(start + 1000, grains))]}
    request = urllib.request.Request(f"{base}/v1/clusters/{cluster}/placements/batch",
        data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    urllib.request.urlopen(request).read()
PY
for scenario in floor heartbeats existing new racing; do
  analyze
  run "$scenario" "wrk/$scenario"
done

# 4. Concurrency: the floor, known and new grains and heartbeats from 8 to 256 connections.
for conns in $SWEEP; do
  for scenario in floor existing new heartbeats; do
    say "sweep $scenario at $conns"
    measure "$scenario" "wrk/$scenario" "$conns" "$SWEEP_DURATION" >> "$OUT/sweep.txt"
  done
done

# 5. A directory of BIG_ROWS more rows (by SQL: placing ten million grains over HTTP would take an
# hour here), spread over the same silos: rows as a registration writes them, named on from the
# known grains (user/g20000, …), so that bench/scale/known.lua draws uniformly from all of them.
if [ "$BIG_ROWS" -gt 0 ]; then
  say "filling the directory with $BIG_ROWS rows"
  chunk=1000000
  for ((start = 0; start < BIG_ROWS; start += chunk)); do
    psql "$DB" -qc "INSERT INTO activations (cluster, grain, silo, strategy, epoch, created_ms)
      SELECT '$BENCH_CLUSTER', 'user/g' || ($BENCH_GRAINS + i), '10.0.0.' || (i % $BENCH_SILOS) || ':11111@1', 'random',
             oracle_next_epoch(), 0
      FROM generate_series($start, LEAST($start + $chunk, $BIG_ROWS) - 1) AS i"
  done
  analyze
  run existing-10M wrk/existing
  SCALE_CLUSTER=$BENCH_CLUSTER SCALE_GRAINS=$((BENCH_GRAINS + BIG_ROWS)) run uniform-10M scale/known
fi

python3 bench/report.py "$OUT" | tee "$OUT/table.md"
python3 bench/plot.py "$OUT" > "$OUT/plot.svg"
echo
echo "written to $OUT/ (table.md, results.txt, sweep.txt, plot.svg)"
