"""How long to wait before trying again: what `Retry-After` says, else exponential with jitter."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

#: The longest `Retry-After` taken as given, seconds. The oracle sends a few seconds at most; a
#: larger value (a proxy's, or garbage) is held to this, so no header can silence a client for good.
MAX_RETRY_AFTER = 3600.0


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
        # NaN would compare false with every time and so put off the next attempt forever.
        if retry_after is not None and not math.isnan(retry_after):
            return min(max(retry_after, 0.0), self.cap * 30)
        ceiling = min(self.cap, self.base * (2 ** min(self.attempt - 1, 30)))
        return self.rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header (the oracle sends whole seconds), None if absent, not a
    number, negative or not finite; at most `MAX_RETRY_AFTER`."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_AFTER)
