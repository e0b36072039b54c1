"""A simulated cluster driving the placement oracle, built on the Python SDK (sdk/python).

Each simulated silo is the SDK's `Silo`: it joins, heartbeats on its own timer with drifting load (CPU wanders, memory
follows the grains it runs) and keeps its lease (its grains pause when the lease runs out and resume when a heartbeat is
acknowledged; told it is dead, it drops them and rejoins as the next generation). A stream of new grains arrives at
random silos, which claim them through the SDK's `Placement` (the registration rule: run here under the epoch answered,
or forward the call to the silo named, which claims it in turn); some grains are deactivated; grains that call each
other (in small groups) locate their callees as callers do, follow forwards when an answer is stale, and count their
calls in each silo's `EdgeReporter`; each silo's `MigrationWorker` carries out the migrations the rebalancer and the
repartitioner issue. A few silos join late, so the rebalancer has something to even out, and the repartitioner has
calls to bring together.

    examples/simulator/run.sh                       # against http://127.0.0.1:8080 (the README's `cargo run --release`)
    examples/simulator/run.sh --silos 20 --duration 120 --url http://127.0.0.1:8081 --url http://127.0.0.1:8082

With credentials, give it the admin token in ORACLE_ADMIN_TOKEN (or `--admin-token`, which `ps` shows): the simulator
issues its cluster a key with both scopes, uses nothing else, and revokes it when it stops; or give it such a key
(ORACLE_KEY or `--key`). Each silo prefers one replica (as silos behind a balancer stick to a connection) and turns to
the others when it does not answer. It prints one line per tick, and exits 1 if the oracle answered anything it did
not expect (each such answer is printed), or if a grain was ever registered to one silo while another still ran it.
When it stops, its silos stop heartbeating without leaving, as a cluster switched off: the oracle declares them dead
after the silo TTL.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import quote

from placement_oracle_sdk import (
    EdgeReporter,
    MigrationWorker,
    OracleClient,
    OracleError,
    Placement,
    RunHere,
    Silo,
)

GRAIN_TYPES = [("user", 0.6), ("order", 0.3), ("session", 0.1)]
GROUP_SIZE = 4  # grains `type/g{n}-{k}` of one group call each other in a ring
GIB = 1_000_000_000
MAX_HOPS = 3  # silos a call or a new grain is forwarded through before the simulator gives up on it
OUT_OF_REACH = (0, 503)  # no replica answered, or the store behind them did not


@dataclass
class Tally:
    """What the run has done, for the tick lines and the summary. Heartbeat threads count too, under `lock`."""

    placed: int = 0
    deactivated: int = 0
    refused_moves: int = 0
    forwarded: int = 0
    lapses: int = 0
    unexpected: int = 0
    unreachable: int = 0

    def __post_init__(self) -> None:
        self.lock = threading.Lock()

    def count_unexpected(self, what: str) -> None:
        with self.lock:
            self.unexpected += 1
        print(f"  unexpected {what}", file=sys.stderr, flush=True)


class SimulatedSilo(Silo):
    """The SDK's silo, telling the simulation of each heartbeat the oracle refused (the SDK itself backs off, waits
    out a lapsed lease and rejoins after a death)."""

    def __init__(self, tally: Tally, client: OracleClient, address: str, **options: Any) -> None:
        super().__init__(client, address, **options)
        self.tally = tally

    def beat(self) -> bool:
        try:
            return super().beat()
        except OracleError as error:
            # Out of reach is what the lease is for; a 200 that is no heartbeat answer is not.
            if error.status not in OUT_OF_REACH or error.problem == "unexpected-answer":
                self.tally.count_unexpected(f"heartbeat answer {error.status} {error.problem}: {error.detail[:300]}")
            raise


class Host:
    """One simulated silo: the SDK's silo, its placement, migration worker and edge reporter, the grains it runs
    (grain → epoch) and its drifting load."""

    def __init__(self, simulation: Simulation, index: int, client: OracleClient, generation: int) -> None:
        args = simulation.args
        self.index = index
        self.client = client
        late = min(args.late, args.silos - 1)
        self.joins_at_tick = args.late_at if index >= args.silos - late else 0
        self.joined = False
        # Heartbeats run on the SDK's threads: each silo draws its load from a generator of its own.
        self.rng = random.Random(args.seed * 1_000 + index)
        self.cpu_base = self.rng.uniform(15, 45)
        self.cpu = self.rng.uniform(10, 50)
        self.connections = self.rng.uniform(20, 60)
        self.load_lock = threading.Lock()
        self.grains: dict[str, int] = {}
        self.died = threading.Event()
        self.tally = simulation.tally
        self.silo = SimulatedSilo(
            simulation.tally, client, f"10.0.0.{index + 1}:11111", generation=generation, load=self.load,
            role="frontend" if index % 3 == 0 else "backend", metadata={"zone": f"az{index % 3 + 1}"},
            on_pause=self.paused, on_resume=self.resumed, on_dead=self.died.set,
        )
        self.placement = Placement(client, self.silo)
        self.worker = MigrationWorker(client, self.silo, hand_over=simulation.hand_over,
                                      on_moved=simulation.moved, on_refused=simulation.refused_move)
        self.edges = EdgeReporter(client)

    @property
    def id(self) -> str:
        return self.silo.silo_id

    def load(self) -> Mapping[str, Any]:
        """What a heartbeat reports: CPU drifting around the silo's own level, memory and traffic following its grains."""
        with self.load_lock:
            self.cpu = min(100.0, max(1.0, self.cpu + self.rng.gauss(0, 4) + 0.1 * (self.cpu_base - self.cpu)))
            self.connections = max(0.0, self.connections + self.rng.gauss(0, 3))
            held = len(self.grains)
            return {
                "cpu_usage": round(min(100.0, self.cpu + 0.02 * held ** 0.5), 1),
                "memory_usage_bytes": int(1.5 * GIB + held * 2_000_000 + self.rng.uniform(0, 0.2 * GIB)),
                "max_available_memory_bytes": 16 * GIB,
                "activation_count": held,
                "recent_activation_count": int(held * 0.4),
                "connection_count": int(self.connections),
                "network_bytes_per_second": int(50_000 + held * 900 + self.rng.uniform(0, 100_000)),
            }

    def paused(self) -> None:
        with self.tally.lock:
            self.tally.lapses += 1
        print(f"  silo {self.id} lost its lease: its {len(self.grains)} grains pause", flush=True)

    def resumed(self) -> None:
        print(f"  silo {self.id} holds its lease again: its grains resume", flush=True)

    def serving(self) -> bool:
        return self.joined and self.silo.may_run_grains()


