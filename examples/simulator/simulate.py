"""A simulated cluster driving the placement oracle, through the Python client generated from openapi/openapi.json.

N silos heartbeat with drifting load (CPU wanders, memory follows the grains each silo runs), a stream of new grains
is placed, some grains are deactivated, silos poll the migrations the oracle issues and carry them out, and grains that
call each other (in small groups) are reported as edges. A few silos join late, so the rebalancer has something to
even out, and the repartitioner has calls to bring together.

    examples/simulator/run.sh                       # against http://127.0.0.1:8080 (the README's `cargo run --release`)
    examples/simulator/run.sh --silos 20 --duration 120 --url http://127.0.0.1:8081 --url http://127.0.0.1:8082

With credentials, give it the admin token in ORACLE_ADMIN_TOKEN (or `--admin-token`, which `ps` shows): the simulator
issues its cluster a key with both scopes, uses nothing else, and revokes it when it stops; or give it such a key
(ORACLE_KEY or `--key`). It prints one line per tick, and exits 1 if
the oracle answered anything it did not expect (each such answer is printed).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import TypeVar

import httpx

from placement_oracle_client import AuthenticatedClient
from placement_oracle_client.api.credentials import issue_key, revoke_key
from placement_oracle_client.api.directory import delete_activation, get_activation, post_placement_batch
from placement_oracle_client.api.membership import post_heartbeat
from placement_oracle_client.api.migrations import complete_migration, fail_migration, list_migrations
from placement_oracle_client.api.policy import put_policy
from placement_oracle_client.api.repartitioner import post_edges
from placement_oracle_client.models import (
    ActivationResponse, Edge, EdgeBatch, EdgesAccepted, GrainTypePolicyInput, HeartbeatRequest, HeartbeatRequestMetadataType0, IssuedKeyResponse,
    MigrationCompleted, MigrationFailed, MigrationPage, NewKeyRequest, Outcome, PlacementBatchRequest,
    PlacementBatchResponse, PlacementRequest, PlacementResponse, PolicyInput, PolicyInputGrainTypes, PolicyResponse, Problem,
    RebalancerOptionsInput, RepartitionerOptionsInput, ReportedStatus, Scope, HeartbeatResponse, Strategy,
)
from placement_oracle_client.types import Response

T = TypeVar("T")

GRAIN_TYPES = [("user", 0.6), ("order", 0.3), ("session", 0.1)]
GROUP_SIZE = 4  # grains `type/g{n}-{k}` of one group call each other in a ring
GIB = 1_000_000_000


@dataclass
class Silo:
    """One simulated silo: its incarnation id, where it is in its life, and its drifting load."""

    id: str
    joins_at_tick: int
    cpu_base: float
    cpu: float
    connections: float
    beats: int = 0
    grains: set[str] = field(default_factory=set)

    @property
    def joined(self) -> bool:
        return self.beats > 0


@dataclass
class Tally:
    """What the run has done, for the tick lines and the summary."""

    placed: int = 0
    existing: int = 0
    deactivated: int = 0
    moved: int = 0
    refused_moves: int = 0
    failed_moves: int = 0
    edges: int = 0
    unexpected: int = 0
    unreachable: int = 0


class Simulation:
    def __init__(self, args: argparse.Namespace, clients: list[AuthenticatedClient]) -> None:
        self.args = args
        self.clients = clients
        self.rng = random.Random(args.seed)
        self.tally = Tally()
        self.holder: dict[str, tuple[str, int]] = {}  # grain → (silo, epoch) the directory gave it
        self.seen_migrations: dict[int, int] = {}  # migration id → the tick a silo first saw it
        self.ticks = 0
        self.groups = 0
        generation = int(time.time())
        # Grains are named for this run too: a run started again within the silo TTL must not
        # find the last run's grains on silos it does not simulate.
        self.run = f"{generation:x}"
        late = min(args.late, args.silos - 1)
        self.silos = [
            Silo(
                id=f"10.0.0.{i + 1}:11111@{generation}",
                joins_at_tick=args.late_at if i >= args.silos - late else 0,
                cpu_base=self.rng.uniform(15, 45),
                cpu=self.rng.uniform(10, 50),
                connections=self.rng.uniform(20, 60),
            )
            for i in range(args.silos)
        ]
        self.by_id = {silo.id: (i, silo) for i, silo in enumerate(self.silos)}

    # ------------------------------------------------------------ plumbing

    def grain(self, grain_type: str, group: int, k: int) -> str:
        return f"{grain_type}/{self.run}.g{group}-{k}"

    def client(self, silo_index: int = 0) -> AuthenticatedClient:
        """Each silo talks to one replica, as silos behind a balancer stick to a connection."""
        return self.clients[silo_index % len(self.clients)]

    def expect(self, response: Response[T | Problem], kind: type[T], *allowed: int) -> T | None:
        """The typed body of a 2xx answer; None for a status listed in `allowed`; else counted and printed."""
        if 200 <= response.status_code < 300 and isinstance(response.parsed, kind):
            return response.parsed
        if response.status_code not in allowed:
            self.tally.unexpected += 1
            print(f"  unexpected {response.status_code}: {response.content[:300]!r}", file=sys.stderr)
        return None

    def live(self) -> list[tuple[int, Silo]]:
        return [(i, s) for i, s in enumerate(self.silos) if s.joined]

    # ------------------------------------------------------------ one tick

    def heartbeat(self, tick: int) -> None:
        for i, silo in enumerate(self.silos):
            if tick < silo.joins_at_tick:
                continue
            silo.cpu = min(100.0, max(1.0, silo.cpu + self.rng.gauss(0, 4) + 0.1 * (silo.cpu_base - silo.cpu)))
            silo.connections = max(0.0, silo.connections + self.rng.gauss(0, 3))
            held = len(silo.grains)
            memory = int(1.5 * GIB + held * 2_000_000 + self.rng.uniform(0, 0.2 * GIB))
            metadata = HeartbeatRequestMetadataType0()
            metadata["zone"] = f"az{i % 3 + 1}"
            beat = HeartbeatRequest(
                silo=silo.id,
                status=ReportedStatus.JOINING if silo.beats == 0 else ReportedStatus.ACTIVE,
                role="frontend" if i % 3 == 0 else "backend",
                metadata=metadata,
                cpu_usage=round(silo.cpu + 0.02 * held ** 0.5, 1),
                memory_usage_bytes=memory,
                max_available_memory_bytes=16 * GIB,
                activation_count=held,
                recent_activation_count=int(held * 0.4),
                connection_count=int(silo.connections),
                network_bytes_per_second=int(50_000 + held * 900 + self.rng.uniform(0, 100_000)),
            )
            if self.expect(post_heartbeat.sync_detailed(self.args.cluster, client=self.client(i), body=beat),
                           HeartbeatResponse) is not None:
                silo.beats += 1

    def place(self) -> None:
        live = [s for _, s in self.live() if s.beats > 1]  # active ones
        if not live:
            return
        requests = []
        for _ in range(self.args.rate):
            group = self.groups
            self.groups += 1
            grain_type = self.rng.choices([t for t, _ in GRAIN_TYPES], weights=[w for _, w in GRAIN_TYPES])[0]
            origin = self.rng.choice(live).id
            for k in range(GROUP_SIZE):
                requests.append(PlacementRequest(grain=self.grain(grain_type, group, k), requesting_silo=origin))
        for start in range(0, len(requests), 1000):
            chunk = requests[start:start + 1000]
            answer = self.expect(post_placement_batch.sync_detailed(
                self.args.cluster, client=self.client(self.rng.randrange(len(self.silos))),
                body=PlacementBatchRequest(placements=chunk)), PlacementBatchResponse, 429)
            if answer is None:
                continue
            for result in answer.results:
                placement = result.placement
                if not isinstance(placement, PlacementResponse):
                    continue  # a problem for this grain (e.g. no silo hosts its type yet)
                if placement.outcome == Outcome.PLACED:
                    self.tally.placed += 1
                else:
                    self.tally.existing += 1
                if isinstance(placement.epoch, int):  # stateless workers have none
                    self.hold(result.grain, placement.silo, placement.epoch)

    def hold(self, grain: str, silo_id: str, epoch: int) -> None:
        """The directory says `silo_id` holds activation `epoch` of `grain`. A silo this run does not
        simulate (another simulator's, say) runs it, not us: the grain is no longer ours to track."""
        self.drop(grain)
        if silo_id in self.by_id:
            self.holder[grain] = (silo_id, epoch)
            self.by_id[silo_id][1].grains.add(grain)

    def drop(self, grain: str) -> None:
        previous = self.holder.pop(grain, None)
        if previous is not None:
            self.by_id[previous[0]][1].grains.discard(grain)

    def deactivate(self) -> None:
        grains = list(self.holder)
        for grain in self.rng.sample(grains, int(len(grains) * self.args.deactivate)):
            silo_id, epoch = self.holder[grain]
            index = self.by_id[silo_id][0]
            response = delete_activation.sync_detailed(
                self.args.cluster, grain, client=self.client(index), silo=silo_id, epoch=epoch)
            if response.status_code == 204:
                self.tally.deactivated += 1
                self.drop(grain)
            elif response.status_code in (404, 409):
                self.resync(grain)  # moved or released meanwhile: ask the directory
            else:
                self.expect(response, type(None))

    def resync(self, grain: str) -> None:
        found = self.expect(get_activation.sync_detailed(self.args.cluster, grain, client=self.client()),
                            ActivationResponse, 404)
        if found is None:
            self.drop(grain)
        else:
            self.hold(grain, found.silo, found.epoch)

    def migrate(self) -> None:
        for i, silo in self.live():
            page = self.expect(list_migrations.sync_detailed(
                self.args.cluster, client=self.client(i), silo=silo.id, limit=200), MigrationPage)
            if page is None:
                continue
            for migration in page.migrations:
                # Handing a grain over takes a while: a silo carries a migration out --move-ticks after it saw it.
                first_seen = self.seen_migrations.setdefault(migration.id, self.ticks)
                if self.ticks - first_seen < self.args.move_ticks:
                    continue
                del self.seen_migrations[migration.id]
                if self.rng.random() < self.args.fail_rate:
                    if self.expect(fail_migration.sync_detailed(
                            self.args.cluster, migration.id, client=self.client(i)), MigrationFailed, 404):
                        self.tally.failed_moves += 1
                    continue
                done = self.expect(complete_migration.sync_detailed(
                    self.args.cluster, migration.id, client=self.client(i)), MigrationCompleted, 404, 409)
                if done is None:
                    self.tally.refused_moves += 1
                    self.resync(migration.grain)
                else:
                    self.tally.moved += 1
                    self.hold(migration.grain, migration.to, done.epoch)

    def report_edges(self) -> None:
        """Calls within each group (a ring) and a few across groups, sampled, as each silo would count them."""
        if self.groups == 0:
            return
        edges: list[Edge] = []
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
            if source in self.holder and target in self.holder and source != target:
                edges.append(Edge(from_=source, to=target, count=self.rng.randint(1, 20)))
        for start in range(0, len(edges), 10_000):
            accepted = self.expect(post_edges.sync_detailed(
                self.args.cluster, client=self.client(self.rng.randrange(len(self.silos))),
                body=EdgeBatch(edges=edges[start:start + 10_000])), EdgesAccepted, 429)
            if accepted is not None:
                self.tally.edges += accepted.accepted

    def tick(self, tick: int) -> None:
        self.ticks = tick
        self.heartbeat(tick)
        self.place()
        if tick % 2 == 1:
            self.deactivate()
        self.migrate()
        self.report_edges()
        counts = " ".join(f"{len(s.grains)}" if s.joined else "-" for s in self.silos)
        t = self.tally
        print(f"tick {tick:4d}  grains {len(self.holder):6d}  per silo [{counts}]  placed {t.placed}  "
              f"deactivated {t.deactivated}  moved {t.moved} (refused {t.refused_moves})  edges {t.edges}", flush=True)


def set_policy(args: argparse.Namespace, client: AuthenticatedClient) -> None:
    """A demo's policy: the rebalancer and the repartitioner on short timers; orders by consistent hash."""
    grain_types = PolicyInputGrainTypes()
    grain_types["order"] = GrainTypePolicyInput(strategy=Strategy.CONSISTENT_HASH)
    grain_types["session"] = GrainTypePolicyInput(strategy=Strategy.PREFER_LOCAL)
    policy = PolicyInput(
        default_strategy=Strategy.RESOURCE_OPTIMIZED,
        grain_types=grain_types,
        rebalancer=RebalancerOptionsInput(enabled=True, due_time_ms=args.rebalance_after * 1000,
                                          session_cycle_period_ms=2_000),
        repartitioner=RepartitionerOptionsInput(enabled=True, min_round_period_ms=6_000, max_round_period_ms=9_000,
                                                recovery_period_ms=6_000),
    )
    response = put_policy.sync_detailed(args.cluster, client=client, body=policy, if_match="*")
    if not isinstance(response.parsed, PolicyResponse):
        sys.exit(f"the policy was refused: {response.status_code} {response.content!r}")


def connect(args: argparse.Namespace) -> tuple[list[AuthenticatedClient], str | None]:
    """A client per replica, and the id of the key issued for this run (None when none was)."""
    token = args.key
    issued_id = None
    if token is None and args.admin_token:
        admin = AuthenticatedClient(base_url=args.url[0], token=args.admin_token)
        issued = admin_key(issue_key.sync_detailed(args.cluster, client=admin, body=NewKeyRequest(
            scopes=[Scope.SILO, Scope.OPERATOR], label="silo simulator")))
        token, issued_id = issued.key, issued.id
        print(f"issued key {issued.id} (silo, operator) for cluster {args.cluster}")
    # The generated operations all take an AuthenticatedClient (the spec declares a credential on each); in
    # open mode the oracle asks for none, and an empty Authorization header is ignored.
    if token is None:
        return [AuthenticatedClient(base_url=url, token="", prefix="") for url in args.url], None
    return [AuthenticatedClient(base_url=url, token=token) for url in args.url], issued_id


def revoke(args: argparse.Namespace, key_id: str) -> None:
    """The run's key goes with the run (a cluster holds at most 100)."""
    admin = AuthenticatedClient(base_url=args.url[0], token=args.admin_token)
    response = revoke_key.sync_detailed(args.cluster, key_id, client=admin)
    print(f"revoked key {key_id}" if response.status_code == 204
          else f"could not revoke key {key_id}: {response.status_code} {response.content!r}")


def admin_key(response: Response[IssuedKeyResponse | Problem]) -> IssuedKeyResponse:
    if not isinstance(response.parsed, IssuedKeyResponse):
        sys.exit(f"could not issue a key: {response.status_code} {response.content!r}")
    return response.parsed


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


def run(args: argparse.Namespace, clients: list[AuthenticatedClient], stop: Stop) -> Tally:
    """Ticks until the duration is up, Ctrl-C or SIGTERM; the tally of what was done."""
    simulation = Simulation(args, clients)
    print(f"{args.silos} silos ({min(args.late, args.silos - 1)} joining at tick {args.late_at}) of cluster "
          f"{args.cluster} on {', '.join(args.url)}")
    simulation.heartbeat(0)  # the cluster exists once a silo has sent a heartbeat
    if not args.no_policy:
        set_policy(args, clients[0])
    started = time.monotonic()
    tick = 1
    try:
        while not stop.requested and (args.duration == 0 or time.monotonic() - started < args.duration):
            began = time.monotonic()
            try:
                simulation.tick(tick)
            except httpx.TransportError as error:
                # A silo keeps running when the oracle is out of reach for a moment; it tries again next tick.
                simulation.tally.unreachable += 1
                print(f"tick {tick:4d}  the oracle is out of reach: {error}", flush=True)
            tick += 1
            time.sleep(max(0.0, args.tick - (time.monotonic() - began)))
    except KeyboardInterrupt:
        pass
    t = simulation.tally
    print(f"done after {tick - 1} ticks: {t.placed} placed, {t.deactivated} deactivated, {t.moved} migrations "
          f"completed ({t.refused_moves} refused, {t.failed_moves} failed on purpose), {t.edges} edges; "
          f"{t.unexpected} unexpected answers, {t.unreachable} ticks without the oracle")
    return t


def main(argv: list[str]) -> int:
    args = parse(argv)
    stop = Stop()
    clients, issued_key = connect(args)
    try:
        tally = run(args, clients, stop)
    finally:
        if issued_key is not None:
            try:
                revoke(args, issued_key)
            except httpx.TransportError as error:
                print(f"could not revoke key {issued_key}: {error}")
    return 1 if tally.unexpected else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
