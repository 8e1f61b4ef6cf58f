"""``bench load``: a Flask endpoint under moderate and high connection counts, errors counted.

``GET /api/v2/<msisdn>`` (:mod:`apps.load_app`) under wrk (``bench/lua/get_bearer.lua``,
without a token) at each connection count, on each server, one process each:

==================  =========================================================================
row                 how it serves
==================  =========================================================================
gunicorn            sync worker: one connection at a time, closed after each response
gunicorn-gthread    gthread worker: a pool of threads, idle keep-alive connections parked
uvicorn             ``apps.load_app:asgi_app``: the Flask app behind a2wsgi's WSGIMiddleware
bjoern              C on libev, one thread (built from source; skipped with the reason when
                    it is not installed)
toy-wsgi            ours, sync worker
toy-wsgi-gthread    ours, gthread worker
==================  =========================================================================

An ASGI server in ``--server``/``--compare`` gets the a2wsgi form of the app; a WSGI server
the Flask app itself.

Connection counts: 100 and 1000 by default, with ``--threads 1``: on 2 cores wrk has one CPU
of its own, and one epoll thread keeps a thousand connections busy. ``--published`` runs the
published levels instead (12 threads, 1000 connections, 60 s; 24 threads, 8000 connections,
120 s). Each connection is a file descriptor in wrk and in the server, so the bench raises
its ``RLIMIT_NOFILE`` soft limit (and the hard one when it may) to what the largest level
needs; wrk and the servers inherit it. When it cannot, it says so in one line and runs: the
connections past the limit then fail as ``connect`` errors, which is a result too.

Errors, per kind, summed over the measured runs (wrk's ``done()`` hook): ``connect`` (refused
or no descriptor), ``read`` and ``write`` (the connection failed or was closed under a
request), ``timeout`` (no answer within ``--timeout``), ``status`` (an answer of 400 or
more). At high connection counts they are the result: a server that refuses connections or
lets them time out can show a high RPS over the few it serves.
"""

from __future__ import annotations

import http.client
import json
import resource
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress

from apps import load_app
from bench import command as options
from bench import report
from bench.command import (
    consoles,
    finish,
    invocation,
    logs_folder,
    names,
    pinning_for,
    print_outcome,
    user_mistakes,
)
from bench.harness import Method, Pinning, UsageProblem, environment, fetch, kept_on, load_generator
from bench.layers import bjoern_status
from bench.report import cell, load_published, noise_notes, pct_cell, provenance
from bench.rounds import Contender, Measurement, measure_rounds
from bench.rows import RowPlan, RowResult, row_json
from bench.wrk_get import GET_BEARER, WrkGet
from toyservers.registry import SERVERS, get

DEFAULT_SERVER = "gunicorn"
DEFAULT_COMPARE = ("gunicorn-gthread", "uvicorn", "bjoern", "toy-wsgi", "toy-wsgi-gthread")
DEFAULT_CONNECTIONS = (100, 1000)
#: The published figures and their source.
PUBLISHED = report.PUBLISHED_DIR / "load.json"
#: File descriptors kept free beyond one per connection (logs, pipes, the listening socket).
FD_MARGIN = 1024


@dataclass(frozen=True)
class Level:
    """One load level: wrk threads, connections, seconds per measured run."""

    threads: int
    connections: int
    duration: int


@dataclass(frozen=True)
class Settings(Method):
    """What ``bench load`` was asked to do: the harness's :class:`Method` plus the rows.

    Attributes:
        server: the row every other row is a percentage of.
        compare: the other servers.
        levels: the load levels, in order.
        published_levels: ``levels`` are the published ones (``--published``).
    """

    server: str = DEFAULT_SERVER
    compare: tuple[str, ...] = DEFAULT_COMPARE
    levels: tuple[Level, ...] = ()
    published_levels: bool = False

    @property
    def servers(self) -> list[str]:
        """``server`` then ``compare``, each once."""
        return list(dict.fromkeys((self.server, *self.compare)))