class Simulation:
    def __init__(self, args: argparse.Namespace, key: str | None) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.tally = Tally()
        self.holder: dict[str, Host] = {}  # grain → the silo that runs it
        self.seen_migrations: dict[int, int] = {}  # migration id → the tick a silo first saw it
        self.ticks = 0
        self.groups = 0
        generation = int(time.time() * 1000)
        # Grains are named for this run too: a run started again within the silo TTL must not
        # find the last run's grains on silos it does not simulate.
        self.run = f"{generation:x}"
        urls: list[str] = args.url
        self.hosts = [
            Host(self, i, OracleClient(urls[i % len(urls):] + urls[:i % len(urls)], args.cluster, key=key), generation)
            for i in range(args.silos)
        ]

    # ------------------------------------------------------------ plumbing

    def grain(self, grain_type: str, group: int, k: int) -> str:
        return f"{grain_type}/{self.run}.g{group}-{k}"

    def find(self, silo_id: str) -> Host | None:
        """The simulated silo of that incarnation; None for a silo this run does not simulate (another run's)."""
        return next((h for h in self.hosts if h.id == silo_id), None)

    def refused(self, error: OracleError, *allowed: int) -> None:
        """An answer that is no success: out of reach ends the tick (raised again), a status in `allowed` is taken as
        it comes, anything else is counted and printed."""
        if error.status in OUT_OF_REACH:
            raise error
        if error.status not in allowed:
            self.tally.count_unexpected(f"{error.status} {error.problem}: {error.detail[:300]}")

    def activate(self, host: Host, grain: str, epoch: int) -> None:
        """`host` holds the registration of activation `epoch` (its own claim said so) and runs the grain. The oracle
        releases a registration only once its silo is dead, which it never declares before that silo's lease has run
        out: another silo still holding its lease and running the grain would be two activations."""
        previous = self.holder.get(grain)
        if previous is not None and previous is not host and previous.silo.may_run_grains():
            self.tally.count_unexpected(f"registration: {grain} went to {host.id} (epoch {epoch}) "
                                        f"while {previous.id} runs it under its lease")
        self.drop(grain)
        self.holder[grain] = host
        host.grains[grain] = epoch

    def hold(self, grain: str, silo_id: str, epoch: int) -> None:
        """The directory says `silo_id` holds activation `epoch` of `grain`. A silo this run does not simulate
        (another simulator's, say) runs it, not us: the grain is no longer ours to track."""
        self.drop(grain)
        host = self.find(silo_id)
        if host is not None:
            self.holder[grain] = host
            host.grains[grain] = epoch

    def drop(self, grain: str) -> None:
        previous = self.holder.pop(grain, None)
        if previous is not None:
            previous.grains.pop(grain, None)

    def resync(self, host: Host, grain: str) -> None:
        """Asks the directory (always the store's answer) where the grain is now."""
        try:
            found = host.client.call("GET", f"/activations/{quote(grain, safe='')}").body
        except OracleError as error:
            if error.status == 404:
                self.drop(grain)
            else:
                self.refused(error)
            return
        self.hold(grain, str(found["silo"]), int(found["epoch"]))

    # ------------------------------------------------------------ one tick

    def join_due(self, tick: int) -> None:
        """Silos whose time has come join (`joining`, then `active`); from then on the SDK heartbeats for them."""
        for host in self.hosts:
            if not host.joined and tick >= host.joins_at_tick:
                host.silo.join(timeout=2.0)
                host.joined = True

    def bury(self) -> None:
        """Silos the oracle declared dead dropped their grains (the SDK called `on_dead` and rejoins them as their
        next generation): their grains are no longer run anywhere until a call places them anew."""
        for host in self.hosts:
            if host.died.is_set():
                host.died.clear()
                dropped = list(host.grains)
                for grain in dropped:
                    self.drop(grain)
                print(f"  a silo was declared dead: {len(dropped)} grains dropped, rejoining as {host.id}", flush=True)

    def place(self) -> None:
        """New grains: calls arrive at random active silos, which claim them; a claim answered with another silo
        forwards the call there, and that silo claims it in turn."""
        active = [h for h in self.hosts if h.serving() and h.silo.status == "active"]
        if not active:
            return
        arriving: dict[Host, list[str]] = {}
        for _ in range(self.args.rate):
            group = self.groups
            self.groups += 1
            grain_type = self.rng.choices([t for t, _ in GRAIN_TYPES], weights=[w for _, w in GRAIN_TYPES])[0]
            origin = self.rng.choice(active)
            arriving.setdefault(origin, []).extend(self.grain(grain_type, group, k) for k in range(GROUP_SIZE))
        for _ in range(MAX_HOPS):
            forwarded: dict[Host, list[str]] = {}
            for host, grains in arriving.items():
                try:
                    claims = host.placement.claim_many(grains)
                except OracleError as error:
                    self.refused(error, 429)
                    continue
                for grain, claim in claims.items():
                    if isinstance(claim, OracleError):
                        continue  # a problem for this grain (e.g. no silo hosts its type yet)
                    if isinstance(claim, RunHere):
                        # Stateless workers are never registered; a claim made before the silo was declared dead
                        # and rejoined is not the new incarnation's (the death released it).
                        if claim.epoch is not None and claim.silo == host.id:
                            self.activate(host, grain, claim.epoch)
                            self.tally.placed += 1
                        continue
                    target = self.find(claim.silo)
                    if target is not None and target.serving():
                        forwarded.setdefault(target, []).append(grain)
                    else:  # the call waits for a silo without its lease (or is another run's): its registration
                        self.hold(grain, claim.silo, claim.epoch)
            arriving = forwarded
            if not arriving:
                break

    def deactivate(self) -> None:
        grains = list(self.holder)
        for grain in self.rng.sample(grains, int(len(grains) * self.args.deactivate)):
            host = self.holder.get(grain)
            if host is None:
                continue
            try:
                released = host.placement.release(grain, host.grains[grain])
            except OracleError as error:
                self.refused(error)
                continue
            if released:
                self.tally.deactivated += 1
                self.drop(grain)
            else:
                self.resync(host, grain)  # moved or released meanwhile: ask the directory

    def hand_over(self, migration: Mapping[str, Any]) -> bool | None:
        """Handing a grain over takes a while: a silo carries a migration out --move-ticks after it saw it, and fails
        --fail-rate of them on purpose."""
        first_seen = self.seen_migrations.setdefault(int(migration["id"]), self.ticks)
        if self.ticks - first_seen < self.args.move_ticks:
            return None
        del self.seen_migrations[int(migration["id"])]
        return self.rng.random() >= float(self.args.fail_rate)

    def moved(self, migration: Mapping[str, Any], epoch: int) -> None:
        self.hold(str(migration["grain"]), str(migration["to"]), epoch)

    def refused_move(self, migration: Mapping[str, Any], error: OracleError) -> None:
        self.tally.refused_moves += 1
        source = self.find(str(migration["from"]))
        if source is not None:
            self.resync(source, str(migration["grain"]))

    def migrate(self) -> None:
        for host in self.hosts:
            if host.serving():  # a silo without its lease hands nothing over
                try:
                    host.worker.poll_once()
                except OracleError as error:
                    self.refused(error)

    def deliver(self, caller: Host, grain: str, answer: Mapping[str, Any]) -> bool:
        """A call to `grain` goes where the caller's answer says. A silo that does not run the grain claims it: it runs
        it (its own registration) or forwards the call. Says whether the call was served."""
        host = self.find(str(answer["silo"]))
        for hop in range(MAX_HOPS):
            if host is None or not host.serving():
                return False  # another run's silo, or one without its lease: the call waits
            if grain in host.grains:
                return True
            if hop == 0:
                caller.placement.forget(grain, int(answer["epoch"]))
            self.tally.forwarded += 1
            try:
                claim = host.placement.claim(grain)
            except OracleError as error:
                self.refused(error, 429)
                return False
            if isinstance(claim, RunHere):
                if claim.epoch is None or not host.silo.may_run_grains_as(claim.silo):
                    return claim.epoch is None  # a stateless worker runs anywhere; else the claim is a dead incarnation's
                self.activate(host, grain, claim.epoch)
                return True
            host = self.find(claim.silo)
        return False

    def report_edges(self) -> None:
        """Calls within each group (a ring) and a few across groups, sampled: the caller's silo locates the callee,
        the call is delivered, and the caller's silo counts it for its edge report."""
        if self.groups == 0:
            return
        calls: dict[Host, list[tuple[str, str, int]]] = {}
        for _ in range(self.args.edges):
            group = self.rng.randrange(self.groups)
            grain_type = next((t for t, _ in GRAIN_TYPES if self.grain(t, group, 0) in self.holder), None)
            if grain_type is None:
                continue
            k = self.rng.randrange(GROUP_SIZE)
            source = self.grain(grain_type, group, k)
            if self.rng.random() < 0.1:
                other = self.rng.randrange(self.groups)
                target_type = next((t for t, _ in GRAIN_TYPES if self.grain(t, other, 0) in self.holder), grain_type)
                target = self.grain(target_type, other, self.rng.randrange(GROUP_SIZE))
            else:
                target = self.grain(grain_type, group, (k + 1) % GROUP_SIZE)
            caller = self.holder.get(source)
            if caller is not None and target in self.holder and source != target:
                calls.setdefault(caller, []).append((source, target, self.rng.randint(1, 20)))
        for caller, made in calls.items():
            if not caller.serving():
                continue  # paused grains make no calls
            try:
                located = caller.placement.locate_many(target for _, target, _ in made)
            except OracleError as error:
                self.refused(error, 429)
                continue
            for source, target, count in made:
                answer = located.get(target)
                if isinstance(answer, dict) and source in caller.grains and self.deliver(caller, target, answer):
                    caller.edges.record_call(source, target, count)
        for host in self.hosts:
            if host.joined:
                try:
                    host.edges.report_once()
                except OracleError as error:
                    self.refused(error, 429)  # a report refused is counted again for the next one

    def tick(self, tick: int) -> None:
        self.ticks = tick
        self.bury()
        self.join_due(tick)
        self.place()
        if tick % 2 == 1:
            self.deactivate()
        self.migrate()
        self.report_edges()
        counts = " ".join(f"{len(h.grains)}" if h.joined else "-" for h in self.hosts)
        t = self.tally
        print(f"tick {tick:4d}  grains {len(self.holder):6d}  per silo [{counts}]  placed {t.placed}  "
              f"deactivated {t.deactivated}  moved {self.moves()} (refused {t.refused_moves})  edges {self.edges()}",
              flush=True)

    def moves(self) -> int:
        return sum(h.worker.completed for h in self.hosts)

    def failed_moves(self) -> int:
        return sum(h.worker.failed for h in self.hosts)

    def edges(self) -> int:
        return sum(h.edges.reported for h in self.hosts)

    def close(self) -> None:
        """The silos stop heartbeating, without leaving: as a cluster switched off, the oracle judges the silence."""
        for host in self.hosts:
            host.silo.close()
            host.client.close()


