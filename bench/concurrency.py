"""``bench concurrency``: a burst of slow and fast requests, and who waits for whom.

The published experiment: a WSGI app whose ``/slow`` calls ``time.sleep`` and an ASGI app
whose ``/slow`` awaits ``asyncio.sleep``, each with ``/fast`` (``apps/concurrency_app.py``);
3 slow and 15 fast requests fired at once by an httpx client (:mod:`bench.timeline`). One
gunicorn sync worker took about the sum of the slow requests, uvicorn about one.

Each row starts its server fresh on a free port (pinned to one CPU, the client and ``bench``
to another: :mod:`bench.harness`), checks ``/fast`` answers, warms up with ``/fast`` requests
for ``--warmup`` seconds, then fires ``--runs`` bursts and keeps every request's start and
end. The table gives each row's total time (the last answer of the burst) as seconds and as a
multiple of ``--slow``, beside what first principles expect and the published figure
(``bench/published/concurrency.json``), and the fast requests' latency (p50, max); the
chart draws the burst of the median run as one bar per request, one panel per row.

What first principles expect: a server that can wait on ``slots`` requests at once (processes
x threads for WSGI; unbounded for an event loop whose app awaits; 1 for an event loop whose
app calls ``time.sleep``) finishes 3 slow requests in ``ceil(3 / slots)`` slow times, if the
slow ones land on different slots (with 4 sync processes the kernel decides which process
accepts which connection, so two can land on one).
"""

from __future__ import annotations

import http.client
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import psutil
import typer
from rich.console import Console

from bench import command as options
from bench import report
from bench.command import (
    consoles,
    finish,
    invocation,
    logs_folder,
    pinning_for,
    row_names,
    user_mistakes,
)
from bench.harness import LOG_LINES, Method, Pinning, environment, fetch, kept_on
from bench.process import ServerProcess, ServerStartError
from bench.report import cell, load_published, provenance
from bench.stats import median, summarize
from bench.timeline import Timing, fire
from toyservers.registry import get

APPS = {"wsgi": "apps.concurrency_app:wsgi_app", "asgi": "apps.concurrency_app:asgi_app",
        "blocking": "apps.concurrency_app:asgi_blocking_app"}
SLOW_REQUESTS = 3
FAST_REQUESTS = 15


@dataclass(frozen=True)
class Row:
    """One server of the table.

    Attributes:
        name: the row's name (``--compare`` picks rows by it).
        spec: the registry name that starts it.
        app: a key of :data:`APPS`.
        workers: processes.
        threads: app threads per process (gthread), None for one.
        slots: requests it can wait on at once (None: unbounded, an event loop that awaits).
        description: one line for the table.
    """

    name: str
    spec: str
    app: str
    workers: int
    threads: int | None
    slots: int | None
    description: str


ROWS = (
    Row("gunicorn-sync-1", "gunicorn", "wsgi", 1, None, 1, "gunicorn, sync worker, 1 process"),
    Row("gunicorn-sync-4", "gunicorn", "wsgi", 4, None, 4, "gunicorn, sync worker, 4 processes"),
    Row("gunicorn-gthread", "gunicorn-gthread", "wsgi", 1, 4, 4,
        "gunicorn, gthread worker, 1 process x 4 threads"),
    Row("toy-wsgi", "toy-wsgi", "wsgi", 1, None, 1, "toy-wsgi, sync worker, 1 process"),
    Row("toy-wsgi-gthread", "toy-wsgi-gthread", "wsgi", 1, 4, 4,
        "toy-wsgi, gthread worker, 1 process x 4 threads"),
    Row("uvicorn", "uvicorn", "asgi", 1, None, None, "uvicorn, /slow awaits asyncio.sleep"),
    Row("toy-httptools", "toy-httptools", "asgi", 1, None, None,
        "toy-httptools, /slow awaits asyncio.sleep"),
    Row("uvicorn-time.sleep", "uvicorn", "blocking", 1, None, 1,
        "uvicorn, /slow calls time.sleep in the ASGI app (the mistake)"),
)
ROW_NAMES = tuple(row.name for row in ROWS)


@dataclass(frozen=True)
class Settings(Method):
    """What ``bench concurrency`` was asked to do: the harness's :class:`Method` (pinning,
    host, runs, warm-up seconds) plus the burst.

    Attributes:
        slow: seconds each ``/slow`` request waits.
        rows: names of the rows to run, out of :data:`ROW_NAMES`.
    """

    slow: float = 1.0
    rows: tuple[str, ...] = ROW_NAMES


