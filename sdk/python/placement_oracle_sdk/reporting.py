"""Edge reports on a timer: `record_call` counts locally (bounded), `report_once` sends batches."""

from __future__ import annotations

from .client import OracleClient, OracleError
from .edges import EdgeCounter
from .periodic import Periodic


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
        """Sends what was counted; a batch the oracle did not take is counted again."""
        sent = 0
        batches = self.counter.take_batches()
        for i, batch in enumerate(batches):
            body = {"edges": [{"from": e.from_grain, "to": e.to_grain, "count": e.count} for e in batch]}
            try:
                self.client.call("POST", "/edges", body)
            except OracleError:
                for rest in batches[i:]:
                    self.counter.put_back(rest)
                raise
            sent += len(batch)
        self.reported += sent
        return sent