def published_levels(published: dict[str, Any]) -> tuple[Level, ...]:
    """The published load levels (threads, connections, seconds)."""
    return tuple(Level(lv["threads"], lv["connections"], lv["duration_s"])
                 for lv in published["setup"]["levels"])


def validate(settings: Settings) -> None:
    """UsageProblem for an unknown server or baseline, or a level with more wrk threads
    than connections."""
    known = [n for n, s in SERVERS.items() if s.kind != "baseline"]
    for name in settings.servers:
        spec = SERVERS.get(name)
        if spec is None or spec.kind == "baseline":
            raise UsageProblem(f"unknown server {name!r} (known: {', '.join(known)})")
    if not settings.levels:
        raise UsageProblem("--connections names no connection count")
    for level in settings.levels:
        if level.threads > level.connections:
            raise UsageProblem(f"wrk needs at least one connection per thread: {level.threads}"
                               f" threads for {level.connections} connections")


def app_for(server: str) -> str:
    """The app a server runs: the Flask app for WSGI servers, its a2wsgi form for ASGI."""
    return "apps.load_app:app" if get(server).interface == "wsgi" else "apps.load_app:asgi_app"


# --- the file-descriptor limit ----------------------------------------------------------------


def raise_nofile(needed: int) -> dict[str, Any]:
    """Raise this process's ``RLIMIT_NOFILE`` to at least ``needed`` where it can (children
    inherit it). Returns ``{"needed", "soft", "hard", "note"}``: the limits after, and one line
    saying what happened (``note`` starts with ``"cannot"`` when the limit stays too low)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = soft
    unlimited = hard == resource.RLIM_INFINITY
    if soft < needed and not unlimited and hard < needed:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))
        except (ValueError, OSError):
            pass
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        target = needed if unlimited or hard >= needed else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        note = (f"open-file limit {soft} (needed {needed}: one descriptor per connection plus "
                f"{FD_MARGIN})" + (f", raised from {before}" if soft != before else ""))
    else:
        note = (f"cannot raise the open-file limit to {needed} (hard limit {hard}): connections "
                f"past about {soft - FD_MARGIN} will fail as connect errors; raise `ulimit -Hn` "
                "or run as root")
    return {"needed": needed, "soft": soft, "hard": hard, "note": note}


# --- checks and rows ---------------------------------------------------------------------------


def check(host: str, port: int) -> str | None:
    """None when ``GET`` :data:`apps.load_app.SAMPLE_PATH` answers 200 with the right JSON."""
    try:
        status, headers, body = fetch(host, port, load_app.SAMPLE_PATH)
    except (OSError, http.client.HTTPException) as exc:
        return f"check request failed: {exc!r}"
    if status != 200 or not headers.get("content-type", "").startswith("application/json"):
        return f"check request got status {status} {headers.get('content-type')!r}"
    try:
        data = json.loads(body)
    except ValueError:
        return f"check request got a body that is not JSON: {body[:200]!r}"
    if data.get("msisdn") != load_app.SAMPLE_PATH.rsplit("/", 1)[1] or not data.get("valid"):
        return f"check request got {data!r}"
    return None


def level_name(level: Level) -> str:
    """``"1000 conn"``: the table's first column."""
    return f"{level.connections} conn"


