"""Lesson 2, step 2: routing and middleware, as plain WSGI callables.

Run: ``.venv/bin/python lessons/code/02-wsgi/step2_routing.py 8000``, then
``curl -i http://127.0.0.1:8000/users/7`` and ``curl -i -X DELETE http://127.0.0.1:8000/``.

A router is a WSGI app that picks another WSGI app by path and method; a middleware is a
function that takes a WSGI app and returns a WSGI app. Both are just callables, so they
compose: ``app = access_log(add_header(router, "X-Served-By", "lesson-2"))``. This is what
Flask and Django do under their decorators, with more features.

Deliberately left out: path parameters beyond one prefix, URL reversing, error pages.
Spec: PEP 3333 ("Middleware: Components that Play Both Sides", and the ``close()`` rule for
the body iterable).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment


# --8<-- [start:router]
class Router:
    """A WSGI app that dispatches on (path, method).

    ``route("/users/*", "GET")`` registers an app for every path starting with ``/users/``;
    a pattern without the final ``*`` matches that exact path only. Unknown path: 404; known path
    with another method: 405 with ``Allow`` (RFC 9110 §15.5.6).
    """

    def __init__(self) -> None:
        self.routes: dict[str, dict[str, WSGIApplication]] = {}

    def route(self, pattern: str, *methods: str) -> Callable[[WSGIApplication], WSGIApplication]:
        """Decorator: serve ``pattern`` for ``methods`` (default GET) with the decorated app."""
        def register(handler: WSGIApplication) -> WSGIApplication:
            for method in methods or ("GET",):
                self.routes.setdefault(pattern, {})[method] = handler
            return handler
        return register

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ["PATH_INFO"]
        for pattern, by_method in self.routes.items():
            if path == pattern or (pattern.endswith("*") and path.startswith(pattern[:-1])):
                handler = by_method.get(environ["REQUEST_METHOD"])
                if handler is None:
                    allow = ", ".join(sorted(by_method))
                    return text(start_response, "405 Method Not Allowed", "method not allowed\n",
                                [("Allow", allow)])
                return handler(environ, start_response)
        return text(start_response, "404 Not Found", f"no route for {path}\n")
# --8<-- [end:router]


def text(start_response: StartResponse, status: str, body: str,
         extra: list[tuple[str, str]] | None = None) -> list[bytes]:
    """Start a plain-text response and return its body iterable."""
    data = body.encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(data))), *(extra or [])])
    return [data]


# --8<-- [start:middleware]
def add_header(app: WSGIApplication, name: str, value: str) -> WSGIApplication:
    """Middleware: add one header to every response, by wrapping ``start_response``."""
    def wrapped(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None
                  ) -> Callable[[bytes], object]:
            return start_response(status, [*headers, (name, value)], exc_info)
        return app(environ, start)
    return wrapped


def access_log(app: WSGIApplication) -> WSGIApplication:
    """Middleware: print one line per request once the body has been sent.

    The body iterable is consumed by the server *after* the app returns, so timing and byte
    counts must wrap the iterable; and PEP 3333 says its ``close()`` must be called if it has
    one, so the wrapper passes that on.
    """
    def wrapped(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        started = time.perf_counter()
        statuses: list[str] = []

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None
                  ) -> Callable[[bytes], object]:
            statuses.append(status)
            return start_response(status, headers, exc_info)

        result = app(environ, start)

        def body() -> Iterator[bytes]:
            sent = 0
            try:
                for chunk in result:
                    sent += len(chunk)
                    yield chunk
            finally:
                if hasattr(result, "close"):
                    result.close()
                micros = (time.perf_counter() - started) * 1e6
                print(f'{environ["REQUEST_METHOD"]} {environ["PATH_INFO"]} '
                      f'{statuses[-1] if statuses else "-"} {sent} B {micros:.0f} µs', flush=True)
        return body()
    return wrapped
# --8<-- [end:middleware]


# --8<-- [start:app]
router = Router()


@router.route("/")
def home(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """The home page."""
    return text(start_response, "200 OK", "home\n")


@router.route("/users/*", "GET")
def user(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """``/users/<id>``: the part after the prefix is the id."""
    user_id = environ["PATH_INFO"].removeprefix("/users/")
    return text(start_response, "200 OK", f"user {user_id}\n")


app = access_log(add_header(router, "X-Served-By", "lesson-2"))
# --8<-- [end:app]

if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    with make_server("127.0.0.1", port, app) as server:
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
