"""``ws-load``, ``bench ws``'s load generator, from Python: its argv, its JSON, its two modes.

``ws-load`` (``bench/ws-load/src/main.rs``: tokio + tokio-tungstenite on one thread, built
with cargo on first use by :func:`bench.native.ensure_wsload`) is a WebSocket client written
so that the client is not what limits the server: a Python client (websockets on uvloop, 10
connections against toy-raw, both pinned) spent 22 µs of CPU per message where ws-load spent
11 and toy-raw 16 to 19; ws-load spent 9 to 19 µs per message in ``lessons/results/ws`` (each
run records its CPU time). It prints JSON, read here:

- :class:`WsLoad` (mode ``echo``) is a :class:`bench.loadgen.LoadGenerator`, so the
  interleaved rounds of :mod:`bench.rounds` drive it as they drive wrk: ``load.connections``
  connections each send one text message of ``len(load.body)`` bytes, wait for the echo and
  repeat for ``load.duration`` seconds. A "request" of :class:`bench.loadgen.RunSummary` is
  one round trip, so its ``rps`` is messages per second; the summary
  (:class:`EchoSummary`) adds the client's own CPU seconds.
- :func:`hold_idle` (mode ``idle``) opens connections that send nothing, lets the caller
  look at the server while they are open, and closes them.

:func:`parse_echo` and :func:`parse_idle` turn the tool's lines into those results and say
plainly what is wrong with a line that is not what the tool prints.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.loadgen import ERROR_KINDS, PERCENTILES, Load, LoadGenError, RunSummary
from bench.native import WSLOAD

#: What ws-load reports under ``latency_us`` besides :data:`bench.loadgen.PERCENTILES`.
EXTRA_LATENCY = ("min", "mean", "max")
#: Seconds a run may take beyond its duration (opening connections, closing them) before it
#: counts as hung.
GRACE = 30.0


def ws_url(url: str) -> str:
    """``url`` with an ``http://`` scheme as ``ws://`` (the rounds build ``http://`` URLs)."""
    return "ws://" + url.removeprefix("http://").removeprefix("ws://")


@dataclass(frozen=True)
class EchoSummary(RunSummary):
    """A :class:`bench.loadgen.RunSummary` of echo round trips, plus the client's CPU time.

    Attributes:
        opened: connections whose handshake succeeded.
        client_cpu_seconds: ws-load's own user + system CPU time over the run (getrusage),
            seconds: beside the server's, it shows whether the client could have been the
            limit (one core each when pinned).
    """

    opened: int = 0
    client_cpu_seconds: float | None = None

    @property
    def client_cpu_share(self) -> float | None:
        """The client's CPU time over the run's wall time: 1.0 is one core kept busy."""
        if self.client_cpu_seconds is None or self.duration_us <= 0:
            return None
        return self.client_cpu_seconds * 1e6 / self.duration_us


def _object(line: str) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except ValueError:
        raise LoadGenError(f"ws-load printed a line that is not JSON: {line[:200]!r}") from None
    if not isinstance(data, dict):
        raise LoadGenError(f"ws-load printed JSON that is not an object: {line[:200]!r}")
    return data


def _errors(data: dict[str, Any]) -> dict[str, int]:
    errors = data.get("errors")
    if not isinstance(errors, dict) or any(
            not isinstance(errors.get(kind), int) for kind in ERROR_KINDS):
        raise LoadGenError(f"ws-load's errors lack a count of some kind ({ERROR_KINDS}): "
                           f"{errors!r}")
    return {kind: int(errors[kind]) for kind in ERROR_KINDS}