def rows_json(results: list[tuple[Level, RowResult]], base: str,
              published: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``rows`` of results.json: :func:`bench.layers.row_json`'s keys (``layer`` is the
    level's name; ``pct_of_below`` the RPS as a % of ``base``'s at the same level) plus
    ``connections``, ``wrk_threads``, ``duration_s`` and ``published`` (the published RPS
    for this server and connection count, or None)."""
    bases = {lv: row_json(r, None) for lv, r in results if r.plan.server == base}
    out = []
    for level, result in results:
        server = result.plan.server
        row = bases[level] if server == base else row_json(result, bases.get(level))
        row.update(connections=level.connections, wrk_threads=level.threads,
                   duration_s=level.duration)
        found = [p for p in published["rows"]
                 if p["server"] == server and p["connections"] == level.connections]
        row["published"] = {"rps": found[0]["rps"]} if found else None
        out.append(row)
    return out


HEADERS = ["Load", "Server", "RPS", "min–max", "p50 ms", "p99 ms", "connect", "read",
           "write", "timeout", "status", "RSS MB", "CPU µs/req", "% of {base}",
           "Published RPS"]
RIGHT = [False, False, *[True] * 13]


def table_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    """Each row's cells in :data:`HEADERS` order; errors per kind over the measured runs."""
    cells = []
    for row in rows:
        pub = row["published"]
        published = f"{pub['rps']:,.0f}" if pub else "–"
        if row["status"] != "ok" or row["rps_median"] is None:
            cells.append([row["layer"], row["server"], row["status"], *["–"] * 11, published])
            continue
        flag = " *" if row["spread_flag"] else ""
        kinds = row["errors_by_kind"]
        cells.append([
            row["layer"], row["server"], f"{row['rps_median']:,.0f}{flag}",
            f"{row['rps_min']:,.0f}–{row['rps_max']:,.0f}",
            cell(row["p50_ms"], ".2f"), cell(row["p99_ms"], ".2f"),
            *[f"{kinds[k]:,}" for k in ("connect", "read", "write", "timeout", "status")],
            cell(row["rss_peak_mb"], ".1f"), cell(row.get("cpu_us_per_request"), ".1f"),
            "100 %" if row["below"] is None else pct_cell(row), published,
        ])
    return cells


def how_it_ran(data: dict[str, Any]) -> list[str]:
    """The "How it ran" lines, from results.json's content."""
    s = data["settings"]
    pub = data["published"]
    levels = "; ".join(f"{lv['threads']} thread(s), {lv['connections']} connections, "
                       f"{lv['duration_s']} s" for lv in s["levels"])
    which = "the published levels (--published)" if s["published_levels"] else "scaled levels"
    lines = [
        data["pinning"]["text"],
        f"wrk {data['wrk']['version']}, {which}: {levels}; {s['warmup_s']} s warm-up, "
        f"then {s['runs']} interleaved round(s) (one run of every row per round, every "
        f"server up throughout), --timeout {s['timeout_s']} s; GET {s['path']} through "
        "bench/lua/get_bearer.lua; RPS is the median, min–max over rounds; CPU µs/req is the "
        "server's process tree's user + system CPU time per request (median)",
        "one process per server; gthread rows run the registry's thread count; uvicorn runs "
        "the Flask app through a2wsgi's WSGIMiddleware; RSS is the peak of the process tree",
        "errors per kind, summed over the measured runs: connect, read, write, timeout "
        "(no answer in time), status (4xx/5xx answers)",
        data["nofile"]["note"],
        f"listen backlog: the kernel caps every server's at net.core.somaxconn = "
        f"{data['somaxconn']}",
        data["bjoern"]["note"],
        f"% of {s['server']}: RPS over the {s['server']} row at the same load, in each round "
        "against its run of the same round, then the median (min–max over rounds)",
        f"published: {pub['source']} Levels: "
        + "; ".join(f"{lv['threads']} threads, {lv['connections']} connections, "
                    f"{lv['duration_s']} s" for lv in pub["setup"]["levels"]),
    ]
    return [*lines, *provenance(data), "* marks runs spread more than 10 %"]


