"""Unit tests: lease arithmetic, backoff, edge aggregation bounds, the claim rule, the client's
failover and problems, batched placement, migrations still under way or refused, a silo's leave
(drain refused, deadline, death while stopping), hooks that raise, Retry-After bounded by the
lease, and heartbeat answers without a lease (on httpx's MockTransport: no network)."""

from __future__ import annotations

import json
import math
import random
import threading
import time
import unittest

import httpx

from typing import Any, Callable

from placement_oracle_sdk import (
    Backoff,
    EdgeCounter,
    EdgeReporter,
    ForwardTo,
    Lease,
    MigrationWorker,
    OracleClient,
    OracleError,
    Placement,
    RunHere,
    Silo,
    decide,
)
from placement_oracle_sdk.backoff import MAX_RETRY_AFTER, parse_retry_after
from placement_oracle_sdk.edges import MAX_EDGES_PER_REPORT, MAX_REPORT_BYTES


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

    def test_absurd_retry_after_values_are_ignored_or_bounded(self) -> None:
        for absurd in ("nan", "NaN", "inf", "-inf", "1e400", "-0.5", ""):
            self.assertIsNone(parse_retry_after(absurd), absurd)
        self.assertEqual(parse_retry_after("99999999999"), MAX_RETRY_AFTER)
        backoff = Backoff(base=0.1, cap=1.0, rng=random.Random(1))
        self.assertLessEqual(backoff.next_delay(math.nan), 0.1, "NaN is no Retry-After: it would wait forever")
        self.assertEqual(backoff.next_delay(math.inf), 30.0, "held to 30 times the cap")


class EdgeCounterTest(unittest.TestCase):
    def test_batches_of_long_ids_stay_within_the_report_size(self) -> None:
        edges = EdgeCounter(max_pairs=20_000)
        long = "x" * 200
        for i in range(5_000):
            edges.record(f"{long}/{i}", "hub")
        batches = edges.take_batches()
        self.assertGreater(len(batches), 1)
        for batch in batches:
            body = json.dumps({"edges": [{"from": e.from_grain, "to": e.to_grain, "count": e.count} for e in batch]})
            self.assertLessEqual(len(body.encode()), MAX_REPORT_BYTES)
        self.assertEqual(sum(len(b) for b in batches), 5_000)

    def test_a_refused_report_is_dropped_and_an_undelivered_one_counted_again(self) -> None:
        answers = [problem(422, "invalid-input"), problem(503, "store-unavailable", "1")]
        client = OracleClient("http://a", "demo", transport=httpx.MockTransport(lambda r: answers.pop(0)))
        reporter = EdgeReporter(client)
        reporter.record_call("user/a", "user/b", 3)
        with self.assertRaises(OracleError):
            reporter.report_once()
        self.assertEqual((len(reporter.counter), reporter.counter.dropped), (0, 3), "refused: dropped")
        reporter.record_call("user/a", "user/c", 2)
        with self.assertRaises(OracleError):
            reporter.report_once()
        self.assertEqual((len(reporter.counter), reporter.counter.dropped), (1, 3), "undelivered: kept")

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
        self.assertEqual(decide("10.0.0.1:1@1", self.answer), RunHere("user/a", 7, "10.0.0.1:1@1"))

    def test_another_silo_means_forward_even_the_same_address_of_an_older_generation(self) -> None:
        self.assertEqual(decide("10.0.0.1:1@2", self.answer), ForwardTo("user/a", "10.0.0.1:1@1", "10.0.0.1:1", 7))

    def test_a_stateless_worker_runs_anywhere(self) -> None:
        stateless = {**self.answer, "outcome": "stateless", "epoch": None}
        self.assertEqual(decide("10.0.0.9:1@1", stateless), RunHere("user/a", None, "10.0.0.9:1@1"))


