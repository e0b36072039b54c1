#!/usr/bin/env bash
# Proves that clients generated from the unmodified openapi/openapi.json work: generates a Python client
# (openapi-python-client) and TypeScript types (openapi-typescript, used through openapi-fetch) with the generators'
# default settings, type-checks each strictly together with a walk-through, then runs each walk-through against a
# running oracle.
#
# Usage: ORACLE_ADMIN_TOKEN=… bash contract/clients.sh BASE_URL   e.g. … http://127.0.0.1:8080
# The walk-throughs issue themselves a cluster key with the oracle's admin token and call with it.
# Works from any directory and is idempotent; everything it makes is under contract/build/ and
# contract/typescript/node_modules/ (both git-ignored). Needs python3 (3.11+), node 20+ and npm, and the
# PyPI and npm registries (or their caches) for the pinned tools.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BASE_URL" >&2
  exit 2
fi
BASE_URL=$1
if [[ -z ${ORACLE_ADMIN_TOKEN:-} ]]; then
  echo "set ORACLE_ADMIN_TOKEN to the admin token of the oracle at $BASE_URL" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SPEC=openapi/openapi.json
BUILD=contract/build
VENV=$BUILD/venv
STARTED=$SECONDS

step() { printf '\n==> %s\n' "$*"; }

step "Oracle at $BASE_URL"
for attempt in $(seq 50); do  # up to 10 s, for an oracle started just before
  if curl -fs "$BASE_URL/healthz"; then echo; break; fi
  if [[ $attempt -eq 50 ]]; then echo "no oracle answers at $BASE_URL/healthz" >&2; exit 1; fi
  sleep 0.2
done

# ---------------------------------------------------------------- Python
step "Python: venv $VENV with contract/python/requirements.txt"
if [[ ! -x $VENV/bin/python ]]; then
  python3 -m venv "$VENV"
fi
# Registries are reached outside the loopback guard (scripts/loopback-guard.sh), and only here.
scripts/unguarded.sh "$VENV/bin/pip" install --quiet --disable-pip-version-check -r contract/python/requirements.txt

step "Python: generate the client from $SPEC (openapi-python-client defaults)"
"$VENV/bin/openapi-python-client" generate --path "$SPEC" --output-path "$BUILD/python-client" --overwrite
# An editable install: the venv finds the package wherever the next generation rewrites it.
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation --no-deps -e "$BUILD/python-client"

step "Python: mypy --strict over the generated package and the walk-through"
"$VENV/bin/mypy" --strict --cache-dir "$BUILD/mypy-cache" \
  "$BUILD/python-client/placement_oracle_client" contract/python/walkthrough.py

step "Python: walk-through"
"$VENV/bin/python" contract/python/walkthrough.py "$BASE_URL"

# ---------------------------------------------------------------- TypeScript
step "TypeScript: npm ci (contract/typescript/package-lock.json)"
(cd contract/typescript && ../../scripts/unguarded.sh npm ci --no-audit --no-fund --loglevel=error)

step "TypeScript: generate types from $SPEC (openapi-typescript defaults)"
(cd contract/typescript && npx --no-install openapi-typescript ../../$SPEC -o build/oracle.d.ts)

step "TypeScript: tsc (strict) over the generated types and the walk-through, emitting build/*.js"
(cd contract/typescript && rm -rf build/js && npx --no-install tsc --project tsconfig.json --strict)

step "TypeScript: walk-through"
node contract/typescript/build/js/walkthrough.js "$BASE_URL"

step "Both walk-throughs passed in $((SECONDS - STARTED)) s"
