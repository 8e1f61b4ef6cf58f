"""What toy-wsgi's serving needs around its connections on blocking sockets and threads.

The thread-and-socket forms of what ``toyservers._server`` does for the asyncio servers and
``toyservers.anyio_serving`` for toy-anyio, so ``toyservers.wsgi_server`` keeps only its own
loop, protocol and cycle:

- ``stop_on_signals``: the ``threading.Event`` that SIGINT and SIGTERM set (a second one
  raises KeyboardInterrupt: stop now, as uvicorn's second Ctrl+C);
- ``proxy_header``: the PROXY protocol header a connection starts with under
  ``--proxy-protocol``, read from the blocking socket before HTTP, with the one policy of
  ``toyservers.proxy_protocol.take``;
- ``run_server``: block in ``serve()``; a failure to listen is one line and status 1, as
  ``toyservers._server.run_server`` says it for the asyncio servers.

Deliberately left out: a PROXY header in front of TLS (toy-wsgi serves no TLS), and one on a
UNIX socket unless ``--forwarded-allow-ips '*'`` (a UNIX peer has no address to trust).

Spec: "The PROXY protocol, versions 1 & 2" (haproxy.org, doc/proxy-protocol.txt), section 2
(the receiver reads the header before any other byte); Python's ``signal`` module (handlers
run in the main thread).

Compare with: gunicorn/workers/base.py (``init_signals``), gunicorn/http/message.py
(``Request.proxy_protocol``: the header read from the socket before the request line).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from toyservers import proxy_protocol
from toyservers.config import Config
from toyservers.listeners import where
from toyservers.proxy import Trusted
from toyservers.proxy_protocol import ProxyHeader, ProxyHeaderError

logger = logging.getLogger("toyservers.error")

READ_SIZE = 4096  # bytes asked of one recv() while a PROXY header comes (v1: at most 107)


def stop_on_signals() -> threading.Event:
    """An Event that SIGINT and SIGTERM set; a second signal, once it is set, raises
    KeyboardInterrupt in the main thread (handlers are installed from the main thread only:
    elsewhere the Event is only set by whoever holds it)."""
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        def on_signal(signum: int, frame: object) -> None:
            if stop.is_set():  # uvicorn: a second Ctrl+C does not wait any more
                raise KeyboardInterrupt
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
    return stop


def proxy_header(sock: socket.socket, buffer: bytearray, peer: tuple[str, int],
                 trusted: Trusted, timeout: float) -> ProxyHeader | None:
    """Read the PROXY header ``sock`` starts with into ``buffer`` and take it off: the header,
    or ``proxy_protocol.NO_HEADER`` when the connection is HTTP from ``peer`` itself (the
    bytes read stay in ``buffer``: the start of the request). Believed from a ``peer`` in
    ``trusted`` only. None when the connection must close: a header from a peer that is not
    trusted, a malformed one, none complete within ``timeout`` seconds, or the peer gone."""
    deadline = time.monotonic() + timeout
    try:
        while (header := proxy_protocol.take(buffer, peer[0] in trusted)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no complete PROXY header in time")
            sock.settimeout(left)
            data = sock.recv(READ_SIZE)
            if not data:
                raise EOFError("the peer closed before its PROXY header ended")
            buffer += data
    except (ProxyHeaderError, OSError, EOFError) as exc:
        logger.debug("closing %s: %s", peer, exc)
        return None
    del buffer[:header.length]
    return header


def run_server(serve: Callable[[Any, Config], None], app: Any, config: Config) -> None:
    """Block in ``serve(app, config)``. Exits the process with status 1 and one line when the
    address cannot be bound; at once (``os._exit``) on a second signal, since the
    interpreter would otherwise wait at exit for the pool's threads."""
    try:
        serve(app, config)
    except OSError as exc:
        logger.error("cannot listen on %s: %s", where(config), exc.strerror or exc)
        sys.exit(1)
    except KeyboardInterrupt:
        os._exit(1)
