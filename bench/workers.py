"""``bench workers``: worker models under a request that needs CPU and then waits on I/O.

The published experiment: each request computes ``fib(25)`` and then calls an upstream that
answers after 150 ms; ApacheBench at concurrency 10 against gunicorn with 4 workers gave
sync 9.8 RPS, gthread (4 threads) 23.3, gevent 23.7, uvicorn's worker with FastAPI 31.7
(``bench/published/workers.json``).

Here the app is ``apps/workers_app.py`` (Flask with a blocking ``urllib`` call for the WSGI
rows; FastAPI awaiting ``httpx.AsyncClient`` for the ASGI rows); the upstream is the bench's
own (``bench/upstream.py`` on toy-httptools, the delay in an ``X-Delay-Ms`` header), started
once on a free port and pinned with wrk, off the server's CPU. Every row runs ``--workers``
processes and is measured at each ``--concurrency`` (wrk connections) in ``--runs``
interleaved rounds (:mod:`bench.rounds`: round 1 of every row, then round 2 of every row...),
each run on a freshly started server (:func:`contender` says why) after a check that ``/``
returns fib(25) and the upstream's answer and a warm-up.

The prediction beside each measurement, from first principles. With ``c`` the CPU seconds of
one request (``fib(25)``, measured here on the server's CPU before any row), ``d`` the
upstream's delay, ``N`` the connections, ``W`` workers and ``T`` the requests one worker can
have in flight (sync 1, gthread its threads, gevent and an event loop unbounded):

* at most ``S = min(N, W*T)`` requests are in flight, each taking at least ``c + d``:
  RPS <= S / (c + d) (Little's law);
* the CPU work cannot outrun the cores: one worker runs Python on one core at a time (the
  GIL), so ``K = min(W, cores the server may use)`` and RPS <= K / c;

predicted RPS = min(S / (c + d), K / c). It leaves out the framework's, the HTTP client's and
the server's own CPU per request, so a measurement a little below it is expected.
"""

from __future__ import annotations

import dataclasses
import http.client
import importlib.util
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from apps.workers_app import (
    DEFAULT_DELAY_MS,
    DELAY_ENV,
    FIB_N,
    UPSTREAM_ENV,
    fib,
)
from bench import command as options
from bench import report, upstream
from bench.command import (
    consoles,
    finish,
    invocation,
    logs_folder,
    pinning_for,
    row_names,
    user_mistakes,
)
from bench.harness import Method, UsageProblem, environment, fetch, kept_on, load_generator
from bench.loadgen import LoadGenerator
from bench.machine import usable_cpus
from bench.report import load_published
from bench.rounds import Contender, Measurement, measure_rounds, steps
from bench.rows import measured_columns
from bench.stats import summarize
from bench.workers_report import HEADERS, RIGHT, how_it_ran, table_cells, write_outputs
from toyservers.registry import get

APPS = {"wsgi": "apps.workers_app:flask_app", "asgi": "apps.workers_app:fastapi_app"}
#: Worker processes, as published.
WORKERS = 4
#: Threads per gthread worker, as published.
THREADS = 4
#: Which published row each of ours stands beside.
PUBLISHED_ROW = {"gunicorn-sync": "gunicorn-sync", "gunicorn-gthread": "gunicorn-gthread",
                 "gunicorn-gevent": "gunicorn-gevent", "uvicorn-workers": "gunicorn-uvicorn"}


@dataclass(frozen=True)
class Row:
    """One worker model of the table.

    Attributes:
        name: the row's name (``--compare`` picks rows by it).
        spec: the registry name that starts it.
        app: a key of :data:`APPS`.
        model: ``"sync"``, ``"gthread"``, ``"gevent"`` or ``"async"``: how many requests one
            worker has in flight (1, its threads, unbounded, unbounded).
        description: one line for the table.
        worker_class: a gunicorn ``--worker-class`` to add, or None.
        needs: a module that must be importable for the row to run, or None.
    """

    name: str
    spec: str
    app: str
    model: str
    description: str
    worker_class: str | None = None
    needs: str | None = None


ROWS = (
    Row("gunicorn-sync", "gunicorn", "wsgi", "sync", "gunicorn sync, Flask"),
    Row("gunicorn-gthread", "gunicorn", "wsgi", "gthread", "gunicorn gthread, Flask"),
    Row("gunicorn-gevent", "gunicorn", "wsgi", "gevent", "gunicorn gevent, Flask",
        worker_class="gevent", needs="gevent"),
    Row("uvicorn-workers", "uvicorn", "asgi", "async", "uvicorn --workers, FastAPI"),
    Row("toy-wsgi", "toy-wsgi", "wsgi", "sync", "toy-wsgi sync, Flask"),
    Row("toy-wsgi-gthread", "toy-wsgi", "wsgi", "gthread", "toy-wsgi gthread, Flask"),
    Row("toy-httptools", "toy-httptools", "asgi", "async", "toy-httptools, FastAPI"),
)
ROW_NAMES = tuple(row.name for row in ROWS)


