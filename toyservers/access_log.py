"""The access log every toy server writes, ASGI or WSGI: uvicorn's line, one function.

``log_request`` writes ``127.0.0.1:50000 - "GET /p?q HTTP/1.1" 200`` to the
``toyservers.access`` logger, from the request-target as received (visible ASCII: every parser
here refuses other bytes in a target), never from a decoded path, in which ``%0d%0a`` would end
the line and ``%1b`` colour a terminal. ``enabled(config)`` says whether to build lines at all:
a server asks once, at start, and skips the call on its hot path otherwise.

Spec: RFC 9112 §3 (request-line: method, request-target, HTTP-version).

Compare with: uvicorn/logging.py (``AccessFormatter``) and the access log in
uvicorn/protocols/http/httptools_impl.py (``send``).
"""

from __future__ import annotations

import logging

from toyservers.config import Config

access_logger = logging.getLogger("toyservers.access")


def enabled(config: Config) -> bool:
    """True when ``config.access_log`` is on and the access logger writes INFO lines."""
    return config.access_log and access_logger.isEnabledFor(logging.INFO)


def log_request(client: tuple[str, int] | None, method: str, raw_path: bytes,
                query_string: bytes, http_version: str, status: int) -> None:
    """Write one access line: the client's ``host:port`` (``-:0`` when unknown), the request
    line rebuilt from the raw target (``raw_path`` and ``query_string``, bytes as received) and
    the response ``status``."""
    target = raw_path.decode("ascii", "backslashreplace")
    if query_string:
        target += "?" + query_string.decode("ascii", "backslashreplace")
    access_logger.info('%s:%d - "%s %s HTTP/%s" %d', *(client or ("-", 0)), method, target,
                       http_version, status)
