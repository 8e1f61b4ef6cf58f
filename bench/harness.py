"""The harness every ``bench`` experiment runs on: one way to measure a server.

An experiment says what to run and how to report it; this module does the measuring, the
same way for every row of every table:

1. start the server fresh on a free port, as a subprocess pinned to one CPU
   (:func:`decide_pinning`), and poll until it accepts a connection (never sleep);
2. check one real request comes back right (:func:`check_echo`), so a broken row fails
   loudly instead of measuring error pages;
3. run a warm-up, then ``runs`` measured runs of a :class:`bench.loadgen.LoadGenerator`
   pinned to another CPU, while a thread samples the RSS of the server's process tree
   (:class:`RssSampler`);
4. stop the whole process tree (SIGTERM, then SIGKILL after a grace period).

A failure at any step ends that row as ``failed`` with the reason and the server's log tail
(:class:`Measurement`); the experiment goes on with its next row.

An experiment is then a short loop. ``bench workers``, for one, would be::

    generator = load_generator("wrk")
    for n in (1, 2, 4):
        port = method.pick_port()
        argv = get("uvicorn").command("apps.asgi_user:app", method.host, port, workers=n)
        rows.append(measure_server(argv, port, label=f"uvicorn x{n}", method=method,
                                   pinning=pinning, generator=generator, log_path=...))

and ``bench h2`` the same over the servers whose ``protocols`` hold ``"h2c"``, with an
h2load generator. :func:`environment` gives
the provenance every results.json records: machine, Python, package versions, the load
generator, and the project's git commit (:func:`git_state`).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol

from apps.user import SAMPLE_BODY
from bench import loadgen
from bench.loadgen import Load, LoadGenerator, LoadGenError, RunSummary
from bench.machine import machine_info, package_versions, python_info
from bench.process import ServerProcess, ServerStartError, free_port, tree_rss
from toyservers.registry import SERVERS, Interface

#: The repository holding this package: where ``git_state`` looks.
ROOT = Path(__file__).resolve().parent.parent
#: Lines of a failed server's log kept in results and shown in the terminal.
LOG_LINES = 15

RunKind = Literal["warmup", "measured"]
Status = Literal["ok", "failed", "skipped"]


class UsageProblem(Exception):
    """A user mistake: the message is the one line ``bench`` prints before exiting."""


# --- how to measure ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Method:
    """How every row is measured: the load, the repetitions, the pinning, the address.

    Attributes:
        connections: load-generator connections.
        threads: load-generator threads.
        duration: seconds per measured run (whole seconds).
        warmup: seconds of warm-up before the measured runs (0: none).
        runs: measured runs per row.
        pin: pin the server and the load generator to separate CPUs.
        server_cpu: the server's CPU when pinned.
        load_cpu: the load generator's CPU when pinned (``bench``'s ``--wrk-cpu``).
        host: address the server listens on.
        port: port for every server (0: a free one each time).
        timeout: seconds after which the load generator counts a request as timed out.
        startup_timeout: seconds a server gets to accept its first connection.
    """

    connections: int = 10
    threads: int = 1
    duration: int = 10
    warmup: int = 2
    runs: int = 3
    pin: bool = True
    server_cpu: int = 0
    load_cpu: int = 1
    host: str = "127.0.0.1"
    port: int = 0
    timeout: int = 2
    startup_timeout: float = 30.0

    def load(self, seconds: int, body: bytes = SAMPLE_BODY) -> Load:
        """The :class:`Load` of one run lasting ``seconds``."""
        return Load(connections=self.connections, threads=self.threads, duration=seconds,
                    timeout=self.timeout, body=body)

    def pick_port(self) -> int:
        """``port``, or a free one on ``host`` when it is 0."""
        return self.port or free_port(self.host)

    @property
    def steps(self) -> int:
        """Load-generator runs per row: the warm-up (if any) and the measured runs."""
        return (1 if self.warmup else 0) + self.runs


@dataclass(frozen=True)
class Pinning:
    """Where the server and the load generator run: a CPU each, or None when unpinned.

    Attributes:
        server_cpu: the server's CPU, or None.
        load_cpu: the load generator's CPU, or None.
        text: one line for reports.
    """

    server_cpu: int | None
    load_cpu: int | None
    text: str

    def to_json(self) -> dict[str, Any]:
        """results.json's ``pinning``: ``{"server_cpu", "load_cpu", "text"}``."""
        return {"server_cpu": self.server_cpu, "load_cpu": self.load_cpu, "text": self.text}


