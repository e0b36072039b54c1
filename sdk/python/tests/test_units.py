"""Unit tests: lease arithmetic, backoff, edge aggregation bounds, the claim rule, and the client's
failover and problems (on httpx's MockTransport: no network)."""

from __future__ import annotations

import json
import random
import unittest

import httpx

from placement_oracle_sdk import (
    Backoff,
    EdgeCounter,
    ForwardTo,
    Lease,
    OracleClient,
    OracleError,
    RunHere,
    Silo,
    decide,
)
from placement_oracle_sdk.backoff import parse_retry_after
from placement_oracle_sdk.edges import MAX_EDGES_PER_REPORT


class LeaseTest(unittest.TestCase):
    def test_a_lease_counts_from_when_the_heartbeat_was_sent(self) -> None:
        lease = Lease()
        self.assertFalse(lease.holds(0.0))
        self.assertTrue(lease.grant(sent_at=10.0, lease_ms=9000, now=10.5))
        self.assertTrue(lease.holds(18.9))
        self.assertFalse(lease.holds(19.0))
        self.assertAlmostEqual(lease.remaining(15.0), 4.0)

    def test_a_later_acknowledgement_never_shortens_it(self) -> None:
        lease = Lease()
        lease.grant(sent_at=10.0, lease_ms=9000, now=10.1)
        self.assertFalse(lease.grant(sent_at=9.0, lease_ms=9000, now=10.2))
        self.assertEqual(lease.until, 19.0)
        self.assertTrue(lease.grant(sent_at=11.0, lease_ms=9000, now=11.1))
        self.assertEqual(lease.until, 20.0)

    def test_an_acknowledgement_after_its_lease_ran_out_grants_nothing(self) -> None:
        lease = Lease()
        self.assertFalse(lease.grant(sent_at=0.0, lease_ms=1000, now=1.5))
        self.assertFalse(lease.holds(1.5))


class BackoffTest(unittest.TestCase):
    def test_retry_after_wins_and_otherwise_it_grows_within_the_cap(self) -> None:
        backoff = Backoff(base=0.1, cap=1.0, rng=random.Random(7))
        self.assertEqual(backoff.next_delay(retry_after=3.0), 3.0)
        delays = [backoff.next_delay() for _ in range(8)]
        for attempt, delay in enumerate(delays, start=2):
            ceiling = min(1.0, 0.1 * 2 ** (attempt - 1))
            self.assertGreaterEqual(delay, ceiling / 2)
            self.assertLessEqual(delay, ceiling)
        again = Backoff(base=0.1, cap=1.0, rng=random.Random(7))
        again.next_delay(retry_after=3.0)
        self.assertEqual([again.next_delay() for _ in range(8)], delays, "one seed, one sequence")
        backoff.reset()
        self.assertLessEqual(backoff.next_delay(), 0.1)

    def test_retry_after_headers_are_read_as_seconds(self) -> None:
        self.assertEqual(parse_retry_after("1"), 1.0)
        self.assertIsNone(parse_retry_after(None))
        self.assertIsNone(parse_retry_after("soon"))
        self.assertIsNone(parse_retry_after("-3"))


class EdgeCounterTest(unittest.TestCase):
    def test_a_pair_and_its_reverse_are_one_edge_and_self_calls_are_left_out(self) -> None:
        edges = EdgeCounter()
        edges.record("user/a", "user/b")
        edges.record("user/b", "user/a", 2)
        edges.record("user/a", "user/a")
        [batch] = edges.take_batches()
        self.assertEqual([(e.from_grain, e.to_grain, e.count) for e in batch], [("user/a", "user/b", 3)])
        self.assertEqual(edges.take_batches(), [], "taking empties it")

    def test_memory_stays_bounded_and_what_does_not_fit_is_counted(self) -> None:
        edges = EdgeCounter(max_pairs=100)
        for i in range(250):
            edges.record(f"user/{i}", "user/hub")
        edges.record("user/0", "user/hub", 5)
        self.assertEqual(len(edges), 100)
        self.assertEqual(edges.dropped, 150)
        [batch] = edges.take_batches()
        self.assertIn(6, [e.count for e in batch], "a kept pair keeps counting")

    def test_batches_stay_within_the_oracles_limit(self) -> None:
        edges = EdgeCounter(max_pairs=25_000)
        for i in range(25_000):
            edges.record(f"user/{i}", f"order/{i}")
        batches = edges.take_batches()
        self.assertEqual([len(b) for b in batches], [MAX_EDGES_PER_REPORT, MAX_EDGES_PER_REPORT, 5_000])
        edges.put_back(batches[2])
        self.assertEqual(len(edges), 5_000)


