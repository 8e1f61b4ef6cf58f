"""Run a registry server on a socket other than host:port, and talk to it from anywhere.

For the conformance rows ``uds``, ``fd`` and ``socket-activation`` (ours and the reference
servers alike; each one's command line comes from the registry's ``listen_*`` sections,
``toyservers/registry.py``), and the proxy rows' client that connects from another
loopback address:

- ``serving_on(name, app, listen)``: the server listening on a UNIX socket (``listen_uds``),
  an inherited descriptor (``listen_fd``) or the socket systemd would pass (``listen_activated``:
  descriptor 3, ``LISTEN_FDS=1``, ``LISTEN_PID`` its own pid); yields a function that opens a
  connection to it. The test's process binds the TCP sockets, so they accept at once: a
  server is ready when it answers, which ``get`` waits for (bounded by STARTUP_TIMEOUT).
- ``get(connect, target, headers)``: one GET on a fresh connection, its response.
- ``from_address(source)``: a ``connect(port)`` from ``source`` (``127.0.0.2``: another
  loopback address, so a server that trusts 127.0.0.1 sees a peer it does not trust).
- ``started(name, app, **options)``: the server on a TCP port with the registry ``options``
  (``proxy_headers``, ``listen="listen_proxy_protocol"``) trusting 127.0.0.1, or None when
  the registry has no such option; ``through_proxy_protocol``: a request after a PROXY header.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.process import kill_tree
from tests.conformance.support import Connection, Response, request
from tests.support.running import RunningServer, running_server
from toyservers.registry import get as spec_of

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
STARTUP_TIMEOUT = 30.0  # seconds a server gets to answer its first request
# As systemd does: the socket on descriptor 3, LISTEN_PID set to the server's own pid (an
# exec keeps the pid), then the server's own program.
EXEC_AS_SYSTEMD = ("import os, sys; os.dup2(int(sys.argv[1]), 3); "
                   "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1'); "
                   "os.execv(sys.argv[2], sys.argv[2:])")
Connect = Callable[[], socket.socket]
TRUSTED, UNTRUSTED = "127.0.0.1", "127.0.0.2"  # the proxy, and a peer it does not trust
FORWARDED = [("X-Forwarded-For", "203.0.113.9"), ("X-Forwarded-Proto", "https")]
RFC_7239 = [("Forwarded", 'for="[2001:db8::9]:4711";proto=https')]
V1 = b"PROXY TCP4 203.0.113.9 192.0.2.1 56324 443\r\n"
V2 = (b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack("!H", 12)
      + socket.inet_aton("203.0.113.9") + socket.inet_aton("192.0.2.1")
      + struct.pack("!HH", 56324, 443))
MALFORMED = b"PROXY TCP4 203.0.113.9 nope\r\n"
NO_OPTION = "the registry gives this server no option for it"


def started(name: str, app: str, **options: object) -> Iterator[RunningServer | None]:
    """``name`` serving ``app`` on a free port with the registry ``options``, trusting
    TRUSTED; None when the registry has no such option (a generator: ``yield from`` it in a
    fixture)."""
    try:
        spec_of(name).command(app, HOST, 1, trusted=TRUSTED, **options)  # type: ignore[arg-type]
    except ValueError:
        yield None
        return
    with running_server(name, lambda port: spec_of(name).command(
            app, HOST, port, trusted=TRUSTED, **options)) as running:  # type: ignore[arg-type]
        yield running


def through_proxy_protocol(source: str, port: int, header: bytes, target: str
                           ) -> Response | None:
    """GET ``target`` after ``header`` from ``source``: the response, or None when the
    server closes (or resets) without one."""
    with Connection.over(from_address(source, port)()) as conn:
        try:
            conn.send(header + request("GET", target))
            return conn.read_response()
        except ConnectionResetError:
            return None


@contextlib.contextmanager
def serving_on(name: str, app: str, listen: str, env: dict[str, str] | None = None
               ) -> Iterator[Connect]:
    """Registry server ``name`` serving ``app`` as its ``listen`` section says; yields a
    function that opens a connection to it (its timeout: STARTUP_TIMEOUT). The process tree
    is stopped at the end. Raises ValueError when the registry has no such section."""
    folder = tempfile.mkdtemp(prefix="listen-")  # short: a UNIX socket path is < 108 bytes
    listener: socket.socket | None = None
    extra: list[str] = []
    if listen == "listen_uds":
        path = os.path.join(folder, "app.sock")
        argv = spec_of(name).command(app, HOST, 0, listen=listen, path=path)

        def connect() -> socket.socket:
            sock = socket.socket(socket.AF_UNIX)
            try:
                sock.settimeout(STARTUP_TIMEOUT)
                sock.connect(path)
            except OSError:
                sock.close()
                raise
            return sock
    else:
        spec_of(name).command(app, HOST, 0, listen=listen)  # ValueError before binding
        listener = socket.create_server((HOST, 0))
        port, fd = listener.getsockname()[1], listener.fileno()
        argv = spec_of(name).command(app, HOST, 0, listen=listen, fd=fd)
        if listen == "listen_activated":
            extra = [sys.executable, "-c", EXEC_AS_SYSTEMD, str(fd)]

        def connect() -> socket.socket:
            return socket.create_connection((HOST, port), timeout=STARTUP_TIMEOUT)
    path_env = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    log = open(os.path.join(folder, "server.log"), "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([*extra, *argv], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {}), "PYTHONPATH": path_env},
                            pass_fds=(listener.fileno(),) if listener is not None else ())
    if listener is not None:
        listener.close()  # the server holds its own copy
    try:
        yield lambda: _connect_while_starting(connect, proc, log.name)
    finally:
        kill_tree(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def _connect_while_starting(connect: Connect, proc: subprocess.Popen[bytes], log: str
                            ) -> socket.socket:
    """``connect()``, retried every 50 ms while a UNIX socket does not exist yet (polled,
    not slept on: the loop ends as soon as it connects); AssertionError with the server's
    log once it has exited or STARTUP_TIMEOUT has passed."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        try:
            return connect()
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the server never listened:\n{Path(log).read_text()}"
                                     ) from None
            time.sleep(0.05)


def get(connect: Connect, target: str, headers: list[tuple[str, str]] | None = None
        ) -> Response:
    """One GET on a fresh connection from ``connect``; AssertionError without a response."""
    with Connection.over(connect()) as conn:
        conn.send(request("GET", target, headers=headers))
        response = conn.read_response()
    assert response is not None and response.complete, f"no complete response to {target}"
    return response


def from_address(source: str, port: int) -> Connect:
    """A ``connect()`` to 127.0.0.1:``port`` from the loopback address ``source``."""
    def connect() -> socket.socket:
        sock = socket.socket()
        try:
            sock.settimeout(STARTUP_TIMEOUT)
            sock.bind((source, 0))
            sock.connect((HOST, port))
        except OSError:
            sock.close()
            raise
        return sock
    return connect
