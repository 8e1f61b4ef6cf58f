"""What ``bench cluster`` runs: N backends, and nginx or HAProxy in front of them.

A **backend** (:class:`Backend`) is an ordinary registry server (``--server``, toy-httptools
by default) serving ``apps/cluster_app.py`` on a free port of 127.0.0.1, one process each,
named ``b1``, ``b2``, ... in its ``x-backend`` header; :class:`Fleet` holds them. A backend can
be stopped gracefully (SIGTERM: the server stops accepting and finishes what is in flight),
killed (SIGKILL: what was in flight is lost) and started again on the same port, and asked
directly how many requests it served (``GET /count``).

A **proxy** (:class:`Proxy`) is nginx or HAProxy from Debian's packages, run in the foreground,
unprivileged, from a config generated into a temporary folder of its own from a template in
``bench/proxies/`` (:func:`render` fills in each ``{{name}}``). What differs from row to row
is an :class:`Upstream`: keep-alive to the backends or not, round robin or least-connections,
HAProxy's active health checks, and backends marked down. A running nginx takes a new config
on SIGHUP (:meth:`Proxy.reload`: new workers, the old ones finish their requests); a running
HAProxy answers its runtime API on the folder's UNIX socket (:meth:`Proxy.api`: ``set server
backends/b1 state drain``, ``show stat``).

Every address is on 127.0.0.1, every port a free one; nothing needs root once nginx and
HAProxy are installed (``scripts/ensure-tools.sh nginx haproxy``). A proxy that is not installed
is named by :func:`find_proxy` returning None, and its rows are skipped with one line.
"""

from __future__ import annotations

import csv
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import psutil

from bench.harness import fetch
from bench.process import ServerProcess, free_port
from toyservers.registry import get

TEMPLATES = Path(__file__).resolve().parent / "proxies"
#: The backends' app.
APP = "apps.cluster_app:app"
#: The proxies ``bench cluster`` knows, in table order.
PROXIES = ("nginx", "haproxy")
#: The template of each proxy's config, and the file it is written to.
CONFIGS = {"nginx": "nginx.conf", "haproxy": "haproxy.cfg"}
Balance = Literal["roundrobin", "leastconn"]

# --- the configs -------------------------------------------------------------------------------

PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def render(template: str, values: Mapping[str, str]) -> str:
    """``template`` with every ``{{name}}`` replaced by ``values[name]``.

    A placeholder alone on its line takes a value of any number of lines, each indented as the
    placeholder was; an empty value removes the line.

    Raises:
        KeyError: a placeholder has no value.
        ValueError: a value has no placeholder (a misspelt name).
    """
    used: set[str] = set()
    out = []
    for line in template.splitlines(keepends=True):
        alone = re.fullmatch(r"( *)\{\{(\w+)\}\}\n?", line)
        if alone:
            indent, name = alone.groups()
            used.add(name)
            out += [f"{indent}{part}\n" for part in values[name].splitlines()]
            continue

        def value(match: re.Match[str]) -> str:
            used.add(match[1])
            return values[match[1]]

        out.append(PLACEHOLDER.sub(value, line))
    unused = sorted(set(values) - used)
    if unused:
        raise ValueError(f"no placeholder for {', '.join(unused)}")
    return "".join(out)


@dataclass(frozen=True)
class Address:
    """A backend as the proxy sees it: its name (``b1``) and ``host:port``."""

    name: str
    host: str
    port: int


@dataclass(frozen=True)
class Upstream:
    """How a proxy reaches its backends.

    Attributes:
        keepalive: keep connections to the backends open for the next requests (nginx:
            ``keepalive`` and HTTP/1.1; HAProxy: ``http-keep-alive``), or one per request.
        balance: ``"roundrobin"`` or ``"leastconn"``.
        checks: HAProxy's active health check (``GET /health``) on every server; nginx has
            only its passive one (``max_fails``, ``fail_timeout``).
        down: names of backends marked down (nginx: out of the upstream once reloaded).
        fail_timeout: nginx's ``fail_timeout``: seconds a backend that failed gets no request.
        read_timeout: seconds the proxy waits for a backend's answer before it answers 504.
        send_proxy: HAProxy opens each backend connection with a PROXY protocol header,
            version 1 (``send-proxy``) or 2 (``send-proxy-v2``); 0: none.
    """

    keepalive: bool = True
    balance: Balance = "roundrobin"
    checks: bool = False
    down: frozenset[str] = frozenset()
    fail_timeout: float = 1.0
    read_timeout: float = 30.0
    send_proxy: int = 0


