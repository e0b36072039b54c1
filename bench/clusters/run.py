#!/usr/bin/env python3
"""Many clusters on one Postgres, served by 1, 2 and 3 replicas in turn.

1,000 clusters × 20 silos (by default) join through the first replica; then, with 1, 2 and 3
replicas running on the same database, it measures:

- the database alone, no replica attached (the floor the figures below stand on);
- the background work alone (no client traffic; silos' TTL long enough that none dies): each
  replica's CPU and store calls per second and the clusters it runs (its
  `oracle_background_clusters_run`), and the database's CPU (every process of the `postgres`
  user) — the per-replica figures should fall as replicas are added, the totals stay;
- then, with the background running, placements spread over every cluster (new grains at first,
  known ones after) and heartbeats of every silo in turn, closed loop through the first replica:
  requests/s, p50, p99.

Usage: bench/clusters/run.py --bin target/release/placement-oracle [--clusters 1000] [--silos 20]
       [--idle 20] [--load 10]   (--load 0: the background work alone, e.g. an idle fleet of
       --clusters 5000 --silos 10)
Needs wrk and a Postgres the user may create databases on (BENCH_DATABASE_SERVER).
"""

import argparse
import json
import os
import pwd
import re
import subprocess
import sys
import time
import urllib.request

HZ = os.sysconf("SC_CLK_TCK")
HERE = os.path.dirname(os.path.abspath(__file__))


def say(text):
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def psql(url, sql):
    subprocess.run(["psql", url, "-qAtc", sql], check=True, capture_output=True, text=True)


def scalar(url, sql):
    out = subprocess.run(["psql", url, "-qAtc", sql], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def postgres_ticks():
    uid = pwd.getpwnam("postgres").pw_uid
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                total += ticks(pid)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    return total


def metric(base, name):
    text = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class Replica:
    def __init__(self, binary, database, index, port):
        self.name = f"bench-{index}"
        self.base = f"http://127.0.0.1:{port}"
        env = dict(os.environ, DATABASE_URL=database, ORACLE_LISTEN=f"127.0.0.1:{port}",
                   ORACLE_REPLICA_ID=self.name, ORACLE_SILO_TTL_MS="3600000",
                   RUST_LOG=os.environ.get("RUST_LOG", "warn"))
        self.process = subprocess.Popen([binary, "serve"], env=env)
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{self.base}/readyz", timeout=1).read()
                return
            except Exception:
                time.sleep(0.1)
        raise SystemExit(f"{self.name} did not start")

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)


