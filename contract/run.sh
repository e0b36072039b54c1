#!/usr/bin/env bash
# The contract suite: what clients in other languages rely on, checked against a running oracle on
# Postgres.
#   1. Redocly's recommended rules over openapi/openapi.json (redocly.yaml says the one exception).
#   2. contract/clients.sh: Python and TypeScript clients generated from the unmodified spec,
#      type-checked strictly, each walking through the README's calls.
#   3. Schemathesis, every check, fixed seed (contract/schemathesis.toml says each adjustment); then
#      again, briefly, against an open-mode oracle, whose served spec makes credentials optional.
#   4. contract/tools.sh: the silo simulator (on the embedded default, then on two replicas), and the
#      live page checked in headless Chromium while it runs.
#   5. The Python SDK (sdk/python): installed, type-checked strictly, its unit tests, and its
#      integration test (SDK silos against an oracle process of its own on database oracle_sdk).
#   6. The TypeScript SDK (sdk/typescript): npm ci, tsc strict, its unit tests, and its integration
#      test (SDK silos against an oracle process of its own on database oracle_sdk_ts).
#   7. The Rust SDK (sdk/rust, a workspace member): its unit tests, its rules against a scripted
#      replica, and its integration test (on database oracle_sdk_rust). Its lints are in .ci/run's
#      clippy; the runtime harness (cargo test --test runtime) runs its hosts on it too.
#   8. rio-rs on the oracle (integrations/rio-rs, a workspace member): its unit tests, its gate
#      against a scripted replica, and the side-by-side test (rio-rs's own Postgres placement and
#      membership, then the oracle's, through a server killed, a server cut off from its
#      membership store, a drain and Postgres stopped, on Postgres servers of its own); then the
#      example's demo against the oracle above.
# Needs Postgres on 127.0.0.1:5432 (trust auth; DATABASE_ADMIN_URL to use another), python3, node,
# npm and Chromium; tools install at their pinned versions under contract/build/ (and
# examples/simulator/build/). Usage: contract/run.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
ADMIN_URL=${DATABASE_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres}
DATABASE=oracle_contract
PORT=${ORACLE_CONTRACT_PORT:-18090}
BASE_URL="http://127.0.0.1:$PORT"
MAX_EXAMPLES=${SCHEMATHESIS_MAX_EXAMPLES:-150}
OPEN_PORT=${ORACLE_CONTRACT_OPEN_PORT:-$((PORT + 3))}   # tools.sh takes PORT+1 and PORT+2
OPEN_EXAMPLES=${SCHEMATHESIS_OPEN_EXAMPLES:-30}

step() { printf '\n==> %s\n' "$*"; }

step "The oracle on a fresh Postgres database ($DATABASE), at $BASE_URL"
if curl -fs "$BASE_URL/healthz" > /dev/null 2>&1; then
  echo "something already answers at $BASE_URL; stop it or set ORACLE_CONTRACT_PORT" >&2; exit 1
fi
cargo build --locked --quiet
BINARY="${CARGO_TARGET_DIR:-target}/debug/placement-oracle"
psql "$ADMIN_URL" -v ON_ERROR_STOP=1 -qc "DROP DATABASE IF EXISTS $DATABASE WITH (FORCE)" -c "CREATE DATABASE $DATABASE"
mkdir -p contract/build
# With credentials, as in production: the clients issue themselves a key with the admin token, and
# schemathesis sends the admin token (its ignored_auth check then proves a request without one is
# refused).
ORACLE_ADMIN_TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
export ORACLE_ADMIN_TOKEN
DATABASE_URL="${ADMIN_URL%/*}/$DATABASE" ORACLE_LISTEN="127.0.0.1:$PORT" \
  "$BINARY" > contract/build/oracle.log 2>&1 &
ORACLE=$!
trap 'kill $ORACLE 2>/dev/null || true' EXIT
for attempt in $(seq 100); do
  if curl -fs "$BASE_URL/readyz" > /dev/null; then break; fi
  if ! kill -0 $ORACLE 2>/dev/null || [[ $attempt -eq 100 ]]; then
    echo "the oracle did not become ready; its log:" >&2; cat contract/build/oracle.log >&2; exit 1
  fi
  sleep 0.2
done
kill -0 $ORACLE  # the oracle that answered is the one started here
# The served document is the committed one (cargo test checks the code against the file too).
curl -fs "$BASE_URL/openapi.json" | python3 -c 'import json,sys; assert json.load(sys.stdin) == json.load(open("openapi/openapi.json")), "served spec differs from openapi/openapi.json"'

step "Clients generated from the spec"
bash contract/clients.sh "$BASE_URL"   # also installs the pinned Python and npm tools

step "Redocly lint (recommended rules)"
# Redocly reports usage to redocly.com and looks for a newer version unless told not to (the
# loopback guard caught its DNS lookups).
(cd contract/typescript && REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
  npx --no-install redocly lint --config ../../redocly.yaml ../../openapi/openapi.json)

step "Schemathesis: every check, seed in contract/schemathesis.toml, $MAX_EXAMPLES examples per operation"
# use_after_free is the one check left out, for the whole run: schemathesis cannot narrow a stateful
# check to one operation, and it flags a design choice — a silo that left or died stays readable
# as `status: dead` (documented on DELETE and GET …/silos/{silo}). The Rust suite covers reads after
# deletes instead.
contract/build/venv/bin/st --config-file contract/schemathesis.toml run "$BASE_URL/openapi.json" \
  --url "$BASE_URL" --checks all --exclude-checks use_after_free \
  --header "Authorization: Bearer $ORACLE_ADMIN_TOKEN" \
  --max-examples "$MAX_EXAMPLES" --no-color

