"""Why a buffering proxy goes in front of a sync worker: one slow client, timed twice.

Usage: ``.venv/bin/python lessons/code/14-proxy/slow_clients.py [SECONDS]``. It starts toy-wsgi
with its sync worker (one connection at a time, lesson 7) serving the user endpoint, and nginx
in front of it. Then, once straight to toy-wsgi and once through nginx, a slow client sends its
request's head and half its body, waits ``SECONDS`` (2 by default: a phone on a bad network),
and sends the rest; a fast client sends the same request meanwhile. It prints how long the fast
client waited each time.

Straight to the sync worker, the fast request waits for the slow one: the worker's only
thread is reading the slow body. Through nginx it does not: nginx reads the whole request
before it passes it on (``proxy_request_buffering``, on by default), so the worker only ever
sees complete requests, sent at loopback speed.
"""

from __future__ import annotations

import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from apps.user import SAMPLE_BODY
from bench.cluster_stack import Fleet, Proxy, Upstream, find_proxy
from bench.harness import fetch


# --8<-- [start:slow]
def slow_client(port: int, pause: float) -> None:
    """POST the user with a pause of ``pause`` seconds halfway through the body."""
    head = (f"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(SAMPLE_BODY)}\r\nConnection: close\r\n\r\n").encode()
    half = len(SAMPLE_BODY) // 2
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head + SAMPLE_BODY[:half])
        time.sleep(pause)  # the client's network, not ours
        sock.sendall(SAMPLE_BODY[half:])
        while sock.recv(65536):
            pass


def fast_request_seconds(port: int, pause: float) -> float:
    """Seconds a fast POST takes while a slow client is sending its request on ``port``."""
    slow = threading.Thread(target=slow_client, args=(port, pause))
    slow.start()
    time.sleep(0.2)  # let the slow client connect first
    started = time.perf_counter()
    status, _, _ = fetch("127.0.0.1", port, method="POST", body=SAMPLE_BODY, timeout=30)
    took = time.perf_counter() - started
    slow.join()
    assert status == 200, status
    return took
# --8<-- [end:slow]


def main(pause: float = 2.0) -> None:
    nginx = find_proxy("nginx")
    if nginx is None:
        sys.exit("nginx is not installed: scripts/ensure-tools.sh nginx installs it")
    with tempfile.TemporaryDirectory(prefix="slow-clients-") as folder:
        fleet = Fleet.plan(1, "toy-wsgi", "127.0.0.1", [None], Path(folder))
        fleet.backends[0].app = "apps.wsgi_user:app"
        proxy = Proxy("nginx", nginx, Path(folder) / "nginx", fleet.addresses, Upstream())
        try:
            fleet.start()
            proxy.start(None, Path(folder) / "nginx.log")
            direct = fast_request_seconds(fleet.backends[0].port, pause)
            print(f"straight to toy-wsgi (sync): the fast request took {direct:.2f} s")
            proxied = fast_request_seconds(proxy.port, pause)
            print(f"through nginx:               the fast request took {proxied:.2f} s")
        finally:
            proxy.stop()
            fleet.stop()


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 2.0)