def nginx_values(folder: Path, listen: str, backends: Sequence[Address], upstream: Upstream
                 ) -> dict[str, str]:
    """The values of ``bench/proxies/nginx.conf``'s placeholders."""
    servers = [f"server {b.host}:{b.port} max_fails=1 fail_timeout={upstream.fail_timeout:g}s"
               + (" down" if b.name in upstream.down else "") + ";" for b in backends]
    return {
        "folder": str(folder), "listen": listen,
        "balance": "least_conn;" if upstream.balance == "leastconn" else "",
        "servers": "\n".join(servers),
        "keepalive": "keepalive 32;\nkeepalive_timeout 4s;" if upstream.keepalive else "",
        "connection": '""' if upstream.keepalive else "close",
        "read_timeout": f"{upstream.read_timeout:g}s",
    }


def haproxy_values(folder: Path, listen: str, backends: Sequence[Address], upstream: Upstream
                   ) -> dict[str, str]:
    """The values of ``bench/proxies/haproxy.cfg``'s placeholders."""
    options = (" check" if upstream.checks else "") + {0: "", 1: " send-proxy",
                                                       2: " send-proxy-v2"}[upstream.send_proxy]
    servers = [f"server {b.name} {b.host}:{b.port}{options}"
               + (" disabled" if b.name in upstream.down else "") for b in backends]
    return {
        "folder": str(folder), "listen": listen, "balance": upstream.balance,
        "servers": "\n".join(servers),
        "keepalive": ("option http-keep-alive" if upstream.keepalive
                      else "option http-server-close"),
        "read_timeout": f"{upstream.read_timeout:g}s",
    }


def config_text(proxy: str, folder: Path, listen: str, backends: Sequence[Address],
                upstream: Upstream) -> str:
    """``proxy``'s whole config (``listen`` is ``host:port``)."""
    values = (nginx_values if proxy == "nginx" else haproxy_values)(folder, listen, backends,
                                                                     upstream)
    return render((TEMPLATES / CONFIGS[proxy]).read_text(), values)


# --- the proxies -------------------------------------------------------------------------------


def find_proxy(name: str) -> str | None:
    """The path of ``name``'s executable (``nginx`` or ``haproxy``): on PATH, or in
    ``/usr/sbin``, where Debian puts both and a user's PATH may not look; None when missing."""
    found = shutil.which(name)
    if found is None and os.access(f"/usr/sbin/{name}", os.X_OK):
        found = f"/usr/sbin/{name}"
    return found


def proxy_version(path: str) -> str:
    """The version a proxy prints (``nginx -v``: ``nginx/1.22.1``; ``haproxy -v``:
    ``2.6.12-1+deb12u4``), or ``unknown``."""
    try:
        out = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = out.stdout + out.stderr
    match = re.search(r"nginx version: (\S+)|HAProxy version (\S+)", text)
    return (match[1] or match[2]) if match else "unknown"


