"""The latency upstream of ``bench workers``: answers every request after the delay it names.

An ASGI app served by one of our own servers (:data:`SERVER`), started by the bench on a free
port beside the server under test (pinned with the load generator, off the server's CPU). A
request carries ``X-Delay-Ms: <milliseconds>`` (as the published experiment's upstream took
its delay from a header); the answer, ``text/plain``, is ``waited <ms> ms``, sent after
``asyncio.sleep``, so a thousand waiting requests cost the upstream no thread and no CPU.
A missing or unreadable header means no delay; delays are capped at :data:`MAX_DELAY_MS`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

#: The registry name of the server that runs the upstream.
SERVER = "toy-httptools"
#: The request header naming the delay (lower case, as ASGI gives header names).
HEADER = b"x-delay-ms"
#: The longest delay honoured, milliseconds.
MAX_DELAY_MS = 60_000


def delay_ms(headers: list[tuple[bytes, bytes]]) -> int:
    """The delay asked for in ``headers`` (ASGI ``(name, value)`` byte pairs), milliseconds:
    0 when :data:`HEADER` is missing or not an integer, at most :data:`MAX_DELAY_MS`."""
    for name, value in headers:
        if name.lower() == HEADER:
            try:
                return min(max(int(value), 0), MAX_DELAY_MS)
            except ValueError:
                return 0
    return 0


# --8<-- [start:app]
async def app(scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
              send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
    """ASGI app: wait ``X-Delay-Ms`` milliseconds, then answer 200 ``waited N ms``."""
    if scope["type"] != "http":
        return
    waited = delay_ms(scope["headers"])
    await asyncio.sleep(waited / 1000)
    body = f"waited {waited} ms".encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
# --8<-- [end:app]