def set_policy(args: argparse.Namespace, client: OracleClient) -> None:
    """A demo's policy: the rebalancer and the repartitioner on short timers; orders by consistent hash."""
    policy = {
        "default_strategy": "resource_optimized",
        "grain_types": {"order": {"strategy": "consistent_hash"}, "session": {"strategy": "prefer_local"}},
        "rebalancer": {"enabled": True, "due_time_ms": args.rebalance_after * 1000, "session_cycle_period_ms": 2_000},
        "repartitioner": {"enabled": True, "min_round_period_ms": 6_000, "max_round_period_ms": 9_000,
                          "recovery_period_ms": 6_000},
    }
    try:
        client.call("PUT", "/policy", policy, headers={"if-match": "*"})
    except OracleError as error:
        sys.exit(f"the policy was refused: {error}")


def issue_key(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The key the silos use, and the id of the key issued for this run (None when none was)."""
    if args.key is not None or not args.admin_token:
        return args.key, None
    admin = OracleClient(args.url, args.cluster, key=args.admin_token)
    try:
        issued = admin.call("POST", "/keys", {"scopes": ["silo", "operator"], "label": "silo simulator"}).body
    except OracleError as error:
        sys.exit(f"could not issue a key: {error}")
    finally:
        admin.close()
    print(f"issued key {issued['id']} (silo, operator) for cluster {args.cluster}")
    return str(issued["key"]), str(issued["id"])


def revoke(args: argparse.Namespace, key_id: str) -> None:
    """The run's key goes with the run (a cluster holds at most 100)."""
    admin = OracleClient(args.url, args.cluster, key=args.admin_token)
    try:
        admin.call("DELETE", f"/keys/{quote(key_id, safe='')}")
        print(f"revoked key {key_id}")
    except OracleError as error:
        print(f"could not revoke key {key_id}: {error}")
    finally:
        admin.close()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--url", action="append", help="an oracle replica (repeat for several); "
                        "default http://127.0.0.1:8080")
    parser.add_argument("--cluster", default="demo")
    parser.add_argument("--silos", type=int, default=10)
    parser.add_argument("--late", type=int, default=2, help="silos that join after --late-at ticks")
    parser.add_argument("--late-at", type=int, default=8)
    parser.add_argument("--rate", type=int, default=25, help="new groups of 4 grains placed per tick")
    parser.add_argument("--edges", type=int, default=400, help="edges sampled per tick")
    parser.add_argument("--deactivate", type=float, default=0.01, help="share of grains deactivated every other tick")
    parser.add_argument("--fail-rate", type=float, default=0.02, help="share of migrations a silo fails")
    parser.add_argument("--move-ticks", type=int, default=1, help="ticks a silo takes to carry a migration out")
    parser.add_argument("--tick", type=float, default=1.0, help="seconds per tick")
    parser.add_argument("--duration", type=float, default=0, help="seconds to run; 0 runs until interrupted")
    parser.add_argument("--rebalance-after", type=int, default=10, help="seconds before the first rebalancer session")
    parser.add_argument("--no-policy", action="store_true", help="leave the cluster's policy as it is")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--key", default=os.environ.get("ORACLE_KEY"), help="a cluster key with both scopes")
    parser.add_argument("--admin-token", default=os.environ.get("ORACLE_ADMIN_TOKEN"),
                        help="default: ORACLE_ADMIN_TOKEN (prefer it: a command line is visible to `ps`)")
    args = parser.parse_args(argv)
    args.url = args.url or ["http://127.0.0.1:8080"]
    if args.silos < 1:
        parser.error("--silos must be at least 1")
    return args


