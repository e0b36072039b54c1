#!/usr/bin/env bash
# What PgBouncer costs: placements through a PgBouncer in session mode, and in transaction mode
# (ORACLE_DB_TRANSACTION_POOLING), ÷ the same placements on direct connections, in one run. Three
# oracles share one freshly created database: one connected straight to Postgres, one through a
# PgBouncer (Debian's, its default settings but the pool modes and sizes) started here in session
# mode, one through the same PgBouncer in transaction mode; only one is loaded at a time, the
# order rotating from round to round.
#
#   bench/pgbouncer.sh                        # builds release; 3 rounds × (known, new grains) × 2
#   ROUNDS=5 ORACLE_BIN=/tmp/oracle bench/pgbouncer.sh
#
# Prints one line per measurement and, per scenario, the median over the rounds of requests/s
# through PgBouncer ÷ direct for each mode; writes them to bench/results/pgbouncer-<time>.txt. Needs wrk,
# pgbouncer (apt-get install wrk pgbouncer) and a Postgres on 127.0.0.1 that lets user postgres
# create databases without a password (BENCH_DATABASE_PORT, default 5432).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
DIRECT_PORT=${DIRECT_PORT:-18083}
SESSION_PORT=${SESSION_PORT:-18084}
TRANSACTION_PORT=${TRANSACTION_PORT:-18085}
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

# PgBouncer, its files in a folder of its own (it refuses to run as root): the database under
# two names, one pooled per session, one per transaction.
BOUNCER_DIR=$(mktemp -d)
echo '"postgres" ""' > "$BOUNCER_DIR/users.txt"
cat > "$BOUNCER_DIR/pgbouncer.ini" <<INI
[databases]
session = host=127.0.0.1 port=$PG_PORT dbname=$DATABASE pool_mode=session
transaction = host=127.0.0.1 port=$PG_PORT dbname=$DATABASE pool_mode=transaction
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

start() { # port, database URL, extra settings…
  env DATABASE_URL="$2" ORACLE_LISTEN="127.0.0.1:$1" ORACLE_SILO_TTL_MS=3600000 "${@:3}" \
    RUST_LOG=${RUST_LOG:-warn} "$ORACLE_BIN" serve > "bench/results/pgbouncer-oracle-$1.log" 2>&1 &
  echo $!
}
ready() { # port
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$1/readyz" >/dev/null && break; sleep 0.2; done
  curl -fs "http://127.0.0.1:$1/readyz" >/dev/null || fail "the oracle on $1 did not start"
}
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$BOUNCER_PORT") 2>/dev/null && break; sleep 0.1; done
DIRECT_PID=$(start "$DIRECT_PORT" "$SERVER/$DATABASE")
trap 'kill $DIRECT_PID ${SESSION_PID:-} ${TRANSACTION_PID:-} 2>/dev/null; pkill -P $BOUNCER_PID 2>/dev/null; kill $BOUNCER_PID 2>/dev/null; wait 2>/dev/null; rm -rf "$BOUNCER_DIR"' EXIT
ready "$DIRECT_PORT" # it migrated the database; the others only check
SESSION_PID=$(start "$SESSION_PORT" "postgres://postgres@127.0.0.1:$BOUNCER_PORT/session" \
  ORACLE_MIGRATE_ON_START=false)
TRANSACTION_PID=$(start "$TRANSACTION_PORT" "postgres://postgres@127.0.0.1:$BOUNCER_PORT/transaction" \
  ORACLE_MIGRATE_ON_START=false ORACLE_DB_TRANSACTION_POOLING=true)
ready "$SESSION_PORT"
ready "$TRANSACTION_PORT"

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

echo "round scenario direct_rps session_rps transaction_rps session/direct transaction/direct" | tee "$OUT"
for round in $(seq "$ROUNDS"); do
  for scenario in existing new; do
    say "round $round: $scenario"
    declare -A rps=()
    ports=("$DIRECT_PORT" "$SESSION_PORT" "$TRANSACTION_PORT")
    for i in 0 1 2; do # rotated: each oracle goes first in one round of three
      port=${ports[$(( (i + round) % 3 ))]}
      rps[$port]=$(measure "$scenario" "$port")
    done
    direct=${rps[$DIRECT_PORT]} session=${rps[$SESSION_PORT]} transaction=${rps[$TRANSACTION_PORT]}
    echo "$round $scenario $direct $session $transaction $(python3 -c "print(round($session / $direct, 3), round($transaction / $direct, 3))")" | tee -a "$OUT"
  done
done
python3 - "$OUT" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1]).read().splitlines()[1:]]
for scenario in ("existing", "new"):
    for mode, column in (("session", 5), ("transaction", 6)):
        ratios = [float(r[column]) for r in rows if r[1] == scenario]
        print(f"{scenario}: requests/s through PgBouncer in {mode} mode ÷ direct: median of "
              f"{len(ratios)} rounds = {statistics.median(ratios):.3f} "
              f"(each: {', '.join(f'{r:.3f}' for r in ratios)})")
PY
