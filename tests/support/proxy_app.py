"""Apps that say who they think the client is: the proxy-header tests' ASGI and WSGI apps.

Both answer any request with JSON ``{"client", "scheme", "server", "host"}``: the ASGI scope's
``client``, ``scheme``, ``server`` and ``host`` header, or the WSGI environ's ``REMOTE_ADDR``
and ``REMOTE_PORT``, ``wsgi.url_scheme``, ``SERVER_NAME`` and ``SERVER_PORT``, ``HTTP_HOST``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI form (lifespan is declined by returning)."""
    if scope["type"] != "http":
        return
    host = next((v.decode("latin-1") for n, v in scope["headers"] if n == b"host"), None)
    body = json.dumps({"client": scope["client"], "scheme": scope["scheme"],
                       "server": scope["server"], "host": host}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def wsgi_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """The WSGI form."""
    body = json.dumps({
        "client": [environ["REMOTE_ADDR"], int(environ["REMOTE_PORT"])],
        "scheme": environ["wsgi.url_scheme"],
        "server": [environ["SERVER_NAME"], int(environ["SERVER_PORT"])],
        "host": environ.get("HTTP_HOST")}).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]