def problem(status: int, kind: str, retry_after: str | None = None) -> httpx.Response:
    headers = {"retry-after": retry_after} if retry_after else {}
    body = {"type": f"urn:placement-oracle:problem:{kind}", "detail": kind, "status": status}
    return httpx.Response(status, json=body, headers=headers)


class ClientTest(unittest.TestCase):
    def test_a_proxy_answering_502_or_504_is_left_for_the_next_replica_as_503_is(self) -> None:
        seen: list[str] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request.url.host)
            if request.url.host == "a":
                return httpx.Response(502, text="<html>bad gateway</html>")
            if request.url.host == "b":
                return httpx.Response(504, text="<html>gateway timeout</html>")
            return httpx.Response(200, json={"ok": True})

        client = OracleClient(["http://a", "http://b", "http://c"], "demo", transport=httpx.MockTransport(handler))
        self.assertEqual(client.call("GET", "/silos").body, {"ok": True})
        self.assertEqual(seen, ["a", "b", "c"])
        for status in (502, 503, 504):
            alone = OracleClient("http://a", "demo", transport=httpx.MockTransport(lambda r, s=status: httpx.Response(s)))
            with self.assertRaises(OracleError) as raised:
                alone.call("GET", "/silos")
            self.assertEqual(raised.exception.status, status)
            self.assertTrue(raised.exception.retryable, status)
        self.assertFalse(OracleError(500, "internal", "").retryable)

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

    def test_headers_go_with_the_one_request(self) -> None:
        seen: list[str | None] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request.headers.get("if-match"))
            return httpx.Response(200, json={})

        client = OracleClient("http://a", "demo", transport=httpx.MockTransport(handler))
        client.call("PUT", "/policy", {}, headers={"if-match": "*"})
        client.call("GET", "/policy")
        self.assertEqual(seen, ["*", None])


def placed(grain: str, silo: str, epoch: int) -> dict[str, Any]:
    return {"grain": grain, "silo": silo, "address": silo.split("@")[0], "epoch": epoch, "outcome": "placed"}


class BatchPlacementTest(unittest.TestCase):
    def setUp(self) -> None:
        self.bodies: list[dict[str, Any]] = []

        def handler(request: httpx.Request) -> httpx.Response:
            self.assertEqual(request.url.path, "/v1/clusters/demo/placements/batch")
            body = json.loads(request.content)
            self.bodies.append(body)
            results: list[dict[str, Any]] = []
            for i, item in enumerate(body["placements"]):
                if item["grain"] == "user/bad":
                    error = {"type": "urn:placement-oracle:problem:no-compatible-silo", "status": 409, "detail": "none"}
                    results.append({"grain": item["grain"], "placement": None, "error": error})
                else:
                    silo = "10.0.0.1:1@1" if i % 2 == 0 else "10.0.0.2:1@1"
                    results.append({"grain": item["grain"], "placement": placed(item["grain"], silo, i + 1), "error": None})
            return httpx.Response(200, json={"results": results})

        self.client = OracleClient("http://a", "demo", transport=httpx.MockTransport(handler))

    def test_claims_in_batches_ask_as_the_silo_and_apply_the_rule_per_grain(self) -> None:
        silo = Silo(self.client, "10.0.0.1:1", generation=1)
        grains = [f"user/{i}" for i in range(1500)] + ["user/bad", "user/0"]
        claims = Placement(self.client, silo).claim_many(grains)
        self.assertEqual([len(b["placements"]) for b in self.bodies], [1000, 501], "a thousand a call, each grain once")
        self.assertTrue(all(p["requesting_silo"] == "10.0.0.1:1@1" for b in self.bodies for p in b["placements"]))
        self.assertEqual(claims["user/0"], RunHere("user/0", 1, "10.0.0.1:1@1"))
        self.assertEqual(claims["user/1"], ForwardTo("user/1", "10.0.0.2:1@1", "10.0.0.2:1", 2))
        bad = claims["user/bad"]
        assert isinstance(bad, OracleError)
        self.assertEqual((bad.status, bad.problem), (409, "no-compatible-silo"))

    def test_located_answers_are_kept_and_only_the_rest_is_asked(self) -> None:
        now = [0.0]
        placement = Placement(self.client, clock=lambda: now[0])
        first = placement.locate_many(["user/a", "user/b"])
        self.assertNotIn("requesting_silo", self.bodies[0]["placements"][0], "callers do not claim")
        self.assertEqual(first["user/b"], placed("user/b", "10.0.0.2:1@1", 2))
        placement.forget("user/a", 1)
        placement.locate_many(["user/a", "user/b"])
        self.assertEqual([p["grain"] for p in self.bodies[1]["placements"]], ["user/a"], "user/b was kept")
        now[0] = 5.0
        placement.locate_many(["user/b"])
        self.assertEqual(len(self.bodies), 3, "a kept answer lasts cache_ttl")