def parse_echo(line: str) -> EchoSummary:
    """An :class:`EchoSummary` from ws-load's ``echo`` line (its format: ``main.rs``'s
    docstring): ``messages`` as requests, ``bytes``, ``duration_us``, the error counts, the
    latency percentiles in µs (null where no message came back), ``opened`` and
    ``cpu_seconds``.

    Raises:
        LoadGenError: the line is not JSON, or lacks a field or has one of the wrong type.
    """
    data = _object(line)
    if data.get("mode") != "echo":
        raise LoadGenError(f"expected ws-load's echo line, got: {line[:200]!r}")
    try:
        latency = data["latency_us"]
        latency_us = {key: None if latency[key] is None else float(latency[key])
                      for key in (*PERCENTILES, *EXTRA_LATENCY)}
        return EchoSummary(
            requests=int(data["messages"]), duration_us=int(data["duration_us"]),
            errors=_errors(data), latency_us=latency_us, bytes=int(data["bytes"]),
            tool="ws-load", opened=int(data["opened"]),
            client_cpu_seconds=float(data["cpu_seconds"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise LoadGenError(f"ws-load's echo line lacks or garbles {exc}: {line[:200]!r}"
                           ) from None


@dataclass(frozen=True)
class IdleOpen:
    """What ws-load's ``idle`` mode reports once its connections are open.

    Attributes:
        connections: asked for.
        opened: handshakes that succeeded.
        errors: the failed ones by kind (:data:`bench.loadgen.ERROR_KINDS`).
        open_us: how long opening them all took, µs.
    """

    connections: int
    opened: int
    errors: dict[str, int]
    open_us: int


def parse_idle(line: str) -> IdleOpen:
    """An :class:`IdleOpen` from ws-load's first ``idle`` line.

    Raises:
        LoadGenError: the line is not that line.
    """
    data = _object(line)
    if data.get("mode") != "idle":
        raise LoadGenError(f"expected ws-load's idle line, got: {line[:200]!r}")
    try:
        return IdleOpen(int(data["connections"]), int(data["opened"]), _errors(data),
                        int(data["open_us"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise LoadGenError(f"ws-load's idle line lacks or garbles {exc}: {line[:200]!r}"
                           ) from None


def parse_closed(line: str) -> tuple[int, float]:
    """``(closed, cpu_seconds)`` from ws-load's last ``idle`` line.

    Raises:
        LoadGenError: the line is not that line.
    """
    data = _object(line)
    try:
        return int(data["closed"]), float(data["cpu_seconds"])
    except (KeyError, TypeError, ValueError) as exc:
        raise LoadGenError(f"ws-load's closing line lacks or garbles {exc}: {line[:200]!r}"
                           ) from None


def _taskset(cpu: int | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` pinning the child to ``cpu`` (None: not pinned)."""
    if cpu is None or not hasattr(os, "sched_setaffinity"):  # Linux-only
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


class WsLoad:
    """ws-load's ``echo`` mode as a :class:`bench.loadgen.LoadGenerator`.

    Args:
        binary: the built ``ws-load`` (:func:`bench.native.ensure_wsload`).
        path: the URL path the servers echo on.
    """

    name = "ws-load"

    def __init__(self, binary: Path = WSLOAD.binary, path: str = "/") -> None:
        self.binary = binary
        self.url_path = path

    @property
    def path(self) -> str:
        """The executable."""
        return str(self.binary)

    def version(self) -> str:
        """The crate's version and its client library (from ``Cargo.lock``)."""
        lock = (WSLOAD.root / "Cargo.lock").read_text(encoding="utf-8")
        versions = dict(_locked(lock))
        return (f"{versions.get('ws-load', '?')} (tokio {versions.get('tokio', '?')}, "
                f"tokio-tungstenite {versions.get('tokio-tungstenite', '?')}, hdrhistogram "
                f"{versions.get('hdrhistogram', '?')})")

    def command(self, url: str, load: Load, *, cpu: int | None = None) -> list[str]:
        """``ws-load echo`` against ``url`` (``http://`` becomes ``ws://``) with ``load``'s
        connections, duration, timeout and message size (``len(load.body)`` bytes)."""
        return self.echo_argv(url, load.connections, load.duration, len(load.body),
                              load.timeout)

    def echo_argv(self, url: str, connections: int, seconds: float, size: int,
                  timeout: float) -> list[str]:
        """``ws-load echo``'s argv: ``connections`` connections echoing ``size``-byte text
        messages for ``seconds`` s, a round trip timing out after ``timeout`` s."""
        return [self.path, "echo", "--url", ws_url(url.rstrip("/") + self.url_path),
                "--connections", str(connections), "--duration", f"{seconds:g}",
                "--size", str(size), "--timeout", f"{timeout:g}"]

    def run(self, url: str, load: Load, *, cpu: int | None = None) -> EchoSummary:
        """One echo run of ``load`` (pinned to ``cpu``); its :class:`EchoSummary`.

        Raises:
            LoadGenError: ws-load failed, hung, or printed no summary.
        """
        return self.echo(url, load.connections, load.duration, len(load.body), load.timeout,
                         cpu=cpu)

    def echo(self, url: str, connections: int, seconds: float, size: int, timeout: float,
             *, cpu: int | None = None) -> EchoSummary:
        """Run :meth:`echo_argv`'s command and read its line.

        Raises:
            LoadGenError: ws-load failed, hung (``seconds`` + :data:`GRACE` + twice
                ``timeout``), or printed no summary.
        """
        argv = self.echo_argv(url, connections, seconds, size, timeout)
        limit = seconds + GRACE + 2 * timeout
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=limit,
                                 preexec_fn=_taskset(cpu))
        except subprocess.TimeoutExpired:
            raise LoadGenError(f"ws-load did not finish in {limit:g} s") from None
        except OSError as exc:
            raise LoadGenError(f"cannot run ws-load: {exc}") from None
        if out.returncode != 0:
            raise LoadGenError(f"ws-load exited with status {out.returncode}: "
                               f"{out.stderr.strip()[-300:]}")
        lines = out.stdout.strip().splitlines()
        if not lines:
            raise LoadGenError("ws-load printed nothing")
        return parse_echo(lines[-1])


def _locked(lock: str) -> Iterator[tuple[str, str]]:
    """``(name, version)`` of every package in a ``Cargo.lock``'s text."""
    name = None
    for line in lock.splitlines():
        if line.startswith("name = "):
            name = line.split('"')[1]
        elif line.startswith("version = ") and name is not None:
            yield name, line.split('"')[1]
            name = None


@dataclass(frozen=True)
class IdleSession:
    """Open idle connections (inside :func:`hold_idle`): what opening them gave."""

    opened: IdleOpen
    argv: list[str]


@dataclass
class IdleEnd:
    """What closing them gave, filled when :func:`hold_idle`'s block ends.

    Attributes:
        closed: connections closed with the close handshake within the timeout.
        cpu_seconds: ws-load's CPU time over its whole life, seconds.
    """

    closed: int = 0
    cpu_seconds: float | None = None


@contextmanager
def hold_idle(binary: Path, url: str, connections: int, *, cpu: int | None = None,
              timeout: float = 10.0, end: IdleEnd | None = None) -> Iterator[IdleSession]:
    """``with hold_idle(binary, url, 1000) as session:``: ``connections`` WebSockets to
    ``url`` open and idle for the block's length; then each is closed (close handshake), and
    ``end`` (when given) gets the closing line's figures.

    Raises:
        LoadGenError: ws-load could not start, printed no open line, or did not close in time
            (it is killed then).
    """
    argv = [str(binary), "idle", "--url", ws_url(url), "--connections", str(connections),
            "--timeout", f"{timeout:g}"]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=_taskset(cpu))
    except OSError as exc:
        raise LoadGenError(f"cannot run ws-load: {exc}") from None
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = proc.stdout.readline()  # the tool's own --timeout bounds each handshake
        if not line:
            raise LoadGenError(f"ws-load idle printed nothing: {proc.stderr.read()[-300:]}"
                               if proc.stderr else "ws-load idle printed nothing")
        yield IdleSession(parse_idle(line), argv)
        # communicate() closes stdin: the end of input tells ws-load to close them all
        last, _ = proc.communicate(timeout=2 * timeout + GRACE)
        if end is not None and last.strip():
            end.closed, end.cpu_seconds = parse_closed(last.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        raise LoadGenError(f"ws-load idle did not close its connections in "
                           f"{2 * timeout + GRACE:g} s") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