def decide_pinning(method: Method, usable: list[int], *, client: str = "wrk",
                   flags: tuple[str, str] = ("--server-cpu", "--wrk-cpu")) -> Pinning:
    """Pin the server and the load generator (``client``) to their CPUs when asked and possible.

    ``usable`` is the CPUs this process may use; ``flags`` name the options that chose the two
    CPUs, for the error message.

    Raises:
        UsageProblem: a requested CPU is not usable, or both are the same.
    """
    if not method.pin:
        return Pinning(None, None, f"not pinned (--no-pin): server and {client} share every "
                                   "core")
    if not hasattr(os, "sched_setaffinity"):  # Linux-only: not on macOS
        return Pinning(None, None, f"not pinned: this system cannot pin a process to a CPU "
                                   f"(no sched_setaffinity), so server and {client} share "
                                   "every core")
    if len(usable) < 2:
        return Pinning(None, None, f"not pinned: only {len(usable)} usable core, so server "
                                   f"and {client} share it (figures are lower than on 2+ "
                                   "cores)")
    for name, cpu in zip(flags, (method.server_cpu, method.load_cpu), strict=True):
        if cpu not in usable:
            cpus = ", ".join(map(str, usable))
            raise UsageProblem(f"{name} {cpu} cannot be used: usable CPUs are {cpus}")
    if method.server_cpu == method.load_cpu:
        raise UsageProblem(f"{flags[0]} and {flags[1]} must differ to pin them apart")
    return Pinning(method.server_cpu, method.load_cpu,
                   f"pinned: server on CPU {method.server_cpu}, {client} on CPU "
                   f"{method.load_cpu}")


@contextmanager
def kept_on(cpu: int | None) -> Iterator[None]:
    """Run ``bench`` itself (its RSS sampler, the check requests) on ``cpu`` meanwhile, off
    the server's CPU; nothing changes when ``cpu`` is None or the system cannot pin."""
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        yield
        return
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, affinity)


# --- checks before measuring -------------------------------------------------------------------


def load_generator(name: str = "wrk") -> LoadGenerator:
    """The load generator ``name``; :class:`UsageProblem` with the install hint when it is
    missing (the one "not found" message lives with the tool, e.g. ``bench.wrk.MISSING``)."""
    try:
        return loadgen.find(name)
    except (KeyError, loadgen.ToolMissing) as exc:
        raise UsageProblem(str(exc.args[0])) from None


def check_port(host: str, port: int) -> None:
    """Raise :class:`UsageProblem` when ``host:port`` cannot be bound (port 0: any port).

    With port 0 this still proves ``host`` is an address of this machine.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            where = f"port {port} on {host}" if port else f"address {host}"
            raise UsageProblem(f"{where} cannot be used: {exc.strerror or exc}") from None


def validate_servers(names: Sequence[str], *, interface: Interface = "asgi") -> None:
    """Raise :class:`UsageProblem` for a name the registry does not know, one that does not
    serve ``interface`` apps, or a baseline (it has a row of its own, not a server to pick)."""
    known = [name for name, spec in SERVERS.items()
             if spec.interface == interface and spec.kind != "baseline"]
    for name in names:
        if name not in SERVERS:
            raise UsageProblem(f"unknown server {name!r} (known: {', '.join(known)})")
        spec = SERVERS[name]
        if spec.interface != interface:
            kind = spec.interface.upper()
            raise UsageProblem(f"{name} serves {kind} apps; the {interface} rows need an "
                               f"{interface.upper()} server ({', '.join(known)})")
        if spec.kind == "baseline":
            raise UsageProblem(f"{name} is a baseline, not a server to compare: it has a row "
                               "of its own")


def fetch(host: str, port: int, path: str = "/", *, method: str = "GET", body: bytes = b"",
          headers: dict[str, str] | None = None, timeout: float = 5.0
          ) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request on a fresh connection: ``(status, headers with lower-case names,
    body)``; a ``body`` is sent as JSON. The one request every check makes.

    Raises:
        OSError, http.client.HTTPException: the request failed (``timeout`` seconds per
            operation).
    """
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        sent = {"Content-Type": "application/json"} if body else {}
        conn.request(method, path, body=body or None, headers={**sent, **(headers or {})})
        response = conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        conn.close()


