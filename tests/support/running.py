"""Run one registry server as a process on 127.0.0.1, for the suites that talk to real servers.

``running_server(name, ...)`` picks a free loopback port, starts the server (the registry's
command line for it, or an argv the caller builds for that port), waits until the port accepts
(polled by ``bench.process.ServerProcess``, never slept), yields a ``RunningServer``, and
stops the whole process tree and reaps it at the end. tests/hostile and tests/conformance both
start their servers through it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.process import ServerProcess, free_port
from toyservers.registry import get

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
STARTUP_TIMEOUT = 30.0  # seconds a server may take to accept connections


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
        return get(self.name).version()

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
