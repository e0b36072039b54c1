#!/usr/bin/env bash
# The loopback guard: runs a command so that every packet its processes (and their children, to
# any depth) send to an address other than loopback — 127.0.0.0/8, ::1 — or the test networks'
# 198.18.0.0/15 (the benchmarking range, where tests put the network namespaces they make) is
# counted, and fails the run when there was any, naming each address and port.
#
#   scripts/loopback-guard.sh COMMAND [ARG…]        # the command's status, or 3 for a leak
#   scripts/loopback-guard.sh --check-leaks          # proves the guard: a connect to the machine's
#                                                    # first non-loopback address must be caught
#
# How: the command runs in a cgroup of its own (the net_cls controller, which tags its sockets
# with a class id), and an nftables table counts that class's packets on the output hook, adding
# each destination to a set. Packets sent inside a network namespace a test made never reach this
# table (each namespace has its own), which is what such a namespace is for. Steps that must reach
# a package registry (npm, pip, Maven, Go) run through scripts/unguarded.sh, which leaves the
# cgroup first.
#
# Needs root, or sudo for the few steps that set the guard up (nft and the cgroup).
set -euo pipefail

TABLE=po_loopback_guard
CLASSID=0x00107701
NET_CLS=/sys/fs/cgroup/net_cls
GUARDED=$NET_CLS/po-loopback-guarded
UNGUARDED=$NET_CLS/po-loopback-unguarded

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo -- "$@"; fi
}

arm() {
  for tool in nft; do
    command -v "$tool" > /dev/null || PATH=$PATH:/usr/sbin:/sbin
    command -v "$tool" > /dev/null || {
      echo "loopback guard: $tool is missing (scripts/prerequisites.sh installs it)" >&2
      exit 2
    }
  done
  if [[ ! -f $NET_CLS/cgroup.procs ]]; then
    as_root mkdir -p "$NET_CLS"
    as_root mount -t cgroup -o net_cls net_cls "$NET_CLS"
  fi
  for group in "$GUARDED" "$UNGUARDED"; do
    as_root mkdir -p "$group"
    as_root chown "$(id -u)" "$group/cgroup.procs" "$group/tasks"
  done
  echo "$CLASSID" | as_root tee "$GUARDED/net_cls.classid" > /dev/null
  as_root nft delete table inet "$TABLE" 2> /dev/null || true
  as_root nft -f - << EOF
table inet $TABLE {
  set seen4 { type ipv4_addr . inet_service; flags dynamic; size 4096; }
  set seen6 { type ipv6_addr . inet_service; flags dynamic; size 4096; }
  chain output {
    type filter hook output priority 0; policy accept;
    meta cgroup != $CLASSID return
    ip daddr { 127.0.0.0/8, 198.18.0.0/15 } return
    ip6 daddr ::1 return
    meta l4proto { tcp, udp } meta nfproto ipv4 add @seen4 { ip daddr . th dport }
    meta l4proto { tcp, udp } meta nfproto ipv6 add @seen6 { ip6 daddr . th dport }
    counter name leaks
  }
  counter leaks {}
}
EOF
}

# The packets counted, and where they went (address . port).
leaks() {
  as_root nft list counter inet "$TABLE" leaks | sed -n 's/.*packets \([0-9]*\).*/\1/p'
}

destinations() {
  for set in seen4 seen6; do
    as_root nft list set inet "$TABLE" "$set" | tr -d '\n\t' | sed -n 's/.*elements = { \(.*\) }.*/\1/p' |
      tr ',' '\n' | sed 's/^ *//; $a\'
  done
}

disarm() {
  as_root nft delete table inet "$TABLE" 2> /dev/null || true
}

report() { # status of the command
  local status=$1 packets
  packets=$(leaks)
  if [[ ${packets:-0} -gt 0 ]]; then
    echo >&2
    echo "loopback guard: the tests sent $packets packet(s) to addresses other than loopback and their own namespaces:" >&2
    destinations | sed 's/^/  /' >&2
    echo "Tests may reach only 127.0.0.0/8, ::1 and network namespaces they make (198.18.0.0/15)." >&2
    disarm
    return 3
  fi
  echo "loopback guard: no packet left loopback"
  disarm
  return "$status"
}

if [[ ${1:-} == --check-leaks ]]; then
  # A connect to the machine's first non-loopback address (as rio-rs names its servers) must be
  # caught; one to loopback must not.
  address=$(ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -n 1)
  if [[ -z $address ]]; then
    echo "loopback guard: this machine has no non-loopback IPv4 address: nothing can leave loopback"
    exit 0
  fi
  arm
  trap disarm EXIT
  (
    echo "$BASHPID" > "$GUARDED/cgroup.procs"
    python3 -c 'import socket, sys
for host in ("127.0.0.1", sys.argv[1]):
    s = socket.socket(); s.settimeout(1); s.connect_ex((host, 9)); s.close()' "$address"
  )
  packets=$(leaks)
  destinations | grep -q "^$address \. 9$" || {
    echo "loopback guard: a connect to $address:9 was not caught (packets $packets)" >&2
    exit 1
  }
  trap - EXIT
  disarm
  echo "loopback guard: a connect to $address:9 was caught, loopback was not"
  exit 0
fi

[[ $# -gt 0 ]] || { echo "usage: $0 COMMAND [ARG…] | --check-leaks" >&2; exit 2; }
arm
trap disarm INT TERM
status=0
(
  echo "$BASHPID" > "$GUARDED/cgroup.procs"
  exec "$@"
) || status=$?
report "$status"
