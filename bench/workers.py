"""``bench workers``: worker models under a request that needs CPU and then waits on I/O.

The published experiment: each request computes ``fib(25)`` and then calls an upstream that
answers after 150 ms; ApacheBench at concurrency 10 against gunicorn with 4 workers gave
sync 9.8 RPS, gthread (4 threads) 23.3, gevent 23.7, uvicorn's worker with FastAPI 31.7
(``bench/published/workers.json``).

Here the app is ``apps/workers_app.py`` (Flask with a blocking ``urllib`` call for the WSGI
rows; FastAPI awaiting ``httpx.AsyncClient`` for the ASGI rows); the upstream is the bench's
own (``bench/upstream.py`` on toy-httptools, the delay in an ``X-Delay-Ms`` header), started
once on a free port and pinned with wrk, off the server's CPU. Every row runs ``--workers``
processes and is measured by the harness (:func:`bench.harness.measure_server`: fresh start,
a check that ``/`` returns fib(25) and the upstream's answer, warm-up, a wrk run) at each
``--concurrency`` (wrk connections), ``--runs`` times, each run on a freshly started server
(:func:`measure_fresh` says why).

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
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress

from apps.workers_app import (
    DEFAULT_DELAY_MS,
    DELAY_ENV,
    DELAY_HEADER,
    FIB_N,
    UPSTREAM_ENV,
    fib,
)
from bench import report, upstream
from bench.command import consoles, finish, user_mistakes
from bench.harness import (
    Measurement,
    Method,
    Pinning,
    UsageProblem,
    check_port,
    decide_pinning,
    environment,
    kept_on,
    load_generator,
    measure_server,
)
from bench.loadgen import LoadGenerator
from bench.machine import usable_cpus
from bench.process import ServerProcess, ServerStartError, free_port
from bench.stats import summarize
from toyservers.registry import get

#: The published figures and where they come from.
PUBLISHED = Path(__file__).resolve().parent / "published" / "workers.json"
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
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", "/")
        response = conn.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        return f"check request failed: {exc!r}"
    finally:
        conn.close()
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if response.status != 200 or not isinstance(data, dict) or data.get("fib") != fib(FIB_N) \
            or not str(data.get("upstream", "")).startswith("waited"):
        return f"check request got {response.status} {body[:200]!r}"
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


def published() -> dict[str, Any]:
    """The published figures (``bench/published/workers.json``)."""
    data: dict[str, Any] = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    return data


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
    ``command``; ``rps_median``, ``rps_runs`` (req/s), ``p50_ms``, ``p99_ms`` (median over
    runs), ``errors`` (all kinds, all measured runs) and ``errors_by_kind``;
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
        "command": measurement.command, "rps_median": None, "rps_runs": [], "p50_ms": None,
        "p99_ms": None, "errors": None, "errors_by_kind": None,
        "predicted_rps": predicted, "measured_over_predicted": None,
        "published_rps": quoted.get("rps"),
        "published_row": PUBLISHED_ROW.get(row.name) if quoted else None,
        "published_s_per_request": published_seconds(row.model, quoted.get("rps"), paper,
                                                     settings.worker_threads),
        "runs": [run.to_json() for run in measurement.runs],
    }
    if measurement.status != "ok" or not summaries:
        return data
    rps = [s.rps for s in summaries]
    median = summarize(rps).median

    def latency_ms(key: str) -> float | None:
        values = [v for s in summaries if (v := s.latency_us.get(key)) is not None]
        return summarize(values).median / 1000 if values else None

    by_kind = {kind: sum(s.errors[kind] for s in summaries) for kind in summaries[0].errors}
    data.update({
        "rps_median": median, "rps_runs": rps, "p50_ms": latency_ms("p50"),
        "p99_ms": latency_ms("p99"), "errors": sum(by_kind.values()),
        "errors_by_kind": by_kind, "measured_over_predicted": median / predicted,
    })
    return data


HEADERS = ("row", "model", "conns", "RPS", "p50 ms", "p99 ms", "errors", "predicted",
           "meas./pred.", "x sync", "published RPS", "published x sync", "published s/req")
RIGHT = (False, False, True, True, True, True, True, True, True, True, True, True, True)


def table_cells(rows: list[dict[str, Any]], paper: dict[str, Any]) -> list[list[str]]:
    """Formatted cells of :data:`HEADERS`; ``x sync`` divides by gunicorn-sync's RPS at the
    same concurrency in the same run, ``published x sync`` the published figures alike."""
    def num(value: float | None, spec: str = ".1f") -> str:
        return "–" if value is None else f"{value:{spec}}"

    sync_rps = {r["connections"]: r["rps_median"] for r in rows
                if r["row"] == "gunicorn-sync" and r["rps_median"]}
    paper_sync = paper["rows"]["gunicorn-sync"]["rps"]
    cells = []
    for r in rows:
        threads = f"x{r['threads']}" if r["threads"] else ""
        model = f"{r['workers']} {r['model']}{threads}"
        pub = r["published_rps"]
        pub_cells = [num(pub), num(pub / paper_sync if pub else None, ".2f"),
                     num(r["published_s_per_request"], ".2f")]
        if r["status"] != "ok":
            cells.append([r["row"], model, str(r["connections"]), r["status"], "–", "–", "–",
                          num(r["predicted_rps"]), "–", "–", *pub_cells])
            continue
        base = sync_rps.get(r["connections"])
        cells.append([
            r["row"], model, str(r["connections"]), num(r["rps_median"]), num(r["p50_ms"], ".0f"),
            num(r["p99_ms"], ".0f"), str(r["errors"]), num(r["predicted_rps"]),
            num(r["measured_over_predicted"], ".2f"),
            num(r["rps_median"] / base if base else None, ".2f"), *pub_cells,
        ])
    return cells


def how_it_ran(data: dict[str, Any]) -> list[str]:
    """The "How it ran" lines of the report."""
    s, p, machine, paper = data["settings"], data["prediction"], data["machine"], \
        data["published"]
    lines = [
        f"each request: fib({FIB_N}) then GET the upstream (bench/upstream.py on "
        f"{upstream.SERVER}) with {DELAY_HEADER}: {s['delay_ms']}; wrk POSTs to / on N "
        f"connections (N = conns) for {s['duration_s']} s, {s['runs']} run(s), each on a "
        f"freshly started server after {s['warmup_s']} s of warm-up; RPS is the median",
        f"model: worker processes, worker class, xT threads per worker (every server runs "
        f"{s['workers']}); the server restarts for each concurrency; x sync: RPS over "
        "gunicorn-sync's at the same conns in this run",
        f"prediction: min(S / (c + d), K / c) with c = fib({FIB_N}) = "
        f"{1000 * p['cpu_s']:.1f} ms of CPU (median of {p['samples']}, measured on the "
        f"server's CPU), d = {1000 * p['wait_s']:.0f} ms, S = min(conns, requests in flight), "
        f"K = min(workers, {p['cores']} core(s) the server may use)",
        data["pinning"]["text"] + (f"; the upstream shares CPU {data['pinning']['load_cpu']} "
                                   "with wrk" if data["pinning"]["load_cpu"] is not None else ""),
        f"published: {paper['source']} (bench/published/workers.json); our uvicorn-workers "
        "row (uvicorn --workers) stands beside its gunicorn + uvicorn worker figure: "
        "uvicorn.workers is deprecated, the server in each worker is the same",
        f"machine: {machine['cpu_model']}, {machine['cores']} cores; Python "
        f"{data['python']['version']}; {data['date']}",
    ]
    git = data.get("git")
    lines.append("toyservers: not a git checkout" if git is None else
                 f"toyservers at commit {git['commit'][:12]}"
                 + (", with uncommitted changes" if git["dirty"] else ""))
    return lines


def chart(path: Path, rows: list[dict[str, Any]], subtitle: str) -> None:
    """Measured RPS (bars) and predicted RPS (black ticks) per row and concurrency (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r["status"] != "skipped"]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * max(len(shown), 1)))
    try:
        positions = list(range(len(shown)))
        values = [r["rps_median"] or 0.0 for r in shown]
        bars = ax.barh(positions, values, color="#4c72b0", label="measured (median)")
        ax.bar_label(bars, labels=[f"{v:.0f}" for v in values], padding=4, fontsize=8)
        ax.scatter([r["predicted_rps"] for r in shown], positions, marker="|", s=300,
                   color="black", label="predicted", zorder=3)
        ax.set_yticks(positions, labels=[f"{r['row']} (c={r['connections']})" for r in shown])
        ax.invert_yaxis()
        ax.set_xlabel("requests per second")
        ax.set_title("fib(25) then a 150 ms upstream call, per worker model\n" + subtitle,
                     fontsize=10)
        ax.legend(fontsize=8, loc="lower right")
        ax.margins(x=0.15)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


