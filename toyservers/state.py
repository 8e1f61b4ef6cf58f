"""What the connections of one server share: ``ServerState``, with no I/O in it.

Every toy server, asyncio, anyio or threads (toy-wsgi), keeps one ``ServerState``: the app,
the settings, the lifespan ``state`` dict, the live connections and running apps (for graceful
shutdown and ``limit_concurrency``) and the ``Date``/``Server`` headers, refreshed at most once
a second. It imports nothing that does I/O, so the WSGI server uses it without asyncio.

Spec: RFC 9110 §6.6.1 (Date: IMF-fixdate), §10.2.4 (Server); ASGI lifespan spec 2.0
(``state``).

Compare with: uvicorn/server.py (``ServerState``: ``total_requests``, ``connections``,
``tasks``, ``default_headers``).
"""

from __future__ import annotations

import time
from email.utils import formatdate
from typing import Any

from toyservers._types import Headers
from toyservers.config import Config
from toyservers.proxy import ProxyHeaders, trusted_peers

SERVER_NAME = b"toyservers"


class ServerState:
    """Shared by every connection of one server.

    Attributes:
        app: the ASGI (or, on toy-wsgi, WSGI) application.
        config: the settings.
        lifespan_state: the lifespan ``state`` dict; copy it into each request scope.
        connections: live connections (protocol objects add and remove themselves).
        tasks: the running apps (add, and discard when done): ``run_asgi`` Tasks (toy-anyio,
            whose tasks belong to anyio task groups: its request cycles).
        default_headers: ``[(b"date", ...), (b"server", b"toyservers")]`` as ASGI headers.
        default_headers_bytes: the same, already framed as ``name: value\\r\\n`` lines.
        server_cert: the PEM certificate the server presents, when it serves TLS.
        cipher_ids: IANA number of each cipher suite by its OpenSSL name, when it serves TLS.
        trusted: the peers whose forwarding headers and PROXY headers are believed
            (``config.forwarded_allow_ips``, ``toyservers.proxy.Trusted``), built once here.
        proxy: the proxy-header rules (``config.proxy_headers``) for ``trusted``, else None.
    """

    def __init__(self, app: Any, config: Config, lifespan_state: dict[str, Any]) -> None:
        self.app = app
        self.config = config
        self.lifespan_state = lifespan_state
        self.connections: set[Any] = set()
        self.tasks: set[Any] = set()
        self.default_headers: Headers = []
        self.default_headers_bytes = b""
        self.refresh_default_headers()
        self.server_cert: str | None = None
        self.cipher_ids: dict[str, int] = {}
        self.trusted = trusted_peers(config.forwarded_allow_ips)
        self.proxy = ProxyHeaders(self.trusted) if config.proxy_headers else None

    def refresh_default_headers(self) -> None:
        """Recompute the ``Date`` header (RFC 9110 §6.6.1: IMF-fixdate), at most once a second."""
        headers: Headers = []
        if self.config.date_header:
            headers.append((b"date", formatdate(time.time(), usegmt=True).encode("latin-1")))
        if self.config.server_header:
            headers.append((b"server", SERVER_NAME))
        self.default_headers = headers
        self.default_headers_bytes = b"".join(b"%s: %s\r\n" % pair for pair in headers)