def expected_total(row: Row, slow_requests: int = SLOW_REQUESTS) -> int:
    """How many slow times the burst should take, from first principles:
    ``ceil(slow_requests / slots)`` (1 for an event loop that awaits)."""
    return 1 if row.slots is None else math.ceil(slow_requests / row.slots)


def burst_paths(slow: float) -> list[tuple[str, str]]:
    """The burst, in the order it is sent: the slow requests first, then the fast ones."""
    return ([("slow", f"/slow?seconds={slow:g}")] * SLOW_REQUESTS
            + [("fast", "/fast")] * FAST_REQUESTS)


def check_fast(host: str, port: int, timeout: float = 5.0) -> str | None:
    """GET ``/fast`` once: None when it is 200 ``fast``, else the problem."""
    try:
        status, _, body = fetch(host, port, "/fast", timeout=timeout)
    except (OSError, http.client.HTTPException) as exc:
        return f"check request failed: {exc!r}"
    if status != 200 or body.strip() != b"fast":
        return f"check request got {status} {body[:100]!r}"
    return None


def wait_for_workers(pid: int, workers: int, timeout: float = 30.0) -> str | None:
    """Poll until process ``pid`` has ``workers`` child processes (a pre-fork master's port
    opens before it forks them; 1 worker: the process itself); None, else the problem."""
    if workers < 2:
        return None
    deadline = time.monotonic() + timeout
    while True:
        try:
            count = len(psutil.Process(pid).children())
        except psutil.NoSuchProcess:
            return "the server exited"
        if count >= workers:
            return None
        if time.monotonic() >= deadline:
            return f"{count} of {workers} workers started in {timeout:g} s"
        time.sleep(0.02)  # polling interval, not synchronisation


def warm_up(host: str, port: int, seconds: float) -> None:
    """Send ``/fast`` requests one after another for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check_fast(host, port)


@dataclass
class RowResult:
    """What one row gave: every burst's timings, or why there are none."""

    row: Row
    command: list[str]
    status: str = "ok"
    error: str | None = None
    log_tail: str | None = None
    bursts: list[list[Timing]] = field(default_factory=list)


def measure_row(row: Row, settings: Settings, pinning: Pinning, logs: Path) -> RowResult:
    """Start ``row``'s server, check it, warm up, fire ``settings.runs`` bursts, stop it."""
    port = settings.pick_port()
    argv = get(row.spec).command(APPS[row.app], settings.host, port, workers=row.workers,
                                 threads=row.threads)
    result = RowResult(row, argv)
    server = ServerProcess(argv, host=settings.host, port=port, cpu=pinning.server_cpu,
                           startup_timeout=settings.startup_timeout,
                           log_path=logs / f"{row.name}.log")
    try:
        server.start()
    except ServerStartError as exc:
        result.status, result.error = "failed", f"server did not start ({str(exc).splitlines()[0]})"
        result.log_tail = server.log_tail(LOG_LINES)
        return result
    try:
        problem = check_fast(settings.host, port) or wait_for_workers(server.pid, row.workers)
        if problem is not None:
            result.status, result.error = "failed", problem
            result.log_tail = server.log_tail(LOG_LINES)
            return result
        warm_up(settings.host, port, settings.warmup)
        base = f"http://{settings.host}:{port}"
        for _ in range(settings.runs):
            timings = fire(base, burst_paths(settings.slow),
                           timeout=settings.slow * (SLOW_REQUESTS + 1) + 30)
            result.bursts.append(timings)
            failed = [t for t in timings if t.error or t.status != 200]
            if failed:
                result.status = "failed"
                result.error = (f"{len(failed)} of {len(timings)} requests failed, first: "
                                f"{failed[0].error or failed[0].status}")
                result.log_tail = server.log_tail(LOG_LINES)
                return result
        return result
    finally:
        server.stop()


# --- what came out -------------------------------------------------------------------------