def write_outputs(out: Path, data: dict[str, Any]) -> list[Path]:
    """Write results.json, results.md and workers.png into ``out``; return their paths."""
    rows = data["rows"]
    json_path, md_path, png_path = out / "results.json", out / "results.md", out / "workers.png"
    report.write_json(json_path, data)
    notes = [f"{r['row']} (c={r['connections']}) {r['status']}: {r['error']}"
             for r in rows if r["status"] != "ok"]
    report.write_markdown(md_path, "bench workers: CPU then I/O, per worker model",
                          how_it_ran(data), HEADERS, table_cells(rows, data["published"]),
                          notes, RIGHT)
    chart(png_path, rows, data["pinning"]["text"])
    return [json_path, md_path, png_path]


# --- measuring -----------------------------------------------------------------------------


class _StatusProgress:
    """The harness's :class:`bench.harness.Progress` on a rich status line."""

    def __init__(self, progress: Progress, task: Any) -> None:
        self.progress, self.task = progress, task

    def update(self, description: str) -> None:
        self.progress.update(self.task, description=description)

    def advance(self, steps: int = 1) -> None:
        self.progress.advance(self.task, steps)


def start_upstream(settings: Settings, pinning: Pinning, logs: Path) -> ServerProcess:
    """Start the latency upstream on a free port, pinned with the load generator.

    Raises:
        UsageProblem: it did not start or does not answer (the message says why).
    """
    port = free_port(settings.host)  # never --port: that one is the server's
    argv = get(upstream.SERVER).command("bench.upstream:app", settings.host, port)
    server = ServerProcess(argv, host=settings.host, port=port, cpu=pinning.load_cpu,
                           log_path=logs / "upstream.log")
    try:
        server.start()
    except ServerStartError as exc:
        raise UsageProblem(f"the upstream did not start: {str(exc).splitlines()[0]}") from None
    conn = http.client.HTTPConnection(settings.host, port, timeout=10)
    try:
        conn.request("GET", "/", headers={DELAY_HEADER: "1"})
        answer = conn.getresponse().read()
    except (OSError, http.client.HTTPException) as exc:
        server.stop()
        raise UsageProblem(f"the upstream does not answer: {exc!r}") from None
    finally:
        conn.close()
    if not answer.startswith(b"waited"):
        server.stop()
        raise UsageProblem(f"the upstream answered {answer[:100]!r}")
    return server


