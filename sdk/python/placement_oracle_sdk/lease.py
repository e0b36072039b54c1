"""The silo lease, as pure arithmetic on one monotonic clock (seconds).

Every acknowledged heartbeat grants `lease_ms`, counted from when the silo *sent* it. A later
acknowledgement never shortens a lease already held, and one that arrives after its own lease ran
out grants nothing (the oracle may have judged the silo in between).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Lease:
    """Until when (monotonic seconds) the silo may run its grains; 0 means never granted."""

    until: float = 0.0

    def grant(self, sent_at: float, lease_ms: int, now: float) -> bool:
        """Records an acknowledgement of a heartbeat sent at `sent_at`; says whether it extended
        the lease."""
        granted = sent_at + lease_ms / 1000.0
        if granted <= now or granted <= self.until:
            return False
        self.until = granted
        return True

    def holds(self, now: float) -> bool:
        return now < self.until

    def remaining(self, now: float) -> float:
        return max(0.0, self.until - now)
