"""The app of ``bench workers``: some CPU, then a wait on an upstream, as Flask and FastAPI.

Every request to ``/`` (GET or POST; a body is ignored) computes ``fib(25)`` the slow way (CPU
time, holding the GIL) and then calls the upstream (``bench/upstream.py``), which answers after
the delay the request names in its :data:`DELAY_HEADER` (150 ms by default): CPU first, then
I/O, as in the published experiment. The answer is JSON: ``{"fib": 75025, "upstream": "..."}``.

* ``flask_app`` (WSGI) calls the upstream with ``urllib.request``: a blocking call, so the
  worker's thread waits (a gevent worker patches the socket module, so there it yields to
  other greenlets instead);
* ``fastapi_app`` (ASGI) awaits ``httpx.AsyncClient``: the event loop runs other requests
  during the wait.

The upstream's URL comes from the environment variable :data:`UPSTREAM_ENV` (the bench sets it
when it starts the server); the delay from :data:`DELAY_ENV` in milliseconds.

Run: ``BENCH_UPSTREAM=http://127.0.0.1:9000/ gunicorn -w 4 apps.workers_app:flask_app``.
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

import httpx
from fastapi import FastAPI
from flask import Flask

#: Environment variable holding the upstream's URL, e.g. ``http://127.0.0.1:9000/``.
UPSTREAM_ENV = "BENCH_UPSTREAM"
#: Environment variable holding the upstream delay each request asks for, milliseconds.
DELAY_ENV = "BENCH_UPSTREAM_DELAY_MS"
#: The request header that tells the upstream how long to wait, milliseconds.
DELAY_HEADER = "X-Delay-Ms"
#: The published delay, milliseconds.
DEFAULT_DELAY_MS = 150
#: The published amount of CPU work: fib(FIB_N), computed recursively.
FIB_N = 25


# --8<-- [start:fib]
def fib(n: int) -> int:
    """The ``n``-th Fibonacci number, the exponential way: ~2.4e5 calls for n = 25."""
    return n if n < 2 else fib(n - 1) + fib(n - 2)
# --8<-- [end:fib]


def upstream() -> tuple[str, dict[str, str]]:
    """The upstream URL and the headers asking for the delay.

    Raises:
        RuntimeError: :data:`UPSTREAM_ENV` is not set.
    """
    url = os.environ.get(UPSTREAM_ENV)
    if not url:
        raise RuntimeError(f"set {UPSTREAM_ENV} to the upstream's URL (bench workers does)")
    delay = os.environ.get(DELAY_ENV, str(DEFAULT_DELAY_MS))
    return url, {DELAY_HEADER: delay}


flask_app = Flask(__name__)


# --8<-- [start:flask]
@flask_app.route("/", methods=["GET", "POST"])
def flask_view() -> tuple[str, int, dict[str, str]]:
    """CPU, then a blocking call to the upstream."""
    value = fib(FIB_N)
    url, headers = upstream()
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
        waited = r.read().decode()
    return json.dumps({"fib": value, "upstream": waited}), 200, {
        "Content-Type": "application/json"}
# --8<-- [end:flask]


fastapi_app = FastAPI()
_clients: dict[int, httpx.AsyncClient] = {}


def _client() -> httpx.AsyncClient:
    """One AsyncClient (a keep-alive pool) per worker process, made on first use: a client is
    tied to the event loop it first ran on, and each worker has its own."""
    client = _clients.get(os.getpid())
    if client is None:
        client = _clients[os.getpid()] = httpx.AsyncClient(
            timeout=30, limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100))
    return client


# --8<-- [start:fastapi]
@fastapi_app.api_route("/", methods=["GET", "POST"])
async def fastapi_view() -> dict[str, Any]:
    """CPU (blocking the loop for its length), then an awaited call to the upstream."""
    value = fib(FIB_N)
    url, headers = upstream()
    response = await _client().get(url, headers=headers)
    return {"fib": value, "upstream": response.text}
# --8<-- [end:fastapi]