@dataclass(frozen=True)
class Settings(Method):
    """What ``bench workers`` was asked to do: the harness's :class:`Method` (wrk load, runs,
    pinning; durations in whole seconds) plus the rows, workers and the sweep.

    Attributes:
        rows: names of the rows to run, out of :data:`ROW_NAMES`.
        workers: processes per server.
        worker_threads: threads per gthread worker.
        concurrency: wrk connection counts, one measurement of every row at each.
        delay_ms: the upstream's delay, milliseconds.
    """

    rows: tuple[str, ...] = ROW_NAMES
    workers: int = WORKERS
    worker_threads: int = THREADS
    concurrency: tuple[int, ...] = (10,)
    delay_ms: int = DEFAULT_DELAY_MS


# --8<-- [start:predict]
def in_flight(model: str, workers: int, threads: int) -> float:
    """Requests a server can have in flight at once: ``workers`` times 1 (sync), ``threads``
    (gthread), or unbounded (gevent, async: ``inf``)."""
    per_worker = {"sync": 1.0, "gthread": float(threads)}.get(model, float("inf"))
    return workers * per_worker


def predict_rps(model: str, *, workers: int, threads: int, connections: int, cpu_s: float,
                wait_s: float, cores: int) -> float:
    """First-principles RPS: min(S / (c + d), K / c) with S = min(connections, in flight),
    K = min(workers, cores), c = ``cpu_s`` and d = ``wait_s`` (seconds)."""
    slots = min(float(connections), in_flight(model, workers, threads))
    busy_cores = min(workers, cores)
    return min(slots / (cpu_s + wait_s), busy_cores / cpu_s)
# --8<-- [end:predict]


def fib_cpu_seconds(repeats: int = 15) -> float:
    """Median CPU time of one ``fib(FIB_N)`` in this thread, seconds (``time.thread_time``)."""
    samples = []
    for _ in range(repeats):
        start = time.thread_time()
        fib(FIB_N)
        samples.append(time.thread_time() - start)
    return summarize(samples).median


def check_app(host: str, port: int, timeout: float = 10.0) -> str | None:
    """GET ``/`` once: None when it is 200 with fib(25) and the upstream's answer."""
    try:
        status, _, body = fetch(host, port, timeout=timeout)
    except (OSError, http.client.HTTPException) as exc:
        return f"check request failed: {exc!r}"
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if status != 200 or not isinstance(data, dict) or data.get("fib") != fib(FIB_N) \
            or not str(data.get("upstream", "")).startswith("waited"):
        return f"check request got {status} {body[:200]!r}"
    return None


def server_argv(row: Row, settings: Settings, port: int) -> list[str]:
    """The exact argv that serves ``row``'s app with ``settings.workers`` processes."""
    threads = settings.worker_threads if row.model == "gthread" else None
    argv = get(row.spec).command(APPS[row.app], settings.host, port, workers=settings.workers,
                                 threads=threads)
    if row.worker_class is not None:  # gunicorn takes the app last: the class goes before
        argv[-1:-1] = ["--worker-class", row.worker_class]
    return argv


def skip_reason(row: Row) -> str | None:
    """Why ``row`` cannot run here, or None."""
    if row.needs is not None and importlib.util.find_spec(row.needs) is None:
        return (f"{row.needs} is not installed (pip install -e '.[dev]' installs it from a "
                "wheel)")
    return None


# --- what came out -------------------------------------------------------------------------


def published_seconds(model: str, rps: float | None, paper: dict[str, Any], threads: int
                      ) -> float | None:
    """Seconds per request the published ``rps`` implies (Little's law: in flight / RPS),
    with the published concurrency and workers; None without a figure."""
    if not rps:
        return None
    in_flight_then = min(float(paper["concurrency"]), in_flight(model, paper["workers"], threads))
    return in_flight_then / rps


