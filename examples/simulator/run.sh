#!/usr/bin/env bash
# One command for a simulated cluster: generates the Python client from openapi/openapi.json (with the
# generator's defaults, unmodified), then runs examples/simulator/simulate.py with the arguments given.
#
#   examples/simulator/run.sh                      # 10 silos against http://127.0.0.1:8080 (`cargo run --release`)
#   examples/simulator/run.sh --help               # every option
#   ORACLE_ADMIN_TOKEN=… examples/simulator/run.sh --url http://127.0.0.1:8081 --url http://127.0.0.1:8082
#
# Everything it makes is under examples/simulator/build/ (git-ignored): a venv with the pinned packages of
# contract/python/client-requirements.txt, and the generated client, made again whenever the spec changes.
# Needs python3 (3.11+) and PyPI (or its cache) the first time.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$ROOT/examples/simulator/build
VENV=$BUILD/venv
SPEC=$ROOT/openapi/openapi.json
REQUIREMENTS=$ROOT/contract/python/client-requirements.txt

if [[ ! -x $VENV/bin/python ]]; then
  python3 -m venv "$VENV"
fi
if [[ ! -f $BUILD/requirements.stamp || $REQUIREMENTS -nt $BUILD/requirements.stamp ]]; then
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQUIREMENTS"
  touch "$BUILD/requirements.stamp"
fi
if [[ ! -f $BUILD/client.stamp || $SPEC -nt $BUILD/client.stamp ]]; then
  echo "generating the Python client from openapi/openapi.json" >&2
  "$VENV/bin/openapi-python-client" generate --path "$SPEC" --output-path "$BUILD/python-client" --overwrite \
    > "$BUILD/generate.log" 2>&1 || { cat "$BUILD/generate.log" >&2; exit 1; }
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation --no-deps -e "$BUILD/python-client"
  touch "$BUILD/client.stamp"
fi
exec "$VENV/bin/python" "$ROOT/examples/simulator/simulate.py" "$@"
