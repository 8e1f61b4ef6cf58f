"""Exercise 2, solution: a WSGI middleware that lets only requests with the right token in.

``require_token(app, token)`` returns a WSGI app that answers ``401 Unauthorized`` with
``WWW-Authenticate: Bearer`` unless the request carries ``Authorization: Bearer <token>``, and
otherwise calls ``app``. Run it with ``.venv/bin/python lessons/exercises/02-wsgi/solution.py 8000``
and try ``curl -i http://127.0.0.1:8000/`` then
``curl -i -H 'Authorization: Bearer secret-token' http://127.0.0.1:8000/``.

Spec: PEP 3333 (environ: the ``Authorization`` header arrives as ``HTTP_AUTHORIZATION``);
RFC 9110 §11.6.1 (401 must carry WWW-Authenticate), §11.1 (the scheme is case-insensitive);
RFC 6750 §2.1 (the Bearer scheme).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from wsgiref.simple_server import make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

TOKEN = os.environ.get("API_TOKEN", "secret-token")
"""The token the demo server accepts."""


# --8<-- [start:exercise]
def require_token(app: WSGIApplication, token: str) -> WSGIApplication:
    """Wrap ``app``: only requests with ``Authorization: Bearer <token>`` reach it.

    Any other request gets ``401 Unauthorized`` with the header ``WWW-Authenticate: Bearer``
    and a short plain-text body, and ``app`` is not called. The scheme name ("Bearer") is
    case-insensitive; the token is compared exactly.
    """
    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        scheme, _, credentials = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() == "bearer" and credentials.strip() == token:
            return app(environ, start_response)
        body = b"missing or wrong bearer token\n"
        start_response("401 Unauthorized", [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("WWW-Authenticate", "Bearer"),
        ])
        return [body]
    return guarded
# --8<-- [end:exercise]


def hello(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """The protected app: says hello."""
    body = f"hello from {environ['PATH_INFO']}\n".encode()
    start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8"),
                              ("Content-Length", str(len(body)))])
    return [body]


app = require_token(hello, TOKEN)

if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    with make_server("127.0.0.1", port, app) as server:
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