class MigrationWorkerTest(unittest.TestCase):
    migration = {"id": 17, "grain": "user/a", "from": "10.0.0.1:1@1", "to": "10.0.0.2:1@1", "reason": "rebalance", "epoch": 3, "created_at_ms": 0}

    def worker(self, complete: httpx.Response, hand_over: list[bool | None]) -> tuple[MigrationWorker, list[str]]:
        calls: list[str] = []

        def handler(request: httpx.Request) -> httpx.Response:
            calls.append(f"{request.method} {request.url.path}")
            self.assertEqual(request.content, b"", "the routes take no body")
            if request.method == "GET":
                return httpx.Response(200, json={"migrations": [self.migration], "next_cursor": None})
            return complete

        client = OracleClient("http://a", "demo", transport=httpx.MockTransport(handler))
        worker = MigrationWorker(client, Silo(client, "10.0.0.1:1", generation=1), hand_over=lambda m: hand_over.pop(0),
                                 on_moved=lambda m, epoch: self.moved.append(epoch),
                                 on_refused=lambda m, error: self.refused.append(error.problem))
        return worker, calls

    def setUp(self) -> None:
        self.moved: list[int] = []
        self.refused: list[str] = []

    def test_a_hand_over_under_way_leaves_the_migration_open_until_it_is_done(self) -> None:
        answer = httpx.Response(200, json={"epoch": 4, "migration": self.migration})
        worker, calls = self.worker(answer, [None, True])
        self.assertEqual(worker.poll_once(), 0)
        self.assertEqual(calls, ["GET /v1/clusters/demo/migrations"], "neither completed nor failed yet")
        self.assertEqual(worker.poll_once(), 1)
        self.assertEqual(calls[-1], "POST /v1/clusters/demo/migrations/17/complete")
        self.assertEqual((self.moved, worker.completed), ([4], 1))

    def test_a_refused_completion_is_told_and_ends_the_migration(self) -> None:
        worker, calls = self.worker(problem(409, "migration-refused"), [True])
        self.assertEqual(worker.poll_once(), 1)
        self.assertEqual((self.moved, self.refused, worker.refused), ([], ["migration-refused"], 1))

    def test_a_failed_hand_over_fails_the_migration_and_is_no_refusal(self) -> None:
        worker, calls = self.worker(problem(404, "not-found"), [False])
        self.assertEqual(worker.poll_once(), 1)
        self.assertEqual(calls[-1], "POST /v1/clusters/demo/migrations/17/fail")
        self.assertEqual((self.refused, worker.failed), ([], 0))


