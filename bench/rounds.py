"""Measuring servers in interleaved rounds: round 1 of every row, then round 2 of every row.

Why: a shared machine's speed drifts. The same binary gave 104k and 56k requests/s on two
days, and within one hand-made interleaved run the ratio toy-httptools/uvicorn went 1.66, 0.87,
1.22, 1.03 and 1.11 in five successive rounds. When rows run one after another, whatever the
machine is doing lands on whichever row is running, and the table prints it as a fact.
Interleaved, every row meets about the same machine in each round, so a ratio between two rows
computed within one round (:func:`bench.stats.paired`) cancels most of the drift, and the
spread of the per-round ratios says how much was left.

How (:func:`measure_rounds`): every server starts once. All start, each is checked with one
real request and warmed up; then round ``r`` runs one measured load-generator run per row, in
an order rotated by one each round, so no row is always the first after the warm-ups or the
last; at the end every server stops. Servers stay up across rounds because a start costs
seconds (Python's imports) and a warm-up each time, and a server idle between its runs sleeps
in ``epoll_wait``: it costs the row being measured nothing. A :class:`Contender` with
``fresh=True`` gets a new server (and warm-up) for each of its rounds instead: ``bench
workers`` needs that, because a sync worker whose accept queue wrk left full would make its
next run pay for the last one's leftovers.

Each run records what the load generator saw, the peak RSS of the server's process tree
(:class:`RssSampler`) and the tree's CPU time over the run (user + system,
:func:`bench.process.tree_cpu_seconds`), so CPU µs per request is ``cpu_seconds / requests``.
A contender may name ``companions``: processes outside its tree that serve its requests too
(``bench cluster``: the backends behind a proxy), whose CPU time is recorded beside it.

A failure at any step ends that row as ``failed`` with the reason and the server's log tail
(:class:`Measurement`); the other rows go on. Ports: a free one per server, or, with a fixed
``Method.port``, that port plus the row's index (every server is up at once).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar

from bench.harness import LOG_LINES, Method, Pinning, check_echo
from bench.loadgen import Load, LoadGenerator, LoadGenError, RunSummary
from bench.process import ServerProcess, ServerStartError, free_port, tree_cpu_seconds, tree_rss

RunKind = Literal["warmup", "measured"]
T = TypeVar("T")
Status = Literal["ok", "failed", "skipped"]


# --- what one run and one row give -------------------------------------------------------------


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
        cpu_seconds: user + system CPU time of the server's process tree over the run, s.
        round: which round (0-based) a measured run belongs to; None for a warm-up.
        error: why the run failed, else None.
        companion_cpu_seconds: the same for the contender's companions (their trees added
            up), s; None when it has none.
    """

    kind: RunKind
    command: list[str]
    summary: RunSummary | None = None
    rss_peak_bytes: int = 0
    cpu_seconds: float | None = None
    round: int | None = None
    error: str | None = None
    companion_cpu_seconds: float | None = None

    @property
    def cpu_us_per_request(self) -> float | None:
        """The server's CPU µs per completed request over this run (None without one)."""
        if self.cpu_seconds is None or self.summary is None or self.summary.requests <= 0:
            return None
        return self.cpu_seconds * 1e6 / self.summary.requests

    @property
    def companion_cpu_us_per_request(self) -> float | None:
        """The companions' CPU µs per completed request over this run (None without them)."""
        if self.companion_cpu_seconds is None or self.summary is None or \
                self.summary.requests <= 0:
            return None
        return self.companion_cpu_seconds * 1e6 / self.summary.requests

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: the fields, the summary expanded, ``cpu_us_per_request``, and the
        companions' two when there are companions."""
        companions = {} if self.companion_cpu_seconds is None else {
            "companion_cpu_seconds": self.companion_cpu_seconds,
            "companion_cpu_us_per_request": self.companion_cpu_us_per_request}
        return {
            "kind": self.kind,
            "round": self.round,
            "command": self.command,
            "summary": self.summary.to_json() if self.summary else None,
            "rss_peak_bytes": self.rss_peak_bytes,
            "cpu_seconds": self.cpu_seconds,
            "cpu_us_per_request": self.cpu_us_per_request,
            "error": self.error,
            **companions,
        }


