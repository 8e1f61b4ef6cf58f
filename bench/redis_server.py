"""A throwaway ``redis-server`` on loopback for ``bench servers`` and the tests.

:class:`RedisServer` starts ``redis-server`` on a free port of 127.0.0.1 with its working
directory in a new temporary folder and persistence off (no RDB snapshots, no append-only
file), polls until it accepts connections (never sleeps), and on exit stops it and deletes the
folder. Nothing outlives the ``with`` block.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from bench.process import ServerProcess, ServerStartError, free_port

#: What every command says when redis-server is not installed.
MISSING = ("redis-server not found: install it (scripts/ensure-tools.sh redis-server, or "
           "apt-get install redis-server); `make bench` does")


class RedisMissing(RuntimeError):
    """redis-server is not on PATH; the message says how to install it (:data:`MISSING`)."""


def find_redis() -> str:
    """The path of ``redis-server``.

    Raises:
        RedisMissing: it is not installed.
    """
    found = shutil.which("redis-server")
    if found is None:
        raise RedisMissing(MISSING)
    return found


def redis_version(path: str) -> str:
    """redis-server's version, e.g. ``"7.0.15"`` (from ``redis-server --version``)."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    for word in out.stdout.split():
        if word.startswith("v="):
            return word[2:]
    return out.stdout.strip() or "unknown"


class RedisServer:
    """``with RedisServer() as redis: ...``: a fresh redis-server on ``redis.host:redis.port``.

    ``cpu`` pins it to that CPU (None: not pinned). Entering raises
    :class:`bench.process.ServerStartError` when it does not start within
    ``startup_timeout`` seconds, and :class:`RedisMissing` when it is not installed.
    """

    def __init__(self, *, host: str = "127.0.0.1", cpu: int | None = None,
                 startup_timeout: float = 20.0) -> None:
        self.path = find_redis()
        self.host = host
        self.port = free_port(host)
        self.cpu = cpu
        self.startup_timeout = startup_timeout
        self.directory: Path | None = None
        self.process: ServerProcess | None = None

    def argv(self, directory: Path) -> list[str]:
        """The command line: loopback only, working files in ``directory``, no persistence."""
        return [self.path, "--bind", self.host, "--port", str(self.port),
                "--dir", str(directory), "--save", "", "--appendonly", "no",
                "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning"]

    def __enter__(self) -> RedisServer:
        self.directory = Path(tempfile.mkdtemp(prefix="bench-redis-"))
        self.process = ServerProcess(self.argv(self.directory), host=self.host, port=self.port,
                                     cpu=self.cpu, startup_timeout=self.startup_timeout,
                                     log_path=self.directory / "redis.log")
        try:
            self.process.start()
        except ServerStartError:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.process is not None:
            self.process.stop()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    @property
    def address(self) -> str:
        """``host:port``, as ``SERVERS_APP_REDIS`` takes it."""
        return f"{self.host}:{self.port}"
