"""Run one registry server as a process on 127.0.0.1, for the suites that talk to real servers.

``running_server(name, ...)`` picks a free loopback port, starts the server (the registry's
command line for it, or an argv the caller builds for that port), waits until the port accepts
(polled by ``bench.process.ServerProcess``, never slept), yields a ``RunningServer``, and
stops the whole process tree and reaps it at the end. tests/hostile and tests/conformance both
start their servers through it.

``serving(name, app, **settings)`` runs a toy server in a thread of the test process instead,
for end-to-end tests that give it an app or settings of their own. ``PeakRSS`` samples a
running server's memory while a test loads it (the ASGI and WSGI conformance suites).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import pytest

from bench.process import ServerProcess, free_port
from toyservers._server import new_event_loop_factory
from toyservers.config import Config
from toyservers.registry import SERVERS, get

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
STARTUP_TIMEOUT = 30.0  # seconds a server process may take to accept connections
THREAD_TIMEOUT = 10.0  # seconds an in-process server may take to start, and to stop


@dataclass
class RunningServer:
    """A started server: its registry ``name`` and its process (port, pid, log)."""

    name: str
    process: ServerProcess

    @property
    def port(self) -> int:
        return self.process.port

    @property
    def address(self) -> tuple[str, int]:
        return (HOST, self.process.port)

    @property
    def version(self) -> str:
        """The server's version, from the registry ("" for one outside it: ``--own-server``)."""
        return get(self.name).version() if self.name in SERVERS else ""

    def alive(self) -> bool:
        """True while the server process has not exited."""
        return self.process.proc is not None and self.process.proc.poll() is None

    def log_tail(self) -> str:
        """The last lines the server printed (for assertion messages)."""
        return self.process.log_tail()


@contextlib.contextmanager
def running_server(name: str, argv: Callable[[int], Sequence[str]] | None = None, *,
                   app: str | None = None, tls: tuple[str, str] | None = None,
                   env: dict[str, str] | None = None, log_path: Path | None = None
                   ) -> Iterator[RunningServer]:
    """Serve with registry server ``name`` on a free port of 127.0.0.1 while the block runs.

    ``argv(port)`` builds the command line; without it, the registry's command serving
    ``app`` (``"module:attr"``), over HTTPS when ``tls`` is a ``(certfile, keyfile)`` pair.
    ``env`` adds to the environment (the repository root is put on PYTHONPATH). A toy server
    whose module does not exist yet fails the test with a clear message (never a skip).
    Raises bench.process.ServerStartError when the server exits or never listens.
    """
    spec = get(name)
    if spec.module is not None and importlib.util.find_spec(spec.module) is None:
        pytest.fail(f"{name}: module {spec.module} does not exist yet", pytrace=False)
    port = free_port(HOST)
    if argv is not None:
        command = list(argv(port))
    else:
        assert app is not None, "running_server needs an app or an argv"
        command = spec.command(app, HOST, port, tls=tls)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    process = ServerProcess(command, host=HOST, port=port, cwd=ROOT,
                            env={**(env or {}), "PYTHONPATH": path},
                            startup_timeout=STARTUP_TIMEOUT, log_path=log_path)
    process.start()
    try:
        yield RunningServer(name, process)
    finally:
        process.stop()


@contextlib.contextmanager
def serving(name: str, app: Any, **settings: Any) -> Iterator[int]:
    """Serve ``app`` with toy server ``name`` (its ``serve()``) in a thread of this process, on
    a socket bound to 127.0.0.1 port 0, with ``Config(**settings)`` (access log and lifespan
    off unless asked for); yield the port. Readiness comes from ``serve``'s ``ready`` callback;
    at the end the server is shut down and its thread joined, each within THREAD_TIMEOUT.
    ``toy-anyio-trio`` runs in ``anyio.run(..., backend="trio")``, the others on asyncio's own
    loop, or on uvloop's with ``loop="uvloop"``."""
    serve = get(name).load().serve
    settings = {"access_log": False, "lifespan": "off", "timeout_graceful_shutdown": 2.0,
                **settings}
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((HOST, 0))
    port: int = sock.getsockname()[1]
    config = Config(host=HOST, port=port, **settings)
    loop = new_event_loop_factory(config.loop if config.loop == "uvloop" else "asyncio")()
    stop: Any = asyncio.Event()
    ready = threading.Event()
    errors: list[BaseException] = []
    token: list[Any] = []  # trio: the token to set ``stop`` from this thread with

    async def on_trio() -> None:
        nonlocal stop
        stop = anyio.Event()
        token.append(anyio.lowlevel.current_token())
        await serve(app, config, sock=sock, ready=lambda _: ready.set(), shutdown=stop)

    def main() -> None:
        try:
            if name == "toy-anyio-trio":
                anyio.run(on_trio, backend="trio")
            else:
                loop.run_until_complete(serve(app, config, sock=sock,
                                              ready=lambda _: ready.set(), shutdown=stop))
        except BaseException as exc:  # handed to the test below
            errors.append(exc)
            ready.set()

    thread = threading.Thread(target=main, name=f"serving-{name}", daemon=True)
    thread.start()
    assert ready.wait(THREAD_TIMEOUT) and not errors, f"{name} did not start: {errors}"
    try:
        yield port
    finally:
        if token:
            anyio.from_thread.run_sync(stop.set, token=token[0])
        else:
            loop.call_soon_threadsafe(stop.set)
        thread.join(THREAD_TIMEOUT)
        alive = thread.is_alive()
        if not alive:
            loop.close()
        sock.close()
        assert not alive and not errors, f"{name} did not stop cleanly: {errors}"


class PeakRSS:
    """Samples the server tree's RSS every 10 ms in a thread; ``growth`` = peak - baseline."""

    def __init__(self, server: RunningServer) -> None:
        self.server = server
        self.baseline = server.process.rss()
        self.peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self.server.process.rss())

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5.0)
        self.peak = max(self.peak, self.server.process.rss())

    @property
    def growth(self) -> int:
        return self.peak - self.baseline