@dataclass
class Measurement:
    """What measuring one server gave: its runs, or why there are none.

    Attributes:
        status: ``"ok"``, ``"failed"`` (see ``error`` and ``log_tail``) or ``"skipped"``.
        command: the server's exact argv (its first start's, when it started fresh per round).
        runs: every run, warm-ups included, in order.
        error: one line saying what failed, else None.
        log_tail: the last lines the server printed, when it failed.
    """

    status: Status = "ok"
    command: list[str] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    error: str | None = None
    log_tail: str | None = None

    @property
    def measured_runs(self) -> list[Run]:
        """The measured runs that completed, in round order."""
        return [r for r in self.runs if r.kind == "measured" and r.summary is not None]

    @property
    def measured(self) -> list[RunSummary]:
        """The summaries of the measured runs that completed."""
        return [r.summary for r in self.measured_runs if r.summary is not None]

    @property
    def rss_peak_bytes(self) -> int:
        """The largest RSS of the server's process tree over the measured runs, bytes."""
        return max((r.rss_peak_bytes for r in self.runs if r.kind == "measured"), default=0)


class Progress(Protocol):
    """Where the measuring reports progress: a description per step, one tick per run."""

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
             cpu: int | None, round_index: int | None = None,
             companions: Sequence[int] | None = None) -> Run:
    """One run of ``generator`` on ``url`` while sampling the RSS and the CPU time of process
    tree ``pid`` (and the CPU time of the ``companions``' trees, when given). A failed run comes
    back with ``error`` set and no summary; it never raises.
    """
    run = Run(kind, generator.command(url, load, cpu=cpu), round=round_index)

    def companion_cpu() -> float:
        return sum(tree_cpu_seconds(other) for other in companions or ())

    try:
        before, others = tree_cpu_seconds(pid), companion_cpu()
        with RssSampler(pid) as sampler:
            run.summary = generator.run(url, load, cpu=cpu)
        run.cpu_seconds = max(tree_cpu_seconds(pid) - before, 0.0)
        if companions is not None:
            run.companion_cpu_seconds = max(companion_cpu() - others, 0.0)
        run.rss_peak_bytes = sampler.peak
    except LoadGenError as exc:
        run.error = str(exc)
    return run


# --- the rounds --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Contender:
    """One row's server, as the rounds measure it.

    Attributes:
        label: the row's name in progress lines and failures.
        argv: the server's argv for a port (``argv(port)``).
        generator: the load generator of its runs.
        load: each measured run's load (the warm-up is the same for ``Method.warmup`` s).
        log_path: where the server's output goes (``fresh``: a suffix per round).
        check: ``check(host, port)``: None when one real request comes back right, else the
            problem.
        cwd, env: the server's folder, and variables added to its environment.
        fresh: a new server (and warm-up) for each round instead of one for all of them.
        port: listen on this port rather than one the rounds choose.
        companions: the pids of processes outside the server's tree that serve its requests
            too (backends behind a proxy), asked before each run; their CPU time is recorded
            as ``Run.companion_cpu_seconds``.
    """

    label: str
    argv: Callable[[int], list[str]]
    generator: LoadGenerator
    load: Load
    log_path: Path
    check: Callable[[str, int], str | None] = check_echo
    cwd: Path | None = None
    env: dict[str, str] | None = None
    fresh: bool = False
    port: int | None = None
    companions: Callable[[], Sequence[int]] | None = None


def steps(contender: Contender, method: Method) -> int:
    """Load-generator runs ``contender`` takes: its warm-ups and its measured runs."""
    warmups = (method.runs if contender.fresh else 1) if method.warmup else 0
    return warmups + method.runs


