"""The HTTP side: one cluster's routes on any of the oracle's replicas, with a cluster key.

A replica that does not answer, or answers 503 (or 502 or 504: a proxy in front of it could not
reach it), is left for the next one at once (the oracle's replicas are interchangeable); what the
last one said is returned. Problems (RFC 9457) become
`OracleError` with their type's last segment (`silo-declared-dead`, …) and `Retry-After`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import quote

import httpx

from .backoff import parse_retry_after

log = logging.getLogger("placement_oracle_sdk")


class OracleError(Exception):
    """The oracle refused (4xx/5xx), or no replica could be reached (`status` 0)."""

    def __init__(self, status: int, problem: str, detail: str, retry_after: float | None = None):
        super().__init__(f"{status} {problem}: {detail}")
        self.status = status
        self.problem = problem
        self.detail = detail
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later: nothing answered (or not as the oracle
        answers), a rate limit, or the replica (or the proxy before it) unable to serve now."""
        return self.status in (0, 429) or self.status in UNAVAILABLE


#: Statuses that say this replica cannot serve now, not that the request is wrong: 503 is the
#: oracle's own (load shed, store unreachable); 502 and 504 are a proxy's in front of a replica
#: that is down or slow. Each sends the request to the next replica at once.
UNAVAILABLE = (502, 503, 504)


@dataclass
class Answer:
    status: int
    body: Any


class OracleClient:
    def __init__(
        self,
        urls: list[str] | str,
        cluster: str,
        *,
        key: str | None = None,
        timeout: float = 2.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise ValueError("at least one oracle URL")
        self.cluster = cluster
        headers = {"authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(timeout=timeout, headers=headers, transport=transport)
        self._timeout = timeout
        self._preferred = 0

    def close(self) -> None:
        self._http.close()

    def path(self, rest: str) -> str:
        return f"/v1/clusters/{quote(self.cluster, safe='')}{rest}"

    def call(
        self,
        method: str,
        rest: str,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        attempt_timeout: float | None = None,
    ) -> Answer:
        """Sends to the preferred replica, then each other one while they fail; raises
        `OracleError` for a problem or when none answers. `headers` go with this request only
        (e.g. `If-Match` on `PUT …/policy`). `attempt_timeout` (seconds), when shorter than the
        client's timeout, is the longest one replica is waited for: for calls that may safely
        reach two replicas (heartbeats)."""
        timeout = self._timeout if attempt_timeout is None else min(attempt_timeout, self._timeout)
        failure: OracleError | None = None
        for turn in range(len(self.urls)):
            index = (self._preferred + turn) % len(self.urls)
            try:
                response = self._http.request(
                    method,
                    self.urls[index] + self.path(rest),
                    json=body,
                    params=params,
                    headers=headers,
                    timeout=timeout,
                )
            except httpx.HTTPError as error:
                log.debug("oracle %s unreachable: %s", self.urls[index], error)
                failure = OracleError(0, "unreachable", str(error))
                continue
            if response.status_code in UNAVAILABLE and turn + 1 < len(self.urls):
                failure = _problem(response)
                continue
            self._preferred = index
            if response.status_code >= 400:
                raise _problem(response)
            body_out = response.json() if response.content else None
            return Answer(response.status_code, body_out)
        assert failure is not None
        raise failure


def problem_error(
    problem: Mapping[str, Any], status: int | None = None, retry_after: float | None = None
) -> OracleError:
    """An RFC 9457 problem as an `OracleError` (also the per-grain problems of a batch)."""
    kind = str(problem.get("type", "")).rsplit(":", 1)[-1] or "unknown"
    code = status if status is not None else int(problem.get("status") or 0)
    return OracleError(code, kind, str(problem.get("detail", "")), retry_after)


def _problem(response: httpx.Response) -> OracleError:
    try:
        problem = response.json()
    except ValueError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    problem.setdefault("detail", response.text[:200])
    return problem_error(
        problem, response.status_code, parse_retry_after(response.headers.get("retry-after"))
    )