def check_echo(host: str, port: int, body: bytes = SAMPLE_BODY, timeout: float = 5.0
               ) -> str | None:
    """POST ``body`` once; None when the answer is 200 with the same JSON, else the problem."""
    try:
        status, headers, data = fetch(host, port, method="POST", body=body, timeout=timeout)
    except (OSError, http.client.HTTPException) as exc:
        return f"check request failed: {exc!r}"
    if status != 200:
        return f"check request got status {status}: {data[:200]!r}"
    content_type = headers.get("content-type", "")
    if not content_type.startswith("application/json"):
        return f"check request got content-type {content_type!r}"
    try:
        echoed = json.loads(data)
    except ValueError:
        return f"check request got a body that is not JSON: {data[:200]!r}"
    if echoed != json.loads(body):
        return f"check request got {echoed!r}, not the echoed user"
    return None


# --- measuring -----------------------------------------------------------------------------------


class RssSampler:
    """Samples the RSS of a process tree in a thread: ``with RssSampler(pid) as s: ...``.

    ``peak`` is the largest sum seen, bytes; one sample is taken on enter and on exit so a
    short run still gets a figure. ``interval`` is in seconds.
    """

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def _sample(self) -> None:
        self.peak = max(self.peak, tree_rss(self.pid))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> RssSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()


@dataclass
class Run:
    """One load-generator run against a server: a warm-up or a measured run.

    Attributes:
        kind: ``"warmup"`` (not counted) or ``"measured"``.
        command: the load generator's exact argv.
        summary: what it reported, None when the run failed.
        rss_peak_bytes: largest RSS of the server's process tree seen during the run, bytes.
        error: why the run failed, else None.
    """

    kind: RunKind
    command: list[str]
    summary: RunSummary | None = None
    rss_peak_bytes: int = 0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: the fields, with the summary expanded and its RPS."""
        return {
            "kind": self.kind,
            "command": self.command,
            "summary": self.summary.to_json() if self.summary else None,
            "rss_peak_bytes": self.rss_peak_bytes,
            "error": self.error,
        }


@dataclass
class Measurement:
    """What measuring one server gave: its runs, or why there are none.

    Attributes:
        status: ``"ok"``, ``"failed"`` (see ``error`` and ``log_tail``) or ``"skipped"``.
        command: the server's exact argv.
        runs: every run, warm-up included, in order.
        error: one line saying what failed, else None.
        log_tail: the last lines the server printed, when it failed.
    """

    status: Status = "ok"
    command: list[str] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    error: str | None = None
    log_tail: str | None = None

    @property
    def measured(self) -> list[RunSummary]:
        """The summaries of the measured runs that completed."""
        return [r.summary for r in self.runs if r.kind == "measured" and r.summary is not None]

    @property
    def rss_peak_bytes(self) -> int:
        """The largest RSS of the server's process tree over the measured runs, bytes."""
        return max((r.rss_peak_bytes for r in self.runs if r.kind == "measured"), default=0)


class Progress(Protocol):
    """Where the harness reports progress: a description per step, one tick per run."""

    def update(self, description: str) -> None:
        """Say what is happening now."""
        ...

    def advance(self, steps: int = 1) -> None:
        """Count ``steps`` load-generator runs as done (or skipped)."""
        ...


class NoProgress:
    """A :class:`Progress` that reports nothing."""

    def update(self, description: str) -> None:
        """Ignore ``description``."""

    def advance(self, steps: int = 1) -> None:
        """Ignore ``steps``."""


