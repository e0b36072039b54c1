"""The runtime side of the placement oracle's protocol, done once: a silo's membership and lease,
placement with the registration rule, migrations carried out, edge reports, connection pools."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from .backoff import Backoff
from .claim import Claim, ForwardTo, RunHere, decide
from .client import Answer, OracleClient, OracleError
from .edges import Edge, EdgeCounter
from .lease import Lease
from .migrations import MigrationWorker
from .placement import Placement
from .reporting import EdgeReporter
from .silo import Silo


def connect(client: OracleClient, pool: str) -> dict[str, Any]:
    """Which node of a SmartConnect-style pool a new client connection should go to."""
    answer: dict[str, Any] = client.call(
        "POST", f"/pools/{quote(pool, safe='')}/connections"
    ).body
    return answer


__all__ = [
    "Answer",
    "Backoff",
    "Claim",
    "Edge",
    "EdgeCounter",
    "EdgeReporter",
    "ForwardTo",
    "Lease",
    "MigrationWorker",
    "OracleClient",
    "OracleError",
    "Placement",
    "RunHere",
    "Silo",
    "connect",
    "decide",
]
