#!/usr/bin/env bash
# One command for a simulated cluster: installs the Python SDK from sdk/python into a venv of its own, then runs
# examples/simulator/simulate.py (built on the SDK) with the arguments given.
#
#   examples/simulator/run.sh                      # 10 silos against http://127.0.0.1:8080 (`cargo run --release`)
#   examples/simulator/run.sh --help               # every option
#   ORACLE_ADMIN_TOKEN=… examples/simulator/run.sh --url http://127.0.0.1:8081 --url http://127.0.0.1:8082
#
# Everything it makes is under examples/simulator/build/ (git-ignored): a venv with the pinned packages of
# examples/simulator/requirements.txt and the SDK, installed again whenever a file of sdk/python changes (the
# install builds in sdk/python/build/, git-ignored too). Needs python3 (3.10+) and PyPI (or its cache) the first
# time; after that, no network.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$ROOT/examples/simulator/build
VENV=$BUILD/venv
SDK=$ROOT/sdk/python
REQUIREMENTS=$ROOT/examples/simulator/requirements.txt

if [[ ! -x $VENV/bin/python ]]; then
  python3 -m venv "$VENV"
fi
if [[ ! -f $BUILD/sdk-requirements.stamp || $REQUIREMENTS -nt $BUILD/sdk-requirements.stamp ]]; then
  # The one step that reaches a registry (run outside the test suite's loopback guard).
  "$ROOT/scripts/unguarded.sh" "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQUIREMENTS"
  touch "$BUILD/sdk-requirements.stamp"
fi
if [[ ! -f $BUILD/sdk.stamp || -n $(find "$SDK/pyproject.toml" "$SDK/placement_oracle_sdk" -newer "$BUILD/sdk.stamp" -print -quit) ]]; then
  echo "installing the Python SDK from sdk/python" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation --no-deps --force-reinstall "$SDK"
  touch "$BUILD/sdk.stamp"
fi
exec "$VENV/bin/python" "$ROOT/examples/simulator/simulate.py" "$@"