def steps_per_run(settings: Settings) -> int:
    """wrk runs per measured run: the run, and its server's warm-up if any."""
    return 2 if settings.warmup else 1


def measure_fresh(row: Row, method: Settings, pinning: Pinning, generator: LoadGenerator,
                  logs: Path, progress: _StatusProgress, env: dict[str, str]) -> Measurement:
    """``method.runs`` measured runs of ``row``, each on a freshly started server.

    Why not one server for every run: when wrk's connections outnumber the requests the
    server holds (a sync worker at 40 connections), the requests wrk left unanswered when a
    run ended stay queued in the server's accept queue, and the next run would first pay for
    them. ``command`` is the first run's argv (the others differ only in the port).
    """
    merged = Measurement()
    for index in range(method.runs):
        port = method.pick_port()
        one = measure_server(
            server_argv(row, method, port), port,
            label=f"{row.name} c={method.connections} run {index + 1}/{method.runs}",
            method=dataclasses.replace(method, runs=1), pinning=pinning, generator=generator,
            log_path=logs / f"{row.name}-c{method.connections}-{index + 1}.log",
            progress=progress, check=check_app, env=env)
        merged.runs += one.runs
        merged.command = merged.command or one.command
        if one.status != "ok":
            merged.status, merged.error, merged.log_tail = one.status, one.error, one.log_tail
            progress.advance((method.runs - index - 1) * steps_per_run(method))
            return merged
    return merged


