"""Exercise 2, a plausible wrong answer: the header looked up by its name on the wire.

``environ.get("Authorization")`` reads as the obvious line, and finds nothing: a WSGI server
puts a request's header fields in ``environ`` as ``HTTP_`` plus the name in upper case with
``-`` as ``_``, so every request is refused, the right token too.
``EXERCISE_IMPL=wrong make exercise N=2`` shows what a student who wrote it reads;
``tests/test_exercises.py`` checks that it fails with this hint:

Fails: test_the_right_token_reaches_the_app: AssertionError: the right token got '401
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
        scheme, _, credentials = environ.get("Authorization", "").partition(" ")
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
