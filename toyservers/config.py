"""One settings object for every toy server, with uvicorn's names and defaults.

Where uvicorn has the setting (``uvicorn.config.Config``) the name and default are the same,
so ``toyserve`` flags read like ``uvicorn`` flags. Settings uvicorn lacks (the request-size
limits and the slow-client deadlines) are named after what they bound, with units in the name's
docstring: sizes in bytes, times in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LoopName = Literal["auto", "asyncio", "uvloop"]
LifespanMode = Literal["auto", "on", "off"]
WorkerClass = Literal["sync", "gthread"]
WSName = Literal["auto", "none", "toyservers", "wsproto"]


@dataclass
class Config:
    """Settings shared by every server in ``toyservers``.

    Attributes:
        host, port: where to listen (``port=0`` picks a free port; see ``ready``).
        uds: listen on a UNIX domain socket at this path instead (uvicorn's ``--uds``).
        fd: serve the inherited listening socket on this descriptor instead (``--fd``).
            Without either, a socket systemd passed (``LISTEN_FDS``) wins over host/port
            (``toyservers.listeners``).
        backlog: ``listen()`` backlog, connections (uvicorn: 2048).
        loop: ``"auto"`` (uvloop when installed), ``"asyncio"`` or ``"uvloop"``.
        lifespan: ASGI lifespan protocol: ``"auto"`` (use it if the app supports it),
            ``"on"`` (a failure is fatal), ``"off"``.
        timeout_keep_alive: idle time allowed between requests on a keep-alive connection,
            seconds (uvicorn: 5).
        timeout_headers: time allowed from a request's first byte to the end of its header
            block, seconds; a slow client past it gets 408 and is closed.
        timeout_body: longest pause allowed while a request body arrives, seconds.
        timeout_graceful_shutdown: on SIGINT/SIGTERM, how long in-flight requests may take
            to finish, seconds (uvicorn's ``--timeout-graceful-shutdown``).
        idle_close_on_response: on SIGINT/SIGTERM, leave an idle keep-alive connection open
            until its next response, which says ``Connection: close``, or until
            ``timeout_keep_alive`` closes it, instead of closing it at once (HAProxy's
            ``option idle-close-on-response``): a proxy that reuses it meanwhile gets an
            answer, not a closed connection. Shutdown then takes up to
            ``timeout_keep_alive`` seconds longer while a client keeps an idle connection.
            HTTP/1.1 only: an HTTP/2 connection gets GOAWAY, which tells the client what
            was not processed (RFC 9113 §6.8).
        limit_concurrency: most connections at once; beyond it new requests get 503.
        max_request_line: longest request line, bytes (longer: 414).
        max_header_size: largest header block, bytes (larger: 431).
        max_headers: most header fields (more: 431).
        max_body_size: largest request body, bytes, or None for no limit (larger: 413).
        workers: processes to pre-fork (1 = serve in this process).
        worker_class: WSGI only, gunicorn's name: ``"sync"`` (one request at a time, closed
            after each response) or ``"gthread"`` (a pool of ``threads`` threads; idle
            keep-alive connections are watched by the main thread).
        threads: WSGI ``gthread`` only: threads running the app (gunicorn: 1).
        access_log: log one line per request.
        log_level: ``"critical" | "error" | "warning" | "info" | "debug" | "trace"``.
        root_path: the ASGI ``root_path`` for an app mounted below a prefix.
        server_header, date_header: send ``Server`` / ``Date`` response headers.
        ssl_keyfile, ssl_certfile: PEM files; both set means TLS.
        proxy_headers: believe ``X-Forwarded-*`` and ``Forwarded`` from trusted peers
            (``toyservers.proxy``; uvicorn: on).
        forwarded_allow_ips: the trusted peers, IPs and CIDRs comma-separated or ``*``;
            None: ``FORWARDED_ALLOW_IPS`` when set, else ``127.0.0.1`` (uvicorn's default).
        proxy_protocol: read a PROXY protocol header (v1 or v2) before HTTP, from the
            trusted peers only (gunicorn's ``--proxy-protocol``; ``toyservers.proxy_protocol``).
        ws: the WebSocket implementation (uvicorn's ``--ws``): ``"auto"`` (the server's own
            choice), ``"none"`` (an upgrade is served as plain HTTP), ``"toyservers"`` (the
            project's RFC 6455 module, ``toyservers/websocket.py``), ``"wsproto"``.
        ws_max_size: largest WebSocket message, bytes (larger: closed with 1009).
        ws_max_queue: most received WebSocket messages waiting for the app; past it the
            server stops reading until the app takes one.
        ws_ping_interval, ws_ping_timeout: a keepalive ping every interval seconds; no pong
            within timeout seconds closes with 1011 (None or 0: no pings, no deadline).
        ws_per_message_deflate: offer permessage-deflate (RFC 7692) compression.
        ws_shutdown_code: the close code open WebSockets get on graceful shutdown: 1001
            (going away), or 1012 (service restart) in a worker retired by a reload.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    uds: str | None = None
    fd: int | None = None
    backlog: int = 2048
    loop: LoopName = "auto"
    lifespan: LifespanMode = "auto"
    timeout_keep_alive: float = 5.0
    timeout_headers: float = 10.0
    timeout_body: float = 30.0
    timeout_graceful_shutdown: float | None = 30.0
    idle_close_on_response: bool = False
    limit_concurrency: int | None = None
    max_request_line: int = 8 * 1024
    max_header_size: int = 16 * 1024
    max_headers: int = 100
    max_body_size: int | None = None
    workers: int = 1
    worker_class: WorkerClass = "sync"
    threads: int = 1
    access_log: bool = True
    log_level: str = "info"
    root_path: str = ""
    server_header: bool = True
    date_header: bool = True
    ssl_keyfile: str | None = None
    ssl_certfile: str | None = None
    proxy_headers: bool = True
    forwarded_allow_ips: str | None = None
    proxy_protocol: bool = False
    ws: WSName = "auto"
    ws_max_size: int = 16 * 1024 * 1024
    ws_max_queue: int = 32
    ws_ping_interval: float | None = 20.0
    ws_ping_timeout: float | None = 20.0
    ws_per_message_deflate: bool = True
    ws_shutdown_code: int = 1001