def run_once(generator: LoadGenerator, url: str, load: Load, *, kind: RunKind, pid: int,
             cpu: int | None) -> Run:
    """One run of ``generator`` on ``url`` while sampling the RSS of process tree ``pid``.

    A failed run comes back with ``error`` set and no summary; it does not raise.
    """
    run = Run(kind, generator.command(url, load, cpu=cpu))
    try:
        with RssSampler(pid) as sampler:
            run.summary = generator.run(url, load, cpu=cpu)
        run.rss_peak_bytes = sampler.peak
    except LoadGenError as exc:
        run.error = str(exc)
    return run


def measure_server(argv: list[str], port: int, *, label: str, method: Method,
                   pinning: Pinning, generator: LoadGenerator, log_path: Path,
                   progress: Progress | None = None,
                   check: Callable[[str, int], str | None] = check_echo,
                   cwd: Path | None = None, env: dict[str, str] | None = None) -> Measurement:
    """Measure one server: start ``argv`` (listening on ``method.host:port``), check it, warm
    up, run ``method.runs`` measured runs, stop its process tree.

    ``check(host, port)`` returns None when the server answers right, else the problem.
    ``env`` adds variables to the server's environment (the app's settings).
    ``label`` names the server in progress lines; its output goes to ``log_path``. Never
    raises for a server or a run that fails: the :class:`Measurement` says what happened.
    ``env`` adds environment variables to the server's (e.g. where its upstream is).
    """
    report = progress if progress is not None else NoProgress()
    result = Measurement(command=argv)
    report.update(f"{label}: starting")
    server = ServerProcess(argv, host=method.host, port=port, cpu=pinning.server_cpu,
                           startup_timeout=method.startup_timeout, log_path=log_path, cwd=cwd,
                           env=env)
    try:
        server.start()
    except ServerStartError as exc:
        report.advance(method.steps)
        result.status, result.log_tail = "failed", server.log_tail(LOG_LINES)
        result.error = f"server did not start ({str(exc).splitlines()[0]})"
        return result
    try:
        problem = check(method.host, port)
        if problem is not None:
            report.advance(method.steps)
            result.status, result.error = "failed", problem
            result.log_tail = server.log_tail(LOG_LINES)
            return result
        url = f"http://{method.host}:{port}/"
        kinds: list[tuple[RunKind, int]] = [("warmup", method.warmup)] if method.warmup else []
        kinds += [("measured", method.duration)] * method.runs
        measured = 0
        for kind, seconds in kinds:
            if kind == "measured":
                measured += 1
                report.update(f"{label}: run {measured}/{method.runs}")
            else:
                report.update(f"{label}: warm-up")
            run = run_once(generator, url, method.load(seconds), kind=kind, pid=server.pid,
                           cpu=pinning.load_cpu)
            result.runs.append(run)
            if run.error is not None:
                result.status = "failed"
                result.error = f"{generator.name} failed: {run.error}"
                result.log_tail = server.log_tail(LOG_LINES)
                report.advance(method.steps - len(result.runs) + 1)
                return result
            report.advance()
        return result
    finally:
        server.stop()


# --- provenance ----------------------------------------------------------------------------------


def git_state(root: Path = ROOT) -> dict[str, Any] | None:
    """The project's commit: ``{"commit": "<40 hex digits>", "dirty": bool}``.

    ``dirty`` is True when ``git status --porcelain`` lists anything (changed, staged or
    untracked files). None when ``root`` is not in a git checkout or git is not installed.
    """
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                                 text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain")
    return {"commit": commit.strip(), "dirty": bool(status and status.strip())}


def environment(generator: LoadGenerator | None = None) -> dict[str, Any]:
    """What results.json records about where and with what it ran.

    Keys: ``machine``, ``python``, ``packages`` (see :mod:`bench.machine`), ``git`` (see
    :func:`git_state`); with a ``generator``, ``load_generator`` (its name) and, under that
    name, ``{"path", "version"}``.
    """
    data: dict[str, Any] = {"machine": machine_info(), "python": python_info(),
                            "packages": package_versions(), "git": git_state()}
    if generator is not None:
        data["load_generator"] = generator.name
        data[generator.name] = {"path": generator.path, "version": generator.version()}
    return data