class EdgeReporterTest(unittest.TestCase):
    def test_calls_counted_in_batches_are_reported_as_one_edge(self) -> None:
        sent: list[dict[str, Any]] = []

        def handler(request: httpx.Request) -> httpx.Response:
            sent.append(json.loads(request.content))
            return httpx.Response(202, json={"accepted": 1, "ignored": 0, "dropped": 0})

        reporter = EdgeReporter(OracleClient("http://a", "demo", transport=httpx.MockTransport(handler)))
        reporter.record_call("user/a", "user/b", 5)
        reporter.record_call("user/b", "user/a")
        self.assertEqual(reporter.report_once(), 1)
        self.assertEqual(sent, [{"edges": [{"from": "user/a", "to": "user/b", "count": 6}]}])


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

    def test_a_heartbeat_waits_a_third_of_the_last_lease_for_one_replica(self) -> None:
        # What httpx is told to wait for each attempt: a replica that never answers (frozen, its
        # VM paused) holds a heartbeat no longer, so the next is tried within the lease.
        waited: list[float] = []

        def handler(request: httpx.Request) -> httpx.Response:
            waited.append(request.extensions["timeout"]["read"])
            return httpx.Response(200, json={"lease_ms": 900})

        client = OracleClient("http://a", "demo", timeout=2.0, transport=httpx.MockTransport(handler))
        silo = Silo(client, "10.0.0.1:1", generation=1)
        silo.beat()
        silo.beat()
        self.assertEqual(waited[0], 2.0, "no lease yet: the client's timeout")
        self.assertAlmostEqual(waited[1], 0.3)

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


class SiloLeaseTest(unittest.TestCase):
    def test_an_answer_to_an_incarnation_declared_dead_meanwhile_grants_the_next_one_nothing(self) -> None:
        silo: Silo
        calls: list[int] = []

        def handler(request: httpx.Request) -> httpx.Response:
            calls.append(1)
            if len(calls) == 1:  # another thread was told of the death while this one was on its way
                silo._declared_dead(silo.generation)
            return httpx.Response(200, json={"lease_ms": 9000})

        client = OracleClient("http://a", "demo", transport=httpx.MockTransport(handler))
        silo = Silo(client, "10.0.0.1:1", generation=1)
        self.assertFalse(silo.beat(), "not acknowledged for the incarnation now current")
        self.assertEqual(silo.silo_id, "10.0.0.1:1@2")
        self.assertFalse(silo.may_run_grains(), "generation 2 has not joined")
        self.assertEqual(silo.lease.until, 0.0)
        self.assertTrue(silo.beat())
        self.assertTrue(silo.may_run_grains_as("10.0.0.1:1@2"))
        self.assertFalse(silo.may_run_grains_as("10.0.0.1:1@1"), "a claim of generation 1 is not run")

    def test_grains_pause_when_the_lease_runs_out_not_at_the_next_tick(self) -> None:
        down = threading.Event()

        def handler(request: httpx.Request) -> httpx.Response:
            if down.is_set():
                return problem(503, "store-unavailable")
            return httpx.Response(200, json={"lease_ms": 300})

        paused = threading.Event()
        client = OracleClient("http://a", "demo", transport=httpx.MockTransport(handler))
        silo = Silo(client, "10.0.0.1:1", generation=1, interval=30.0, on_pause=paused.set)
        silo.join()
        down.set()
        try:
            self.assertTrue(paused.wait(5.0), "paused long before the 30 s tick")
            self.assertFalse(silo.may_run_grains())
        finally:
            silo.close()



def until(what: str, check: Callable[[], bool], within: float = 5.0) -> None:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > within:
            raise AssertionError(f"{what}: not within {within} s")
        time.sleep(0.005)


SILO_PATH = "/v1/clusters/demo/silos/10.0.0.1%3A1%401"