class ClaimTest(unittest.TestCase):
    answer = {"grain": "user/a", "silo": "10.0.0.1:1@1", "address": "10.0.0.1:1", "epoch": 7, "outcome": "placed"}

    def test_its_own_id_means_run_here_under_that_epoch(self) -> None:
        self.assertEqual(decide("10.0.0.1:1@1", self.answer), RunHere("user/a", 7))

    def test_another_silo_means_forward_even_the_same_address_of_an_older_generation(self) -> None:
        self.assertEqual(decide("10.0.0.1:1@2", self.answer), ForwardTo("user/a", "10.0.0.1:1@1", "10.0.0.1:1", 7))

    def test_a_stateless_worker_runs_anywhere(self) -> None:
        stateless = {**self.answer, "outcome": "stateless", "epoch": None}
        self.assertEqual(decide("10.0.0.9:1@1", stateless), RunHere("user/a", None))


def problem(status: int, kind: str, retry_after: str | None = None) -> httpx.Response:
    headers = {"retry-after": retry_after} if retry_after else {}
    body = {"type": f"urn:placement-oracle:problem:{kind}", "detail": kind, "status": status}
    return httpx.Response(status, json=body, headers=headers)


class ClientTest(unittest.TestCase):
    def test_a_replica_that_fails_is_left_for_the_next_at_once(self) -> None:
        seen: list[str] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request.url.host)
            if request.url.host == "a":
                raise httpx.ConnectError("refused")
            if request.url.host == "b":
                return problem(503, "store-unavailable", "1")
            return httpx.Response(200, json={"ok": True})

        client = OracleClient(["http://a", "http://b", "http://c"], "demo", transport=httpx.MockTransport(handler))
        self.assertEqual(client.call("GET", "/silos").body, {"ok": True})
        self.assertEqual(seen, ["a", "b", "c"])
        client.call("GET", "/silos")
        self.assertEqual(seen[-1], "c", "the replica that answered is asked first next time")

    def test_problems_carry_their_type_and_retry_after(self) -> None:
        client = OracleClient("http://a", "demo", transport=httpx.MockTransport(lambda r: problem(429, "rate-limited", "2")))
        with self.assertRaises(OracleError) as raised:
            client.call("POST", "/heartbeats", {})
        self.assertEqual((raised.exception.status, raised.exception.problem), (429, "rate-limited"))
        self.assertEqual(raised.exception.retry_after, 2.0)
        self.assertTrue(raised.exception.retryable)


class SiloTest(unittest.TestCase):
    def test_told_dead_it_drops_its_grains_and_rejoins_as_the_next_generation(self) -> None:
        now = [100.0]
        beats: list[dict[str, object]] = []

        def handler(request: httpx.Request) -> httpx.Response:
            body = json.loads(request.content)
            beats.append(body)
            if body["silo"] == "10.0.0.1:1@5" and len(beats) > 2:
                return problem(409, "silo-declared-dead")
            return httpx.Response(200, json={"silo": body["silo"], "status": body["status"], "lease_ms": 9000})

        dropped: list[int] = []
        client = OracleClient("http://a", "demo", transport=httpx.MockTransport(handler))
        silo = Silo(client, "10.0.0.1:1", generation=5, clock=lambda: now[0], on_dead=lambda: dropped.append(1))
        silo.beat()
        silo.status = "active"
        silo.beat()
        self.assertTrue(silo.may_run_grains())
        now[0] = 103.0
        with self.assertRaises(OracleError):
            silo.beat()
        self.assertEqual(dropped, [1])
        self.assertFalse(silo.may_run_grains())
        self.assertEqual((silo.silo_id, silo.status), ("10.0.0.1:1@6", "joining"))
        silo.beat()
        self.assertTrue(silo.may_run_grains())
        self.assertEqual(beats[-1]["status"], "joining")

    def test_without_an_acknowledgement_the_lease_runs_out(self) -> None:
        now = [0.0]
        answers = [httpx.Response(200, json={"lease_ms": 9000}), problem(503, "store-unavailable", "1")]
        client = OracleClient("http://a", "demo", transport=httpx.MockTransport(lambda r: answers.pop(0)))
        silo = Silo(client, "10.0.0.1:1", generation=1, clock=lambda: now[0])
        silo.beat()
        now[0] = 5.0
        with self.assertRaises(OracleError):
            silo.beat()
        self.assertTrue(silo.may_run_grains(), "the lease held still runs")
        now[0] = 9.0
        self.assertFalse(silo.may_run_grains(), "paused when it runs out")
        self.assertGreaterEqual(silo._quiet_until, 6.0, "the next heartbeat waits as Retry-After said")


if __name__ == "__main__":
    unittest.main()
