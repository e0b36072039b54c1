#!/usr/bin/env bash
# What credentials cost: placements with a cluster key ÷ the same placements in open mode, in one
# run. Two oracles share one freshly created database: one in open mode, one with an admin token
# (its requests carry a silo key). Only one is loaded at a time; each round measures both, the
# first mode alternating from round to round, so that the machine's drift falls on both alike.
#
#   bench/auth.sh                        # builds release; 6 rounds × (known grains, new grains) × 2 modes
#   ROUNDS=5 DURATION=20 bench/auth.sh
#   ORACLE_BIN=/tmp/oracle bench/auth.sh # another binary, no build
#
# Prints one line per measurement and, per scenario, the median over the rounds of two ratios:
# requests/s with credentials ÷ in open mode (the goal is ≥ 0.95), and the oracle's own CPU time
# per request in open mode ÷ with credentials (what the credential check costs the oracle, steadier
# than throughput on a machine whose cores wrk and Postgres share); writes them to
# bench/results/auth-<time>.txt. Needs wrk and a Postgres that lets the user create
# databases (BENCH_DATABASE_SERVER, default postgres://postgres@127.0.0.1:5432).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-6}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
OPEN_PORT=${OPEN_PORT:-18081}
AUTH_PORT=${AUTH_PORT:-18082}
SERVER=${BENCH_DATABASE_SERVER:-postgres://postgres@127.0.0.1:5432}
DATABASE=placement_oracle_bench_auth
export BENCH_CLUSTER=bench BENCH_GRAINS=20000

fail() { echo "bench/auth.sh: $*" >&2; exit 1; }
say() { echo "[$(date +%T)] $*" >&2; }
command -v wrk >/dev/null || fail "wrk is missing: apt-get install wrk"
psql "$SERVER/postgres" -qAtc 'SELECT 1' >/dev/null || fail "no Postgres at $SERVER"
if [ -z "${ORACLE_BIN:-}" ]; then
  cargo build --release --quiet
  ORACLE_BIN=./target/release/placement-oracle
fi
mkdir -p bench/results
OUT="bench/results/auth-$(date -u +%Y%m%dT%H%M%SZ).txt"
psql "$SERVER/postgres" -qc "DROP DATABASE IF EXISTS $DATABASE WITH (FORCE)" -c "CREATE DATABASE $DATABASE"
ADMIN=$(python3 -c 'import secrets; print(secrets.token_hex(32))')

start() { # port, then extra environment
  local port=$1; shift
  # Its output goes to a file: inherited, it would hold the caller's $(…) open until it exits.
  env "$@" DATABASE_URL="$SERVER/$DATABASE" ORACLE_LISTEN="127.0.0.1:$port" ORACLE_SILO_TTL_MS=3600000 \
    RUST_LOG=${RUST_LOG:-warn} "$ORACLE_BIN" serve > "bench/results/auth-oracle-$port.log" 2>&1 &
  echo $!
}
OPEN_PID=$(start "$OPEN_PORT")
AUTH_PID=$(start "$AUTH_PORT" ORACLE_ADMIN_TOKEN="$ADMIN")
trap 'kill $OPEN_PID $AUTH_PID 2>/dev/null; wait 2>/dev/null || true' EXIT
for port in "$OPEN_PORT" "$AUTH_PORT"; do
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.2; done
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null || fail "the oracle on $port did not start"
done

say "ten silos, $BENCH_GRAINS known grains, one silo key"
KEY=$(python3 - "http://127.0.0.1:$AUTH_PORT" "$ADMIN" <<'PY'
import json, os, sys, urllib.request
base, admin = sys.argv[1], sys.argv[2]
cluster, grains = os.environ["BENCH_CLUSTER"], int(os.environ["BENCH_GRAINS"])
def post(path, body, token):
    request = urllib.request.Request(f"{base}/v1/clusters/{cluster}{path}", data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {token}"})
    return json.load(urllib.request.urlopen(request))
key = post("/keys", {"scopes": ["silo"], "label": "bench"}, admin)["key"]
for i in range(10):
    post("/heartbeats", {"silo": f"10.0.0.{i}:11111@1", "cpu_usage": 10}, key)
for start in range(0, grains, 1000):
    post("/placements/batch", {"placements": [{"grain": f"user/g{i}"} for i in range(start, min(start + 1000, grains))]}, key)
print(key)
PY
)

cpu_ticks() { # a process's user + system CPU so far, in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat"
}

measure() { # scenario, port, pid, [key] → "requests/s oracle-CPU-µs-per-request"
  local scenario=$1 port=$2 pid=$3 key=${4:-} out before after
  export BENCH_RUN="$$-$scenario-$port-$(date +%s%N)"
  BENCH_KEY=$key wrk -t"$THREADS" -c"$CONNECTIONS" -d2s --timeout 10s -s "bench/wrk/$scenario.lua" \
    "http://127.0.0.1:$port" >/dev/null
  export BENCH_RUN="$$-$scenario-$port-$(date +%s%N)"
  before=$(cpu_ticks "$pid")
  out=$(BENCH_KEY=$key wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --timeout 10s --latency \
    -s "bench/wrk/$scenario.lua" "http://127.0.0.1:$port")
  after=$(cpu_ticks "$pid")
  local errors
  errors=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
  [ -z "$errors" ] || fail "$scenario on $port: $errors answers were not 2xx"
  local requests rps
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  python3 -c "print($rps, round(($after - $before) / $TICKS * 1e6 / $requests, 2))"
}

TICKS=$(getconf CLK_TCK)
echo "round scenario open_rps auth_rps auth/open open_cpu_us auth_cpu_us open/auth_cpu" | tee "$OUT"
for round in $(seq "$ROUNDS"); do
  for scenario in existing new; do
    say "round $round: $scenario"
    # Which mode goes first alternates, so that a drift within a round favours neither.
    if (( round % 2 )); then
      read -r open open_cpu < <(measure "$scenario" "$OPEN_PORT" "$OPEN_PID")
      read -r auth auth_cpu < <(measure "$scenario" "$AUTH_PORT" "$AUTH_PID" "$KEY")
    else
      read -r auth auth_cpu < <(measure "$scenario" "$AUTH_PORT" "$AUTH_PID" "$KEY")
      read -r open open_cpu < <(measure "$scenario" "$OPEN_PORT" "$OPEN_PID")
    fi
    echo "$round $scenario $open $auth $(python3 -c "print(round($auth / $open, 3))") $open_cpu $auth_cpu" \
      "$(python3 -c "print(round($open_cpu / $auth_cpu, 3))")" | tee -a "$OUT"
  done
done
python3 - "$OUT" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1]).read().splitlines()[1:]]
for scenario in ("existing", "new"):
    mine = [r for r in rows if r[1] == scenario]
    for column, what in ((4, "requests/s, auth ÷ open"), (7, "oracle CPU per request, open ÷ auth")):
        ratios = [float(r[column]) for r in mine]
        print(f"{scenario}: {what}: median of {len(ratios)} rounds = {statistics.median(ratios):.3f} "
              f"(each: {', '.join(f'{r:.3f}' for r in ratios)})")
PY
