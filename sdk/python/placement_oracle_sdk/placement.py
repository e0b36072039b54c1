"""Placement for callers (`locate`) and for the silo a call arrived at (`claim`), and `release`.

`locate` may answer from a short cache: an answer is an activation (silo and epoch), and a caller
that finds the silo no longer runs it `forget`s that epoch and asks again. `claim` always asks the
oracle as the requesting silo, so it gets the store's answer, and applies the registration rule
(`claim.decide`). `locate_many` and `claim_many` do the same for many grains at once, through
`POST …/placements/batch` (a thousand grains a call); a grain the oracle could not place maps to
its problem, as an `OracleError`.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable
from urllib.parse import quote

from .claim import Claim, decide
from .client import OracleClient, OracleError, problem_error
from .silo import Silo

#: Grains per `POST …/placements/batch`: the oracle's limit.
MAX_PLACEMENTS_PER_BATCH = 1000

Answers = dict[str, dict[str, Any] | OracleError]


class Placement:
    def __init__(
        self,
        client: OracleClient,
        silo: Silo | None = None,
        *,
        cache_ttl: float = 1.0,
        cache_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.silo = silo
        self.cache_ttl = cache_ttl
        self.cache_entries = cache_entries
        self.clock = clock
        self._cache: dict[str, tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def locate(self, grain: str) -> dict[str, Any]:
        """Where `grain` runs (placing it if it runs nowhere): the oracle's answer."""
        now = self.clock()
        with self._lock:
            kept = self._cache.get(grain)
            if kept is not None and now - kept[0] < self.cache_ttl:
                return kept[1]
        answer: dict[str, Any] = self.client.call("POST", "/placements", {"grain": grain}).body
        self._keep(now, grain, answer)
        return answer

    def locate_many(self, grains: Iterable[str]) -> Answers:
        """`locate` for many grains: kept answers first, the rest in batches."""
        now = self.clock()
        found: Answers = {}
        missing: list[str] = []
        with self._lock:
            for grain in grains:
                kept = self._cache.get(grain)
                if kept is not None and now - kept[0] < self.cache_ttl:
                    found[grain] = kept[1]
                else:
                    missing.append(grain)
        asked = self._batch(missing, None)
        for grain, answer in asked.items():
            if not isinstance(answer, OracleError):
                self._keep(now, grain, answer)
        return {**found, **asked}

    def _keep(self, now: float, grain: str, answer: dict[str, Any]) -> None:
        if answer.get("outcome") == "stateless":
            return
        with self._lock:
            if len(self._cache) >= self.cache_entries:
                self._cache.clear()
            self._cache[grain] = (now, answer)

    def _batch(self, grains: list[str], requesting_silo: str | None) -> Answers:
        answers: Answers = {}
        ask = {"requesting_silo": requesting_silo} if requesting_silo is not None else {}
        distinct = list(dict.fromkeys(grains))
        for start in range(0, len(distinct), MAX_PLACEMENTS_PER_BATCH):
            chunk = distinct[start : start + MAX_PLACEMENTS_PER_BATCH]
            body = {"placements": [{"grain": grain, **ask} for grain in chunk]}
            results = self.client.call("POST", "/placements/batch", body).body["results"]
            # One result per grain, in request order.
            for grain, result in zip(chunk, results):
                if result.get("placement") is not None:
                    answers[grain] = result["placement"]
                else:
                    answers[grain] = problem_error(result.get("error") or {})
        return answers

    def forget(self, grain: str, epoch: int) -> None:
        """Drops the kept answer if it names activation `epoch` (the silo said it does not run it)."""
        with self._lock:
            kept = self._cache.get(grain)
            if kept is not None and kept[1].get("epoch") == epoch:
                del self._cache[grain]

    def claim(self, grain: str) -> Claim:
        """For the silo a call arrived at: run it here under an epoch, or forward it."""
        if self.silo is None:
            raise ValueError("claim needs the silo the call arrived at")
        body = {"grain": grain, "requesting_silo": self.silo.silo_id}
        return decide(self.silo.silo_id, self.client.call("POST", "/placements", body).body)

    def claim_many(self, grains: Iterable[str]) -> dict[str, Claim | OracleError]:
        """`claim` for many grains that calls arrived for at once (each still the store's answer)."""
        if self.silo is None:
            raise ValueError("claim needs the silo the call arrived at")
        own = self.silo.silo_id
        return {
            grain: answer if isinstance(answer, OracleError) else decide(own, answer)
            for grain, answer in self._batch(list(grains), own).items()
        }

    def release(self, grain: str, epoch: int) -> bool:
        """Deactivates activation `epoch` of `grain` on this silo; False when the registration was
        no longer this one (moved, or ended already)."""
        if self.silo is None:
            raise ValueError("release needs the silo that ran the grain")
        params = {"silo": self.silo.silo_id, "epoch": epoch}
        try:
            self.client.call("DELETE", f"/activations/{quote(grain, safe='')}", params=params)
        except OracleError as error:
            if error.status in (404, 409):
                return False
            raise
        self.forget(grain, epoch)
        return True