def median_burst(bursts: list[list[Timing]]) -> int | None:
    """Index of the burst whose total time is the median one (the lower middle), or None."""
    if not bursts:
        return None
    totals = sorted((max(t.end for t in burst), i) for i, burst in enumerate(bursts))
    return totals[(len(totals) - 1) // 2][1]


def row_json(result: RowResult, slow: float, paper: dict[str, Any]) -> dict[str, Any]:
    """The ``rows`` entry of results.json for one row.

    Keys: ``row``, ``server`` (registry name), ``app`` (``module:attr``), ``description``,
    ``workers``, ``threads``, ``slots`` (None: unbounded), ``status``, ``error``,
    ``log_tail``, ``command``; ``expected_over_slow`` (first principles), ``published_over_slow``
    and ``published_text`` (None where the source gives none); ``total_s`` (median over bursts
    of the last answer's end, seconds), ``totals_s`` (each burst), ``total_over_slow``;
    ``fast_p50_s``, ``fast_max_s``, ``slow_max_s`` (median over bursts, seconds);
    ``median_burst`` (index into ``bursts``, the one charted) and ``bursts`` (every request
    of every burst: kind, path, start, end, latency in seconds, status, error).
    """
    row = result.row
    quoted = paper["rows"].get(row.name, {})
    data: dict[str, Any] = {
        "row": row.name, "server": row.spec, "app": APPS[row.app],
        "description": row.description, "workers": row.workers, "threads": row.threads,
        "slots": row.slots, "status": result.status, "error": result.error,
        "log_tail": result.log_tail, "command": result.command,
        "expected_over_slow": expected_total(row),
        "published_over_slow": quoted.get("total_over_slow"),
        "published_text": quoted.get("text"),
        "total_s": None, "totals_s": [], "total_over_slow": None, "fast_p50_s": None,
        "fast_max_s": None, "slow_max_s": None, "median_burst": median_burst(result.bursts),
        "bursts": [[t.to_json() for t in burst] for burst in result.bursts],
    }
    if result.status != "ok" or not result.bursts:
        return data
    totals = [max(t.end for t in burst) for burst in result.bursts]

    def per_burst(kind: str, pick: str) -> float | None:
        values = []
        for burst in result.bursts:
            latencies = [t.latency for t in burst if t.kind == kind]
            values.append(summarize(latencies).median if pick == "p50" else max(latencies))
        return median(values)

    total = median(totals)
    data.update({
        "total_s": total, "totals_s": totals,
        "total_over_slow": total / slow if total is not None and slow > 0 else None,
        "fast_p50_s": per_burst("fast", "p50"), "fast_max_s": per_burst("fast", "max"),
        "slow_max_s": per_burst("slow", "max"),
    })
    return data


HEADERS = ("row", "server and model", "slots", "total s", "x slow", "expected x slow",
           "published x slow", "fast p50 s", "fast max s")
RIGHT = (False, False, True, True, True, True, True, True, True)


def table_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    """Formatted cells of :data:`HEADERS`, one list per row; a failed row says so."""
    cells = []
    for r in rows:
        slots = "∞" if r["slots"] is None else str(r["slots"])
        published_cell = "–" if r["published_over_slow"] is None else \
            f"≈ {r['published_over_slow']}"
        if r["status"] != "ok":
            cells.append([r["row"], r["description"], slots, r["status"], "–",
                          str(r["expected_over_slow"]), published_cell, "–", "–"])
            continue
        cells.append([r["row"], r["description"], slots, cell(r["total_s"], ".2f"),
                      cell(r["total_over_slow"], ".1f"), str(r["expected_over_slow"]),
                      published_cell, cell(r["fast_p50_s"], ".3f"), cell(r["fast_max_s"], ".3f")])
    return cells


def how_it_ran(data: dict[str, Any]) -> list[str]:
    """The "How it ran" lines of the report."""
    s, paper = data["settings"], data["published"]
    lines = [
        f"each burst: {s['slow_requests']} GET /slow?seconds={s['slow_s']:g} then "
        f"{s['fast_requests']} GET /fast, all sent at once, one connection each, by an "
        f"httpx.AsyncClient (bench/timeline.py); {s['runs']} burst(s) per row after "
        f"{s['warmup_s']:g} s of /fast warm-up; figures are the median over bursts",
        "total: when the burst's last answer arrived; x slow: total / --slow; expected: "
        "ceil(3 / slots) slow times, slots = requests the server can wait on at once "
        "(processes x threads; ∞ for an event loop whose app awaits)",
        data["pinning"]["text"],
        f"published: {paper['source']} (bench/published/concurrency.json; its slow time was "
        f"{paper['slow_s']} s, so compare the x slow columns)",
        *provenance(data),
    ]
    return lines


def write_outputs(out: Path, data: dict[str, Any]) -> list[Path]:
    """Write results.json, results.md and concurrency.png into ``out``; return their paths."""
    rows = data["rows"]
    json_path, md_path, png_path = (out / "results.json", out / "results.md",
                                    out / "concurrency.png")
    report.write_json(json_path, data)
    notes = [f"{r['row']} {r['status']}: {r['error']}" for r in rows if r["status"] != "ok"]
    report.write_markdown(md_path, "bench concurrency: slow and fast requests at once",
                          how_it_ran(data), HEADERS, table_cells(rows), notes, RIGHT)
    panels = []
    for r in rows:
        if r["median_burst"] is None:
            continue
        burst = r["bursts"][r["median_burst"]]
        panels.append((f"{r['row']}: {r['description']}",
                       [(t["kind"], t["start"], t["end"]) for t in burst]))
    report.timeline_chart(
        png_path, panels,
        title=f"{data['settings']['slow_requests']} slow (/slow, {data['settings']['slow_s']:g}"
              f" s) and {data['settings']['fast_requests']} fast requests sent at once",
        subtitle=data["pinning"]["text"])
    return [json_path, md_path, png_path]


# --- the command ---------------------------------------------------------------------------


def measure(settings: Settings, console: Console, out: Path) -> dict[str, Any]:
    """Measure every row asked for and return results.json's content.

    Raises:
        UsageProblem: a CPU or the port is unusable.
    """
    pinning = pinning_for(settings, console, client="the httpx client",
                          flags=("--server-cpu", "--client-cpu"))
    logs = logs_folder(out)
    paper = load_published("concurrency")
    started = datetime.now(UTC)
    results = []
    with kept_on(pinning.load_cpu):
        for row in (r for r in ROWS if r.name in settings.rows):
            with console.status(f"{row.name}: {settings.runs} burst(s)"):
                result = measure_row(row, settings, pinning, logs)
            results.append(result)
            if result.status == "ok":
                totals = [max(t.end for t in b) for b in result.bursts]
                console.print(f"[green]✓[/] {row.name}: {median(totals):.2f} s")
            else:
                console.print(f"[red]✗ {row.name} failed:[/] {result.error}\n"
                              f"{result.log_tail or ''}", highlight=False)
    return {
        "experiment": "concurrency",
        "date": started.isoformat(timespec="seconds"),
        "command": invocation(),
        "settings": {"slow_s": settings.slow, "slow_requests": SLOW_REQUESTS,
                     "fast_requests": FAST_REQUESTS, "runs": settings.runs,
                     "warmup_s": settings.warmup, "rows": list(settings.rows),
                     "host": settings.host, "client": "httpx.AsyncClient (bench/timeline.py)"},
        "pinning": pinning.to_json(),
        **environment(),
        "published": paper,
        "rows": [row_json(r, settings.slow, paper) for r in results],
    }


def command(
    slow: Annotated[float, typer.Option(min=0.0, max=60.0,
                                        help="Seconds each /slow request waits.")] = 1.0,
    runs: Annotated[int, typer.Option(min=1, help="Bursts per row (the median is kept).")] = 1,
    warmup: Annotated[int, typer.Option(min=0, help="Seconds of /fast warm-up per row "
                                                    "(0: none).")] = 1,
    compare: Annotated[str, typer.Option(help="Comma-separated rows to run: "
                                              + ", ".join(ROW_NAMES) + ".")] = ",".join(ROW_NAMES),
    pin: Annotated[bool, typer.Option(help="Pin the server and the client to separate CPUs.")
                   ] = True,
    server_cpu: options.ServerCpu = 0,
    client_cpu: Annotated[int, typer.Option(help="CPU for the httpx client when pinned.")] = 1,
    host: options.Host = "127.0.0.1",
    output: Annotated[Path | None, typer.Option(
        help="Folder for results.json, results.md and concurrency.png "
             "[default: results/concurrency-<timestamp>]")] = None,
) -> None:
    """WSGI against ASGI: 3 slow and 15 fast requests at once, and a timeline of who waited."""
    console, errors = consoles()
    out = output if output is not None else report.default_output("concurrency")
    with user_mistakes(errors):
        settings = Settings(slow=slow, runs=runs, warmup=warmup, rows=row_names(compare, ROW_NAMES),
                            pin=pin, server_cpu=server_cpu, load_cpu=client_cpu, host=host)
        report.prepare_output(out)
        data = measure(settings, console, out)
    finish(console, errors, "bench concurrency: slow and fast requests at once", HEADERS,
           table_cells(data["rows"]), how_it_ran(data), RIGHT, data["rows"],
           lambda: write_outputs(out, data))


def register(app: typer.Typer) -> None:
    """Add ``concurrency`` to the ``bench`` CLI."""
    app.command("concurrency")(command)
