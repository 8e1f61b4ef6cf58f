"""The echo app of ``echo_app.py`` as a WSGI app (PEP 3333), for the WSGI servers' tests.

It answers any request with the same JSON the ASGI echo app gives: ``{"method", "path",
"raw_path", "query_string", "headers", "body"}`` (bytes shown as latin-1 strings), with a
Content-Length. WSGI has no ``raw_path`` and no header list, so they are rebuilt: ``raw_path``
from ``RAW_URI`` (gunicorn's name, which toy-wsgi also sets: the target as received, less its
query), else ``SCRIPT_NAME + PATH_INFO``; ``headers`` from the ``HTTP_*`` keys (``HTTP_X_Y``
becomes ``x-y``) and ``CONTENT_TYPE``/``CONTENT_LENGTH``, in no particular order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any


def headers(environ: dict[str, Any]) -> list[list[str]]:
    """The request's header fields as lower-case ``[name, value]`` pairs, from the environ."""
    pairs = []
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            pairs.append([key[5:].lower().replace("_", "-"), value])
        elif key in ("CONTENT_TYPE", "CONTENT_LENGTH") and value:
            pairs.append([key.lower().replace("_", "-"), value])
    return pairs


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Echo: answer any request with a JSON description of it and its body."""
    path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
    raw_path = environ.get("RAW_URI", "").partition("?")[0] or path
    payload = json.dumps({
        "method": environ["REQUEST_METHOD"],
        "path": path,
        "raw_path": raw_path,
        "query_string": environ.get("QUERY_STRING", ""),
        "headers": headers(environ),
        "body": environ["wsgi.input"].read().decode("latin-1"),
    }).encode()
    start_response("200 OK", [("Content-Type", "application/json"),
                              ("Content-Length", str(len(payload)))])
    return [payload]
