"""The ASGI and WSGI vocabulary, as types.

ASGI (https://asgi.readthedocs.io/en/latest/specs/main.html): an application is an
``async def app(scope, receive, send)``; ``scope`` is a dict describing the connection,
``receive()`` awaits the next event dict from the client, ``send(message)`` sends an event
dict to the client. Messages are plain dicts with a ``"type"`` key, exactly as the spec
writes them (``{"type": "http.response.start", "status": 200, "headers": [...]}``).

WSGI (PEP 3333): an application is ``app(environ, start_response) -> iterable of bytes``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from types import TracebackType
from typing import Any, Protocol

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

Headers = list[tuple[bytes, bytes]]
"""ASGI headers: (lowercased name, value) byte pairs, in received order (ASGI spec, HTTP scope)."""

Environ = dict[str, Any]
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


class StartResponse(Protocol):
    """PEP 3333 ``start_response(status, response_headers, exc_info=None) -> write``."""

    def __call__(
        self,
        status: str,
        headers: list[tuple[str, str]],
        exc_info: ExcInfo | None = None,
        /,
    ) -> Callable[[bytes], object]: ...


WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]