class SiloLeaveTest(unittest.TestCase):
    """Leaving releases the registrations: no grain may run here from just before the DELETE."""

    def oracle(self, drain: httpx.Response, remaining: list[int]) -> tuple[OracleClient, list[str]]:
        calls: list[str] = []

        def handler(request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/heartbeats"):
                body = json.loads(request.content)
                calls.append(f"heartbeat {body['silo']} {body['status']}")
                return httpx.Response(200, json={"lease_ms": 9000})
            calls.append(f"{request.method} {request.url.raw_path.decode()}")
            if request.url.path.endswith("/drain"):
                return drain
            if request.method == "GET":
                left = remaining.pop(0) if len(remaining) > 1 else remaining[0]
                return httpx.Response(200, json={"drain": {"remaining_activations": left}})
            return httpx.Response(200, json={"released_activations": 0, "release_pending": False})

        return OracleClient("http://a", "demo", transport=httpx.MockTransport(handler)), calls

    def test_at_the_drain_deadline_the_grains_still_running_stop_before_the_leave(self) -> None:
        client, calls = self.oracle(httpx.Response(200, json={"migrations": []}), [3])
        seen: list[tuple[bool, int]] = []
        silo: Silo

        def on_leave() -> None:
            seen.append((silo.may_run_grains_as("10.0.0.1:1@1"), len(calls)))

        silo = Silo(client, "10.0.0.1:1", generation=1, interval=30.0, on_leave=on_leave)
        silo.join()
        self.assertTrue(silo.may_run_grains())
        self.assertEqual(silo.stop(drain_deadline=0.05, poll=0.01), 3, "how many remained when it left")
        self.assertEqual(len(seen), 1)
        may_run, calls_before = seen[0]
        self.assertFalse(may_run, "no grain may run once it is leaving")
        self.assertEqual(calls[calls_before:], [f"DELETE {SILO_PATH}"], "on_leave comes before the DELETE")
        self.assertFalse(silo.may_run_grains(), "nor after: the lease it still holds is no longer its to run")

    def test_the_leave_is_sent_even_when_the_drain_is_refused(self) -> None:
        client, calls = self.oracle(problem(403, "forbidden"), [0])
        left: list[str] = []
        silo = Silo(client, "10.0.0.1:1", generation=1, interval=30.0, on_leave=lambda: left.append("leave"))
        silo.join()
        with self.assertRaises(OracleError) as raised:
            silo.stop(drain_deadline=1.0)
        self.assertEqual(raised.exception.problem, "forbidden", "what the drain was told is what stop raises")
        self.assertEqual(calls[-2:], [f"POST {SILO_PATH}/drain", f"DELETE {SILO_PATH}"])
        self.assertEqual(left, ["leave"])
        self.assertFalse(silo.may_run_grains())

    def test_leave_stops_the_grains_and_leaves_at_once_without_a_drain(self) -> None:
        client, calls = self.oracle(httpx.Response(200, json={}), [0])
        left: list[str] = []
        silo = Silo(client, "10.0.0.1:1", generation=1, interval=0.01, on_leave=lambda: left.append("leave"))
        silo.join()
        silo.leave()
        self.assertEqual(left, ["leave"])
        self.assertEqual([c for c in calls if not c.startswith("heartbeat")], [f"DELETE {SILO_PATH}"])
        sent = len(calls)
        time.sleep(0.05)
        self.assertEqual(len(calls), sent, "no heartbeat after leaving")
        self.assertFalse(silo.may_run_grains())

    def test_a_death_while_stopping_ends_it_no_rejoin_and_the_leave_goes_to_that_incarnation(self) -> None:
        dead = threading.Event()
        calls: list[str] = []

        def handler(request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/heartbeats"):
                body = json.loads(request.content)
                calls.append(f"heartbeat {body['silo']} {body['status']}")
                if dead.is_set():
                    return problem(409, "silo-declared-dead")
                return httpx.Response(200, json={"lease_ms": 9000})
            calls.append(f"{request.method} {request.url.raw_path.decode()}")
            if request.url.path.endswith("/drain"):
                dead.set()  # the oracle judges the silo dead while it drains
                return httpx.Response(200, json={"migrations": []})
            if request.method == "GET":
                return httpx.Response(200, json={"drain": {"remaining_activations": 5}})
            return httpx.Response(200, json={"released_activations": 0, "release_pending": False})

        events: list[str] = []
        client = OracleClient("http://a", "demo", transport=httpx.MockTransport(handler))
        silo = Silo(client, "10.0.0.1:1", generation=1, interval=0.01,
                    on_dead=lambda: events.append("dead"), on_leave=lambda: events.append("leave"))
        silo.join()
        started = time.monotonic()
        silo.stop(drain_deadline=10.0, poll=0.01)
        self.assertLess(time.monotonic() - started, 5.0, "the death ended the wait for the drain")
        self.assertEqual(events, ["dead"], "its grains were dropped once; nothing is left to stop")
        self.assertEqual((silo.deaths, silo.silo_id), (1, "10.0.0.1:1@1"), "no next generation")
        self.assertFalse([c for c in calls if "@2" in c], "nothing sent for a next generation")
        self.assertEqual(calls[-1], f"DELETE {SILO_PATH}")
        self.assertFalse(silo.may_run_grains())


class HookFailureTest(unittest.TestCase):
    """A runtime's hook that raises is logged; the silo goes on heartbeating and keeps its state."""

    def test_an_on_pause_that_raises_does_not_stop_the_silos_timer(self) -> None:
        down = threading.Event()

        def handler(request: httpx.Request) -> httpx.Response:
            if down.is_set():
                return problem(503, "store-unavailable")
            return httpx.Response(200, json={"lease_ms": 200})

        events: list[str] = []

        def on_pause() -> None:
            events.append("pause")
            raise RuntimeError("the runtime's bug")

        client = OracleClient("http://a", "demo", transport=httpx.MockTransport(handler))
        silo = Silo(client, "10.0.0.1:1", generation=1, interval=0.02, on_pause=on_pause,
                    on_resume=lambda: events.append("resume"))
        with self.assertLogs("placement_oracle_sdk", "ERROR") as logged:
            silo.join()
            try:
                down.set()
                until("paused", lambda: events == ["pause"])
                down.clear()
                until("resumed after the hook raised", lambda: events == ["pause", "resume"])
                self.assertTrue(silo.may_run_grains())
            finally:
                silo.close()
        self.assertIn("on_pause of silo 10.0.0.1:1@1 raised", logged.output[0])

    def test_an_on_dead_that_raises_still_rejoins_and_a_load_that_raises_still_heartbeats(self) -> None:
        beats: list[dict[str, Any]] = []

        def handler(request: httpx.Request) -> httpx.Response:
            body = json.loads(request.content)
            beats.append(body)
            if body["silo"] == "10.0.0.1:1@1":
                return problem(409, "silo-declared-dead")
            return httpx.Response(200, json={"lease_ms": 9000})

        def broken() -> dict[str, Any]:
            raise ValueError("no load figures today")

        def on_dead() -> None:
            raise RuntimeError("could not drop")

        client = OracleClient("http://a", "demo", transport=httpx.MockTransport(handler))
        silo = Silo(client, "10.0.0.1:1", generation=1, load=broken, on_dead=on_dead)
        with self.assertLogs("placement_oracle_sdk", "ERROR") as logged:
            with self.assertRaises(OracleError):
                silo.beat()
            self.assertFalse(silo._dropping, "the flag is reset whatever on_dead did")
            self.assertTrue(silo.beat(), "the next generation heartbeats")
        self.assertTrue(silo.may_run_grains_as("10.0.0.1:1@2"))
        self.assertEqual(beats[-1], {"address": "10.0.0.1:1", "silo": "10.0.0.1:1@2", "status": "joining"})
        self.assertTrue(any("on_dead of silo" in line for line in logged.output))
        self.assertTrue(any("load of silo" in line for line in logged.output))

    def test_an_on_leave_that_raises_still_leaves(self) -> None:
        deleted: list[str] = []

        def handler(request: httpx.Request) -> httpx.Response:
            if request.method == "DELETE":
                deleted.append(request.url.raw_path.decode())
            return httpx.Response(200, json={"lease_ms": 9000})

        def on_leave() -> None:
            raise RuntimeError("could not stop")

        silo = Silo(OracleClient("http://a", "demo", transport=httpx.MockTransport(handler)), "10.0.0.1:1",
                    generation=1, on_leave=on_leave)
        with self.assertLogs("placement_oracle_sdk", "ERROR"):
            silo.leave()
        self.assertEqual(deleted, [SILO_PATH])
        self.assertFalse(silo.may_run_grains())


class HeartbeatAnswerTest(unittest.TestCase):
    def test_retry_after_never_keeps_a_silo_quiet_for_more_than_half_its_lease(self) -> None:
        now = [0.0]
        answers = [httpx.Response(200, json={"lease_ms": 9000}), problem(429, "rate-limited", "30")]
        client = OracleClient("http://a", "demo", transport=httpx.MockTransport(lambda r: answers.pop(0)))
        silo = Silo(client, "10.0.0.1:1", generation=1, interval=1.0, clock=lambda: now[0])
        silo.beat()
        now[0] = 1.0
        with self.assertRaises(OracleError):
            silo.beat()
        self.assertEqual(silo._quiet_until, 1.0 + 4.0, "half of the 8 s it still holds, not 30 s")

    def test_without_a_lease_retry_after_is_held_to_the_interval(self) -> None:
        now = [0.0]
        client = OracleClient("http://a", "demo", transport=httpx.MockTransport(lambda r: problem(503, "overloaded", "30")))
        silo = Silo(client, "10.0.0.1:1", generation=1, interval=2.0, clock=lambda: now[0])
        with self.assertRaises(OracleError):
            silo.beat()
        self.assertEqual(silo._quiet_until, 2.0)

    def test_a_short_retry_after_is_waited_as_given(self) -> None:
        now = [0.0]
        answers = [httpx.Response(200, json={"lease_ms": 9000}), problem(429, "rate-limited", "1")]
        client = OracleClient("http://a", "demo", transport=httpx.MockTransport(lambda r: answers.pop(0)))
        silo = Silo(client, "10.0.0.1:1", generation=1, interval=0.5, clock=lambda: now[0])
        silo.beat()
        with self.assertRaises(OracleError):
            silo.beat()
        self.assertEqual(silo._quiet_until, 1.0)

    def test_a_200_without_a_numeric_lease_is_an_unexpected_answer_and_grants_nothing(self) -> None:
        for answer in (
            httpx.Response(200, json={"silo": "10.0.0.1:1@1"}),
            httpx.Response(200, json={"lease_ms": "9000"}),
            httpx.Response(200, json={"lease_ms": None}),
            httpx.Response(200, json={"lease_ms": True}),
            httpx.Response(200, json=[9000]),
            httpx.Response(200, content=b'{"lease_ms": NaN}'),
            httpx.Response(200, content=b'{"lease_ms": Infinity}'),
            httpx.Response(200),
        ):
            client = OracleClient("http://a", "demo", transport=httpx.MockTransport(lambda r, a=answer: a))
            silo = Silo(client, "10.0.0.1:1", generation=1)
            with self.assertRaises(OracleError) as raised:
                silo.beat()
            self.assertEqual((raised.exception.status, raised.exception.problem), (0, "unexpected-answer"))
            self.assertFalse(silo.may_run_grains())

    def test_an_answer_for_the_incarnation_before_a_death_does_not_make_the_next_one_active(self) -> None:
        silo: Silo

        def handler(request: httpx.Request) -> httpx.Response:
            if json.loads(request.content)["silo"].endswith("@1"):
                silo._declared_dead(1)  # told of the death on another thread meanwhile
            return httpx.Response(200, json={"lease_ms": 9000})

        silo = Silo(OracleClient("http://a", "demo", transport=httpx.MockTransport(handler)), "10.0.0.1:1", generation=1)
        silo.status = "active"
        silo._beat_quietly()
        self.assertEqual((silo.silo_id, silo.status), ("10.0.0.1:1@2", "joining"),
                         "generation 2 goes active on its own acknowledgement only")
        silo._beat_quietly()
        self.assertEqual(silo.status, "active")


if __name__ == "__main__":
    unittest.main()
