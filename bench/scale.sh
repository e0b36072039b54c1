#!/usr/bin/env bash
# Scale benchmark: does the oracle stay as fast with a big directory as with a small one?
#
#   cargo build --release && bench/scale.sh
#   LARGE_GRAINS=1000000 bench/scale.sh          # a quicker rehearsal (fewer grains; same shape)
#
# One Postgres database, two clusters, one oracle (Postgres store) on 127.0.0.1:
#   - scale-large: 1,000 silos and 10,000,000 activations (silo #100 holds exactly 100,000 of them,
#     silo #200 exactly 10,000, the other 998 share the rest evenly);
#   - scale-small: 10 silos and 20,000 activations, the size bench/run.sh uses.
# It reports p50/p99 (ms) under wrk load (64 connections, 2 threads, 2 s warm-up, 10 s measured,
# like bench/run.sh) of:
#   1. placing a known grain, 2. placing a new grain — on both clusters, and their ratio large ÷
#      small (goal: at most 1.5×); the small cluster is measured twice, first on the fresh database
#      before any statistics exist (what a new deployment sees), then after VACUUM ANALYZE;
#   3. a silo listing page 900 silos deep (limit 100, cursor = silo #899);
# and, once each, in seconds:
#   4. how long after its death deadline (last heartbeat + TTL of 3 s) a silent silo holding 10,000
#      grains has its activation listing empty;
#   5. a graceful leave of the silo holding 100,000 grains: the DELETE's response time, and the time
#      until its activation listing is empty (entries are released in the background, in chunks).
# The table is printed and written to bench/results/scale-<date>.md.
#
# It does not build (another build may be running): it needs ./target/release/placement-oracle.
# Needs wrk (apt-get install wrk), python3 (standard library only), psql, and a Postgres that lets
# the user create databases (SCALE_DATABASE_SERVER, default postgres://postgres@127.0.0.1:5432).
# The database placement_oracle_scale is dropped and created anew on every run, and dropped again
# after a successful run (about 3 GB) unless KEEP_DATABASE=1; after a failure it is kept to look at.
#
# Membership is made over HTTP (heartbeats), as in life. The directory is filled by direct SQL
# instead: 10 million placements over HTTP would take hours on the 2-core machine, and what is
# measured is the oracle reading and writing a big directory, not how it got big. The rows are what
# a registration writes (epoch from the same sequence, created_ms now, strategy `random`); see
# `bench/scale/scale.py fill-sql` for the statement. This assumes the `activations` table of
# migrations/ (cluster, grain, silo, strategy, epoch, created_ms) and that nothing else needs a row
# per activation (no counters kept elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."

CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
# wrk's default timeout (2 s) would drop slow requests from the latency figures; count them in.
WRK_TIMEOUT=${WRK_TIMEOUT:-10s}
PORT=${PORT:-18081}
SERVER=${SCALE_DATABASE_SERVER:-${BENCH_DATABASE_SERVER:-postgres://postgres@127.0.0.1:5432}}
DATABASE=placement_oracle_scale
ORACLE_BIN=${ORACLE_BIN:-./target/release/placement-oracle}
HELPER="python3 bench/scale/scale.py"

# The large cluster. Silo ids are 10.1.X.Y:11111@1 with X = 100 + i / 100, Y = 100 + i % 100: both
# three digits, so the ids sort (byte order, as the store does) exactly like the numbers i, and silo
# #899 is 899 silos deep. The special silos are away from the deep page and from each other.
LARGE=scale-large LARGE_NET=10.1 LARGE_SILOS=1000 LARGE_GRAINS=${LARGE_GRAINS:-10000000}
LEAVE_SILO=100 LEAVE_GRAINS=100000   # graceful leave (scenario 5)
DEAD_SILO=200 DEAD_GRAINS=10000      # stops heartbeating (scenario 4)
DEEP_SILO=899 PAGE_LIMIT=100         # the listing page after silo #899: silos #900 … #999
DEAD_TTL_MS=3000                     # the cluster's TTL while scenario 4 runs
LONG_TTL_MS=3600000                  # otherwise: nobody dies of a slow benchmark step
# The small cluster (the size of bench/run.sh's directory).
SMALL=scale-small SMALL_NET=10.2 SMALL_SILOS=10 SMALL_GRAINS=20000

say() { echo "[$(date +%T)] $*" >&2; }
fail() { echo "bench/scale.sh: $*" >&2; exit 1; }

command -v wrk >/dev/null || fail "wrk is missing: apt-get install wrk"
command -v psql >/dev/null || fail "psql is missing: apt-get install postgresql-client"
[ -x "$ORACLE_BIN" ] || fail "$ORACLE_BIN is missing: run cargo build --release first"
psql "$SERVER/postgres" -qAtc 'SELECT 1' >/dev/null || fail "no Postgres at $SERVER"
# Nothing may answer on the port already, or we would measure that instead.
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then fail "port $PORT is in use (PORT=…)"; fi
[ "$LARGE_GRAINS" -ge $((LEAVE_GRAINS + DEAD_GRAINS + LARGE_SILOS)) ] || fail "LARGE_GRAINS is too small"

WORK=$(mktemp -d /tmp/placement-oracle-scale.XXXXXX)   # logs, heartbeat loop files
DB="$SERVER/$DATABASE"
sql() { psql "$DB" -qAt -v ON_ERROR_STOP=1 "$@"; }
# Wall-clock seconds of a command (its output goes to stderr so the number stays alone on stdout).
timed() { local start; start=$(date +%s.%N); "$@" >&2; awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}'; }

psql "$SERVER/postgres" -qc "DROP DATABASE IF EXISTS $DATABASE WITH (FORCE)" -c "CREATE DATABASE $DATABASE"

# The oracle applies the migrations at start. A one-hour TTL so that no silo dies while the
# directory is filled; ORACLE_MAX_SILOS_PER_CLUSTER well above the 1,000 silos of the large cluster.
say "starting the oracle on 127.0.0.1:$PORT (log: $WORK/oracle.log)"
DATABASE_URL="$DB" ORACLE_LISTEN="127.0.0.1:$PORT" ORACLE_SILO_TTL_MS=$LONG_TTL_MS \
  ORACLE_MAX_SILOS_PER_CLUSTER=5000 RUST_LOG=${RUST_LOG:-info} \
  "$ORACLE_BIN" serve >"$WORK/oracle.log" 2>&1 &
ORACLE=$!
HEARTBEATS=
DONE=
cleanup() {
  # Stop what this script started, by pid: the heartbeat loop (also told by its stop file, and it
  # stops by itself after its time limit anyway), then the oracle.
  touch "$WORK/stop"
  if [ -n "$HEARTBEATS" ]; then kill "$HEARTBEATS" 2>/dev/null; wait "$HEARTBEATS" 2>/dev/null || true; fi
  kill "$ORACLE" 2>/dev/null; wait "$ORACLE" 2>/dev/null || true
  if [ -n "$DONE" ] && [ "${KEEP_DATABASE:-0}" != 1 ]; then
    psql "$SERVER/postgres" -qc "DROP DATABASE IF EXISTS $DATABASE WITH (FORCE)" || true
  elif [ -z "$DONE" ]; then
    echo "bench/scale.sh stopped early; database $DATABASE and logs in $WORK are kept" >&2
  fi
}
trap cleanup EXIT
BASE="http://127.0.0.1:$PORT"
for _ in $(seq 150); do curl -fs "$BASE/readyz" >/dev/null && break; sleep 0.2; done
curl -fs "$BASE/readyz" >/dev/null || fail "the oracle did not become ready; see $WORK/oracle.log"

# wrk's latency lines look like "     50%    1.23ms"; turn a duration into milliseconds.
to_ms() { awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); print v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v); print v} else if (v ~ /s$/) {sub(/s$/,"",v); print v*1000} else print v}'; }