def wrk(script, base, seconds, connections, env):
    out = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "--latency",
         "-s", os.path.join(HERE, script), base],
        check=True, capture_output=True, text=True, env=dict(os.environ, **env)).stdout

    def ms(value):
        number = float(re.match(r"[\d.]+", value).group())
        return number / 1000 if value.endswith("us") else number * 1000 if value.endswith("s") and not value.endswith("ms") else number

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = ms(re.search(r"\s50%\s+(\S+)", out).group(1))
    p99 = ms(re.search(r"\s99%\s+(\S+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rps, p50, p99, int(errors.group(1)) if errors else 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="target/release/placement-oracle")
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--silos", type=int, default=20)
    parser.add_argument("--idle", type=int, default=20, help="seconds of background alone")
    parser.add_argument("--load", type=int, default=10,
                        help="seconds of each client load (0: the background work alone)")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--port", type=int, default=18180)
    args = parser.parse_args()
    server = os.environ.get("BENCH_DATABASE_SERVER", "postgres://postgres@127.0.0.1:5432")
    database = f"{server}/placement_oracle_clusters"
    psql(f"{server}/postgres", "DROP DATABASE IF EXISTS placement_oracle_clusters WITH (FORCE)")
    psql(f"{server}/postgres", "CREATE DATABASE placement_oracle_clusters")
    env = {"BENCH_CLUSTERS": str(args.clusters), "BENCH_SILOS": str(args.silos)}
    replicas = [Replica(args.bin, database, 1, args.port)]
    rows = []
    try:
        say(f"{args.clusters} clusters × {args.silos} silos join")
        expected = args.clusters * args.silos
        offset = 0
        while int(scalar(database, "SELECT count(*) FROM silos")) < expected:
            rps = wrk("heartbeats.lua", replicas[0].base, 5, args.connections,
                      dict(env, BENCH_OFFSET=str(offset)))[0]
            offset += int(rps * 5 / 2)
        # Settled, as a fleet that has run a while is: the join's dead row versions vacuumed now
        # rather than by autovacuum in the middle of a measure.
        psql(database, "VACUUM (ANALYZE)")
        # The floor: the database with no replica attached, for as long as each measure.
        replicas[0].stop()
        time.sleep(2)
        db_before, started = postgres_ticks(), time.time()
        time.sleep(args.idle)
        floor = (postgres_ticks() - db_before) * 1000 / HZ / (time.time() - started)
        say(f"the database alone: {floor:.1f} ms of CPU a second")
        replicas[0] = Replica(args.bin, database, 1, args.port)
        for count in (1, 2, 3):
            while len(replicas) < count:
                replicas.append(Replica(args.bin, database, len(replicas) + 1,
                                        args.port + len(replicas)))
            say(f"{count} replica(s): waiting until the clusters are shared out")
            deadline = time.time() + 60
            while time.time() < deadline:
                run = [metric(r.base, "oracle_background_clusters_run") for r in replicas]
                if sum(run) == args.clusters and min(run) > 0:
                    break
                time.sleep(1)
            time.sleep(3)
            say(f"{count} replica(s): {args.idle} s of background work alone")
            before = [(ticks(r.process.pid), metric(r.base, "oracle_store_call_duration_seconds_count"))
                      for r in replicas]
            db_before, started = postgres_ticks(), time.time()
            time.sleep(args.idle)
            elapsed = time.time() - started
            db_cpu = (postgres_ticks() - db_before) * 1000 / HZ / elapsed
            per_replica = []
            for r, (t0, c0) in zip(replicas, before):
                cpu = (ticks(r.process.pid) - t0) * 1000 / HZ / elapsed
                calls = (metric(r.base, "oracle_store_call_duration_seconds_count") - c0) / elapsed
                owned = metric(r.base, "oracle_background_clusters_run")
                per_replica.append((r.name, int(owned), cpu, calls))
            placements = heartbeats = None
            if args.load > 0:
                say(f"{count} replica(s): placements and heartbeats through {replicas[0].name}")
                placements = wrk("placements.lua", replicas[0].base, args.load, args.connections,
                                 dict(env, BENCH_GRAINS="200"))
                heartbeats = wrk("heartbeats.lua", replicas[0].base, args.load, args.connections,
                                 env)
            rows.append({"replicas": count, "background": per_replica, "db_cpu_ms_per_s": db_cpu,
                         "placements": placements, "heartbeats": heartbeats})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        for r in replicas:
            r.stop()
    print()
    print(f"The database alone (no replica attached): {floor:.1f} ms of CPU a second.")
    print()
    print("| replicas | per replica: clusters run, CPU ms/s, store calls/s | database CPU ms/s | placements/s, p50, p99 ms | heartbeats/s, p50, p99 ms |")
    print("|---:|---|---:|---|---|")
    for row in rows:
        background = "; ".join(f"{name}: {owned}, {cpu:.0f}, {calls:.0f}"
                               for name, owned, cpu, calls in row["background"])
        loads = [f"{r[0]:.0f}, {r[1]:.2f}, {r[2]:.2f}" if r else "—"
                 for r in (row["placements"], row["heartbeats"])]
        print(f"| {row['replicas']} | {background} | {row['db_cpu_ms_per_s']:.0f} | "
              f"{loads[0]} | {loads[1]} |")


if __name__ == "__main__":
    main()
