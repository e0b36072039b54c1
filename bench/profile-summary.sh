#!/usr/bin/env bash
# Summarises a system-wide `perf record -a -g` file: CPU samples by process, then the hottest
# symbols of the oracle and of Postgres (self time). Used by bench/run.sh with PROFILE_DIR.
set -euo pipefail
data=$1
echo "## samples by process"
perf report -i "$data" --no-children --sort comm --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -8
for comm in tokio-rt-worker postgres; do
  echo
  echo "## hottest symbols in $comm"
  perf report -i "$data" --no-children --comms "$comm" --sort dso,symbol --stdio -g none 2>/dev/null \
    | grep -E '^ +[0-9]' | head -25
done