# One wrk scenario: warm-up, then the measured run. Prints "name rps p50 p99 non2xx socket_errors".
# The scripts read SCALE_CLUSTER, SCALE_GRAINS, SCALE_RUN, SCALE_PATH from the environment.
wrk_run() { # name lua-script
  say "wrk: $1"
  # A fresh run id per wrk invocation, so the measured "new" grains are never ones the warm-up placed.
  SCALE_RUN="$$-$1-warmup" wrk -t"$THREADS" -c"$CONNECTIONS" -d"${WARMUP}s" --timeout "$WRK_TIMEOUT" \
    -s "bench/scale/$2.lua" "$BASE" >/dev/null
  local out rps p50 p99 non2xx socket
  out=$(SCALE_RUN="$$-$1-measured" wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --timeout "$WRK_TIMEOUT" \
    --latency -s "bench/scale/$2.lua" "$BASE")
  echo "$out" >"$WORK/wrk-$1.txt"
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out" | to_ms)
  p99=$(awk '$1=="99%" {print $2}' <<<"$out" | to_ms)
  non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out"); non2xx=${non2xx:-0}
  # "Socket errors: connect 0, read 0, write 0, timeout 3"
  socket=$(awk '/Socket errors/ {s = 0; for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+,?$/) s += $i; print s}' <<<"$out")
  socket=${socket:-0}
  echo "$1 $rps $p50 $p99 $non2xx $socket"
}
# New-grain runs add ~100,000 "fresh/…" activations; delete them so each directory stays at its
# nominal size (and the special silos keep exactly 10,000 and 100,000 grains for scenarios 4 and 5).
drop_fresh() { sql -c "DELETE FROM activations WHERE cluster = '$1' AND grain LIKE 'fresh/%'"; }
# Like bench/run.sh: each scenario after a VACUUM (ANALYZE), so no churn of the previous one is in it,
# and a CHECKPOINT, so that the dirty pages of the fill (gigabytes) are not written out during it.
vacuum() { sql -c 'VACUUM (ANALYZE)' -c 'CHECKPOINT'; }
known() { SCALE_CLUSTER=$1 SCALE_GRAINS=$2 wrk_run "$3" known; }
new() { SCALE_CLUSTER=$1 wrk_run "$2" new; drop_fresh "$1"; }

# --- membership, over HTTP ---------------------------------------------------------------------
$HELPER join --base "$BASE" --cluster $SMALL --net $SMALL_NET --silos $SMALL_SILOS \
  --activation-count $((SMALL_GRAINS / SMALL_SILOS))
$HELPER join --base "$BASE" --cluster $LARGE --net $LARGE_NET --silos $LARGE_SILOS \
  --activation-count $((LARGE_GRAINS / LARGE_SILOS))

# --- the small directory on the fresh database, before any statistics ----------------------------
# A freshly created database has no planner statistics until someone runs ANALYZE (or autovacuum
# does): the plans the oracle's statements get then are what a new deployment lives with.
say "filling $SMALL: $SMALL_GRAINS grains"
$HELPER fill-sql --cluster $SMALL --net $SMALL_NET --silos $SMALL_SILOS --grains $SMALL_GRAINS | sql >&2
$HELPER probe --base "$BASE" --cluster $SMALL --grain user/g1 --expect existing
stats_before=$(sql -c "SELECT count(*) FROM pg_stats WHERE tablename = 'activations'")
results=$(
  known $SMALL $SMALL_GRAINS small-known-nostats
  new $SMALL small-new-nostats
)
# Autovacuum may have analyzed the table while those ran; say so in the report if it did.
stats_after=$(sql -c "SELECT count(*) FROM pg_stats WHERE tablename = 'activations'")

# --- the large directory -----------------------------------------------------------------------
say "filling $LARGE: $LARGE_GRAINS grains (direct SQL, in chunks of 1,000,000)"
fill_s=$(timed bash -c "set -o pipefail; $HELPER fill-sql --cluster $LARGE --net $LARGE_NET --silos $LARGE_SILOS \
  --grains $LARGE_GRAINS --special $LEAVE_SILO:$LEAVE_GRAINS --special $DEAD_SILO:$DEAD_GRAINS \
  | psql '$DB' -qAt -v ON_ERROR_STOP=1")
