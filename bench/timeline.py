"""The Python client for timelines: fire a burst of requests at once and record each one's
start and end.

wrk reports aggregates (RPS, percentiles); an experiment about *blocking* needs to see which
request waited for which. :func:`fire` opens one connection per request with
``httpx.AsyncClient`` on one event loop, starts every request in the same instant (the order
given: the slow ones first, so they reach the server first), and records for each its start
and end in seconds since the burst began (``time.perf_counter``), its status and error.
The client itself never blocks: each request is a task waiting on its own socket, so a late
answer is the server's doing.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Timing:
    """One request of a burst.

    Attributes:
        kind: what the experiment calls it, e.g. ``"slow"`` or ``"fast"``.
        path: the path and query asked for.
        start: when it was sent, seconds since the burst began.
        end: when its whole answer was read (or it failed), seconds since the burst began.
        status: the HTTP status, or None when it failed.
        error: why it failed (``repr`` of the exception), else None.
    """

    kind: str
    path: str
    start: float
    end: float
    status: int | None
    error: str | None = None

    @property
    def latency(self) -> float:
        """Seconds from sending to the whole answer."""
        return self.end - self.start

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: the fields plus ``latency``."""
        return {**asdict(self), "latency": self.latency}


# --8<-- [start:fire]
async def _fire(base_url: str, requests: list[tuple[str, str]], timeout: float
                ) -> list[Timing]:
    limits = httpx.Limits(max_connections=len(requests) + 1, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits) as client:
        origin = time.perf_counter()

        async def one(kind: str, path: str) -> Timing:
            start = time.perf_counter() - origin
            try:
                response = await client.get(path)
            except httpx.HTTPError as exc:
                return Timing(kind, path, start, time.perf_counter() - origin, None, repr(exc))
            return Timing(kind, path, start, time.perf_counter() - origin, response.status_code)

        tasks = [asyncio.create_task(one(kind, path)) for kind, path in requests]
        return list(await asyncio.gather(*tasks))
# --8<-- [end:fire]


def fire(base_url: str, requests: list[tuple[str, str]], *, timeout: float) -> list[Timing]:
    """Send every ``(kind, path)`` in ``requests`` at once to ``base_url``, each on its own
    connection, and return their timings in the same order.

    ``timeout`` bounds each request, seconds; a request that fails (refused, reset, timed out)
    comes back with ``status`` None and ``error`` set: this never raises for one.
    """
    return asyncio.run(_fire(base_url, requests, timeout))
