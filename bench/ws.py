"""``bench ws``: WebSocket echo throughput, round-trip latency, and RSS per idle connection.

Every server whose registry entry lists ``websocket`` (``--servers`` names some) serves
``apps/ws_echo.py``; two experiments run against it:

- **echo**: ``ws-load`` (:mod:`bench.ws_client`, a Rust client on one tokio thread) opens
  ``--connections`` WebSockets (10 and 100 by default); each sends one text message of
  ``--size`` bytes (1 KiB), waits for the echo and repeats, for ``--duration`` seconds. A row
  per server and connection count: messages per second, p50/p99 round trip, errors, the
  server's CPU µs per message and its CPU share of the run, ws-load's own CPU share of the
  run (so a reader sees whether the client could have been the limit), and the row's
  messages per second and CPU µs per message as percentages of the ``--reference`` row's
  (uvicorn) at the same connection count. On a busy machine the second is the steadier: a
  server pinned to a shared core gets a share of it that changes from run to run, and its
  rate with it, while what a message costs it changes much less.
- **idle**: a fresh server, checked with one echo; its process tree's RSS; then ws-load
  opens ``--idle`` WebSockets (1,000) that send nothing; the tree's peak RSS over the next
  :data:`HOLD` seconds; then they close and the server stops. RSS per idle connection is
  (peak with them open - before) / connections opened, in KiB, and its percentage of the
  reference's.

Method (:mod:`bench.harness`, :mod:`bench.rounds`): the server pinned to ``--server-cpu``
and ws-load to ``--load-cpu``. Echo rows run in interleaved rounds: every row's server starts,
is checked with one round trip and warmed up for ``--warmup`` seconds; then ``--runs`` rounds
each run ws-load once against every row, in an order rotated each round, recording the
server tree's CPU time and peak RSS over the run. Idle rows are interleaved the same way,
with a fresh server for each run, since a server that held 1,000 connections keeps much of
that memory after they close (the allocator does not give it back), and a second round on it
would measure almost nothing. Ratios to the reference are computed in each round, then given
as the median (min–max over rounds); rounds that disagree on which is larger print ``noise``.

Issue 20's targets, written out with their arithmetic under the table: toy-httptools ≥ 1.2x
uvicorn's messages per second at 10 connections, and its RSS per idle connection ≤
uvicorn's; every toy row measured is set against them.

Output in ``--output`` (default ``results/ws-<timestamp>/``): results.json (settings,
machine, versions, git commit, command, ws-load's build, every run) and results.md (both
tables, the targets, how it ran); server logs under ``logs/``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from bench import command as options
from bench import report
from bench.autobahn import choose_servers  # the same choice: the servers with WebSocket
from bench.command import (
    consoles,
    invocation,
    logs_folder,
    measure_and_print,
    names,
    pinning_for,
    user_mistakes,
)
from bench.harness import (
    LOG_LINES,
    Method,
    Pinning,
    UsageProblem,
    environment,
    kept_on,
)
from bench.loadgen import Load, LoadGenError
from bench.native import NativeBuild, ensure_wsload
from bench.process import ServerProcess, ServerStartError, free_port, tree_rss
from bench.rounds import Contender, RssSampler, rotated
from bench.ws_client import IdleEnd, WsLoad, hold_idle
from bench.ws_report import EchoResult, IdleRun, echo_rows, goals, idle_rows, print_and_write
from toyservers.registry import SERVERS

APP = "apps.ws_echo:app"
ROOT = Path(__file__).resolve().parent.parent
#: The row every ratio is taken against.
REFERENCE = "uvicorn"
#: Seconds the idle connections stay open while the server's RSS is sampled (its peak kept).
HOLD = 1.0
#: How long one round trip of the check may take, seconds.
CHECK_SECONDS = 0.2


@dataclass(frozen=True)
class Settings(Method):
    """What ``bench ws`` was asked to do: the harness's :class:`Method` (duration, runs,
    warm-up, pinning, address) plus the servers and the two experiments' sizes.

    Attributes:
        servers: registry names, in table order.
        reference: the row the ratios are taken against.
        sweep: connection counts of the echo rows.
        size: bytes of each echo message (text).
        idle: idle connections opened (0: no idle rows).
    """

    servers: tuple[str, ...] = ()
    reference: str = REFERENCE
    sweep: tuple[int, ...] = (10, 100)
    size: int = 1024
    idle: int = 1000

    def echo_load(self, connections: int) -> Load:
        """One echo run's load at ``connections``."""
        return Load(connections=connections, threads=1, duration=self.duration,
                    timeout=self.timeout, body=b"x" * self.size)