say "filled in ${fill_s} s; VACUUM ANALYZE"
vacuum_s=$(timed sql -c 'VACUUM ANALYZE')
leave_id=$($HELPER silo-id --net $LARGE_NET --index $LEAVE_SILO)
dead_id=$($HELPER silo-id --net $LARGE_NET --index $DEAD_SILO)
count_on() { sql -c "SELECT count(*) FROM activations WHERE cluster = '$LARGE' AND silo = '$1'"; }
check_special_silos() {
  [ "$(count_on "$leave_id")" = "$LEAVE_GRAINS" ] || fail "$leave_id does not hold $LEAVE_GRAINS grains"
  [ "$(count_on "$dead_id")" = "$DEAD_GRAINS" ] || fail "$dead_id does not hold $DEAD_GRAINS grains"
}
check_special_silos
$HELPER probe --base "$BASE" --cluster $LARGE --grain "user/g$((LARGE_GRAINS - 1))" --expect existing
table_size=$(sql -c "SELECT pg_size_pretty(pg_total_relation_size('activations'))")

# --- placements, both directories, with statistics ---------------------------------------------
results+=$'\n'$(
  vacuum; known $SMALL $SMALL_GRAINS small-known
  vacuum; new $SMALL small-new
  vacuum; known $LARGE "$LARGE_GRAINS" large-known
  vacuum; new $LARGE large-new
)

# --- a listing page deep in the silo list ------------------------------------------------------
deep_cursor=$($HELPER silo-id --net $LARGE_NET --index $DEEP_SILO --quoted)
deep_path="/v1/clusters/$LARGE/silos?limit=$PAGE_LIMIT&cursor=$deep_cursor"
# One look first: if the listing is not paged (yet), the figure would measure something else.
page_check=$($HELPER check-page --base "$BASE" --cluster $LARGE --net $LARGE_NET --path "$deep_path" \
  --expect-first $((DEEP_SILO + 1)) --limit $PAGE_LIMIT)
say "deep page: $page_check"
results+=$'\n'$(vacuum; SCALE_PATH="$deep_path" wrk_run large-silos-page get)

# --- 4. a silo that stops heartbeating, with 10,000 grains ---------------------------------------
# The TTL goes down to 3 s for this, so every other silo must now heartbeat: a background loop
# beats all of them but the dying one every second (16 connections). It is bounded — it stops when
# told (stop file), or after 5 minutes whatever happens. The dying silo gets one last heartbeat and
# only then is the TTL lowered, so its deadline is exactly that heartbeat + 3 s (the oracle judges
# by the database's clock, which is this machine's clock).
check_special_silos   # the new-grain runs' grains are gone again
vacuum
say "scenario 4: $dead_id stops heartbeating"
$HELPER heartbeats --base "$BASE" --cluster $LARGE --net $LARGE_NET --silos $LARGE_SILOS \
  --skip $DEAD_SILO --activation-count $((LARGE_GRAINS / LARGE_SILOS)) --period 1 --threads 16 --max-seconds 300 \
  --stop-file "$WORK/stop" --ready-file "$WORK/ready" --summary-file "$WORK/heartbeats.json" &
HEARTBEATS=$!
for _ in $(seq 600); do [ -e "$WORK/ready" ] && break; sleep 0.1; done
[ -e "$WORK/ready" ] || fail "the heartbeat loop did not complete a round in 60 s"
dead_s=$($HELPER dead --base "$BASE" --cluster $LARGE --net $LARGE_NET --index $DEAD_SILO \
  --ttl-ms $DEAD_TTL_MS --activation-count $((LARGE_GRAINS / LARGE_SILOS)) --timeout 120)
# Back to the long TTL before the loop stops, so nobody else dies.
$HELPER set-ttl --base "$BASE" --cluster $LARGE --ttl-ms $LONG_TTL_MS
touch "$WORK/stop"; wait "$HEARTBEATS" || true; HEARTBEATS=
heartbeat_summary=$(cat "$WORK/heartbeats.json")
# Exactly one silo should have died: the one that stopped. More means the loop fell behind.
dead_silos=$(sql -c "SELECT count(*) FROM silos WHERE cluster = '$LARGE' AND status = 'dead'")

# --- 5. graceful leave of the silo with 100,000 grains -----------------------------------------
vacuum
say "scenario 5: $leave_id leaves"
leave_out=$($HELPER leave --base "$BASE" --cluster $LARGE --net $LARGE_NET --index $LEAVE_SILO --timeout 300)
read -r leave_response_s leave_empty_s leave_status <<<"$leave_out"

