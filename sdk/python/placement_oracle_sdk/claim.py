"""The registration rule: a silo runs a grain only under a registration it holds.

A call arrives at a silo that does not run the grain: it does not activate on the caller's word,
it asks the oracle as the requesting silo (an answer naming the asker is never served from a cache,
so it is the store's). Its own id means it holds the registration: run here under that epoch.
Another silo means forward the call there. A stateless worker may run anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class RunHere:
    grain: str
    epoch: int | None  # None for a stateless worker (never registered)
    #: The incarnation that asked: run it only while `silo.may_run_grains_as(claim.silo)` (a
    #: claim made before a rejoin is not the new incarnation's).
    silo: str


@dataclass(frozen=True)
class ForwardTo:
    grain: str
    silo: str
    address: str
    epoch: int


Claim = RunHere | ForwardTo


def decide(own_silo: str, placement: Mapping[str, Any]) -> Claim:
    """What the silo `own_silo` does with the oracle's answer to its own placement request."""
    grain = str(placement["grain"])
    if placement.get("outcome") == "stateless":
        return RunHere(grain, None, own_silo)
    epoch = int(placement["epoch"])
    if placement["silo"] == own_silo:
        return RunHere(grain, epoch, own_silo)
    return ForwardTo(grain, str(placement["silo"]), str(placement["address"]), epoch)