class Proxy:
    """nginx or HAProxy in front of ``backends``, from a config in ``folder``.

    :meth:`argv` writes the config for a port and returns the command that runs the proxy in
    the foreground; whoever runs it (the rounds, or :meth:`start`) owns the process.
    """

    def __init__(self, name: str, path: str, folder: Path, backends: Sequence[Address],
                 upstream: Upstream, host: str = "127.0.0.1") -> None:
        self.name, self.path, self.folder = name, path, folder
        self.backends, self.upstream, self.host = list(backends), upstream, host
        self.port = 0
        self.process: ServerProcess | None = None
        folder.mkdir(parents=True, exist_ok=True)
        # nginx's workers run as "nobody" when its master is root: let them into the folder
        folder.chmod(0o755)

    @property
    def config_path(self) -> Path:
        return self.folder / CONFIGS[self.name]

    @property
    def socket_path(self) -> Path:
        """HAProxy's runtime API socket."""
        return self.folder / "admin.sock"

    def write(self) -> None:
        """Write the config for :attr:`port` and :attr:`upstream`."""
        self.config_path.write_text(config_text(self.name, self.folder,
                                                f"{self.host}:{self.port}", self.backends,
                                                self.upstream))

    def argv(self, port: int) -> list[str]:
        """Write the config for ``port``; the argv that runs the proxy in the foreground."""
        self.port = port
        self.write()
        if self.name == "nginx":
            return [self.path, "-p", str(self.folder), "-c", str(self.config_path),
                    "-e", str(self.folder / "error.log")]
        return [self.path, "-f", str(self.config_path), "-db"]

    def start(self, cpu: int | None, log_path: Path, port: int = 0) -> ServerProcess:
        """Run the proxy on ``port`` (0: a free one) until :meth:`stop`.

        Raises:
            bench.process.ServerStartError: it exited or did not listen.
        """
        port = port or free_port(self.host)
        self.process = ServerProcess(self.argv(port), host=self.host, port=port, cpu=cpu,
                                     log_path=log_path, startup_timeout=10)
        self.process.start()
        return self.process

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def reload(self, upstream: Upstream, timeout: float = 10.0) -> None:
        """nginx: rewrite the config with ``upstream`` and send SIGHUP; return once the
        workers that ran the old config have exited (they finish their requests first).

        Raises:
            TimeoutError: an old worker still runs after ``timeout`` seconds.
        """
        assert self.process is not None and self.name == "nginx", "reload a running nginx"
        self.upstream = upstream
        self.write()
        master = psutil.Process(self.process.pid)
        old = {child.pid for child in master.children()}

        def renewed() -> bool:
            workers = {child.pid for child in master.children()}
            return bool(workers) and not workers & old

        master.send_signal(signal.SIGHUP)
        wait_until(renewed, timeout, "nginx's old workers to exit after a reload")

    def api(self, command: str, timeout: float = 5.0) -> str:
        """One command to HAProxy's runtime API; its answer.

        Raises:
            OSError: the socket is not there or did not answer within ``timeout`` seconds.
        """
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(self.socket_path))
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def server_stats(self) -> dict[str, dict[str, str]]:
        """HAProxy's ``show stat`` for each backend server: its fields by name (``status``:
        ``UP``, ``DOWN``, ``DRAIN``, ``MAINT``...; ``scur``: requests in progress now)."""
        lines = self.api("show stat").lstrip("# ").splitlines()
        return {row["svname"]: row for row in csv.DictReader(lines)
                if row.get("pxname") == "backends" and row["svname"] not in ("BACKEND",
                                                                             "FRONTEND")}


# --- the backends ------------------------------------------------------------------------------


