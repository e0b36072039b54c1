#!/usr/bin/env bash
# What PgBouncer costs: placements through a PgBouncer in session mode ÷ the same placements on
# direct connections, in one run. Two oracles share one freshly created database, one connected
# straight to Postgres, one through a PgBouncer (Debian's, its default settings but the pool mode
# and sizes) started here; only one is loaded at a time, the first alternating from round to round.
# (Transaction pooling is not supported: docs/CONFIGURATION.md.)
#
#   bench/pgbouncer.sh                        # builds release; 3 rounds × (known, new grains) × 2
#   ROUNDS=5 ORACLE_BIN=/tmp/oracle bench/pgbouncer.sh
#
# Prints one line per measurement and, per scenario, the median over the rounds of requests/s
# through PgBouncer ÷ direct; writes them to bench/results/pgbouncer-<time>.txt. Needs wrk,
# pgbouncer (apt-get install wrk pgbouncer) and a Postgres on 127.0.0.1 that lets user postgres
# create databases without a password (BENCH_DATABASE_PORT, default 5432).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
DIRECT_PORT=${DIRECT_PORT:-18083}
POOLED_PORT=${POOLED_PORT:-18084}
BOUNCER_PORT=${BOUNCER_PORT:-16432}
PG_PORT=${BENCH_DATABASE_PORT:-5432}
SERVER="postgres://postgres@127.0.0.1:$PG_PORT"
DATABASE=placement_oracle_bench_pgbouncer
export BENCH_CLUSTER=bench BENCH_GRAINS=20000

fail() { echo "bench/pgbouncer.sh: $*" >&2; exit 1; }
say() { echo "[$(date +%T)] $*" >&2; }
command -v wrk >/dev/null || fail "wrk is missing: apt-get install wrk"
[ -x /usr/sbin/pgbouncer ] || fail "pgbouncer is missing: apt-get install pgbouncer"
psql "$SERVER/postgres" -qAtc 'SELECT 1' >/dev/null || fail "no Postgres at $SERVER"
if [ -z "${ORACLE_BIN:-}" ]; then
  cargo build --release --quiet
  ORACLE_BIN=./target/release/placement-oracle
fi
mkdir -p bench/results
OUT="bench/results/pgbouncer-$(date -u +%Y%m%dT%H%M%SZ).txt"
psql "$SERVER/postgres" -qc "DROP DATABASE IF EXISTS $DATABASE WITH (FORCE)" -c "CREATE DATABASE $DATABASE"

# PgBouncer in session mode, its files in a folder of its own; it refuses to run as root.
BOUNCER_DIR=$(mktemp -d)
echo '"postgres" ""' > "$BOUNCER_DIR/users.txt"
cat > "$BOUNCER_DIR/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=$PG_PORT
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $BOUNCER_DIR/users.txt
pool_mode = session
default_pool_size = 40
max_client_conn = 200
logfile = $BOUNCER_DIR/pgbouncer.log
INI
if [ "$(id -u)" = 0 ]; then
  chown -R postgres:postgres "$BOUNCER_DIR"
  runuser -u postgres -- /usr/sbin/pgbouncer "$BOUNCER_DIR/pgbouncer.ini" >/dev/null 2>&1 &
else
  /usr/sbin/pgbouncer "$BOUNCER_DIR/pgbouncer.ini" >/dev/null 2>&1 &
fi
BOUNCER_PID=$!

start() { # port, database URL
  env DATABASE_URL="$2" ORACLE_LISTEN="127.0.0.1:$1" ORACLE_SILO_TTL_MS=3600000 \
    RUST_LOG=${RUST_LOG:-warn} "$ORACLE_BIN" serve > "bench/results/pgbouncer-oracle-$1.log" 2>&1 &
  echo $!
}
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$BOUNCER_PORT") 2>/dev/null && break; sleep 0.1; done
DIRECT_PID=$(start "$DIRECT_PORT" "$SERVER/$DATABASE")
POOLED_PID=$(start "$POOLED_PORT" "postgres://postgres@127.0.0.1:$BOUNCER_PORT/$DATABASE")
trap 'kill $DIRECT_PID $POOLED_PID 2>/dev/null; pkill -P $BOUNCER_PID 2>/dev/null; kill $BOUNCER_PID 2>/dev/null; wait 2>/dev/null; rm -rf "$BOUNCER_DIR"' EXIT
for port in "$DIRECT_PORT" "$POOLED_PORT"; do
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.2; done
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null || fail "the oracle on $port did not start"
done

say "ten silos and $BENCH_GRAINS known grains"
python3 - "http://127.0.0.1:$DIRECT_PORT" <<'PY'
import json, os, sys, urllib.request
base, cluster, grains = sys.argv[1], os.environ["BENCH_CLUSTER"], int(os.environ["BENCH_GRAINS"])
def post(path, body):
    request = urllib.request.Request(f"{base}/v1/clusters/{cluster}{path}", data=json.dumps(body).encode(),
        headers={"content-type": "application/json"})
    return json.load(urllib.request.urlopen(request))
for i in range(10):
    post("/heartbeats", {"silo": f"10.0.0.{i}:11111@1", "cpu_usage": 10})
for start in range(0, grains, 1000):
    post("/placements/batch", {"placements": [{"grain": f"user/g{i}"} for i in range(start, min(start + 1000, grains))]})
PY
psql "$SERVER/$DATABASE" -qc 'VACUUM (ANALYZE)' >/dev/null

measure() { # scenario, port → requests/s
  local scenario=$1 port=$2 out errors
  export BENCH_RUN="$$-$scenario-$port-$(date +%s%N)"
  wrk -t"$THREADS" -c"$CONNECTIONS" -d2s --timeout 10s -s "bench/wrk/$scenario.lua" "http://127.0.0.1:$port" >/dev/null
  export BENCH_RUN="$$-$scenario-$port-$(date +%s%N)"
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --timeout 10s -s "bench/wrk/$scenario.lua" "http://127.0.0.1:$port")
  errors=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
  [ -z "$errors" ] || fail "$scenario on $port: $errors answers were not 2xx"
  awk '/^Requests\/sec/ {print $2}' <<<"$out"
}

echo "round scenario direct_rps pooled_rps pooled/direct" | tee "$OUT"
for round in $(seq "$ROUNDS"); do
  for scenario in existing new; do
    say "round $round: $scenario"
    if (( round % 2 )); then
      direct=$(measure "$scenario" "$DIRECT_PORT"); pooled=$(measure "$scenario" "$POOLED_PORT")
    else
      pooled=$(measure "$scenario" "$POOLED_PORT"); direct=$(measure "$scenario" "$DIRECT_PORT")
    fi
    echo "$round $scenario $direct $pooled $(python3 -c "print(round($pooled / $direct, 3))")" | tee -a "$OUT"
  done
done
python3 - "$OUT" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1]).read().splitlines()[1:]]
for scenario in ("existing", "new"):
    ratios = [float(r[4]) for r in rows if r[1] == scenario]
    print(f"{scenario}: requests/s through PgBouncer ÷ direct: median of {len(ratios)} rounds = "
          f"{statistics.median(ratios):.3f} (each: {', '.join(f'{r:.3f}' for r in ratios)})")
PY