class Slot:
    """One contender across the rounds: its server, its :class:`Measurement`, and the
    progress steps it has left."""

    def __init__(self, contender: Contender, index: int, method: Method, pinning: Pinning,
                 report: Progress) -> None:
        self.contender, self.index, self.method = contender, index, method
        self.pinning, self.report = pinning, report
        self.measurement = Measurement()
        self.server: ServerProcess | None = None
        self.left = steps(contender, method)
        self.starts = 0

    @property
    def alive(self) -> bool:
        """Whether the row is still being measured (it has not failed)."""
        return self.measurement.status == "ok"

    def port(self) -> int:
        """The port of its next start (see the module docstring)."""
        if self.contender.port is not None:
            return self.contender.port
        return self.method.port + self.index if self.method.port else free_port(
            self.method.host)

    def fail(self, error: str) -> None:
        """End the row as failed: keep ``error`` and the log tail, skip its steps left."""
        self.measurement.status, self.measurement.error = "failed", error
        if self.server is not None:
            self.measurement.log_tail = self.server.log_tail(LOG_LINES)
        self.report.advance(self.left)
        self.left = 0
        self.stop()

    def start(self) -> bool:
        """Start the server, check it and warm it up; False (the row failed) on a problem."""
        c, method = self.contender, self.method
        port = self.port()
        argv = c.argv(port)
        self.measurement.command = self.measurement.command or argv
        log = c.log_path if not c.fresh else c.log_path.with_suffix(f".{self.starts + 1}.log")
        self.starts += 1
        self.report.update(f"{c.label}: starting")
        self.server = ServerProcess(argv, host=method.host, port=port, cpu=self.pinning.server_cpu,
                                    startup_timeout=method.startup_timeout, log_path=log,
                                    cwd=c.cwd, env=c.env)
        try:
            self.server.start()
        except ServerStartError as exc:
            self.fail(f"server did not start ({str(exc).splitlines()[0]})")
            return False
        problem = c.check(method.host, port)
        if problem is not None:
            self.fail(problem)
            return False
        if method.warmup:
            self.report.update(f"{c.label}: warm-up")
            return self.run("warmup", replace(c.load, duration=method.warmup), None)
        return True

    def run(self, kind: RunKind, load: Load, round_index: int | None) -> bool:
        """One run on the running server; False (the row failed) when it failed."""
        assert self.server is not None, "run before start"
        url = f"http://{self.method.host}:{self.server.port}/"
        companions = self.contender.companions
        run = run_once(self.contender.generator, url, load, kind=kind, pid=self.server.pid,
                       cpu=self.pinning.load_cpu, round_index=round_index,
                       companions=companions() if companions is not None else None)
        self.measurement.runs.append(run)
        if run.error is not None:
            self.fail(f"{self.contender.generator.name} failed: {run.error}")
            return False
        self.report.advance()
        self.left -= 1
        return True

    def measured_round(self, round_index: int) -> None:
        """Round ``round_index``'s run (starting a fresh server first when asked)."""
        if self.contender.fresh and not self.start():
            return
        self.report.update(f"{self.contender.label}: round {round_index + 1}/{self.method.runs}")
        self.run("measured", self.contender.load, round_index)
        if self.contender.fresh:
            self.stop()

    def stop(self) -> None:
        """Stop the server's whole process tree, if it runs."""
        if self.server is not None:
            self.server.stop()
            self.server = None


def rotated(items: Sequence[T], by: int) -> list[T]:
    """``items`` starting at index ``by`` (modulo their number), wrapping round."""
    if not items:
        return []
    by %= len(items)
    return [*items[by:], *items[:by]]


def measure_rounds(contenders: Sequence[Contender], method: Method, pinning: Pinning,
                   progress: Progress | None = None) -> list[Measurement]:
    """Measure ``contenders`` in ``method.runs`` interleaved rounds (module docstring); one
    :class:`Measurement` each, in the order given. Never raises for a server or a run that
    fails; every server started is stopped on the way out, Ctrl-C included."""
    report = progress if progress is not None else NoProgress()
    slots = [Slot(c, i, method, pinning, report) for i, c in enumerate(contenders)]
    try:
        for slot in slots:
            if not slot.contender.fresh:
                slot.start()
        for round_index in range(method.runs):
            for slot in rotated(slots, round_index):
                if slot.alive:
                    slot.measured_round(round_index)
    finally:
        for slot in slots:
            slot.stop()
    return [slot.measurement for slot in slots]


def measure_server(argv: list[str], port: int, *, label: str, method: Method,
                   pinning: Pinning, generator: LoadGenerator, log_path: Path,
                   progress: Progress | None = None,
                   check: Callable[[str, int], str | None] = check_echo,
                   cwd: Path | None = None, env: dict[str, str] | None = None) -> Measurement:
    """Measure one server alone: :func:`measure_rounds` with one contender serving ``argv``
    on ``method.host:port`` under ``method.load(method.duration)``."""
    contender = Contender(label, lambda _port: argv, generator, method.load(method.duration),
                          log_path, check, cwd, env, port=port)
    return measure_rounds([contender], method, pinning, progress)[0]
