"""``bench h2``: what HTTP/2 multiplexing buys and what it costs, server by server.

The same app (:mod:`apps.h2_bodies`) on each server that speaks HTTP/2 (its registry
``protocols`` hold ``h2c`` or ``h2``): toy-h2 (``--server``), hypercorn and granian
(``--compare``), under three workloads:

- ``post``: ``POST /`` with the layers user (``apps.user.SAMPLE_BODY``), echoed as JSON;
- ``short``: ``GET /short``, a 22-byte body;
- ``long``: ``GET /long``, a 430 KB body (many DATA frames and window updates).

Each workload runs over each protocol:

- ``http/1.1``: wrk, ``--connections`` keep-alive connections, one request at a time each
  (``--no-h1`` leaves these rows out); the baseline multiplexing is measured against;
- ``h2c``: h2load in clear text with prior knowledge (RFC 9113 §3.3);
- ``h2``: h2load over TLS, ``h2`` chosen by ALPN (RFC 9113 §3.2), with a throwaway
  certificate made by trustme for 127.0.0.1;

and, for the two HTTP/2 protocols, over a sweep of connections × streams per connection
(``--connections 10 --streams 1,10``: h2load's ``-c`` and ``-m``; the product is the number
of requests in flight). ``-m 1`` is HTTP/2 with no multiplexing: only framing and HPACK differ
from HTTP/1.1.

Method (:mod:`bench.harness` and :mod:`bench.rounds`, the same for every experiment): every
row's server starts on a free port, pinned to one CPU with the load generator on the other, is
checked with one real request over the row's protocol (status 200 and the expected body, and
ALPN's ``h2`` over TLS) and warmed up; then ``--runs`` interleaved rounds run the row's load
generator once against every row while sampling the RSS and CPU time of each server's process
tree; every tree stops at the end. A row that fails is reported with its log tail and the run
goes on. RPS is the median over rounds; ``× hypercorn`` divides a row's RPS by hypercorn's in
the same workload, protocol and sweep point, round by round, and gives the median.

Goals (issue 11), checked from the rows and written with their arithmetic: toy-h2 ≥ 1.3×
hypercorn's RPS on ``post`` at ``-m 10``, and toy-h2's peak RSS ≤ hypercorn's there.

Output in ``--output`` (default ``results/h2-<timestamp>/``): results.json (settings, machine,
versions, git commit, every command, every run), results.md (the table, the goals, how it
ran), h2.png, and the same table in the terminal.
"""

from __future__ import annotations

import ssl
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from apps.user import SAMPLE_BODY
from bench import command as options
from bench import report
from bench.command import (
    consoles,
    finish,
    invocation,
    logs_folder,
    measure_and_print,
    names,
    pinning_for,
    user_mistakes,
)
from bench.h2_check import check_row, row_generator
from bench.h2_plan import (
    APP,
    DEFAULT_COMPARE,
    DEFAULT_SERVER,
    REFERENCE,
    WORKLOADS,
    RowPlan,
    Settings,
    choose_servers,
    plan_rows,
)
from bench.h2_report import (
    HEADERS,
    RIGHT,
    RowResult,
    goal_lines,
    goals,
    how_it_ran,
    rows_json,
    table_cells,
    write_outputs,
)
from bench.h2load import H2Load
from bench.harness import Pinning, UsageProblem, environment, kept_on, load_generator
from bench.rounds import Contender
from bench.wrk import Wrk
from toyservers.registry import available, get

# --- measuring -----------------------------------------------------------------------------


def make_certificate(folder: Path) -> tuple[tuple[str, str], ssl.SSLContext]:
    """A throwaway CA and a certificate for 127.0.0.1 in ``folder``: ``((certfile,
    keyfile), client context trusting the CA and offering ALPN h2)``.

    Raises:
        UsageProblem: trustme (the ``dev`` extra) is not installed.
    """
    try:
        import trustme
    except ImportError:
        raise UsageProblem("the TLS rows need trustme: pip install -e '.[dev]' (make bench "
                           "does), or leave them out with --modes h2c") from None
    folder.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = folder / "cert.pem", folder / "key.pem"
    issued.private_key_pem.write_to_path(str(key))
    issued.cert_chain_pems[0].write_to_path(str(cert))
    for extra in issued.cert_chain_pems[1:]:
        extra.write_to_path(str(cert), append=True)
    context = ssl.create_default_context()
    ca.configure_trust(context)
    context.set_alpn_protocols(["h2"])
    return (str(cert), str(key)), context