def check_echo(generator: WsLoad, host: str, port: int) -> str | None:
    """One connection echoing for :data:`CHECK_SECONDS`: None when at least one message came
    back the same and nothing failed, else the problem."""
    try:
        summary = generator.echo(f"ws://{host}:{port}/", connections=1, seconds=CHECK_SECONDS,
                                 size=len(b"check"), timeout=5.0)
    except LoadGenError as exc:
        return f"check echo failed: {exc}"
    if summary.requests < 1 or summary.error_total:
        return (f"check echo got {summary.requests} message(s) back, errors "
                f"{dict(summary.errors)}")
    return None


def server_argv(server: str, host: str, port: int) -> list[str]:
    """The argv serving :data:`APP` on ``server`` at ``host:port``."""
    return SERVERS[server].command(APP, host, port)


# --- measuring ---------------------------------------------------------------------------------


def measure_echo(settings: Settings, servers: list[str], generator: WsLoad, pinning: Pinning,
                 logs: Path, console: Console) -> list[EchoResult]:
    """Every echo row (server x connections) in interleaved rounds; one line printed each."""
    plans = [(server, c) for c in settings.sweep for server in servers]
    contenders = [Contender(f"{server} c{c}", partial(server_argv, server, settings.host),
                            generator, settings.echo_load(c), logs / f"echo-{server}-c{c}.log",
                            partial(check_echo, generator), cwd=ROOT)
                  for server, c in plans]
    with report.progress_bar(console) as progress:
        measurements = measure_and_print(contenders, settings, pinning, progress,
                                         "messages/s")
    return [EchoResult(server, c, m) for (server, c), m in zip(plans, measurements,
                                                                 strict=True)]


def idle_run(server: str, round_index: int, port: int, settings: Settings, generator: WsLoad,
             pinning: Pinning, log: Path) -> IdleRun:
    """One idle run: a fresh ``server``, checked, its RSS, ``settings.idle`` connections
    opened, its peak RSS over :data:`HOLD` s, the connections closed, the server stopped."""
    argv = server_argv(server, settings.host, port)
    run = IdleRun(server, round_index, argv)
    process = ServerProcess(argv, host=settings.host, port=port, cwd=ROOT,
                            cpu=pinning.server_cpu, startup_timeout=settings.startup_timeout,
                            log_path=log)
    try:
        process.start()
    except ServerStartError as exc:
        run.error = f"server did not start ({str(exc).splitlines()[0]})"
        run.log_tail = process.log_tail(LOG_LINES)
        return run
    try:
        run.error = check_echo(generator, settings.host, port)
        if run.error is None:
            run.rss_before = tree_rss(process.pid)
            end = IdleEnd()
            with hold_idle(generator.binary, f"{process.url}/", settings.idle,
                           cpu=pinning.load_cpu, end=end) as session, \
                    RssSampler(process.pid) as sampler:
                threading.Event().wait(HOLD)  # sample the RSS while they are open
            run.opened, run.errors = session.opened.opened, session.opened.errors
            run.open_us, run.rss_open = session.opened.open_us, sampler.peak
            run.closed, run.client_cpu_seconds = end.closed, end.cpu_seconds
    except LoadGenError as exc:
        run.error = f"ws-load idle failed: {exc}"
    finally:
        if run.error is not None:
            run.log_tail = process.log_tail(LOG_LINES)
        process.stop()
    return run


def measure_idle(settings: Settings, servers: list[str], generator: WsLoad, pinning: Pinning,
                 logs: Path, console: Console) -> list[IdleRun]:
    """Every server's idle runs, interleaved: round 1 of every server, then round 2, ...
    (a fresh server each, see the module docstring); a server that failed is not retried."""
    runs: list[IdleRun] = []
    failed: set[str] = set()
    with report.progress_bar(console) as progress:
        task = progress.add_task("idle", total=settings.runs * len(servers))
        for round_index in range(settings.runs):
            for server in rotated(servers, round_index):
                progress.update(task, description=f"{server}: {settings.idle} idle, round "
                                                  f"{round_index + 1}/{settings.runs}")
                if server not in failed:
                    port = (settings.port + servers.index(server) if settings.port
                            else free_port(settings.host))
                    run = idle_run(server, round_index, port, settings, generator, pinning,
                                   logs / f"idle-{server}.{round_index + 1}.log")
                    runs.append(run)
                    if run.error is not None:
                        failed.add(server)
                        console.print(f"[red]✗[/] {server} idle: {run.error}")
                progress.advance(task)
    return runs