def measure(settings: Settings, console: Console, out: Path) -> dict[str, Any]:
    """Measure every row at every concurrency and return results.json's content.

    Raises:
        UsageProblem: wrk is missing, a CPU or the port is unusable, the upstream fails.
    """
    generator = load_generator("wrk")
    check_port(settings.host, settings.port)
    pinning = decide_pinning(settings, usable_cpus(), client=generator.name)
    if pinning.server_cpu is None and settings.pin:
        console.print(f"[yellow]note:[/] {pinning.text}")
    cores = 1 if pinning.server_cpu is not None else len(usable_cpus())
    with kept_on(pinning.server_cpu):
        cpu_s = fib_cpu_seconds()
    prediction = {"cpu_s": cpu_s, "samples": 15, "wait_s": settings.delay_ms / 1000,
                  "cores": cores, "formula": "min(min(N, W*T) / (c + d), min(W, cores) / c)"}
    console.print(f"fib({FIB_N}): {1000 * cpu_s:.1f} ms of CPU; the server may use {cores} "
                  "core(s)", highlight=False)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    paper = published()
    started = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    chosen = [r for r in ROWS if r.name in settings.rows]
    up = start_upstream(settings, pinning, logs)
    env = {UPSTREAM_ENV: f"http://{settings.host}:{up.port}/", DELAY_ENV: str(settings.delay_ms)}
    try:
        with kept_on(pinning.load_cpu), report.progress_bar(console) as progress:
            task = progress.add_task("starting", total=settings.runs * steps_per_run(settings)
                                     * len(chosen) * len(settings.concurrency))
            for row in chosen:
                for connections in settings.concurrency:
                    method = dataclasses.replace(settings, connections=connections)
                    reason = skip_reason(row)
                    if reason is not None:
                        measurement = Measurement(status="skipped", error=reason)
                        progress.advance(task, settings.runs * steps_per_run(settings))
                    else:
                        measurement = measure_fresh(
                            row, method, pinning, generator, logs,
                            _StatusProgress(progress, task), env)
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
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "settings": {"duration_s": settings.duration, "warmup_s": settings.warmup,
                     "runs": settings.runs, "threads": settings.threads,
                     "concurrency": list(settings.concurrency), "workers": settings.workers,
                     "worker_threads": settings.worker_threads, "delay_ms": settings.delay_ms,
                     "rows": list(settings.rows), "host": settings.host,
                     "timeout_s": settings.timeout},
        "pinning": {"server_cpu": pinning.server_cpu, "load_cpu": pinning.load_cpu,
                    "text": pinning.text},
        "upstream": {"command": up.argv, "server": upstream.SERVER, "cpu": pinning.load_cpu},
        "prediction": prediction,
        **environment(generator),
        "published": paper,
        "rows": rows,
    }


# --- the command ---------------------------------------------------------------------------


def parse_names(text: str) -> tuple[str, ...]:
    """Row names from ``--compare`` (comma-separated); UsageProblem for an unknown one."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise UsageProblem(f"--compare names no row (known: {', '.join(ROW_NAMES)})")
    for name in names:
        if name not in ROW_NAMES:
            raise UsageProblem(f"unknown row {name!r} (known: {', '.join(ROW_NAMES)})")
    return names


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
    duration: Annotated[int, typer.Option(min=1, help="Seconds per measured run.")] = 5,
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
    server_cpu: Annotated[int, typer.Option(help="CPU for the server when pinned.")] = 0,
    wrk_cpu: Annotated[int, typer.Option(help="CPU for wrk and the upstream when pinned.")] = 1,
    host: Annotated[str, typer.Option(help="Address the servers listen on.")] = "127.0.0.1",
    output: Annotated[Path | None, typer.Option(
        help="Folder for results.json, results.md and workers.png "
             "[default: results/workers-<timestamp>]")] = None,
) -> None:
    """Worker models under fib(25) plus a 150 ms upstream call: measured beside predicted."""
    console, errors = consoles()
    out = output if output is not None else report.default_output("workers")
    with user_mistakes(errors):
        settings = Settings(duration=duration, warmup=warmup, runs=runs, timeout=10,
                            rows=parse_names(compare), workers=workers,
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
