#!/usr/bin/env bash
# Summarises a system-wide `perf record -a -g` file: CPU samples by process, then the hottest
# symbols (self time) of the oracle's worker threads and of Postgres. bench/run.sh calls it for
# each scenario when PROFILE_DIR is set.
set -eu  # no pipefail: `head` closing the pipe early is not a failure
data=$1
tidy() { grep -E '^ +[0-9]' | sed -E 's/ +/ /g; s/ - - ?$//' | cut -c1-150 | head -"$1"; }
echo "## samples by process"
perf report -i "$data" --no-children --sort comm --stdio -g none 2>/dev/null | tidy 6
for comm in tokio-rt-worker postgres; do
  echo
  echo "## hottest symbols in $comm (share of all samples)"
  perf report -i "$data" --no-children --comms "$comm" --sort dso,symbol --stdio -g none 2>/dev/null | tidy 25
done