def write_outputs(out: Path, data: dict[str, Any]) -> list[Path]:
    """Write results.json, results.md and load.png into ``out``; return their paths."""
    rows = data["rows"]
    base = data["settings"]["server"]
    notes = [f"{r['layer']} ({r['server']}) {r['status']}: {r['error']}"
             for r in rows if r["status"] != "ok"]
    notes += noise_notes(rows)
    json_path, md_path, png_path = out / "results.json", out / "results.md", out / "load.png"
    report.write_json(json_path, data)
    report.write_markdown(md_path, "bench load: Flask under moderate and high load",
                          how_it_ran(data), [h.format(base=base) for h in HEADERS],
                          table_cells(rows), notes, RIGHT)
    ok = [r for r in rows if r["status"] == "ok" and r["rps_median"] is not None]
    labels = [f"{r['layer']}: {r['server']}"
              + (f" ({r['errors']:,} errors)" if r["errors"] else "") for r in ok]
    report.bar_chart(png_path, labels, [r["rps_median"] for r in ok],
                     [r["rps_min"] for r in ok], [r["rps_max"] for r in ok],
                     title="Flask GET /api/v2/<msisdn> at each connection count "
                           "(requests/s, median)",
                     xlabel="requests per second (min–max whiskers)",
                     subtitle=data["pinning"]["text"])
    return [json_path, md_path, png_path]


# --- measuring ---------------------------------------------------------------------------------


def somaxconn() -> int | None:
    """``net.core.somaxconn``: the kernel's cap on every listen backlog (None: unknown)."""
    try:
        return int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        return None


def measure_rows(settings: Settings, pinning: Pinning, generator: WrkGet, bjoern: bool,
                 bjoern_note: str, logs: Path, progress: Progress
                 ) -> list[tuple[Level, RowResult]]:
    """Measure every (level, server) row in interleaved rounds (:mod:`bench.rounds`); bjoern's
    rows are skipped with ``bjoern_note`` when it is not installed."""
    planned: list[tuple[Level, RowPlan, Contender | None]] = []
    for level in settings.levels:
        method = replace(settings, threads=level.threads, connections=level.connections)
        for name in settings.servers:
            app = app_for(name)
            plan = RowPlan(level_name(level), name, app, get(name).description,
                           get(name).interface)
            if name == "bjoern" and not bjoern:
                planned.append((level, plan, None))
                continue
            planned.append((level, plan, Contender(
                f"{level_name(level)} ({name})", partial(get(name).command, app, settings.host),
                generator, method.load(level.duration),
                logs / f"{level.connections}-{name}.log", check)))
    contenders = [c for _, _, c in planned if c is not None]
    task = progress.add_task("starting", total=settings.steps * len(contenders))
    measured = iter(measure_rounds(contenders, settings, pinning,
                                   report.RichProgress(progress, task)))
    results = []
    for level, plan, contender in planned:
        measurement = (next(measured) if contender is not None
                       else Measurement(status="skipped", error=bjoern_note))
        print_outcome(progress.console, f"{plan.layer} ({plan.server})", measurement)
        results.append((level, RowResult(plan, measurement)))
    return results


def measure(settings: Settings, console: Console, out: Path) -> dict[str, Any]:
    """Measure every (level, server) row and return results.json's content.

    Raises:
        UsageProblem: wrk is missing, a name is unknown, a CPU or the port is unusable.
    """
    validate(settings)
    wrk = load_generator("wrk")
    pinning = pinning_for(settings, console)
    nofile = raise_nofile(max(lv.connections for lv in settings.levels) + FD_MARGIN)
    console.print(nofile["note"], highlight=False)
    installed, note = bjoern_status()
    if "bjoern" in settings.servers:
        console.print(note, highlight=False)
    else:
        note = "no bjoern row (not in --server or --compare)"
    bjoern = {"installed": installed, "note": note}
    published = load_published("load")
    logs = logs_folder(out)
    started = datetime.now(UTC)
    generator = WrkGet(wrk.path, load_app.SAMPLE_PATH)
    with kept_on(pinning.load_cpu), report.progress_bar(console) as progress:
        results = measure_rows(settings, pinning, generator, installed, note, logs, progress)
    return {
        "experiment": "load",
        "date": started.isoformat(timespec="seconds"),
        "command": invocation(),
        "settings": {
            "levels": [{"threads": lv.threads, "connections": lv.connections,
                        "duration_s": lv.duration} for lv in settings.levels],
            "published_levels": settings.published_levels, "warmup_s": settings.warmup,
            "runs": settings.runs, "server": settings.server,
            "compare": [c for c in settings.servers if c != settings.server],
            "host": settings.host, "timeout_s": settings.timeout,
            "path": load_app.SAMPLE_PATH, "lua_script": str(GET_BEARER),
        },
        "pinning": pinning.to_json(),
        **environment(wrk),
        "nofile": nofile,
        "somaxconn": somaxconn(),
        "bjoern": bjoern,
        "published": {"source": published["source"], "setup": published["setup"],
                      "rows": published["rows"],
                      "file": str(PUBLISHED.relative_to(PUBLISHED.parents[2]))},
        "rows": rows_json(results, settings.server, published),
    }


