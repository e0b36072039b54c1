#!/usr/bin/env bash
# The users' tools end to end (run by contract/run.sh after the contract checks):
#   0. the simulator (built on the Python SDK, sdk/python) type-checked with mypy --strict;
#   1. the simulator, with the README's one command, against an oracle on the embedded default;
#   2. the simulator against two replicas on Postgres with credentials, while
#   3. the live cluster page (/ui/) is checked in headless Chromium against what the API reports, and a
#      screenshot is kept (contract/build/live-cluster.png; UPDATE_SCREENSHOT=1 also writes
#      docs/ui/live-cluster.png, the one the README shows).
#
# Usage: ORACLE_ADMIN_TOKEN=… ORACLE_BINARY=… ORACLE_DATABASE_URL=… bash contract/tools.sh BASE_URL
# BASE_URL is an oracle on ORACLE_DATABASE_URL with that admin token; this script starts a second replica
# on the same database (BASE_URL's port + 1) and an embedded one (port + 2). Needs python3, node, npm,
# Chromium (/usr/bin/chromium, or CHROMIUM=…; Debian: apt-get install chromium) and mypy in contract/build/venv
# (contract/clients.sh installs it).
set -euo pipefail

if [[ $# -ne 1 || -z ${ORACLE_ADMIN_TOKEN:-} || -z ${ORACLE_BINARY:-} || -z ${ORACLE_DATABASE_URL:-} ]]; then
  echo "usage: ORACLE_ADMIN_TOKEN=… ORACLE_BINARY=… ORACLE_DATABASE_URL=… $0 BASE_URL" >&2
  exit 2
fi
BASE_URL=$1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=contract/build
PORT=${BASE_URL##*:}
SECOND_URL="http://127.0.0.1:$((PORT + 1))"
EMBEDDED_URL="http://127.0.0.1:$((PORT + 2))"
CLUSTER=live-page
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
export CHROMIUM
PIDS=()
trap 'for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done' EXIT

step() { printf '\n==> %s\n' "$*"; }

if [[ ! -x $CHROMIUM ]]; then
  echo "no Chromium at $CHROMIUM: install it (Debian: apt-get install chromium) or set CHROMIUM" >&2
  exit 1
fi

wait_ready() { # url, pid, log
  for attempt in $(seq 100); do
    if curl -fs "$1/readyz" > /dev/null; then return 0; fi
    if ! kill -0 "$2" 2>/dev/null || [[ $attempt -eq 100 ]]; then
      echo "the oracle at $1 did not become ready; its log:" >&2; cat "$3" >&2; return 1
    fi
    sleep 0.2
  done
}

# ---------------------------------------------------------------- 0
step "Simulator: mypy --strict over examples/simulator/simulate.py and the SDK it imports (sdk/python)"
if [[ ! -x $BUILD/venv/bin/mypy ]]; then
  echo "no mypy in $BUILD/venv: run contract/clients.sh first (it installs contract/python/requirements.txt)" >&2
  exit 1
fi
MYPYPATH=sdk/python "$BUILD/venv/bin/mypy" --strict --cache-dir "$BUILD/mypy-cache" examples/simulator/simulate.py

# ---------------------------------------------------------------- 1
step "Simulator, the README's one command, against the embedded default at $EMBEDDED_URL"
env -u DATABASE_URL -u ORACLE_ADMIN_TOKEN ORACLE_LISTEN="${EMBEDDED_URL#http://}" "$ORACLE_BINARY" \
  > "$BUILD/embedded.log" 2>&1 &
PIDS+=($!)
wait_ready "$EMBEDDED_URL" "${PIDS[-1]}" "$BUILD/embedded.log"
env -u ORACLE_ADMIN_TOKEN examples/simulator/run.sh --url "$EMBEDDED_URL" --duration 12 --late-at 5 \
  | tee "$BUILD/simulator-embedded.log" | tail -n 4
grep -q " 0 unexpected answers, 0 ticks without the oracle" "$BUILD/simulator-embedded.log"
curl -fs "$EMBEDDED_URL/v1/clusters/demo/distribution" | python3 -c '
import json, sys
d = json.load(sys.stdin)
empty = [s["silo"] for s in d["silos"] if s["activations"] == 0]
assert d["activations"] > 0 and len(d["silos"]) == 10 and not empty, d
print("the embedded oracle holds", d["activations"], "grains over", len(d["silos"]), "silos, none empty")'

# ---------------------------------------------------------------- 2
step "A second replica at $SECOND_URL on the same database; the simulator drives both"
DATABASE_URL=$ORACLE_DATABASE_URL ORACLE_LISTEN="${SECOND_URL#http://}" "$ORACLE_BINARY" \
  > "$BUILD/second.log" 2>&1 &
PIDS+=($!)
wait_ready "$SECOND_URL" "${PIDS[-1]}" "$BUILD/second.log"
# The late silos join once the first repartitioner round has run, so the rebalancer has them to fill
# while the page is looked at; silos take three ticks to carry a migration out, so some stay open.
examples/simulator/run.sh --url "$BASE_URL" --url "$SECOND_URL" --cluster "$CLUSTER" \
  --late-at 12 --move-ticks 3 --rebalance-after 4 > "$BUILD/simulator-replicas.log" 2>&1 &
SIMULATOR=$!
PIDS+=($SIMULATOR)

echo "waiting for repartitioner rounds, a rebalancer session and open migrations"
ready=""
for _ in $(seq 120); do
  if ! kill -0 $SIMULATOR 2>/dev/null; then
    echo "the simulator stopped:" >&2; cat "$BUILD/simulator-replicas.log" >&2; exit 1
  fi
  if ready=$(python3 - "$BASE_URL" "$CLUSTER" <<'PY'
import json, os, sys, urllib.request
base, cluster = sys.argv[1], sys.argv[2]
def get(path):
    request = urllib.request.Request(f"{base}/v1/clusters/{cluster}{path}",
                                     headers={"authorization": f"Bearer {os.environ['ORACLE_ADMIN_TOKEN']}"})
    return json.load(urllib.request.urlopen(request))
try:
    rebalancer, repartitioner, spread = get("/rebalancer"), get("/repartitioner"), get("/distribution")
except Exception:
    sys.exit(1)
joined = len(spread["silos"]) == 10
open_moves = sum(f["count"] for f in spread["migrations"])
if joined and rebalancer["session"] is not None and rebalancer["reports"] and repartitioner["rounds"] >= 1 and open_moves:
    print(f"session {rebalancer['session']} cycle {rebalancer['cycle']}, {repartitioner['rounds']} rounds, "
          f"{open_moves} migrations open")
else:
    sys.exit(1)
PY
  ); then break; fi
  sleep 0.5
done
[[ -n $ready ]] || { echo "the cluster never got there; the simulator said:" >&2; cat "$BUILD/simulator-replicas.log" >&2; exit 1; }
echo "$ready"

# ---------------------------------------------------------------- 3
step "The live page in headless Chromium ($CHROMIUM)"
(cd contract/ui && ../../scripts/unguarded.sh npm ci --no-audit --no-fund --loglevel=error)
node contract/ui/live-page.mjs "$BASE_URL" "$CLUSTER" "$BUILD/live-cluster.png"
if [[ ${UPDATE_SCREENSHOT:-} == 1 ]]; then
  mkdir -p docs/ui && cp "$BUILD/live-cluster.png" docs/ui/live-cluster.png
  echo "wrote docs/ui/live-cluster.png"
fi

kill -TERM $SIMULATOR
wait $SIMULATOR || { echo "the simulator failed:" >&2; tail -n 30 "$BUILD/simulator-replicas.log" >&2; exit 1; }
tail -n 2 "$BUILD/simulator-replicas.log"
grep -q " 0 unexpected answers, 0 ticks without the oracle" "$BUILD/simulator-replicas.log"
step "The simulator and the live page passed"