def measure(settings: Settings, console: Console, out: Path) -> dict[str, Any] | None:
    """Measure both experiments and return results.json's content; None (after one line
    saying why) when ws-load cannot be built.

    Raises:
        UsageProblem: a server name is unknown, none speaks WebSocket, or a CPU or the port
            is unusable.
    """
    servers, notes = choose_servers(settings.servers)
    for note in notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    if not servers:
        raise UsageProblem("no server to measure speaks WebSocket (see the notes above)")
    pinning = pinning_for(settings, console, client="ws-load",
                          flags=("--server-cpu", "--load-cpu"))
    with console.status("ws-load: building the load generator with cargo (once, then cached)"):
        build = ensure_wsload()
    console.print(build.note, highlight=False)
    if build.binary is None:
        return None
    generator = WsLoad(build.binary)
    env = environment(generator)  # git's state before this run writes its own files
    logs = logs_folder(out)
    started = datetime.now(UTC)
    with kept_on(pinning.load_cpu):
        echo = measure_echo(settings, servers, generator, pinning, logs, console)
        idle = (measure_idle(settings, servers, generator, pinning, logs, console)
                if settings.idle else [])
    return results(settings, servers, notes, pinning, started, env, build, echo, idle)


def results(settings: Settings, servers: list[str], notes: list[str], pinning: Pinning,
            started: datetime, env: dict[str, Any], build: NativeBuild,
            echo: list[EchoResult], idle: list[IdleRun]) -> dict[str, Any]:
    """results.json's content (:mod:`bench.ws_report` derives the rows' columns)."""
    rows = echo_rows(echo, settings.reference)
    idle_table = idle_rows(idle, servers, settings.reference) if settings.idle else []
    return {
        "experiment": "ws",
        "date": started.isoformat(timespec="seconds"),
        "command": invocation(),
        "settings": {
            "servers": servers, "reference": settings.reference,
            "connections": list(settings.sweep), "message_bytes": settings.size,
            "idle_connections": settings.idle, "idle_hold_s": HOLD,
            "duration_s": settings.duration, "warmup_s": settings.warmup,
            "runs": settings.runs, "host": settings.host, "timeout_s": settings.timeout,
            "app": APP,
        },
        "pinning": pinning.to_json(),
        **env,
        "ws_load_build": {"note": build.note, "build_command": build.command,
                          "rustc": build.rustc},
        "notes": notes,
        "rows": rows,
        "idle": idle_table,
        "goals": goals(rows, idle_table, settings.reference),
    }


# --- the command ---------------------------------------------------------------------------


def _counts(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in names(text))
    except ValueError:
        raise UsageProblem(f"--connections takes comma-separated whole numbers, not {text!r}"
                           ) from None
    if not values or min(values) < 1:
        raise UsageProblem(f"--connections takes numbers of 1 or more, not {text!r}")
    return values


def command(
    duration: options.Duration = 5,
    warmup: options.Warmup = 1,
    runs: options.Runs = 3,
    servers: Annotated[str, typer.Option(
        help="Comma-separated servers (default: every installed one whose registry entry "
             "lists websocket).")] = "",
    reference: Annotated[str, typer.Option(
        help="The row the ratios are taken against (% of it, round by round).")] = REFERENCE,
    connections: Annotated[str, typer.Option(
        help="Comma-separated connection counts of the echo rows.")] = "10,100",
    size: Annotated[int, typer.Option(min=1, help="Bytes of each echo message (text).")
                    ] = 1024,
    idle: Annotated[int, typer.Option(
        min=0, help="Idle WebSockets opened for the RSS per connection (0: no idle rows).")
                    ] = 1000,
    pin: Annotated[bool, typer.Option(help="Pin the server and ws-load to separate CPUs.")
                   ] = True,
    server_cpu: options.ServerCpu = 0,
    load_cpu: Annotated[int, typer.Option(help="CPU for ws-load when pinned.")] = 1,
    host: options.Host = "127.0.0.1",
    port: options.Port = 0,
    output: Annotated[Path | None, typer.Option(
        help="Folder for results.json and results.md [default: results/ws-<timestamp>]")
                      ] = None,
) -> None:
    """WebSocket echo messages/s and round trips at 10 and 100 connections, and RSS per idle
    connection with 1,000 open, on every server with WebSocket (ws-load, built with cargo)."""
    console, errors = consoles()
    out = output if output is not None else report.default_output("ws")
    with user_mistakes(errors):
        settings = Settings(duration=duration, warmup=warmup, runs=runs,
                            servers=names(servers), reference=reference,
                            sweep=_counts(connections), size=size, idle=idle, pin=pin,
                            server_cpu=server_cpu, load_cpu=load_cpu, host=host, port=port)
        report.prepare_output(out)
        data = measure(settings, console, out)
    if data is None:
        raise typer.Exit(0)
    print_and_write(console, errors, out, data)


def register(app: typer.Typer) -> None:
    """Add ``ws`` to the ``bench`` CLI."""
    app.command("ws")(command)