def row_json(row: Row, connections: int, measurement: Measurement, settings: Settings,
             prediction: dict[str, Any], paper: dict[str, Any]) -> dict[str, Any]:
    """The ``rows`` entry of results.json for one row at one concurrency.

    Keys: ``row``, ``server``, ``model``, ``app``, ``description``, ``workers``, ``threads``
    (per worker; None but for gthread), ``connections``, ``status``, ``error``, ``log_tail``,
    ``command``; ``rps_median``, ``rps_runs`` (req/s) and ``rounds`` (each run's round),
    ``p50_ms``, ``p99_ms`` (median over runs), ``errors`` (all kinds, all measured runs) and
    ``errors_by_kind``, ``cpu_us_per_request`` and ``cpu_us_runs`` (the server tree's CPU µs
    per request, :func:`bench.rows.measured_columns`);
    ``predicted_rps`` (:func:`predict_rps` with this file's ``prediction`` inputs),
    ``measured_over_predicted``; ``published_rps`` (None where the source has no figure),
    ``published_row`` and ``published_s_per_request``: what Little's law makes of the
    published figure, seconds each request took = requests in flight (the published
    concurrency, capped by what its 4 workers hold) / published RPS; ``runs`` (every wrk
    run).
    """
    summaries = measurement.measured
    threads = settings.worker_threads if row.model == "gthread" else None
    quoted = paper["rows"].get(PUBLISHED_ROW.get(row.name, ""), {})
    predicted = predict_rps(row.model, workers=settings.workers,
                            threads=settings.worker_threads, connections=connections,
                            cpu_s=prediction["cpu_s"], wait_s=prediction["wait_s"],
                            cores=prediction["cores"])
    data: dict[str, Any] = {
        "row": row.name, "server": row.spec, "model": row.model, "app": APPS[row.app],
        "description": row.description, "workers": settings.workers, "threads": threads,
        "connections": connections, "status": measurement.status,
        "error": measurement.error, "log_tail": measurement.log_tail,
        "command": measurement.command, "rps_median": None, "rps_runs": [], "rounds": [],
        "p50_ms": None, "p99_ms": None, "errors": None, "errors_by_kind": None,
        "cpu_us_per_request": None, "cpu_us_runs": [],
        "predicted_rps": predicted, "measured_over_predicted": None,
        "published_rps": quoted.get("rps"),
        "published_row": PUBLISHED_ROW.get(row.name) if quoted else None,
        "published_s_per_request": published_seconds(row.model, quoted.get("rps"), paper,
                                                     settings.worker_threads),
        "runs": [run.to_json() for run in measurement.runs],
    }
    if measurement.status != "ok" or not summaries:
        return data
    columns = measured_columns(measurement)
    data.update({key: columns[key] for key in ("rps_median", "rps_runs", "rounds", "p50_ms",
                                                "p99_ms", "errors", "errors_by_kind",
                                                "cpu_us_per_request", "cpu_us_runs")})
    data["measured_over_predicted"] = columns["rps_median"] / predicted
    return data


# --- measuring -----------------------------------------------------------------------------


def contender(row: Row, settings: Settings, connections: int, generator: LoadGenerator,
              logs: Path, env: dict[str, str]) -> Contender:
    """How the rounds measure ``row`` at ``connections``: a freshly started server for each
    round (``fresh``), because when wrk's connections outnumber the requests the server holds
    (a sync worker at 40 connections), the requests wrk left unanswered when a run ended stay
    queued in the server's accept queue, and the next run would first pay for them."""
    method = dataclasses.replace(settings, connections=connections)
    return Contender(f"{row.name} c={connections}", partial(server_argv, row, settings),
                     generator, method.load(settings.duration),
                     logs / f"{row.name}-c{connections}.log", check_app, env=env, fresh=True)


def measure(settings: Settings, console: Console, out: Path) -> dict[str, Any]:
    """Measure every row at every concurrency and return results.json's content.

    Raises:
        UsageProblem: wrk is missing, a CPU or the port is unusable, the upstream fails.
    """
    generator = load_generator("wrk")
    pinning = pinning_for(settings, console, client=generator.name)
    cores = 1 if pinning.server_cpu is not None else len(usable_cpus())
    with kept_on(pinning.server_cpu):
        cpu_s = fib_cpu_seconds()
    prediction = {"cpu_s": cpu_s, "samples": 15, "wait_s": settings.delay_ms / 1000,
                  "cores": cores, "formula": "min(min(N, W*T) / (c + d), min(W, cores) / c)"}
    console.print(f"fib({FIB_N}): {1000 * cpu_s:.1f} ms of CPU; the server may use {cores} "
                  "core(s)", highlight=False)
    logs = logs_folder(out)
    paper = load_published("workers")
    started = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    chosen = [r for r in ROWS if r.name in settings.rows]
    up = upstream.start(settings.host, pinning.load_cpu, logs / "upstream.log")
    env = {UPSTREAM_ENV: f"http://{settings.host}:{up.port}/", DELAY_ENV: str(settings.delay_ms)}
    try:
        with kept_on(pinning.load_cpu), report.progress_bar(console) as progress:
            planned = [(row, connections) for row in chosen
                       for connections in settings.concurrency]
            runnable = [(row, n) for row, n in planned if skip_reason(row) is None]
            contenders = [contender(row, settings, n, generator, logs, env)
                          for row, n in runnable]
            task = progress.add_task("starting", total=sum(steps(c, settings)
                                                           for c in contenders))
            measured = dict(zip(runnable, measure_rounds(contenders, settings, pinning,
                                                         report.RichProgress(progress, task)),
                                strict=True))
            for row, connections in planned:
                reason = skip_reason(row)
                measurement = (measured[(row, connections)] if reason is None
                               else Measurement(status="skipped", error=reason))
                data = row_json(row, connections, measurement, settings, prediction, paper)
                rows.append(data)
                label = f"{row.name} c={connections}"
                if data["status"] == "ok":
                    progress.console.print(
                        f"[green]✓[/] {label}: {data['rps_median']:.1f} requests/s "
                        f"(predicted {data['predicted_rps']:.1f})")
                else:
                    tail = (measurement.log_tail or "")[-2000:]
                    progress.console.print(f"[red]✗ {label} {data['status']}:[/] "
                                           f"{data['error']}\n{tail}", highlight=False)
    finally:
        up.stop()
    return {
        "experiment": "workers",
        "date": started.isoformat(timespec="seconds"),
        "command": invocation(),
        "settings": {"duration_s": settings.duration, "warmup_s": settings.warmup,
                     "runs": settings.runs, "threads": settings.threads,
                     "concurrency": list(settings.concurrency), "workers": settings.workers,
                     "worker_threads": settings.worker_threads, "delay_ms": settings.delay_ms,
                     "rows": list(settings.rows), "host": settings.host,
                     "timeout_s": settings.timeout},
        "pinning": pinning.to_json(),
        "upstream": {"command": up.argv, "server": upstream.SERVER, "cpu": pinning.load_cpu},
        "prediction": prediction,
        **environment(generator),
        "published": paper,
        "rows": rows,
    }


