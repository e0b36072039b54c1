"""Carrying out the migrations the oracle issues for a silo (rebalancer, repartitioner, drain).

`poll_once` reads the silo's open migrations and hands each grain over through `hand_over` (state
transfer is the runtime's: True when the target has the grain's state, False when it could not be
handed over, None while the hand-over is still under way — the migration stays open and is offered
again at the next poll); then completes the migration (the target holds the registration under the
epoch the completion returns, passed to `on_moved`) or fails it. Retries are safe: the oracle
answers a repeated completion with its first answer, and one it ended otherwise
(`migration-ended`, `migration-refused`, gone) is done with: `on_refused` hears of a completion
refused so, since the state handed to the target must then not be activated there.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from .client import OracleClient, OracleError
from .periodic import Periodic
from .silo import Silo

log = logging.getLogger("placement_oracle_sdk")

Migration = Mapping[str, Any]


def _ignore(migration: Migration, epoch: int) -> None:
    pass


def _ignore_refusal(migration: Migration, error: OracleError) -> None:
    pass


class MigrationWorker(Periodic):
    name = "migrations"

    def __init__(
        self,
        client: OracleClient,
        silo: Silo,
        hand_over: Callable[[Migration], bool | None],
        *,
        on_moved: Callable[[Migration, int], None] = _ignore,
        on_refused: Callable[[Migration, OracleError], None] = _ignore_refusal,
        interval: float = 0.5,
    ) -> None:
        self.client, self.silo = client, silo
        self.hand_over, self.on_moved, self.on_refused = hand_over, on_moved, on_refused
        self.interval = interval
        self.completed = 0
        self.failed = 0
        self.refused = 0

    def tick(self) -> int:
        return self.poll_once()

    def poll_once(self) -> int:
        """Carries out every open migration of the silo; returns how many it ended."""
        page = self.client.call("GET", "/migrations", params={"silo": self.silo.silo_id}).body
        ended = 0
        for migration in page["migrations"]:
            if self._end(migration):
                ended += 1
        return ended

    def _end(self, migration: Migration) -> bool:
        moved = self.hand_over(migration)
        if moved is None:
            return False  # still under way: offered again at the next poll
        verb = "complete" if moved else "fail"
        try:
            # No body: the routes take none (a body the oracle does not read can cost the connection).
            answer = self.client.call("POST", f"/migrations/{migration['id']}/{verb}")
        except OracleError as error:
            if error.problem in ("migration-ended", "migration-refused") or error.status == 404:
                log.info("migration %s of %s: %s", migration["id"], migration["grain"], error.detail)
                if moved:
                    self.refused += 1
                    self.on_refused(migration, error)
                return True
            raise
        if moved:
            self.completed += 1
            self.on_moved(migration, int(answer.body["epoch"]))
        else:
            self.failed += 1
        return True