def measure(settings: Settings, console: Console, out: Path) -> dict[str, Any]:
    """Measure every row and return results.json's content (see :func:`write_outputs`).

    Raises:
        UsageProblem: h2load (or wrk) is missing, a server name is unknown, a CPU or the
            port is unusable, or no server to measure speaks HTTP/2.
    """
    h2load = load_generator("h2load")
    assert isinstance(h2load, H2Load)
    wrk = load_generator("wrk") if settings.h1 else None
    assert wrk is None or isinstance(wrk, Wrk)
    servers, notes = choose_servers(settings, available())
    for note in notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    if not servers:
        raise UsageProblem("no server to measure speaks HTTP/2 (see the notes above)")
    pinning = pinning_for(settings, console, client="the load generator",
                          flags=("--server-cpu", "--load-cpu"))
    started = datetime.now(UTC)
    env = environment(h2load)  # the git state before the run writes its files
    with tempfile.TemporaryDirectory(prefix="bench-h2-tls-") as tls_dir:
        tls, context = (None, None)
        if "h2" in settings.modes:  # a throwaway key: never written to the results folder
            tls, context = make_certificate(Path(tls_dir))
        results = _measure_rows(settings, servers, pinning, tls, context, h2load, wrk, console,
                                out)
    rows = rows_json(results)
    return _finish(settings, servers, notes, pinning, started, env, rows, wrk)


def _measure_rows(settings: Settings, servers: list[str], pinning: Pinning,
                  tls: tuple[str, str] | None, context: ssl.SSLContext | None, h2load: H2Load,
                  wrk: Wrk | None, console: Console, out: Path) -> list[RowResult]:
    """Measure every planned row in interleaved rounds (:mod:`bench.rounds`), one line
    printed per row."""
    plans = plan_rows(settings, servers)
    logs = logs_folder(out)
    with kept_on(pinning.load_cpu), report.progress_bar(console) as progress:
        contenders = [Contender(
            plan.label, partial(server_argv, plan, settings.host, tls),
            row_generator(plan, wrk, h2load),
            replace(settings, connections=plan.connections).load(settings.duration),
            logs / (plan.label.replace(" ", "-").replace("/", "") + ".log"),
            check_row(plan, context)) for plan in plans]
        measurements = measure_and_print(contenders, settings, pinning, progress)
    return [RowResult(plan, m) for plan, m in zip(plans, measurements, strict=True)]


def server_argv(plan: RowPlan, host: str, tls: tuple[str, str] | None, port: int
                ) -> list[str]:
    """The argv serving :data:`APP` for ``plan``'s row on ``host:port`` (with ``tls``, a
    (certfile, keyfile) pair, on the ``h2`` rows)."""
    return get(plan.server).command(APP, host, port, tls=tls if plan.protocol == "h2" else None)


def _finish(settings: Settings, servers: list[str], notes: list[str], pinning: Pinning,
            started: datetime, env: dict[str, Any], rows: list[dict[str, Any]],
            wrk: Wrk | None) -> dict[str, Any]:
    """results.json's content from what :func:`measure` gathered."""
    if wrk is not None:
        env["wrk"] = {"path": wrk.path, "version": wrk.version()}
    return {
        "experiment": "h2",
        "date": started.isoformat(timespec="seconds"),
        "command": invocation(),
        "settings": {
            "threads": settings.threads, "duration_s": settings.duration,
            "warmup_s": settings.warmup, "runs": settings.runs, "servers": servers,
            "server": settings.server, "compare": list(settings.compare),
            "workloads": list(settings.workloads), "modes": list(settings.modes),
            "connections": list(settings.sweep_connections),
            "streams": list(settings.sweep_streams), "h1": settings.h1,
            "host": settings.host, "timeout_s": settings.timeout, "app": APP,
            "post_body": SAMPLE_BODY.decode(), "reference": REFERENCE,
        },
        "pinning": pinning.to_json(),
        **env,
        "notes": notes,
        "rows": rows,
        "goals": goals(rows, settings.server),
    }


