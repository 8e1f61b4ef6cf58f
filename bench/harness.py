"""The harness every ``bench`` experiment runs on: how it measures, what it checks first, and
where the figures came from.

An experiment says what to run and how to report it; the harness gives it the same method for
every row of every table:

1. :class:`Method`: the load, the repetitions, the pinning (:func:`decide_pinning`: server on
   one CPU, load generator on another) and the address;
2. the checks before measuring: the load generator is installed (:func:`load_generator`),
   the port can be bound (:func:`check_port`), the servers are known
   (:func:`validate_servers`), and one real request comes back right (:func:`check_echo`),
   so a broken row fails loudly instead of measuring error pages;
3. the measuring itself, in interleaved rounds (:mod:`bench.rounds`): every row's server
   started, checked and warmed up, then round 1 of every row, round 2 of every row, and so on,
   each run sampling the RSS and CPU time of the server's process tree;
4. the provenance every results.json records (:func:`environment`): machine, Python, package
   versions, the load generator, and the project's git commit (:func:`git_state`).

An experiment is then a short list. ``bench workers``, for one, could be::

    generator = load_generator("wrk")
    contenders = [Contender(f"uvicorn x{n}", partial(argv_for, n), generator,
                            method.load(method.duration), logs / f"x{n}.log")
                  for n in (1, 2, 4)]
    measurements = measure_rounds(contenders, method, pinning)
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apps.user import SAMPLE_BODY
from bench import loadgen
from bench.loadgen import Load, LoadGenerator
from bench.machine import machine_info, package_versions, python_info
from bench.process import free_port
from toyservers.registry import SERVERS, Interface

#: The repository holding this package: where ``git_state`` looks.
ROOT = Path(__file__).resolve().parent.parent
#: Lines of a failed server's log kept in results and shown in the terminal.
LOG_LINES = 15


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


# --- provenance ----------------------------------------------------------------------------------


def git_state(root: Path = ROOT) -> dict[str, Any] | None:
    """The project's commit: ``{"commit": "<40 hex digits>", "dirty": bool}``.

    ``dirty`` is True when ``git status --porcelain`` lists anything (changed, staged or
    untracked files) outside ``lessons/results/``: what ``make lesson-results`` writes there
    one line after another is the output of runs, not a change to the code a run measures.
    None when ``root`` is not in a git checkout or git is not installed.
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
    status = git("status", "--porcelain", "--", ".", ":(exclude)lessons/results")
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