# --- the command -------------------------------------------------------------------------------


def command(
    connections: Annotated[str, typer.Option(
        help="Comma-separated connection counts, one load level each.")
    ] = ",".join(map(str, DEFAULT_CONNECTIONS)),
    threads: Annotated[int, typer.Option(min=1, help="wrk threads at every level.")] = 1,
    duration: options.Duration = 10,
    warmup: options.Warmup = 2,
    runs: options.Runs = 3,
    published: Annotated[bool, typer.Option(
        "--published", help="Run the published levels instead: 12 threads, 1000 connections, "
                            "60 s; 24 threads, 8000 connections, 120 s (--connections, "
                            "--threads and --duration are then ignored).")] = False,
    timeout: Annotated[int, typer.Option(
        min=1, help="Seconds before wrk counts a request as a timeout error.")] = 2,
    server: Annotated[str, typer.Option(
        help="The server every row is a percentage of.")] = DEFAULT_SERVER,
    compare: Annotated[str, typer.Option(
        help="Comma-separated servers measured beside --server ('' for none); an ASGI "
             "server runs the Flask app through a2wsgi.")] = ",".join(DEFAULT_COMPARE),
    pin: options.Pin = True,
    server_cpu: options.ServerCpu = 0,
    wrk_cpu: options.WrkCpu = 1,
    host: options.Host = "127.0.0.1",
    output: Annotated[Path | None, typer.Option(
        help="Folder for results.json, results.md and load.png "
             "[default: results/load-<timestamp>]")] = None,
) -> None:
    """Flask's GET /api/v2/<msisdn> under 100 and 1000 connections (or the published 1000
    and 8000) on gunicorn, uvicorn + a2wsgi, bjoern and toy-wsgi, with errors by kind."""
    console, errors = consoles(180)
    out = output if output is not None else report.default_output("load")
    with user_mistakes(errors):
        if published:
            levels = published_levels(load_published("load"))
        else:
            try:
                counts = [int(c) for c in names(connections)]
            except ValueError:
                raise UsageProblem(f"--connections takes comma-separated whole numbers, not "
                                   f"{connections!r}") from None
            if any(c < 1 for c in counts):
                raise UsageProblem("--connections counts must be 1 or more")
            levels = tuple(Level(threads, c, duration) for c in counts)
        settings = Settings(levels=levels, published_levels=published, warmup=warmup,
                            runs=runs, timeout=timeout, server=server, compare=names(compare),
                            pin=pin, server_cpu=server_cpu, load_cpu=wrk_cpu, host=host)
        validate(settings)
        report.prepare_output(out)
        data = measure(settings, console, out)
    finish(console, errors, "bench load: Flask under moderate and high load",
           [h.format(base=settings.server) for h in HEADERS], table_cells(data["rows"]),
           how_it_ran(data), RIGHT, data["rows"], lambda: write_outputs(out, data),
           noise_notes(data["rows"]))


def register(app: typer.Typer) -> None:
    """Add ``load`` to the ``bench`` CLI."""
    app.command("load")(command)