@dataclass
class Backend:
    """One backend process: ``server`` serving :data:`APP` as ``name`` on ``host:port``.

    Attributes:
        wait_ms: how long each request waits in the app (``BACKEND_WAIT_MS``).
        cpu: the CPU it is pinned to, or None.
        log_path: where its output goes (each start appends a numbered file).
        app: the app it serves, ``module:attr``.
        options: more command-line options for the server (``--forwarded-allow-ips``...).
    """

    name: str
    server: str
    host: str
    port: int
    log_path: Path
    wait_ms: float = 0.0
    cpu: int | None = None
    app: str = APP
    options: tuple[str, ...] = ()
    process: ServerProcess | None = None
    starts: int = 0

    @property
    def address(self) -> Address:
        return Address(self.name, self.host, self.port)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def argv(self) -> list[str]:
        return [*get(self.server).command(self.app, self.host, self.port), *self.options]

    def start(self) -> None:
        """Start it and wait until it answers ``GET /health``.

        Raises:
            bench.process.ServerStartError: it exited or did not listen.
            TimeoutError: it listened but did not answer.
        """
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the process; return at once."""
        self.starts += 1
        log = self.log_path.with_suffix(f".{self.starts}.log") if self.starts > 1 \
            else self.log_path
        env = {"BACKEND_NAME": self.name, "BACKEND_WAIT_MS": f"{self.wait_ms:g}"}
        self.process = ServerProcess(self.argv(), host=self.host, port=self.port, cpu=self.cpu,
                                     env=env, log_path=log)
        self.process.launch()

    def wait_ready(self) -> None:
        """Wait until the launched process answers ``GET /health`` (see :meth:`start`)."""
        assert self.process is not None, "wait_ready before launch"
        self.process.wait_ready()
        if self.app == APP:
            wait_until(self.healthy, 10, f"{self.name} to answer GET /health")

    def healthy(self) -> bool:
        """Whether it answers ``GET /health`` with 200 now (:data:`APP` does)."""
        try:
            return fetch(self.host, self.port, "/health", timeout=1)[0] == 200
        except (OSError, http.client.HTTPException):
            return False

    def count(self) -> int | None:
        """The ``/`` requests it served since it started (``GET /count``), None when it does
        not answer."""
        try:
            status, _, body = fetch(self.host, self.port, "/count", timeout=2)
        except (OSError, http.client.HTTPException):
            return None
        return int(json.loads(body)["requests"]) if status == 200 else None

    def terminate(self, timeout: float = 30.0) -> float:
        """SIGTERM, then wait for it to exit (a graceful shutdown); the seconds it took.

        Raises:
            TimeoutError: it still ran after ``timeout`` seconds (it is then killed).
        """
        return self.end(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL: it ends at once, and what it had in flight with it."""
        self.end(signal.SIGKILL, 10)

    def end(self, sig: signal.Signals, timeout: float) -> float:
        assert self.process is not None and self.process.proc is not None, "not running"
        proc, started = self.process.proc, time.monotonic()
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.stop()
            raise TimeoutError(f"{self.name} still ran {timeout:g} s after {sig.name}") from None
        finally:
            self.process = None
        return time.monotonic() - started

    def stop(self) -> None:
        """Stop it if it runs (SIGTERM, then SIGKILL after a grace period)."""
        if self.process is not None:
            self.process.stop()
            self.process = None


@dataclass
class Fleet:
    """The N backends behind a proxy."""

    backends: list[Backend] = field(default_factory=list)

    @classmethod
    def plan(cls, count: int, server: str, host: str, cpus: Sequence[int | None], logs: Path,
             prefix: str = "", wait_ms: Callable[[int], float] = lambda _: 0.0,
             options: tuple[str, ...] = ()) -> Fleet:
        """``count`` backends ``b1``... on free ports; backend ``i`` (0-based) on
        ``cpus[i % len(cpus)]`` and waiting ``wait_ms(i)`` ms per request, each with
        ``options`` (:attr:`Backend.options`); logs in ``logs`` named ``<prefix>b<i>.log``."""
        return cls([Backend(f"b{i + 1}", server, host, free_port(host),
                            logs / f"{prefix}b{i + 1}.log", wait_ms(i), cpus[i % len(cpus)],
                            options=options)
                    for i in range(count)])

    @property
    def addresses(self) -> list[Address]:
        return [b.address for b in self.backends]

    def pids(self) -> list[int]:
        return [b.pid for b in self.backends if b.pid is not None]

    def start(self) -> None:
        """Start every backend that is not running (see :meth:`Backend.start`), all at once;
        on a failure stop them all."""
        stopped = [b for b in self.backends if b.process is None]
        try:
            for backend in stopped:
                backend.launch()
            for backend in stopped:
                backend.wait_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for backend in self.backends:
            backend.stop()

    def counts(self) -> dict[str, int | None]:
        """Each backend's ``/count``, by name."""
        return {b.name: b.count() for b in self.backends}

    def __getitem__(self, name: str) -> Backend:
        return next(b for b in self.backends if b.name == name)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` until it is true.

    Raises:
        TimeoutError: still false after ``timeout`` seconds (the message names ``what``).
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:g} s for {what}")
        time.sleep(0.02)  # a polling interval, not a wait for something to happen
