#!/usr/bin/env bash
# Edge flood: a million edge reports in a minute against two replicas on one Postgres, while
# placements go on; reports memory of both replicas over the minute, the store's buffer and state
# sizes, and placement latency during the flood against a quiet baseline measured in the same run.
#
#   bench/edge_flood.sh                 # 1 000 000 edges in 60 s, batches of 1000
#   EDGES=2000000 bench/edge_flood.sh
#
# The repartitioner is enabled with rounds every 20–30 s, so rounds run under the flood (ROUNDS=false:
# edges are still counted every 5 s, but no round runs). Edge
# pairs: 20 % among 2 000 hot pairs, the rest uniformly random among the 20 000 placed grains (a
# worst case for the sketch: almost every cold pair is new). Needs wrk and a Postgres
# (BENCH_DATABASE_SERVER, default postgres://postgres@127.0.0.1:5432).
set -euo pipefail
cd "$(dirname "$0")/.."

EDGES=${EDGES:-1000000}
SECONDS_OF_FLOOD=${SECONDS_OF_FLOOD:-60}
BATCH=${BATCH:-1000}
CONNECTIONS=${CONNECTIONS:-16}
SERVER=${BENCH_DATABASE_SERVER:-postgres://postgres@127.0.0.1:5432}
DATABASE=placement_oracle_flood
export BENCH_CLUSTER=flood BENCH_GRAINS=20000 BENCH_RUN=$$

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
cargo build --release --quiet
psql "$SERVER/postgres" -qc "DROP DATABASE IF EXISTS $DATABASE WITH (FORCE)" -c "CREATE DATABASE $DATABASE"

PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null || true' EXIT
for n in 1 2; do
  DATABASE_URL="$SERVER/$DATABASE" ORACLE_LISTEN="127.0.0.1:1808$n" ORACLE_SILO_TTL_MS=3600000 \
    ORACLE_REPLICA_ID="flood-$n" RUST_LOG=${RUST_LOG:-warn} ./target/release/placement-oracle serve &
  PIDS+=($!)
done
A=http://127.0.0.1:18081
B=http://127.0.0.1:18082
# Placements go to replica A (the first to take the cluster's lease) unless PLACE_ON=B.
PLACE=$A; [ "${PLACE_ON:-A}" = B ] && PLACE=$B
for base in $A $B; do
  for _ in $(seq 50); do curl -fs "$base/readyz" >/dev/null && break; sleep 0.2; done
done

for i in $(seq 0 9); do
  curl -fs -o /dev/null -X POST "$A/v1/clusters/$BENCH_CLUSTER/heartbeats" -H 'content-type: application/json' \
    -d "{\"silo\":\"10.0.0.$i:11111@1\",\"cpu_usage\":10}"
done
curl -fs -o /dev/null -X PUT "$A/v1/clusters/$BENCH_CLUSTER/policy" -H 'content-type: application/json' \
  -H 'If-Match: *' -d "{\"repartitioner\":{\"enabled\":${ROUNDS:-true},\"min_round_period_ms\":20000,\"max_round_period_ms\":30000,\"recovery_period_ms\":20000}}"
python3 - "$A" <<'PY'
import json, os, sys, urllib.request
base, cluster, grains = sys.argv[1], os.environ["BENCH_CLUSTER"], int(os.environ["BENCH_GRAINS"])
for start in range(0, grains, 1000):
    body = {"placements": [{"grain": f"user/g{i}"} for i in range(start, min(start + 1000, grains))]}
    request = urllib.request.Request(f"{base}/v1/clusters/{cluster}/placements/batch",
        data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    urllib.request.urlopen(request).read()
PY

p99() { awk '$1=="99%" {v=$2; if (v ~ /us$/) {sub(/us$/,"",v); print v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v); print v} else {sub(/s$/,"",v); print v*1000}}'; }
rps() { awk '/^Requests\/sec/ {print $2}'; }
rss_mb() { ps -o rss= -p "$1" | awk '{printf "%.1f", $1/1024}'; }

# Quiet baseline: placements of existing grains on replica A.
base_out=$(wrk -t1 -c"$CONNECTIONS" -d10s --latency -s bench/wrk/existing.lua "$PLACE")

# The flood, paced evenly over the minute and split between the replicas, with placements beside it.
memory_log=$(mktemp)
( for _ in $(seq $((SECONDS_OF_FLOOD / 5 + 3))); do
    echo "$(rss_mb "${PIDS[0]}") $(rss_mb "${PIDS[1]}")" >>"$memory_log"; sleep 5
  done ) &
SAMPLER=$!
wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_OF_FLOOD}s" --latency -s bench/wrk/existing.lua "$PLACE" >/tmp/flood-placements.txt &
PLACEMENTS=$!
flood=$(python3 - "$A" "$B" "$EDGES" "$SECONDS_OF_FLOOD" "$BATCH" <<'PY'
import json, os, random, sys, threading, time, urllib.request
a, b, total, seconds, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
cluster, grains = os.environ["BENCH_CLUSTER"], int(os.environ["BENCH_GRAINS"])
batches = total // batch
rng = random.Random(7)
hot = [(rng.randrange(grains), rng.randrange(grains)) for _ in range(2000)]
def body():
    edges = []
    for _ in range(batch):
        x, y = rng.choice(hot) if rng.random() < 0.2 else (rng.randrange(grains), rng.randrange(grains))
        edges.append({"from": f"user/g{x}", "to": f"user/g{y}", "count": 1})
    return json.dumps({"edges": edges}).encode()
bodies = [body() for _ in range(64)]
stats = {"accepted": 0, "ignored": 0, "dropped": 0, "errors": 0, "late": 0.0}
lock = threading.Lock()
def send(i, at):
    base = a if i % 2 == 0 else b
    request = urllib.request.Request(f"{base}/v1/clusters/{cluster}/edges", data=bodies[i % len(bodies)],
                                     headers={"content-type": "application/json"})
    try:
        answer = json.loads(urllib.request.urlopen(request, timeout=30).read())
        with lock:
            for k in ("accepted", "ignored", "dropped"):
                stats[k] += answer[k]
    except Exception:
        with lock:
            stats["errors"] += 1
start = time.monotonic()
threads = []
for i in range(batches):
    at = start + i * seconds / batches
    delay = at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    else:
        stats["late"] = max(stats["late"], -delay)
    t = threading.Thread(target=send, args=(i, at)); t.start(); threads.append(t)
for t in threads:
    t.join()
elapsed = time.monotonic() - start
print(f"{batches * batch} {elapsed:.1f} {stats['accepted']} {stats['ignored']} {stats['dropped']} {stats['errors']}")
PY
)
wait $PLACEMENTS
sleep 12  # the lease holder counts what waits within 5 s
kill $SAMPLER 2>/dev/null || true

read -r sent elapsed accepted ignored dropped errors <<<"$flood"
buffer=$(psql "$SERVER/$DATABASE" -qAtc "SELECT coalesce(sum(last_seq - first_seq + 1), 0) FROM edge_buffer")
state_kb=$(psql "$SERVER/$DATABASE" -qAtc "SELECT coalesce(sum(pg_column_size(state)) / 1024, 0) FROM cluster_work_state WHERE kind = 'repartitioner'")
tracked=$(curl -fs "$A/v1/clusters/$BENCH_CLUSTER/repartitioner" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["tracked_edges"], r["dropped_edges"], r["rounds"])')
echo
echo "edge flood — $(date -u +%F), $(nproc) cores, two replicas on one Postgres"
echo
echo "| | value |"
echo "|---|---:|"
echo "| edges sent (batches of $BATCH, both replicas) | $sent in ${elapsed} s |"
echo "| accepted / ignored / dropped by the bound / failed requests | $accepted / $ignored / $dropped / $errors |"
echo "| waiting in the buffer afterwards | $buffer |"
echo "| sketch: tracked edges, dropped reports ever, rounds run | $tracked |"
echo "| stored repartitioner state | ${state_kb} KiB |"
echo "| placements/s quiet → during the flood | $(rps <<<"$base_out") → $(rps </tmp/flood-placements.txt) |"
echo "| placement p99 quiet → during the flood (ms) | $(p99 <<<"$base_out") → $(p99 </tmp/flood-placements.txt) |"
echo "| RSS of replicas A and B every 5 s (MiB) | $(tr '\n' ';' <"$memory_log" | sed 's/;$//') |"
echo "| lease holder; CPU seconds used by A and B over the whole run | $(psql "$SERVER/$DATABASE" -qAtc 'SELECT holder FROM cluster_leases'); $(ps -o times= -p "${PIDS[0]}" | tr -d ' ') and $(ps -o times= -p "${PIDS[1]}" | tr -d ' ') |"