# --- the command ---------------------------------------------------------------------------


def _counts(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in names(text))
    except ValueError:
        raise UsageProblem(f"{option} takes comma-separated whole numbers, not {text!r}"
                           ) from None
    if not values or min(values) < 1:
        raise UsageProblem(f"{option} takes numbers of 1 or more, not {text!r}")
    return values


def parse_settings(*, workloads: str, modes: str, connections: str, streams: str,
                   **rest: Any) -> Settings:
    """Settings from the command's options; UsageProblem names the first bad value."""
    chosen = names(workloads)
    unknown = [n for n in chosen if n not in WORKLOADS]
    if unknown or not chosen:
        raise UsageProblem(f"unknown workload {unknown[0] if unknown else workloads!r} in "
                           f"--workloads (known: {', '.join(WORKLOADS)})")
    chosen_modes = names(modes)
    bad = [m for m in chosen_modes if m not in ("h2c", "h2")]
    if bad:
        raise UsageProblem(f"unknown mode {bad[0]!r} in --modes (known: h2c, h2)")
    return Settings(workloads=chosen, modes=chosen_modes,
                    sweep_connections=_counts(connections, "--connections"),
                    sweep_streams=_counts(streams, "--streams"), **rest)


def command(
    duration: options.Duration = 10,
    warmup: options.Warmup = 2,
    runs: options.Runs = 3,
    server: Annotated[str, typer.Option(help="The server measured first.")] = DEFAULT_SERVER,
    compare: Annotated[str, typer.Option(help="Comma-separated servers measured beside it "
                                              "('' for none).")] = ",".join(DEFAULT_COMPARE),
    workloads: Annotated[str, typer.Option(
        help="Comma-separated workloads: post (the layers user, echoed), short (GET, 22 B), "
             "long (GET, 430 KB).")] = ",".join(WORKLOADS),
    modes: Annotated[str, typer.Option(
        help="Comma-separated HTTP/2 modes: h2c (clear text, prior knowledge), h2 (TLS, "
             "ALPN).")] = "h2c,h2",
    connections: Annotated[str, typer.Option(
        help="Comma-separated connection counts to sweep (h2load -c; wrk's connections).")
                           ] = "10",
    streams: Annotated[str, typer.Option(
        help="Comma-separated streams per connection to sweep (h2load -m).")] = "1,10",
    h1: Annotated[bool, typer.Option(help="Add the HTTP/1.1 rows (wrk, same app).")] = True,
    threads: Annotated[int, typer.Option(min=1, help="Load-generator threads.")] = 1,
    pin: Annotated[bool, typer.Option(help="Pin the server and the load generator to "
                                           "separate CPUs.")] = True,
    server_cpu: options.ServerCpu = 0,
    load_cpu: Annotated[int, typer.Option(help="CPU for h2load/wrk when pinned.")] = 1,
    host: options.Host = "127.0.0.1",
    port: options.Port = 0,
    output: Annotated[Path | None, typer.Option(
        help="Folder for results.json, results.md and h2.png "
             "[default: results/h2-<timestamp>]")] = None,
) -> None:
    """HTTP/2 against HTTP/1.1: h2load (h2c and TLS, a sweep of connections × streams) and
    wrk on toy-h2, hypercorn and granian, the same app."""
    console, errors = consoles()
    out = output if output is not None else report.default_output("h2")
    with user_mistakes(errors):
        settings = parse_settings(
            workloads=workloads, modes=modes, connections=connections, streams=streams,
            duration=duration, warmup=warmup, runs=runs, server=server,
            compare=names(compare), h1=h1, threads=threads, pin=pin,
            server_cpu=server_cpu, load_cpu=load_cpu, host=host, port=port)
        if not settings.modes and not settings.h1:
            raise UsageProblem("nothing to measure: --modes is empty and --no-h1 was given")
        report.prepare_output(out)
        data = measure(settings, console, out)
    finish(console, errors, "bench h2: HTTP/2 against HTTP/1.1", HEADERS,
           table_cells(data["rows"]), how_it_ran(data), RIGHT, data["rows"],
           lambda: write_outputs(out, data), notes=goal_lines(data))


def register(app: typer.Typer) -> None:
    """Add ``h2`` to the ``bench`` CLI."""
    app.command("h2")(command)