step "Schemathesis against an open-mode oracle (no admin token, embedded store): every check, $OPEN_EXAMPLES examples"
# The spec such an oracle serves says no credential is needed, so checks about authentication
# (ignored_auth, missing_required_header) hold it to that.
if curl -fs "http://127.0.0.1:$OPEN_PORT/healthz" > /dev/null 2>&1; then
  echo "something already answers at port $OPEN_PORT; stop it or set ORACLE_CONTRACT_OPEN_PORT" >&2; exit 1
fi
env -u ORACLE_ADMIN_TOKEN ORACLE_LISTEN="127.0.0.1:$OPEN_PORT" "$BINARY" > contract/build/oracle-open.log 2>&1 &
OPEN_ORACLE=$!
trap 'kill $ORACLE $OPEN_ORACLE 2>/dev/null || true' EXIT
for attempt in $(seq 100); do
  if curl -fs "http://127.0.0.1:$OPEN_PORT/readyz" > /dev/null; then break; fi
  if ! kill -0 $OPEN_ORACLE 2>/dev/null || [[ $attempt -eq 100 ]]; then
    echo "the open-mode oracle did not become ready; its log:" >&2; cat contract/build/oracle-open.log >&2; exit 1
  fi
  sleep 0.2
done
contract/build/venv/bin/st --config-file contract/schemathesis.toml run "http://127.0.0.1:$OPEN_PORT/openapi.json" \
  --url "http://127.0.0.1:$OPEN_PORT" --checks all --exclude-checks use_after_free \
  --max-examples "$OPEN_EXAMPLES" --no-color
kill $OPEN_ORACLE

step "Users' tools: the simulator (embedded, and two replicas) and the live page in headless Chromium"
ORACLE_BINARY="$BINARY" ORACLE_DATABASE_URL="${ADMIN_URL%/*}/$DATABASE" bash contract/tools.sh "$BASE_URL"

step "The Python SDK (sdk/python): installed from its folder, mypy --strict, unit tests, and SDK silos against an oracle of their own on Postgres (oracle_sdk), stopped and started"
# pip builds the package in an isolated environment, fetching its build backend from PyPI: a
# registry step (outside the loopback guard).
scripts/unguarded.sh contract/build/venv/bin/pip install --quiet --disable-pip-version-check --no-deps ./sdk/python
contract/build/venv/bin/mypy --strict --cache-dir contract/build/mypy-cache sdk/python/placement_oracle_sdk sdk/python/tests
psql "$ADMIN_URL" -v ON_ERROR_STOP=1 -qc "DROP DATABASE IF EXISTS oracle_sdk WITH (FORCE)" -c "CREATE DATABASE oracle_sdk"
ORACLE_BINARY="$(realpath "$BINARY")" ORACLE_SDK_DATABASE_URL="${ADMIN_URL%/*}/oracle_sdk" \
  contract/build/venv/bin/python -m unittest discover -s sdk/python/tests -v

step "The TypeScript SDK (sdk/typescript): npm ci, tsc strict, unit tests, and SDK silos against an oracle of their own on Postgres (oracle_sdk_ts), stopped and started"
scripts/unguarded.sh npm --prefix sdk/typescript ci --no-audit --no-fund --loglevel=error
npm --prefix sdk/typescript run --silent build
# dist/src is committed (npm does not build a folder it links): it must be what the build makes.
if ! git diff --quiet -- sdk/typescript/dist/src || [[ -n $(git status --porcelain -- sdk/typescript/dist/src) ]]; then
  echo "sdk/typescript/dist/src differs from what npm run build makes: commit the build" >&2
  git status --short -- sdk/typescript/dist/src >&2
  exit 1
fi
npm --prefix sdk/typescript test
psql "$ADMIN_URL" -v ON_ERROR_STOP=1 -qc "DROP DATABASE IF EXISTS oracle_sdk_ts WITH (FORCE)" -c "CREATE DATABASE oracle_sdk_ts"
ORACLE_BINARY="$(realpath "$BINARY")" ORACLE_SDK_DATABASE_URL="${ADMIN_URL%/*}/oracle_sdk_ts" \
  npm --prefix sdk/typescript run test:integration

step "The Rust SDK (sdk/rust): unit tests, the rules against a scripted replica, and SDK silos against an oracle of their own on Postgres (oracle_sdk_rust), stopped and started"
psql "$ADMIN_URL" -v ON_ERROR_STOP=1 -qc "DROP DATABASE IF EXISTS oracle_sdk_rust WITH (FORCE)" -c "CREATE DATABASE oracle_sdk_rust"
ORACLE_BINARY="$(realpath "$BINARY")" ORACLE_SDK_DATABASE_URL="${ADMIN_URL%/*}/oracle_sdk_rust" \
  cargo test --locked -p placement-oracle-sdk -- --nocapture

step "rio-rs on the oracle (integrations/rio-rs): unit tests, the gate against a scripted replica, and rio-rs's own placement and membership side by side with the oracle's under four faults"
ORACLE_BINARY="$(realpath "$BINARY")" cargo test --locked -p placement-oracle-rio -- --nocapture --test-threads 1
# The example's one command (three servers and a client, a drain, every counter checked), against
# this suite's oracle.
cargo run --locked --quiet -p placement-oracle-rio --example counter -- demo --oracle "$BASE_URL" \
  --key "$ORACLE_ADMIN_TOKEN" --cluster rio-demo --state-url "${ADMIN_URL%/*}/$DATABASE"

step "Contract suite passed"
