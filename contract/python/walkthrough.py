"""The README's walk-through, through the Python client generated from the unmodified openapi/openapi.json.

Usage: ORACLE_ADMIN_TOKEN=… python walkthrough.py BASE_URL   (run by contract/clients.sh, which generates the client
first). With the admin token it issues itself a key of its cluster, and makes every other call with that key.
Every call goes through the generated functions and models; every check reads the typed result.
"""

import os
import secrets
import sys
from typing import TypeVar

import httpx

from placement_oracle_client import AuthenticatedClient
from placement_oracle_client.api.credentials import issue_key
from placement_oracle_client.api.connections import get_pool, post_connection, put_pool
from placement_oracle_client.api.directory import delete_activation, get_activation, post_placement, post_placement_batch
from placement_oracle_client.api.membership import drain_silo, get_silo, list_silos, post_heartbeat
from placement_oracle_client.api.migrations import complete_migration, list_migrations
from placement_oracle_client.api.policy import get_policy, put_policy
from placement_oracle_client.models import (
    ActivationResponse, ConnectionExplanation, ConnectionResponse, ConnectRule, DrainProgress, DrainResponse,
    Explanation, IssuedKeyResponse, NewKeyRequest, Scope, GrainTypePolicyInput, HeartbeatRequest, HeartbeatResponse, MembersInput, MigrationCompleted, MigrationPage,
    MigrationReason, Outcome, PlacementBatchRequest, PlacementBatchResponse, PlacementRequest,
    PlacementResponse, PolicyInput, PolicyInputGrainTypes, PolicyResponse, Pool, PoolInput, PreferredMatchFilter,
    PreferredMatchFilterInput, PreferredMatchFilterInputKind, Problem, RequiredMatchFilter, RequiredMatchFilterInput,
    RequiredMatchFilterInputKind, SiloListResponse, SiloResponse, SiloStatus, Strategy,
)
from placement_oracle_client.types import Response


T = TypeVar("T")


def ok(response: Response[T | Problem], kind: type[T], status: int = 200) -> T:
    """The typed body of a successful answer; on anything else, fail showing what the oracle sent."""
    assert response.status_code == status, f"expected {status}, got {response.status_code}: {response.content!r}"
    assert isinstance(response.parsed, kind), f"expected a {kind.__name__}, got {response.parsed!r}"
    return response.parsed


def bad(response: Response[T | Problem], status: int) -> Problem:
    """The typed problem of a refused request."""
    assert response.status_code == status, f"expected {status}, got {response.status_code}: {response.content!r}"
    assert isinstance(response.parsed, Problem), f"expected a Problem, got {response.parsed!r}"
    assert response.parsed.status == status and response.headers["content-type"] == "application/problem+json"
    return response.parsed


