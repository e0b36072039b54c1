#!/usr/bin/env python3
"""Helpers for bench/scale.sh: everything that is easier in Python than in shell.

Standard library only (no requests, no psycopg): HTTP with http.client / urllib, SQL is printed
for psql to run. Subcommands:

  silo-id       print the id of silo number I (the ids sort in the same order as the numbers)
  join          one heartbeat from every silo of a cluster, so that the silos exist
  fill-sql      print the INSERT statements that fill a cluster's directory (run by psql)
  probe         one placement of a grain; fails unless its outcome is the expected one
  check-page    one GET of a silo listing page; says whether it looks paged as expected
  heartbeats    background loop keeping a cluster's silos alive while its TTL is short
  set-ttl       GET the policy, PUT it back with another silo_ttl_ms (If-Match: its ETag)
  dead          measure how long after its death deadline a silent silo's entries are released
  leave         measure a graceful leave: DELETE response time, and time until entries are gone

Silo ids look like "10.1.X.Y:11111@1" with X = 100 + i // 100 and Y = 100 + i % 100: both octets
have three digits, so byte order (the "C" collation the store sorts by) equals numeric order, and
silo number i is exactly i silos deep in the listing.
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

MAX_SILOS = 15_600  # X = 100 + i // 100 stays a valid three-digit octet (<= 255)


def silo_id(net, i):
    return f"{net}.{100 + i // 100}.{100 + i % 100}:11111@1"


def silo_id_sql(net, i):
    """The same id as silo_id(), computed by Postgres from the integer column or expression i."""
    return f"format('{net}.%s.%s:11111@1', 100 + {i} / 100, 100 + {i} % 100)"


def quote(segment):
    # Silo ids contain ':' and '@'; percent-encode them in paths and queries to be safe.
    return urllib.parse.quote(segment, safe="")


def now_ms():
    return time.time() * 1000.0


def log(*args):
    print(*args, file=sys.stderr, flush=True)


class Api:
    """A small JSON client over one persistent HTTP/1.1 connection (one per thread)."""

    def __init__(self, base, timeout=30):
        url = urllib.parse.urlsplit(base)
        self.host, self.port = url.hostname, url.port or 80
        self.timeout = timeout
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        """Returns (status, headers, parsed JSON or text or None)."""
        headers = dict(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                response = self.conn.getresponse()
                raw = response.read()
                break
            except (http.client.HTTPException, ConnectionError, OSError):
                # A kept-alive connection the server closed: reconnect once.
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        text = raw.decode("utf-8", "replace")
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text
        return response.status, response.headers, parsed


def heartbeat_body(silo, activation_count):
    return {"silo": silo, "cpu_usage": 10, "activation_count": activation_count}


def cmd_silo_id(a):
    silo = silo_id(a.net, a.index)
    print(quote(silo) if a.quoted else silo)


# --- join ---------------------------------------------------------------------------------------


def cmd_join(a):
    ids = [silo_id(a.net, i) for i in range(a.silos)]
    assert ids == sorted(ids), "silo ids must sort like their numbers"
    local = threading.local()

    def beat(silo):
        if not hasattr(local, "api"):
            local.api = Api(a.base)
        status, _, body = local.api.request(
            "POST", f"/v1/clusters/{a.cluster}/heartbeats", heartbeat_body(silo, a.activation_count))
        if status != 200:
            raise SystemExit(f"heartbeat of {silo} answered {status}: {body}")

    with concurrent.futures.ThreadPoolExecutor(a.threads) as pool:
        list(pool.map(beat, ids))
    log(f"{a.cluster}: {len(ids)} silos joined ({ids[0]} … {ids[-1]})")


# --- fill-sql -----------------------------------------------------------------------------------


def cmd_fill_sql(a):
    """Prints SQL that inserts grains user/g0 … user/g{grains-1} into the cluster's directory.

    The first `special` silos get exact counts, in the order given (user/g0… go to the first one,
    the next range to the second, …); every other grain goes round robin to the remaining silos,
    so those hold grains // n or grains // n + 1 each. Chunks of `chunk` rows, one statement (and
    transaction) each, so psql shows progress and no single transaction holds 10 million rows.
    """
    specials = []
    for spec in a.special:
        index, count = (int(x) for x in spec.split(":"))
        specials.append((index, count))
    special_total = sum(count for _, count in specials)
    others = a.silos - len(specials)
    if a.silos > MAX_SILOS or others <= 0 or special_total > a.grains:
        raise SystemExit("fill-sql: impossible layout")

    # Silo number i of grain g: the special ranges first, else round robin over the others — slot
    # k0, shifted past each special number in ascending order (k1, k2, …) so none is reused.
    steps = [f"LATERAL (SELECT (g - {special_total}) % {others} AS k0) AS r0"]
    for n, index in enumerate(sorted(i for i, _ in specials), start=1):
        steps.append(f"LATERAL (SELECT k{n - 1} + (k{n - 1} >= {index})::int AS k{n}) AS r{n}")
    cases, start = [], 0
    for index, count in specials:
        start += count
        cases.append(f"WHEN g < {start} THEN {index} ")
    last = f"k{len(specials)}"
    steps.append(f"LATERAL (SELECT CASE {''.join(cases)}ELSE {last} END AS i) AS s" if cases
                 else f"LATERAL (SELECT {last} AS i) AS s")
    joins = ",\n     ".join(steps)

    print("\\set ON_ERROR_STOP on")
    print(f"-- generated by bench/scale/scale.py fill-sql for cluster {a.cluster}")
    for lo in range(0, a.grains, a.chunk):
        hi = min(lo + a.chunk, a.grains) - 1
        print(f"\\echo {a.cluster}: grains {lo} to {hi}")
        print(
            "INSERT INTO activations (cluster, grain, silo, strategy, epoch, created_ms)\n"
            f"SELECT '{a.cluster}', 'user/g' || g, {silo_id_sql(a.net, 'i')},\n"
            "       'random', oracle_next_epoch(), (extract(epoch FROM now()) * 1000)::bigint\n"
            f"FROM generate_series({lo}, {hi}) AS g,\n     {joins};"
        )


# --- probe, check-page --------------------------------------------------------------------------


def cmd_probe(a):
    status, _, body = Api(a.base).request(
        "POST", f"/v1/clusters/{a.cluster}/placements", {"grain": a.grain})
    outcome = body.get("outcome") if isinstance(body, dict) else None
    if status != 200 or outcome != a.expect:
        raise SystemExit(f"placement of {a.grain} in {a.cluster}: {status} {body} (expected outcome {a.expect})")
    log(f"{a.cluster}: {a.grain} → {body.get('silo')} ({outcome})")


def cmd_check_page(a):
    """Prints one line for the report: does the deep page look like the paged listing?"""
    status, _, body = Api(a.base).request("GET", a.path)
    if status != 200 or not isinstance(body, dict):
        print(f"unexpected answer {status}")
        return
    silos = [s.get("silo") for s in body.get("silos", [])]
    expected_first = silo_id(a.net, a.expect_first)
    if silos and silos[0] == expected_first and len(silos) <= a.limit:
        print(f"ok: {len(silos)} silos from {silos[0]}, next_cursor {body.get('next_cursor')!r}")
    else:
        first = silos[0] if silos else None
        print(f"NOT PAGED AS EXPECTED: {len(silos)} silos, first {first!r} (expected {expected_first!r},"
              f" at most {a.limit}), keys {sorted(body)}")


# --- heartbeats (background loop) ---------------------------------------------------------------


def cmd_heartbeats(a):
    """Keeps every silo but the skipped ones alive: a round of heartbeats every `period` seconds.

    Bounded: stops when `stop_file` appears or after `max_seconds`, whichever comes first, so a
    crashed benchmark never leaves it running. A silo answered 409 (declared dead, or left) is
    dropped from the rotation. Writes `ready_file` after the first complete round, and a summary
    (rounds, slowest round, failures) to `summary_file` when it stops.
    """
    skip = set(a.skip)
    silos = [silo_id(a.net, i) for i in range(a.silos) if i not in skip]
    local = threading.local()
    gone, failures = set(), []
    lock = threading.Lock()

    def beat(silo):
        if not hasattr(local, "api"):
            local.api = Api(a.base, timeout=10)
        try:
            status, _, body = local.api.request(
                "POST", f"/v1/clusters/{a.cluster}/heartbeats", heartbeat_body(silo, a.activation_count))
        except Exception as error:  # noqa: BLE001 — a failed beat is counted, never fatal
            status, body = None, repr(error)
        if status != 200:
            with lock:
                if status == 409:
                    gone.add(silo)
                failures.append(f"{silo}: {status} {str(body)[:200]}")

    started = time.monotonic()
    rounds, slowest = 0, 0.0
    with concurrent.futures.ThreadPoolExecutor(a.threads) as pool:
        while time.monotonic() - started < a.max_seconds and not os.path.exists(a.stop_file):
            round_start = time.monotonic()
            list(pool.map(beat, [s for s in silos if s not in gone]))
            took = time.monotonic() - round_start
            rounds, slowest = rounds + 1, max(slowest, took)
            if rounds == 1:
                open(a.ready_file, "w").close()
            # Sleep out the period, waking early if told to stop.
            while time.monotonic() - round_start < a.period and not os.path.exists(a.stop_file):
                time.sleep(0.05)
    summary = {"rounds": rounds, "slowest_round_s": round(slowest, 3), "silos": len(silos),
               "failures": len(failures), "first_failures": failures[:5], "dropped": sorted(gone)}
    with open(a.summary_file, "w") as f:
        json.dump(summary, f)
    log(f"heartbeat loop stopped: {summary}")


# --- set-ttl, dead, leave -----------------------------------------------------------------------


def set_ttl(api, cluster, ttl_ms):
    """GET the policy and its ETag, PUT it back with silo_ttl_ms changed (If-Match: that ETag)."""
    status, headers, body = api.request("GET", f"/v1/clusters/{cluster}/policy")
    if status != 200:
        raise SystemExit(f"GET policy answered {status}: {body}")
    etag = headers.get("ETag")
    # The answer is {"version": …, "policy": {…}}; PUT takes the policy object itself.
    policy = body["policy"] if "policy" in body else body
    policy["silo_ttl_ms"] = ttl_ms
    status, _, body = api.request("PUT", f"/v1/clusters/{cluster}/policy", policy, {"If-Match": etag})
    if status != 200:
        raise SystemExit(f"PUT policy (If-Match {etag}) answered {status}: {body}")
    return body


def cmd_set_ttl(a):
    set_ttl(Api(a.base), a.cluster, a.ttl_ms)
    log(f"{a.cluster}: silo_ttl_ms = {a.ttl_ms}")


def listing_empty(api, cluster, silo):
    status, _, body = api.request(
        "GET", f"/v1/clusters/{cluster}/activations?silo={quote(silo)}&limit=1")
    if status != 200:
        raise SystemExit(f"activation listing of {silo} answered {status}: {body}")
    return len(body["activations"]) == 0


def wait_until_empty(api, cluster, silo, timeout_s, poll_s):
    """Polls the silo's activation listing; returns the wall-clock ms of the first empty answer
    (the time the request was sent, so the answer's own latency is not counted), or None."""
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        sent = now_ms()
        if listing_empty(api, cluster, silo):
            return sent
        time.sleep(poll_s)
    return None


def cmd_dead(a):
    """Prints seconds from the silo's death deadline (its last heartbeat + TTL, on the oracle's
    clock, which is this machine's) until its activation listing first answers empty."""
    api = Api(a.base)
    silo = silo_id(a.net, a.index)
    if listing_empty(api, a.cluster, silo):
        raise SystemExit(f"{silo} has no activations to begin with")
    # Its last heartbeat; the background loop skips this silo, so no other one follows.
    status, _, body = api.request(
        "POST", f"/v1/clusters/{a.cluster}/heartbeats", heartbeat_body(silo, a.activation_count))
    if status != 200:
        raise SystemExit(f"last heartbeat of {silo} answered {status}: {body}")
    last_heartbeat = body.get("last_heartbeat_at_ms") or now_ms()
    # Only now shorten the TTL: every other silo has just been beaten by the loop, and this one's
    # deadline becomes its last heartbeat + ttl_ms.
    set_ttl(api, a.cluster, a.ttl_ms)
    deadline = last_heartbeat + a.ttl_ms
    empty_at = wait_until_empty(api, a.cluster, silo, a.timeout, a.poll)
    if empty_at is None:
        print(f"timeout after {a.timeout} s")
    else:
        print(f"{(empty_at - deadline) / 1000:.3f}")


def cmd_leave(a):
    """Prints "<DELETE response seconds> <seconds from sending the DELETE until the listing is
    empty> <HTTP status>"."""
    api = Api(a.base, timeout=a.timeout)
    silo = silo_id(a.net, a.index)
    if listing_empty(api, a.cluster, silo):
        raise SystemExit(f"{silo} has no activations to begin with")
    sent = now_ms()
    status, _, body = api.request("DELETE", f"/v1/clusters/{a.cluster}/silos/{quote(silo)}")
    answered = now_ms()
    log(f"DELETE {silo} answered {status} in {(answered - sent) / 1000:.3f} s: {str(body)[:300]}")
    empty_at = wait_until_empty(api, a.cluster, silo, a.timeout, a.poll)
    until_empty = "timeout" if empty_at is None else f"{(empty_at - sent) / 1000:.3f}"
    print(f"{(answered - sent) / 1000:.3f} {until_empty} {status}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def command(name, func, *, base=True, cluster=True, net=False):
        s = sub.add_parser(name)
        s.set_defaults(func=func)
        if base:
            s.add_argument("--base", required=True, help="http://127.0.0.1:PORT")
        if cluster:
            s.add_argument("--cluster", required=True)
        if net:
            s.add_argument("--net", required=True, help="first two octets of the silo ids, e.g. 10.1")
        return s

    s = command("silo-id", cmd_silo_id, base=False, cluster=False, net=True)
    s.add_argument("--index", type=int, required=True)
    s.add_argument("--quoted", action="store_true", help="percent-encoded, for a URL")

    s = command("join", cmd_join, net=True)
    s.add_argument("--silos", type=int, required=True)
    s.add_argument("--activation-count", type=int, default=0)
    s.add_argument("--threads", type=int, default=8)

    s = command("fill-sql", cmd_fill_sql, base=False, net=True)
    s.add_argument("--silos", type=int, required=True)
    s.add_argument("--grains", type=int, required=True)
    s.add_argument("--special", action="append", default=[], metavar="INDEX:COUNT")
    s.add_argument("--chunk", type=int, default=1_000_000)

    s = command("probe", cmd_probe)
    s.add_argument("--grain", required=True)
    s.add_argument("--expect", required=True, help="expected outcome: existing, placed, …")

    s = command("check-page", cmd_check_page, net=True)
    s.add_argument("--path", required=True)
    s.add_argument("--expect-first", type=int, required=True, help="silo number expected first")
    s.add_argument("--limit", type=int, required=True)

    s = command("heartbeats", cmd_heartbeats, net=True)
    s.add_argument("--silos", type=int, required=True)
    s.add_argument("--skip", type=int, action="append", default=[], help="silo number not to beat")
    s.add_argument("--activation-count", type=int, default=0)
    s.add_argument("--period", type=float, default=1.0)
    s.add_argument("--threads", type=int, default=8)
    s.add_argument("--max-seconds", type=float, required=True)
    s.add_argument("--stop-file", required=True)
    s.add_argument("--ready-file", required=True)
    s.add_argument("--summary-file", required=True)

    s = command("set-ttl", cmd_set_ttl)
    s.add_argument("--ttl-ms", type=int, required=True)

    s = command("dead", cmd_dead, net=True)
    s.add_argument("--index", type=int, required=True)
    s.add_argument("--ttl-ms", type=int, required=True)
    s.add_argument("--activation-count", type=int, default=0)
    s.add_argument("--timeout", type=float, default=120)
    s.add_argument("--poll", type=float, default=0.02)

    s = command("leave", cmd_leave, net=True)
    s.add_argument("--index", type=int, required=True)
    s.add_argument("--timeout", type=float, default=300)
    s.add_argument("--poll", type=float, default=0.02)

    a = p.parse_args()
    a.func(a)


if __name__ == "__main__":
    main()