class Stop:
    """SIGTERM ends the run like Ctrl-C, but after the tick under way, with the summary and exit code."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self.request)

    def request(self, signum: int, frame: object) -> None:
        self.requested = True


def run(args: argparse.Namespace, key: str | None, stop: Stop) -> Tally:
    """Ticks until the duration is up, Ctrl-C or SIGTERM; the tally of what was done."""
    simulation = Simulation(args, key)
    print(f"{args.silos} silos ({min(args.late, args.silos - 1)} joining at tick {args.late_at}) of cluster "
          f"{args.cluster} on {', '.join(args.url)}")
    tick = 1
    try:
        try:
            simulation.join_due(0)  # the cluster exists once a silo has sent a heartbeat
        except OracleError as error:
            sys.exit(f"the silos could not join: {error}")
        if not args.no_policy:
            set_policy(args, simulation.hosts[0].client)
        started = time.monotonic()
        while not stop.requested and (args.duration == 0 or time.monotonic() - started < args.duration):
            began = time.monotonic()
            try:
                simulation.tick(tick)
            except OracleError as error:
                if error.status not in OUT_OF_REACH:
                    raise
                # A silo keeps running when the oracle is out of reach for a moment (while its lease holds); it
                # tries again next tick.
                simulation.tally.unreachable += 1
                print(f"tick {tick:4d}  the oracle is out of reach: {error}", flush=True)
            tick += 1
            time.sleep(max(0.0, args.tick - (time.monotonic() - began)))
    except KeyboardInterrupt:
        pass
    finally:
        simulation.close()
    t = simulation.tally
    print(f"done after {tick - 1} ticks: {t.placed} placed, {t.deactivated} deactivated, {simulation.moves()} "
          f"migrations completed ({t.refused_moves} refused, {simulation.failed_moves()} failed on purpose), "
          f"{simulation.edges()} edges, {t.forwarded} calls forwarded, {t.lapses} leases lapsed; "
          f"{t.unexpected} unexpected answers, {t.unreachable} ticks without the oracle")
    return t


def main(argv: list[str]) -> int:
    args = parse(argv)
    # The simulator prints what its silos go through (a lapsed lease, a death) itself.
    logging.getLogger("placement_oracle_sdk").setLevel(logging.ERROR)
    stop = Stop()
    key, issued_key = issue_key(args)
    try:
        tally = run(args, key, stop)
    finally:
        if issued_key is not None:
            revoke(args, issued_key)
    return 1 if tally.unexpected else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
