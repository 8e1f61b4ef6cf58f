"""The user endpoint as a plain WSGI application (PEP 3333), no framework.

``app`` answers ``POST /`` with the echoed user (``application/json``); a body that is not a
user gets 400 or 422 with a JSON error body (see :mod:`apps.user`); other paths get 404 and
other methods on ``/`` get 405. The body is read from ``wsgi.input`` up to ``CONTENT_LENGTH``
bytes, as PEP 3333 asks ("the application should not attempt to read more data than is
specified by the CONTENT_LENGTH variable").

Run it: ``gunicorn apps.wsgi_user:app``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from apps.user import CONTENT_TYPE, UserError, endpoint

StartResponse = Callable[..., Any]

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            422: "Unprocessable Content"}


def _respond(start_response: StartResponse, status: int, body: bytes,
             extra: list[tuple[str, str]] | None = None) -> list[bytes]:
    headers = [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(body))), *(extra or [])]
    start_response(f"{status} {_REASONS[status]}", headers)
    return [body]


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """The WSGI application: ``POST /`` echoes the JSON user in the request body."""
    if environ.get("PATH_INFO", "/") not in ("", "/"):
        return _respond(start_response, 404, b'{"error": "not found"}')
    if environ["REQUEST_METHOD"] != "POST":
        return _respond(start_response, 405, b'{"error": "method not allowed"}',
                        [("Allow", "POST")])
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    body = environ["wsgi.input"].read(length) if length > 0 else b""
    try:
        return _respond(start_response, 200, endpoint(body))
    except UserError as exc:
        return _respond(start_response, exc.status, exc.body())
