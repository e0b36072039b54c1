#!/usr/bin/env bash
# Installs and starts what the test suite needs on Debian 12 or Ubuntu (as root, or with sudo):
#   - Postgres 15 (the server the tests share on 127.0.0.1:5432, user `postgres` trusted on loopback
#     only, and the server binaries initdb/pg_ctl for the tests that run servers of their own),
#   - PgBouncer, Prometheus' promtool, Chromium (the live page's check), wrk,
#   - Patroni 3.0.2 with its etcd v2 client, etcd and HAProxy (the high-availability harness),
#   - nftables, iproute2 and util-linux's unshare (the loopback guard and the network namespaces
#     some tests run in).
# Rust, Python 3, Node.js 20 and npm are not installed here: bring them as you do (rustup, …).
# Safe to run again: it installs what is missing and starts Postgres when it is down.
#
#   sudo scripts/prerequisites.sh
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
  exec sudo -- "$0" "$@"
fi

PACKAGES=(
  postgresql-15 postgresql-client-15
  pgbouncer
  chromium fonts-dejavu-core
  wrk
  patroni python3-etcd etcd-server etcd-client haproxy
  nftables iproute2 util-linux procps curl
)
missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2> /dev/null | grep -q "ok installed" || missing+=("$package")
done
# promtool comes with Prometheus (without its recommended exporters).
command -v promtool > /dev/null || missing+=(prometheus)
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# A package's service may start under systemd; the harness starts its own etcd, HAProxy, Patroni
# and PgBouncer, so the distribution's must not hold their ports.
for service in etcd haproxy patroni pgbouncer prometheus; do
  if command -v systemctl > /dev/null && systemctl is-active --quiet "$service" 2> /dev/null; then
    systemctl disable --now "$service" > /dev/null 2>&1 || true
  fi
done

# The shared test server: cluster 15/main, user `postgres` trusted on loopback. The lines go first
# in pg_hba.conf (the first match wins) and are marked, so a second run leaves them as they are.
CLUSTER=/etc/postgresql/15/main
if [[ ! -d $CLUSTER ]]; then
  pg_createcluster 15 main
fi
HBA=$CLUSTER/pg_hba.conf
MARK="# placement-oracle tests: user postgres trusted on loopback"
if ! grep -qF "$MARK" "$HBA"; then
  {
    echo "$MARK"
    echo "host    all    postgres    127.0.0.1/32    trust"
    echo "host    all    postgres    ::1/128         trust"
    cat "$HBA"
  } > "$HBA.new"
  chown --reference="$HBA" "$HBA.new"
  chmod --reference="$HBA" "$HBA.new"
  mv "$HBA.new" "$HBA"
  pg_ctlcluster 15 main reload 2> /dev/null || true
fi
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "starting Postgres 15 (cluster main) on 127.0.0.1:5432"
  pg_ctlcluster --skip-systemctl-redirect 15 main start
  for _ in $(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi
pg_isready -h 127.0.0.1 -p 5432
psql -h 127.0.0.1 -U postgres -qAtc "SELECT 'Postgres ' || current_setting('server_version') || ' answers as user postgres'"
