"""Calls between grains, counted locally in bounded memory and handed out in report-sized batches.

At most `max_pairs` distinct pairs are kept; calls between pairs beyond that are counted as dropped
(the oracle's repartitioner only needs the heavy pairs, which a bounded counter keeps once seen).
A pair and its reverse are one edge, as the oracle counts them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

#: Edges per report: the oracle's limit on one `POST …/edges`.
MAX_EDGES_PER_REPORT = 10_000
#: Bytes of JSON per report, well inside the oracle's request body limit (1 MiB by default).
MAX_REPORT_BYTES = 768 * 1024
#: What one edge costs in a report beside its two ids (names, quotes, the count).
EDGE_OVERHEAD_BYTES = 48
#: Largest count of one edge the oracle takes.
MAX_COUNT = 1_000_000_000


@dataclass(frozen=True)
class Edge:
    from_grain: str
    to_grain: str
    count: int


class EdgeCounter:
    def __init__(self, max_pairs: int = 100_000) -> None:
        if max_pairs < 1:
            raise ValueError("max_pairs must be at least 1")
        self.max_pairs = max_pairs
        self.dropped = 0
        self._counts: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def record(self, from_grain: str, to_grain: str, calls: int = 1) -> None:
        if from_grain == to_grain or calls <= 0:
            return
        pair = (from_grain, to_grain) if from_grain <= to_grain else (to_grain, from_grain)
        with self._lock:
            if pair in self._counts:
                self._counts[pair] = min(MAX_COUNT, self._counts[pair] + calls)
            elif len(self._counts) < self.max_pairs:
                self._counts[pair] = min(MAX_COUNT, calls)
            else:
                self.dropped += calls

    def __len__(self) -> int:
        with self._lock:
            return len(self._counts)

    def take_batches(self) -> list[list[Edge]]:
        """Everything counted so far, emptied, in batches of at most MAX_EDGES_PER_REPORT edges
        and about MAX_REPORT_BYTES of JSON."""
        with self._lock:
            counts, self._counts = self._counts, {}
        batches: list[list[Edge]] = []
        batch: list[Edge] = []
        size = 0
        for (a, b), n in counts.items():
            cost = len(a.encode()) + len(b.encode()) + EDGE_OVERHEAD_BYTES
            if len(batch) == MAX_EDGES_PER_REPORT or (batch and size + cost > MAX_REPORT_BYTES):
                batches.append(batch)
                batch, size = [], 0
            batch.append(Edge(a, b, n))
            size += cost
        if batch:
            batches.append(batch)
        return batches

    def drop(self, batch: list[Edge]) -> None:
        """Counts a batch the oracle refused as such as dropped (it would fail again)."""
        with self._lock:
            self.dropped += sum(edge.count for edge in batch)

    def put_back(self, batch: list[Edge]) -> None:
        """Returns a batch that could not be reported (it is counted again, within the bound)."""
        for edge in batch:
            self.record(edge.from_grain, edge.to_grain, edge.count)