# --- report ------------------------------------------------------------------------------------
figure() { awk -v name="$1" -v col="$2" '$1==name {print $col}' <<<"$results"; }
ratio() { awk -v a="$(figure "$1" "$3")" -v b="$(figure "$2" "$3")" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }
verdict() { awk -v r="$1" 'BEGIN {print (r == "n/a" ? "n/a" : (r + 0 <= 1.5 ? "yes" : "no"))}'; }
label() {
  case $1 in
    small-known-nostats) echo "known grain, small directory, fresh database (no statistics)" ;;
    small-new-nostats) echo "new grain, small directory, fresh database (no statistics)" ;;
    small-known) echo "known grain, small directory" ;;
    small-new) echo "new grain, small directory" ;;
    large-known) echo "known grain, large directory" ;;
    large-new) echo "new grain, large directory" ;;
    large-silos-page) echo "silo listing page after silo #$DEEP_SILO (limit $PAGE_LIMIT), large cluster" ;;
  esac
}
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain -- src migrations Cargo.toml Cargo.lock 2>/dev/null)" ] && commit+=" with uncommitted changes"
mkdir -p bench/results
report="bench/results/scale-$(date -u +%Y%m%dT%H%M%SZ).md"
{
  echo "placement-oracle scale benchmark — $(date -u +%F), $(nproc) cores, ${CONNECTIONS} connections, ${THREADS} wrk threads, ${WARMUP} s warm-up + ${DURATION} s per scenario, Postgres store"
  echo
  echo "Source tree at commit $commit; $ORACLE_BIN built $(date -u -r "$ORACLE_BIN" '+%F %T UTC')."
  echo
  echo "Large directory: $LARGE_GRAINS activations over $LARGE_SILOS silos (activations table with indexes: $table_size)."
  echo "Small directory: $SMALL_GRAINS activations over $SMALL_SILOS silos, same database and oracle."
  echo
  echo "| scenario | requests/s | p50 ms | p99 ms | non-2xx | socket errors |"
  echo "|---|---:|---:|---:|---:|---:|"
  while read -r name rps p50 p99 non2xx socket; do
    awk -v l="$(label "$name")" -v r="$rps" -v a="$p50" -v b="$p99" -v n="$non2xx" -v s="$socket" \
      'BEGIN {printf "| %s | %.0f | %.2f | %.2f | %s | %s |\n", l, r, a, b, n, s}'
  done <<<"$results"
  echo
  echo "| large ÷ small (with statistics) | p50 | p99 | within 1.5× |"
  echo "|---|---:|---:|---|"
  for kind in known new; do
    r50=$(ratio large-$kind small-$kind 3); r99=$(ratio large-$kind small-$kind 4)
    echo "| $kind grain | ${r50}× | ${r99}× | p50 $(verdict "$r50"), p99 $(verdict "$r99") |"
  done
  echo
  echo "| release | seconds |"
  echo "|---|---:|"
  echo "| dead silo with $DEAD_GRAINS grains: death deadline (last heartbeat + ${DEAD_TTL_MS} ms) → activation listing empty | $dead_s |"
  echo "| graceful leave of a silo with $LEAVE_GRAINS grains: DELETE response (HTTP $leave_status) | $leave_response_s |"
  echo "| graceful leave: DELETE sent → activation listing empty | $leave_empty_s |"
  echo
  echo "Checks and setup:"
  echo "- planner statistics rows for \`activations\` before / after the no-statistics runs: $stats_before / $stats_after (0 / 0 = none existed)"
  echo "- filling the large directory by SQL: ${fill_s} s; the VACUUM ANALYZE after it: ${vacuum_s} s"
  echo "- deep listing page: $page_check"
  echo "- dead silos in $LARGE after scenario 4: $dead_silos (1 expected: only the silent one)"
  echo "- heartbeat loop during scenario 4 (999 silos, every second): $heartbeat_summary"
  echo "- release times are polled every 20 ms; logs and wrk outputs: $WORK"
} | tee "$report"
echo
echo "written to $report"
DONE=1
