"""The latency upstream of ``bench workers``: answers every request after the delay it names.

An ASGI app served by one of our own servers (:data:`SERVER`), started by the bench on a free
port beside the server under test (pinned with the load generator, off the server's CPU). A
request carries ``X-Delay-Ms: <milliseconds>`` (as the published experiment's upstream took
its delay from a header); the answer, ``text/plain``, is ``waited <ms> ms``, sent after
``asyncio.sleep``, so a thousand waiting requests cost the upstream no thread and no CPU.
A missing or unreadable header means no delay; delays are capped at :data:`MAX_DELAY_MS`.
:func:`start` runs it and checks it answers.
"""

from __future__ import annotations

import asyncio
import http.client
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.harness import UsageProblem, fetch
from bench.process import ServerProcess, ServerStartError, free_port
from toyservers.registry import get

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


def start(host: str, cpu: int | None, log_path: Path) -> ServerProcess:
    """Start the upstream on a free port of ``host`` (never ``--port``: that one is the
    server's), pinned to ``cpu``, and check one 1 ms request comes back.

    Raises:
        UsageProblem: it did not start or does not answer (the message says why).
    """
    port = free_port(host)
    argv = get(SERVER).command("bench.upstream:app", host, port)
    server = ServerProcess(argv, host=host, port=port, cpu=cpu, log_path=log_path)
    try:
        server.start()
    except ServerStartError as exc:
        raise UsageProblem(f"the upstream did not start: {str(exc).splitlines()[0]}") from None
    try:
        _, _, answer = fetch(host, port, headers={HEADER.decode(): "1"}, timeout=10)
    except (OSError, http.client.HTTPException) as exc:
        server.stop()
        raise UsageProblem(f"the upstream does not answer: {exc!r}") from None
    if not answer.startswith(b"waited"):
        server.stop()
        raise UsageProblem(f"the upstream answered {answer[:100]!r}")
    return server
