"""The SDK against a real oracle on Postgres: a process of the oracle's binary started here, alone
on its database, so that it can be stopped and started again (an oracle outage). Three SDK silos go
through placements and the registration rule, a deactivation, edge reports, a drain whose
migrations a worker hands over, the oracle gone for longer than their leases (paused, resumed, none
dead), and a silo declared dead that rejoins as its next generation.

    ORACLE_BINARY=target/debug/placement-oracle \\
    ORACLE_SDK_DATABASE_URL=postgres://postgres@127.0.0.1:5432/oracle_sdk \\
    python -m unittest discover -s sdk/python/tests -p 'test_integration.py'
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import tempfile
import time
import unittest
from typing import Any, Callable

import httpx

from placement_oracle_sdk import (
    EdgeReporter,
    ForwardTo,
    MigrationWorker,
    OracleClient,
    Placement,
    RunHere,
    Silo,
)

TTL_MS = 3_000
ADMIN = secrets.token_hex(32)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def until(what: str, check: Callable[[], bool], within: float = 15.0) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > within:
            raise AssertionError(f"{what}: not within {within} s")
        time.sleep(0.05)
    return time.monotonic() - started


class OracleProcess:
    def __init__(self) -> None:
        self.binary = os.environ["ORACLE_BINARY"]
        self.database_url = os.environ["ORACLE_SDK_DATABASE_URL"]
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="oracle-sdk-", suffix=".log", delete=False)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "DATABASE_URL": self.database_url,
            "ORACLE_LISTEN": f"127.0.0.1:{self.port}",
            "ORACLE_ADMIN_TOKEN": ADMIN,
            "ORACLE_LEASE_TTL_MS": "1000",
            "RUST_LOG": "warn",
        }
        self.process = subprocess.Popen([self.binary], env=env, stdout=self.log, stderr=self.log)
        until("the oracle is ready", self.ready, within=30)

    def ready(self) -> bool:
        try:
            return httpx.get(self.base + "/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()


class SdkAgainstTheOracle(unittest.TestCase):
    oracle: OracleProcess

    @classmethod
    def setUpClass(cls) -> None:
        cls.oracle = OracleProcess()
        cls.oracle.start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.oracle.kill()

    def admin(self, method: str, path: str, body: Any, **headers: str) -> Any:
        response = httpx.request(
            method,
            self.oracle.base + path,
            json=body,
            headers={"authorization": f"Bearer {ADMIN}", **headers},
        )
        self.assertLess(response.status_code, 300, response.text)
        return response.json()

    def test_a_cluster_of_sdk_silos_through_placements_a_drain_an_outage_and_a_death(self) -> None:
        cluster = f"sdk-{os.getpid()}"
        issued = self.admin("POST", f"/v1/clusters/{cluster}/keys", {"scopes": ["silo", "operator"]})
        client = OracleClient(self.oracle.base, cluster, key=issued["key"], timeout=1.0)
        self.admin("PUT", f"/v1/clusters/{cluster}/policy", {"silo_ttl_ms": TTL_MS}, **{"if-match": "*"})

        events: dict[str, list[str]] = {name: [] for name in "abc"}

        def silo(name: str, n: int) -> Silo:
            return Silo(
                client,
                f"10.0.0.{n}:11111",
                generation=1,
                interval=0.25,
                load=lambda: {"cpu_usage": 10.0},
                on_pause=lambda: events[name].append("pause"),
                on_resume=lambda: events[name].append("resume"),
                on_dead=lambda: events[name].append("dead"),
                on_leave=lambda: events[name].append("leave"),
            )

        a, b, c = silo("a", 1), silo("b", 2), silo("c", 3)
        for s in (a, b, c):
            s.join()
            self.assertTrue(s.may_run_grains())
        by_id = {s.silo_id: s for s in (a, b, c)}
        placements = {s.silo_id: Placement(client, s) for s in (a, b, c)}
        caller = Placement(client)

        # Placement: the silo named holds the registration; any other forwards to it.
        grains = [f"user/{i}" for i in range(30)]
        where: dict[str, tuple[str, int]] = {}
        for grain in grains:
            answer = caller.locate(grain)
            owner, epoch = answer["silo"], answer["epoch"]
            self.assertEqual(placements[owner].claim(grain), RunHere(grain, epoch, owner))
            other = next(s for s in by_id if s != owner)
            self.assertEqual(placements[other].claim(grain).__class__, ForwardTo)
            where[grain] = (owner, epoch)

        # A deactivation ends that epoch only; the grain is placed anew with a larger one.
        owner, epoch = where["user/0"]
        self.assertTrue(placements[owner].release("user/0", epoch))
        self.assertFalse(placements[owner].release("user/0", epoch), "already ended")
        caller.forget("user/0", epoch)
        again = caller.locate("user/0")
        self.assertGreater(again["epoch"], epoch)
        where["user/0"] = (again["silo"], again["epoch"])

        # Edge reports.
        edges = EdgeReporter(client)
        for i in range(0, 30, 2):
            for _ in range(3):
                edges.record_call(f"user/{i}", f"user/{i + 1}")
        self.assertEqual(edges.report_once(), 15)

        # A drain: c's grains are handed over by its worker, then c leaves.
        handed: list[str] = []

        def hand_over(migration: Any) -> bool:
            handed.append(str(migration["grain"]))  # the runtime's state transfer goes here
            return True

        worker = MigrationWorker(client, c, hand_over, interval=0.1)
        worker.start()
        on_c = {g for g, (s, _) in where.items() if s == c.silo_id}
        self.assertTrue(on_c, "the test places some grains on c")
        self.assertEqual(c.stop(drain_deadline=20), 0)
        self.assertEqual(events["c"], ["leave"], "told to stop what still ran, before the leave")
        self.assertFalse(c.may_run_grains())
        self.assertEqual(client.call("GET", f"/silos/{c.silo_id}").body["status"], "dead", "it left")
        worker.stop()
        self.assertEqual(set(handed), on_c)
        self.assertEqual(worker.completed, len(on_c))
        for grain in on_c:
            moved = client.call("GET", f"/activations/{grain.replace('/', '%2F')}").body
            self.assertNotEqual(moved["silo"], c.silo_id)
            self.assertGreater(moved["epoch"], where[grain][1])

        # The oracle gone for longer than a lease: grains pause, then resume; no one dies.
        self.oracle.kill()
        paused = until("a and b pause", lambda: not a.may_run_grains() and not b.may_run_grains())
        self.oracle.start()
        resumed = until("a and b resume", lambda: a.may_run_grains() and b.may_run_grains())
        for name in "ab":
            self.assertEqual(events[name], ["pause", "resume"], name)
        print(f"\noracle outage: leases ran out {paused:.2f} s after the kill; resumed {resumed:.2f} s after the restart")

        # b falls silent for longer than the TTL: declared dead; it drops its grains and rejoins.
        b.close()
        old_b = b.silo_id
        until(
            "b is declared dead",
            lambda: client.call("GET", f"/silos/{old_b}").body["status"] == "dead",
            within=20,
        )
        b.join()
        self.assertEqual(events["b"][-1], "dead")
        self.assertEqual(b.silo_id, "10.0.0.2:11111@2")
        self.assertTrue(b.may_run_grains())
        for grain in grains:
            answer = client.call("POST", "/placements", {"grain": grain}).body
            self.assertNotEqual(answer["silo"], old_b, "a dead silo's grains are placed anew")

        for s in (a, b):
            s.stop(drain_deadline=0.5)
        for name in "ab":
            self.assertEqual(events[name][-1], "leave", name)
        client.close()


if __name__ == "__main__":
    unittest.main()