def main(base_url: str) -> None:
    sent: list[httpx.URL] = []  # the URL of every request, as it went on the wire

    def record(request: httpx.Request) -> None:
        sent.append(request.url)

    cluster = f"walk-py-{secrets.token_hex(4)}"
    silos = ["10.0.0.5:11111@1", "10.0.0.6:11111@1", "10.0.0.7:11111@1"]
    print(f"cluster {cluster}")

    # 0. The admin issues a key of the cluster, with both scopes; every later call uses it. A key that was never
    #    issued is refused (401), and the key cannot issue keys itself (403).
    admin = AuthenticatedClient(base_url=base_url, token=os.environ["ORACLE_ADMIN_TOKEN"], raise_on_unexpected_status=True)
    key = ok(issue_key.sync_detailed(cluster, client=admin, body=NewKeyRequest(
        scopes=[Scope.SILO, Scope.OPERATOR], label="python walk-through")), IssuedKeyResponse, 201)
    assert key.key.startswith(key.starts_with) and key.cluster == cluster, key
    client = AuthenticatedClient(base_url=base_url, token=key.key, raise_on_unexpected_status=True,
                                 httpx_args={"event_hooks": {"request": [record]}})
    stranger = AuthenticatedClient(base_url=base_url, token="pok_" + "0" * 16 + "_" + "0" * 64)
    bad(list_silos.sync_detailed(cluster, client=stranger), 401)
    bad(issue_key.sync_detailed(cluster, client=client, body=NewKeyRequest(scopes=[Scope.SILO])), 403)
    print(f"0. key {key.id} issued with scopes {[s.value for s in key.scopes]}")

    # a. Three silos report their load; the third reports only its CPU. The first two have role "storage".
    for i, silo in enumerate(silos):
        beat = HeartbeatRequest(silo=silo, cpu_usage=20.0 * (i + 1))
        if i < 2:
            beat.memory_usage_bytes, beat.max_available_memory_bytes = 4_000_000_000, 16_000_000_000
            beat.activation_count, beat.connection_count, beat.role = 100 * (i + 1), 10 * (i + 1), "storage"
        seen = ok(post_heartbeat.sync_detailed(cluster, client=client, body=beat), HeartbeatResponse)
        assert seen.silo == silo and seen.status == SiloStatus.ACTIVE and seen.load.cpu_usage == 20.0 * (i + 1)
        assert seen.lease_ms == seen.silo_ttl_ms - seen.silo_ttl_ms // 10, "the lease: the TTL less a tenth"
        assert seen.load.memory_usage_bytes == (4_000_000_000 if i < 2 else None)
    print("a. 3 heartbeats: all active")

    # b. Membership: the list (paged in id order), then one silo ('@' and ':' in the path).
    listed = ok(list_silos.sync_detailed(cluster, client=client, limit=100), SiloListResponse)
    assert [s.silo for s in listed.silos] == silos and listed.next_cursor is None and listed.cluster == cluster
    one = ok(get_silo.sync_detailed(cluster, silos[0], client=client), SiloResponse)
    assert one.silo == silos[0] and one.address == "10.0.0.5:11111" and one.role == "storage"
    print(f"b. listed {len(listed.silos)} silos; {one.silo} has smoothed cpu {one.smoothed.cpu_usage}")

    # c. Place user/alice with an explanation, then again: the same activation comes back.
    placed = ok(post_placement.sync_detailed(
        cluster, client=client, body=PlacementRequest(grain="user/alice", explain=True)), PlacementResponse)
    assert placed.outcome == Outcome.PLACED and placed.silo in silos and isinstance(placed.epoch, int)
    # (A nullable object the generated parser cannot read is handed back as a raw dict: check the class, not None.)
    assert isinstance(placed.explanation, Explanation), f"explanation not read as an Explanation: {placed.explanation}"
    assert sorted(placed.explanation.candidates) == silos, placed.explanation
    again = ok(post_placement.sync_detailed(
        cluster, client=client, body=PlacementRequest(grain="user/alice")), PlacementResponse)
    assert (again.outcome, again.silo, again.epoch, again.explanation) == (Outcome.EXISTING, placed.silo, placed.epoch, None)
    print(f"c. user/alice placed on {placed.silo}, epoch {placed.epoch}, rule {placed.explanation.rule}; then existing")

    # d. Directory lookup. The generated client percent-encodes the grain's '/' (user%2Falice); the oracle takes it.
    found = ok(get_activation.sync_detailed(cluster, "user/alice", client=client), ActivationResponse)
    assert sent[-1].raw_path.endswith(b"/activations/user%2Falice"), sent[-1]
    assert (found.grain, found.silo, found.epoch) == ("user/alice", placed.silo, placed.epoch)
    print(f"d. lookup of user/alice: {found.silo}, epoch {found.epoch}")

    # e. Three grains in one batch call: three results, each a placement.
    grains = ["order/1", "order/2", "order/3"]
    batch = ok(post_placement_batch.sync_detailed(cluster, client=client, body=PlacementBatchRequest(
        placements=[PlacementRequest(grain=g) for g in grains])), PlacementBatchResponse)
    assert [r.grain for r in batch.results] == grains
    for r in batch.results:
        assert r.error is None and isinstance(r.placement, PlacementResponse) and r.placement.outcome == Outcome.PLACED
    print(f"e. batch: {[r.placement.silo for r in batch.results if r.placement]}")

    # f. Policy: read it with its ETag, replace it with If-Match, then a stale If-Match is refused (412).
    read = get_policy.sync_detailed(cluster, client=client)
    etag = read.headers["ETag"]
    assert ok(read, PolicyResponse).policy.default_strategy == Strategy.RESOURCE_OPTIMIZED
    grain_types = PolicyInputGrainTypes()
    grain_types["session"] = GrainTypePolicyInput(strategy=Strategy.PREFER_LOCAL, filters=[
        RequiredMatchFilterInput(keys=["zone"], kind=RequiredMatchFilterInputKind.REQUIRED_MATCH),
        PreferredMatchFilterInput(keys=["rack"], kind=PreferredMatchFilterInputKind.PREFERRED_MATCH, min_candidates=2,
                                  order=1)])
    new_policy = PolicyInput(default_strategy=Strategy.ACTIVATION_COUNT, grain_types=grain_types)
    written = put_policy.sync_detailed(cluster, client=client, body=new_policy, if_match=etag)
    changed = ok(written, PolicyResponse)
    assert written.headers["ETag"] != etag and written.headers["ETag"] == f'"{changed.version}"'
    assert changed.policy.default_strategy == Strategy.ACTIVATION_COUNT
    session = changed.policy.grain_types["session"]
    required, preferred = session.filters
    assert session.strategy == Strategy.PREFER_LOCAL and isinstance(required, RequiredMatchFilter)
    assert isinstance(preferred, PreferredMatchFilter) and (preferred.keys, preferred.min_candidates) == (["rack"], 2)
    stale = bad(put_policy.sync_detailed(cluster, client=client, body=new_policy, if_match=etag), 412)
    print(f"f. policy {etag} -> {written.headers['ETag']}; stale If-Match: {stale.status} {stale.type_}")

    # g. A connection pool of the "storage" silos, read back whole, then asked for a node with an explanation.
    pool_in = PoolInput(members=MembersInput(role="storage"), rule=ConnectRule.CONNECTION_COUNT, ttl_seconds=5)
    ok(put_pool.sync_detailed(cluster, "storage", client=client, body=pool_in), Pool)
    pool = ok(get_pool.sync_detailed(cluster, "storage", client=client), Pool)
    assert (pool.rule, pool.ttl_seconds, pool.burst_aware) == (ConnectRule.CONNECTION_COUNT, 5, False)
    assert (pool.members.role, pool.members.silos, pool.members.metadata) == ("storage", None, None)
    node = ok(post_connection.sync_detailed(cluster, "storage", client=client, explain=True), ConnectionResponse)
    assert node.silo in silos[:2] and node.rule == ConnectRule.CONNECTION_COUNT
    assert isinstance(node.explanation, ConnectionExplanation), f"explanation not read: {node.explanation}"
    assert sorted(node.explanation.candidates) == silos[:2], node.explanation
    print(f"g. pool storage -> {node.silo} ({node.address}), figures {[(f.silo, f.value) for f in node.explanation.figures]}")

    # h. The silo deactivates user/alice, naming the activation (silo and epoch); the lookup then finds nothing.
    assert placed.epoch is not None
    gone = delete_activation.sync_detailed(cluster, "user/alice", client=client, silo=placed.silo, epoch=placed.epoch)
    assert gone.status_code == 204, f"expected 204, got {gone.status_code}: {gone.content!r}"
    missing = bad(get_activation.sync_detailed(cluster, "user/alice", client=client), 404)
    print(f"h. deactivated; lookup: {missing.status} {missing.type_}")

    # i. A CPU of 140 % is refused with a problem naming the field.
    refused = bad(post_heartbeat.sync_detailed(
        cluster, client=client, body=HeartbeatRequest(silo="10.0.0.9:11111@1", cpu_usage=140.0)), 422)
    assert refused.errors and refused.errors[0].field == "cpu_usage", refused
    print(f"i. cpu_usage 140: {refused.status} {refused.errors[0].field}: {refused.errors[0].message}")

    # j. A planned restart: the third silo (given five carts by hint) is drained, hands them over, has none left.
    carts = [PlacementRequest(grain=f"cart/{i}", hint=silos[2]) for i in range(5)]
    hinted = ok(post_placement_batch.sync_detailed(cluster, client=client, body=PlacementBatchRequest(placements=carts)),
                PlacementBatchResponse)
    assert all(r.placement and r.placement.silo == silos[2] for r in hinted.results), hinted
    drained = ok(drain_silo.sync_detailed(cluster, silos[2], client=client), DrainResponse)
    assert drained.silo.status == SiloStatus.SHUTTING_DOWN and isinstance(drained.silo.drain, DrainProgress)
    # The answer counts what this request issued; the lease holder's mover may have issued them a moment before it.
    issued = sum(t.migrations for t in drained.issued)
    assert issued in (0, 5) and all(t.silo in silos[:2] for t in drained.issued), drained.issued
    page = ok(list_migrations.sync_detailed(cluster, client=client, silo=silos[2], limit=1000), MigrationPage)
    assert len(page.migrations) == 5 and page.next_cursor is None, page.migrations
    for m in page.migrations:
        moved = ok(complete_migration.sync_detailed(cluster, m.id, client=client), MigrationCompleted)
        assert moved.migration.id == m.id and moved.epoch > m.epoch and m.reason == MigrationReason.DRAIN
    after = ok(get_silo.sync_detailed(cluster, silos[2], client=client), SiloResponse)
    assert isinstance(after.drain, DrainProgress), f"drain not read: {after.drain}"
    assert (after.drain.remaining_activations, after.drain.migrating) == (0, 0), after.drain
    print(f"j. drained {silos[2]} (planner {drained.planner}): {len(page.migrations)} grains moved, none left")
    print("python walk-through: OK")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: walkthrough.py BASE_URL")
    main(sys.argv[1])
