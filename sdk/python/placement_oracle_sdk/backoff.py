"""How long to wait before trying again: what `Retry-After` says, else exponential with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Exponential backoff from `base` to `cap` seconds with full jitter, from a seeded RNG so that
    tests are exact. `Retry-After` from the oracle wins when it is given."""

    base: float = 0.05
    cap: float = 2.0
    rng: random.Random = field(default_factory=random.Random)
    attempt: int = 0

    def next_delay(self, retry_after: float | None = None) -> float:
        self.attempt += 1
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.cap * 30)
        ceiling = min(self.cap, self.base * (2 ** min(self.attempt - 1, 30)))
        return self.rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header (the oracle sends whole seconds), None if absent or
    not a number."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
