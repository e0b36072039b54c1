"""A silo's membership: it joins (`joining`, then `active`), heartbeats on a timer with the load
its host reports, and tracks its lease; it says whether it may run grains now; it backs off as
`Retry-After` says; it pauses its grains when the lease runs out (the oracle unreachable) and
resumes them when a heartbeat is acknowledged; told dead, it drops every grain and rejoins as the
next generation. `stop()` drains: the oracle issues migrations for its grains (a
`MigrationWorker` carries them out), it waits for none to remain or a deadline, stops the grains
still running and leaves (`leave()` does the last two at once).

The runtime's hooks, and which thread calls them: `on_pause` and `on_resume` come from the silo's
timer thread (`silo <id>`), one at a time and in order; `on_dead` from the thread whose heartbeat
was told the silo is dead (a `heartbeat` pool thread, or the caller of `join()`/`beat()`), before
any heartbeat of the next generation; `on_leave` from the caller of `stop()`/`leave()`, before the
`DELETE`; `load` from whichever thread sends the heartbeat. What a hook raises is logged
(`logging.exception`) and goes no further: a hook that killed the silo's threads would cost it
its lease.
"""

from __future__ import annotations

import logging
import math
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
        on_leave: Hook = _nothing,
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
        #: The silo is about to leave: stop every grain still running — their registrations are
        #: released by the leave.
        self.on_leave = on_leave
        self.clock = clock
        self.backoff = backoff or Backoff()
        self.lease = Lease()
        # The lease the last acknowledgement granted (seconds): a heartbeat waits at most a third
        # of it for one replica before it tries the next (see `beat`).
        self._granted: float | None = None
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
        # Set for good by `stop()`/`leave()`: a death from then on ends the silo, it does not
        # rejoin (nothing would drain or leave the next generation).
        self._stopping = False
        # Set for good just before the leave (or by a death while stopping): no grain runs again.
        self._left = False
        self._thread: threading.Thread | None = None
        self._beats: ThreadPoolExecutor | None = None

    @property
    def silo_id(self) -> str:
        return f"{self.address}@{self.generation}"

    def may_run_grains(self) -> bool:
        """Whether the silo holds its lease now: run grains only while this is true (never again
        once it leaves)."""
        with self._lock:
            return self._may_run()

    def may_run_grains_as(self, silo_id: str) -> bool:
        """As `may_run_grains`, and the silo is still incarnation `silo_id`: a claim made before
        the silo was declared dead and rejoined is not the new incarnation's to run."""
        with self._lock:
            return self.silo_id == silo_id and self._may_run()

    def _may_run(self) -> bool:
        """`may_run_grains`, with the lock held."""
        return not self._dropping and not self._left and self.lease.holds(self.clock())

    def join(self, timeout: float = 10.0) -> None:
        """Joins (one `joining` heartbeat, then `active`) and starts the timer. A silo told it
        is dead on the way rejoins as the next generation."""
        deadline = self.clock() + timeout
        while True:
            try:
                if self.beat() and self.status == "joining":
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
                # Not past the deadline: a long Retry-After is answered by raising, not by waiting.
                time.sleep(min(self.backoff.next_delay(error.retry_after), max(0.0, deadline - self.clock())))
        self._stop.clear()
        self._wake.clear()
        self._beats = ThreadPoolExecutor(max_workers=4, thread_name_prefix="heartbeat")
        self._thread = threading.Thread(target=self._run, name=f"silo {self.silo_id}", daemon=True)
        self._thread.start()

    def beat(self) -> bool:
        """One heartbeat, now. Says whether it was acknowledged for the incarnation that sent it
        and is still current (False: that one was declared dead, or left, meanwhile, and the answer
        grants nothing). Raises what the oracle refused (a death is handled first), and an
        `OracleError` `unexpected-answer` (status 0) for a 200 without a numeric `lease_ms`."""
        with self._lock:
            if self._dropping:
                raise OracleError(409, "silo-declared-dead", f"{self.silo_id} is dropping its grains")
            generation = self.generation
            status = self.status
        sent_at = self.clock()
        body: dict[str, Any] = {**self.fixed, **self._load(), "silo": f"{self.address}@{generation}"}
        body["status"] = status
        # A replica that takes the connection but does not answer (frozen, its VM paused) must not
        # hold the heartbeat until the silo's silence reaches the TTL, where the replicas that run
        # would find it dead: a third of the lease each, so two are tried within it.
        attempt = self._granted / 3 if self._granted is not None else None
        try:
            answer = self.client.call("POST", "/heartbeats", body, attempt_timeout=attempt)
        except OracleError as error:
            if error.problem == "silo-declared-dead":
                self._declared_dead(generation)
            elif error.retryable:
                self._quiet_after(error.retry_after)
            raise
        lease_ms = _lease_ms(answer.body)
        self.backoff.reset()
        with self._lock:
            if self.generation != generation or self._dropping or self._left:
                return False  # an answer to an incarnation that is gone grants the next one nothing
            granted = self.lease.grant(sent_at, lease_ms, self.clock())
            self._granted = lease_ms / 1000
        self._running = self._running or granted
        if granted:
            self._wake.set()
        return True

    def _quiet_after(self, retry_after: float | None) -> None:
        """Holds the timer's heartbeats back as `Retry-After` (or the backoff) says, but for no
        longer than half the lease still held (or `interval`, if longer): a rate limit or a shed
        load must not keep a silo silent until its lease runs out and its grains pause."""
        delay = self.backoff.next_delay(retry_after)
        now = self.clock()
        with self._lock:
            remaining = self.lease.remaining(now)
        self._quiet_until = now + min(delay, max(self.interval, remaining / 2))

    def _load(self) -> Mapping[str, Any]:
        """The host's load. If `load` raises, the heartbeat goes without it (the oracle needs only
        the id): a heartbeat not sent could cost the lease, and with it every grain."""
        try:
            return self.load()
        except Exception:
            log.exception("load of silo %s raised: this heartbeat reports none", self.silo_id)
            return {}

    def _hook(self, name: str, hook: Hook) -> None:
        """Calls one of the runtime's hooks. What it raises is logged, never passed on: the silo's
        own threads call them, and one that died would heartbeat, or pause grains, no more."""
        try:
            hook()
        except Exception:
            log.exception("%s of silo %s raised", name, self.silo_id)

    def _declared_dead(self, generation: int) -> None:
        """Drops every grain (through `on_dead`) before the next generation heartbeats."""
        with self._lock:
            if self.generation != generation or self._dropping or self._left:
                return
            old = self.silo_id
            self.lease = Lease()
            self._granted = None
            self.deaths += 1
            stopping = self._stopping
            if stopping:
                self._left = True  # the death ends a stopping silo: `stop()` leaves no one else
            else:
                self._dropping = True
                self.status = "joining"
                self.generation += 1
        self._running = False
        if stopping:
            log.warning("silo %s was declared dead while stopping: its grains are dropped", old)
            self._hook("on_dead", self.on_dead)
            return
        log.warning("silo %s was declared dead: its grains are dropped; rejoining as %s", old, self.silo_id)
        try:
            self._hook("on_dead", self.on_dead)
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
                if (
                    now >= self._quiet_until
                    and self._beats is not None
                    and not self._dropping
                    and not self._left
                ):
                    self._beats.submit(self._beat_quietly)
            holds = self.may_run_grains()
            if self.deaths != deaths:  # dropped, not paused: the next generation starts afresh
                holding, paused, deaths = holds, False, self.deaths
                continue
            if holding and not holds and self._running:
                paused = True
                log.warning("silo %s lost its lease: grains pause", self.silo_id)
                self._hook("on_pause", self.on_pause)
            elif not holding and holds and paused:
                paused = False
                log.info("silo %s holds its lease again: grains resume", self.silo_id)
                self._hook("on_resume", self.on_resume)
            holding = holds

    def _beat_quietly(self) -> None:
        with self._lock:
            generation = self.generation
        try:
            acknowledged = self.beat()
        except OracleError as error:
            log.debug("heartbeat of %s: %s", self.silo_id, error)
            return
        except Exception:
            log.exception("heartbeat of %s raised", self.silo_id)
            return
        with self._lock:
            # Active only on its own acknowledgement: an answer for the incarnation before a death
            # must not make the next one active before its first (`joining`) heartbeat.
            if acknowledged and self.generation == generation and self.status == "joining":
                self.status = "active"

    def stop(self, drain_deadline: float = 30.0, poll: float = 0.2) -> int:
        """Drains and leaves: asks the oracle to move every grain away (carried out by the silo's
        `MigrationWorker`, which must keep running), heartbeating as `shutting_down` meanwhile,
        waits until none remains or the deadline, then leaves as `leave()` does (`on_leave` stops
        the grains still running first). The drain and the leave both need a key with the
        `operator` scope. It leaves even when the drain could not be asked for (and then raises
        what the oracle said); a death meanwhile ends it (`on_dead`, no rejoin). Returns how many
        activations remained when it left."""
        silo_id = self._begin_stopping()
        path = f"/silos/{quote(silo_id, safe='')}"
        remaining = -1
        try:
            self.client.call("POST", path + "/drain")
            deadline = self.clock() + drain_deadline
            while self.clock() < deadline and not self._left:
                drain = self.client.call("GET", path).body.get("drain") or {}
                remaining = int(drain.get("remaining_activations", 0))
                if remaining == 0:
                    break
                time.sleep(poll)
        finally:
            self._leave(silo_id)
        return max(remaining, 0)

    def leave(self) -> None:
        """Leaves at once, without draining: stops heartbeating, stops the grains still running
        (`on_leave`), then `DELETE …/silos/{silo}` (a key with the `operator` scope) releases their
        registrations, so that they are placed anew on their next call."""
        self._leave(self._begin_stopping())

    def _begin_stopping(self) -> str:
        """From now on a death ends the silo instead of rejoining it. Returns the incarnation that
        is stopping: the one the leave is for, whatever happens meanwhile."""
        with self._lock:
            self._stopping = True
            self.status = "shutting_down"
            return self.silo_id

    def _leave(self, silo_id: str) -> None:
        """Stops heartbeating and makes sure no grain runs before the `DELETE`: the oracle places
        the silo's grains anew the moment it answers, so one still running here would run twice."""
        self.close()
        with self._lock:
            died = self._left  # declared dead while stopping: `on_dead` has dropped the grains
            self._left = True
        if not died:
            log.info("silo %s leaves: the grains still running stop", silo_id)
            self._hook("on_leave", self.on_leave)
        self.client.call("DELETE", f"/silos/{quote(silo_id, safe='')}")

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


def _lease_ms(body: Any) -> int:
    """The lease an acknowledgement grants, ms. A 200 without a finite number there is no answer
    the oracle gives (a proxy's page, another service on the port): it grants nothing, and says so."""
    lease = body.get("lease_ms") if isinstance(body, dict) else None
    if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not math.isfinite(lease):
        raise OracleError(0, "unexpected-answer", f"a heartbeat answered without lease_ms: {str(body)[:200]}")
    return int(lease)
