"""A silo's membership: it joins (`joining`, then `active`), heartbeats on a timer with the load
its host reports, and tracks its lease; it says whether it may run grains now; it backs off as
`Retry-After` says; it pauses its grains when the lease runs out (the oracle unreachable) and
resumes them when a heartbeat is acknowledged; told dead, it drops every grain and rejoins as the
next generation. `stop()` drains: the oracle issues migrations for its grains (a
`MigrationWorker` carries them out), it waits for none to remain or a deadline, and leaves.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping
from urllib.parse import quote

from .backoff import Backoff
from .client import OracleClient, OracleError
from .lease import Lease

log = logging.getLogger("placement_oracle_sdk")

Load = Callable[[], Mapping[str, Any]]
Hook = Callable[[], None]


def _nothing() -> None:
    pass


class Silo:
    def __init__(
        self,
        client: OracleClient,
        address: str,
        *,
        generation: int | None = None,
        load: Load = dict,
        grain_types: list[str] | None = None,
        role: str | None = None,
        metadata: Mapping[str, str] | None = None,
        interval: float = 1.0,
        on_pause: Hook = _nothing,
        on_resume: Hook = _nothing,
        on_dead: Hook = _nothing,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
    ) -> None:
        self.client = client
        self.address = address
        self.generation = generation if generation is not None else int(time.time() * 1000)
        self.load = load
        self.fixed: dict[str, Any] = {"address": address}
        if grain_types is not None:
            self.fixed["grain_types"] = grain_types
        if role is not None:
            self.fixed["role"] = role
        if metadata is not None:
            self.fixed["metadata"] = dict(metadata)
        self.interval = interval
        self.on_pause, self.on_resume, self.on_dead = on_pause, on_resume, on_dead
        self.clock = clock
        self.backoff = backoff or Backoff()
        self.lease = Lease()
        self.status = "joining"
        self.deaths = 0
        self._quiet_until = 0.0
        self._running = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        # Set while `on_dead` drops the grains of an incarnation told it is dead: nothing is sent
        # for the next generation until it has.
        self._dropping = False
        self._thread: threading.Thread | None = None
        self._beats: ThreadPoolExecutor | None = None

    @property
    def silo_id(self) -> str:
        return f"{self.address}@{self.generation}"

    def may_run_grains(self) -> bool:
        """Whether the silo holds its lease now: run grains only while this is true."""
        with self._lock:
            return not self._dropping and self.lease.holds(self.clock())

    def may_run_grains_as(self, silo_id: str) -> bool:
        """As `may_run_grains`, and the silo is still incarnation `silo_id`: a claim made before
        the silo was declared dead and rejoined is not the new incarnation's to run."""
        with self._lock:
            return (
                not self._dropping
                and self.silo_id == silo_id
                and self.lease.holds(self.clock())
            )

    def join(self, timeout: float = 10.0) -> None:
        """Joins (one `joining` heartbeat, then `active`) and starts the timer. A silo told it
        is dead on the way rejoins as the next generation."""
        deadline = self.clock() + timeout
        while True:
            try:
                self.beat()
                if self.status == "joining":
                    self.status = "active"
                    self.beat()
                break
            except OracleError as error:
                if self.clock() >= deadline:
                    raise
                if error.problem == "silo-declared-dead":
                    continue
                if not error.retryable:
                    raise
                time.sleep(self.backoff.next_delay(error.retry_after))
        self._stop.clear()
        self._wake.clear()
        self._beats = ThreadPoolExecutor(max_workers=4, thread_name_prefix="heartbeat")
        self._thread = threading.Thread(target=self._run, name=f"silo {self.silo_id}", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        """One heartbeat, now. Raises what the oracle refused (a death is handled first)."""
        with self._lock:
            if self._dropping:
                raise OracleError(409, "silo-declared-dead", f"{self.silo_id} is dropping its grains")
            generation = self.generation
        sent_at = self.clock()
        body: dict[str, Any] = {**self.fixed, **self.load(), "silo": f"{self.address}@{generation}"}
        body["status"] = self.status
        try:
            answer = self.client.call("POST", "/heartbeats", body)
        except OracleError as error:
            if error.problem == "silo-declared-dead":
                self._declared_dead(generation)
            elif error.retryable:
                self._quiet_until = self.clock() + self.backoff.next_delay(error.retry_after)
            raise
        self.backoff.reset()
        with self._lock:
            if self.generation != generation or self._dropping:
                return  # an answer to an incarnation that is gone grants the next one nothing
            granted = self.lease.grant(sent_at, int(answer.body["lease_ms"]), self.clock())
        self._running = self._running or granted
        if granted:
            self._wake.set()

    def _declared_dead(self, generation: int) -> None:
        """Drops every grain (through `on_dead`) before the next generation heartbeats."""
        with self._lock:
            if self.generation != generation or self._dropping:
                return
            old = self.silo_id
            self._dropping = True
            self.status = "joining"
            self.lease = Lease()
            self.deaths += 1
            self.generation += 1
        self._running = False
        log.warning("silo %s was declared dead: its grains are dropped; rejoining as %s", old, self.silo_id)
        try:
            self.on_dead()
        finally:
            with self._lock:
                self._dropping = False
            self._wake.set()

    def _run(self) -> None:
        """Heartbeats every `interval` (each on a pool thread: a slow one does not hold back the
        next), and calls `on_pause` the moment the lease runs out and `on_resume` when an
        acknowledgement grants it again, from this one thread so that they come in order."""
        holding, paused, deaths = self.may_run_grains(), False, self.deaths
        next_beat = self.clock() + self.interval
        while not self._stop.is_set():
            wait = max(0.0, next_beat - self.clock())
            with self._lock:
                remaining = self.lease.remaining(self.clock())
            if holding and remaining > 0:
                wait = min(wait, remaining)
            self._wake.wait(wait)
            self._wake.clear()
            if self._stop.is_set():
                return
            now = self.clock()
            if now >= next_beat:
                next_beat = now + self.interval
                if now >= self._quiet_until and self._beats is not None and not self._dropping:
                    self._beats.submit(self._beat_quietly)
            holds = self.may_run_grains()
            if self.deaths != deaths:  # dropped, not paused: the next generation starts afresh
                holding, paused, deaths = holds, False, self.deaths
                continue
            if holding and not holds and self._running:
                paused = True
                log.warning("silo %s lost its lease: grains pause", self.silo_id)
                self.on_pause()
            elif not holding and holds and paused:
                paused = False
                log.info("silo %s holds its lease again: grains resume", self.silo_id)
                self.on_resume()
            holding = holds

    def _beat_quietly(self) -> None:
        try:
            self.beat()
            if self.status == "joining":
                self.status = "active"
        except OracleError as error:
            log.debug("heartbeat of %s: %s", self.silo_id, error)

    def stop(self, drain_deadline: float = 30.0, poll: float = 0.2) -> int:
        """Drains and leaves: asks the oracle to move every grain away (carried out by the silo's
        `MigrationWorker`, which must keep running), waits until none remains or the deadline,
        then leaves. Returns how many activations remained when it left."""
        path = f"/silos/{quote(self.silo_id, safe='')}"
        self.status = "shutting_down"
        remaining = -1
        try:
            self.client.call("POST", path + "/drain")
            deadline = self.clock() + drain_deadline
            while self.clock() < deadline:
                drain = self.client.call("GET", path).body.get("drain") or {}
                remaining = int(drain.get("remaining_activations", 0))
                if remaining == 0:
                    break
                time.sleep(poll)
        finally:
            self.close()
        self.client.call("DELETE", path)
        return max(remaining, 0)

    def close(self) -> None:
        """Stops heartbeating without leaving (the oracle will judge the silence)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._beats is not None:
            self._beats.shutdown(wait=True)
            self._beats = None
