"""Edge reports on a timer: `record_call` counts locally (bounded), `report_once` sends batches."""

from __future__ import annotations

import logging

from .client import OracleClient, OracleError
from .edges import EdgeCounter
from .periodic import Periodic

log = logging.getLogger("placement_oracle_sdk")


class EdgeReporter(Periodic):
    name = "edges"

    def __init__(
        self, client: OracleClient, *, max_pairs: int = 100_000, interval: float = 5.0
    ) -> None:
        self.client = client
        self.counter = EdgeCounter(max_pairs)
        self.interval = interval
        self.reported = 0

    def record_call(self, from_grain: str, to_grain: str, calls: int = 1) -> None:
        """Counts `calls` calls from one grain to another (a runtime may count them in batches)."""
        self.counter.record(from_grain, to_grain, calls)

    def tick(self) -> int:
        return self.report_once()

    def report_once(self) -> int:
        """Sends what was counted. A batch that could not be delivered is counted again; one the
        oracle refused as such (422, 413) would fail for ever, so it is dropped and counted in
        `counter.dropped`."""
        sent = 0
        batches = self.counter.take_batches()
        for i, batch in enumerate(batches):
            body = {"edges": [{"from": e.from_grain, "to": e.to_grain, "count": e.count} for e in batch]}
            try:
                self.client.call("POST", "/edges", body)
            except OracleError as error:
                retry = i
                if not error.retryable:
                    log.warning("an edge report of %d edges was refused (%s); they are dropped", len(batch), error)
                    self.counter.drop(batch)
                    retry = i + 1
                for rest in batches[retry:]:
                    self.counter.put_back(rest)
                raise
            sent += len(batch)
        self.reported += sent
        return sent