# --- the command ---------------------------------------------------------------------------


def parse_concurrency(text: str) -> tuple[int, ...]:
    """Connection counts from ``--concurrency`` (comma-separated positive integers)."""
    try:
        counts = tuple(dict.fromkeys(int(n) for n in text.split(",") if n.strip()))
    except ValueError:
        raise UsageProblem(f"--concurrency takes comma-separated integers, not {text!r}"
                           ) from None
    if not counts or min(counts) < 1:
        raise UsageProblem(f"--concurrency needs counts of 1 or more, not {text!r}")
    return counts


def command(
    concurrency: Annotated[str, typer.Option(
        help="Comma-separated wrk connection counts (a sweep: every row at each).")] = "10",
    duration: options.Duration = 5,
    warmup: Annotated[int, typer.Option(
        min=0, help="Seconds of warm-up before each measured run (0: none). At more "
                    "connections than a sync server holds, a warm-up leaves requests queued "
                    "that the run then pays for.")] = 0,
    runs: Annotated[int, typer.Option(min=1, help="Measured runs per row, each on a freshly "
                                                  "started server.")] = 1,
    compare: Annotated[str, typer.Option(help="Comma-separated rows to run: "
                                              + ", ".join(ROW_NAMES) + ".")] = ",".join(ROW_NAMES),
    workers: Annotated[int, typer.Option(min=1, help="Worker processes per server.")
                       ] = WORKERS,
    threads: Annotated[int, typer.Option(min=1, help="Threads per gthread worker.")] = THREADS,
    delay_ms: Annotated[int, typer.Option(min=0, max=60_000,
                                          help="The upstream's delay, milliseconds.")
                        ] = DEFAULT_DELAY_MS,
    pin: Annotated[bool, typer.Option(help="Pin the server to one CPU, wrk and the upstream "
                                           "to another.")] = True,
    server_cpu: options.ServerCpu = 0,
    wrk_cpu: Annotated[int, typer.Option(help="CPU for wrk and the upstream when pinned.")] = 1,
    host: options.Host = "127.0.0.1",
    output: Annotated[Path | None, typer.Option(
        help="Folder for results.json, results.md and workers.png "
             "[default: results/workers-<timestamp>]")] = None,
) -> None:
    """Worker models under fib(25) plus a 150 ms upstream call: measured beside predicted."""
    console, errors = consoles()
    out = output if output is not None else report.default_output("workers")
    with user_mistakes(errors):
        settings = Settings(duration=duration, warmup=warmup, runs=runs, timeout=10,
                            rows=row_names(compare, ROW_NAMES), workers=workers,
                            worker_threads=threads, concurrency=parse_concurrency(concurrency),
                            delay_ms=delay_ms, pin=pin, server_cpu=server_cpu,
                            load_cpu=wrk_cpu, host=host)
        report.prepare_output(out)
        data = measure(settings, console, out)
    finish(console, errors, "bench workers: CPU then I/O, per worker model", HEADERS,
           table_cells(data["rows"], data["published"]), how_it_ran(data), RIGHT,
           data["rows"], lambda: write_outputs(out, data))


def register(app: typer.Typer) -> None:
    """Add ``workers`` to the ``bench`` CLI."""
    app.command("workers")(command)
