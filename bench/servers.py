"""``bench servers``: the ASGI servers side by side on three endpoints, beside a published paper.

The same FastAPI app (:mod:`apps.servers_app`) on every server, the same wrk load
(``bench/lua/get_bearer.lua``: GET, and the bearer token on the real endpoint):

============  ====================  =======================================================
endpoint      path                  what it measures
============  ====================  =======================================================
shortbody     ``/api/shortbody``    a 22-byte body: the server's cost per request
longbody      ``/api/longbody``     a 430,000-byte body: the server's write path
activities    ``/api/activities``   JWT decoded, two Redis round trips, JSON: a real request
============  ====================  =======================================================

Rows: ``--server`` (uvicorn by default: the published paper's fastest, and the row every
other row is a percentage of) and each of ``--compare`` (hypercorn, daphne, granian and our
toy-raw, toy-h11, toy-httptools), for each endpoint. Columns: RPS (median, min–max), p99,
errors, the peak RSS of the server's whole process tree, RPS as a % of the ``--server`` row
on the same endpoint, and the published figures (``bench/published/servers.json``) beside
ours with the same ratio computed from them, since only ratios travel between machines.

For the activities rows the bench starts a real ``redis-server`` on a free loopback port in
a throwaway folder without persistence (:class:`bench.redis_server.RedisServer`), seeds it
with :func:`apps.servers_app.seed`, signs a token for ``user1``, and stops it at the end.
Redis runs on wrk's CPU, so the server's CPU holds the Python server and nothing else.

Workers: one by default (``--workers``), pinned to one CPU with wrk on the other, the
project's method on a 2-core machine: with two cores, a second worker could only share the
server's core or take wrk's, and either would measure contention instead of the server. A
server without a workers option (daphne) gets a row only at ``--workers 1``; otherwise it is
skipped with the registry's reason.

The feature table (protocols, built-in worker processes, licence) is generated from the
registry (:class:`toyservers.registry.ServerSpec`) and each installed distribution's metadata
(``License-Expression``, ``License``, or the licence classifier), not typed here.

Method (:mod:`bench.harness`): each row starts its server fresh, checks one real request,
warms up, runs ``--runs`` measured wrk runs while sampling RSS, and stops the process tree.
"""

from __future__ import annotations

import http.client
import importlib.metadata
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.panel import Panel
from rich.progress import Progress

from apps import servers_app
from bench import report
from bench.command import consoles, finish, names, user_mistakes
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
from bench.layers import RowPlan, RowResult, row_json
from bench.machine import usable_cpus
from bench.redis_server import RedisMissing, RedisServer, redis_version
from bench.stats import summarize
from bench.wrk_get import GET_BEARER, WrkGet
from toyservers.registry import SERVERS, ServerSpec, get

APP = "apps.servers_app:app"
DEFAULT_SERVER = "uvicorn"
DEFAULT_COMPARE = ("hypercorn", "daphne", "granian", "toy-raw", "toy-h11", "toy-httptools")
#: The published figures and their source.
PUBLISHED = Path(__file__).parent / "published" / "servers.json"
#: Users seeded into Redis, and activities per user; the token names the first user.
USERS, ACTIVITIES = 100, 10


# --- what to run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """One endpoint of :mod:`apps.servers_app`.

    Attributes:
        name: the row's name, e.g. ``"shortbody"``.
        path: the request path.
        auth: send the bearer token (and start Redis).
    """

    name: str
    path: str
    auth: bool = False


ENDPOINTS = {e.name: e for e in (Endpoint("shortbody", "/api/shortbody"),
                                 Endpoint("longbody", "/api/longbody"),
                                 Endpoint("activities", "/api/activities", auth=True))}


@dataclass(frozen=True)
class Settings(Method):
    """What ``bench servers`` was asked to do: the harness's :class:`Method` plus the rows.

    Attributes:
        server: the row every other row is a percentage of.
        compare: the other servers.
        endpoints: endpoint names, in table order.
        workers: worker processes per server.
    """

    server: str = DEFAULT_SERVER
    compare: tuple[str, ...] = DEFAULT_COMPARE
    endpoints: tuple[str, ...] = tuple(ENDPOINTS)
    workers: int = 1

    @property
    def servers(self) -> list[str]:
        """``server`` then ``compare``, each once."""
        return list(dict.fromkeys((self.server, *self.compare)))


def validate(settings: Settings) -> None:
    """UsageProblem for an unknown endpoint, or a server that is unknown, not ASGI, or a
    baseline."""
    unknown = [e for e in settings.endpoints if e not in ENDPOINTS]
    if unknown:
        raise UsageProblem(f"unknown endpoint {unknown[0]!r} (known: {', '.join(ENDPOINTS)})")
    if not settings.endpoints:
        raise UsageProblem("--endpoints names no endpoint")
    known = [n for n, s in SERVERS.items() if s.interface == "asgi" and s.kind != "baseline"]
    for name in settings.servers:
        spec = SERVERS.get(name)
        if spec is None or spec.interface != "asgi" or spec.kind == "baseline":
            raise UsageProblem(f"{name!r} is not an ASGI server to compare "
                               f"(known: {', '.join(known)})")


def server_argv(spec: ServerSpec, host: str, port: int, workers: int) -> list[str]:
    """The argv serving :data:`APP` with ``workers`` processes (ValueError when the server
    has no workers option and more than one is asked)."""
    return spec.command(APP, host, port, workers=workers)


# --- checks ------------------------------------------------------------------------------------


def fetch(host: str, port: int, path: str, token: str = "", timeout: float = 5.0
          ) -> tuple[int, dict[str, str], bytes]:
    """``GET path`` once: ``(status, headers with lower-case names, body)``.

    Raises:
        OSError, http.client.HTTPException: the request failed.
    """
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        conn.close()


def checker(endpoint: Endpoint, token: str) -> Callable[[str, int], str | None]:
    """The harness's check for ``endpoint``: None when one request comes back right."""

    def check(host: str, port: int) -> str | None:
        try:
            status, headers, body = fetch(host, port, endpoint.path, token)
        except (OSError, http.client.HTTPException) as exc:
            return f"check request failed: {exc!r}"
        if status != 200:
            return f"check request got status {status}: {body[:200]!r}"
        if endpoint.name == "shortbody" and body != servers_app.SHORT_BODY:
            return f"check request got {body[:100]!r}, not the short body"
        if endpoint.name == "longbody" and body != servers_app.LONG_BODY:
            return f"check request got {len(body)} bytes, not the {len(servers_app.LONG_BODY)}"
        if endpoint.name == "activities":
            try:
                data = json.loads(body)
                name = data["user"]["username"]
                count = len(data["activities"])
            except (ValueError, KeyError, TypeError):
                return f"check request got {body[:200]!r}, not a user and activities"
            if name != servers_app.username(1) or count != ACTIVITIES:
                return f"check request got user {name!r} with {count} activities"
        return None

    return check


# --- the feature table -------------------------------------------------------------------------


def licence(distribution: str) -> str:
    """The licence an installed distribution declares: ``License-Expression``, else a
    one-line ``License`` field, else its ``License ::`` classifier; ``"unknown"`` otherwise."""
    try:
        meta = importlib.metadata.metadata(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
    expression = meta["License-Expression"]
    if expression:
        return str(expression)
    text = str(meta["License"] or "").strip()
    if text and "\n" not in text and len(text) <= 40:
        return text
    for classifier in meta.get_all("Classifier") or []:
        if classifier.startswith("License ::"):
            return str(classifier).rsplit("::", 1)[1].strip().removesuffix(" License")
    return "unknown"


def installed(distribution: str) -> bool:
    """True when ``distribution`` is installed."""
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def feature_row(spec: ServerSpec) -> dict[str, Any]:
    """One server's features, from the registry and its distribution's metadata.

    Keys: ``server``, ``package``, ``version``, ``http1``, ``http2`` (``"h2, h2c"``,
    ``"h2"``, ``"h2c"`` or ``"no"``), ``websocket``, ``http3`` (``"no"``, or what it needs),
    ``workers`` (``"--workers N"`` or ``"no"``), ``workers_note`` (why not), ``licence``.
    """
    protocols = spec.protocols
    h2 = ", ".join(p for p in ("h2", "h2c") if p in protocols) or "no"
    optional = dict(spec.optional_protocols)
    if "h3" in protocols:
        h3 = "yes"
    elif "h3" in optional:
        need = optional["h3"]
        h3 = f"with {need} ({'installed' if installed(need) else 'not installed'})"
    else:
        h3 = "no"
    return {
        "server": spec.name, "package": spec.package, "version": spec.version(),
        "http1": "yes" if "http/1.1" in protocols else "no", "http2": h2,
        "websocket": "yes" if "websocket" in protocols else "no", "http3": h3,
        "workers": "--workers N" if spec.multiprocess else "no",
        "workers_note": spec.one_process, "licence": licence(spec.package),
    }


FEATURE_HEADERS = ["Server", "Version", "HTTP/1.1", "HTTP/2", "WebSocket", "HTTP/3",
                   "Worker processes", "Licence"]


def feature_cells(features: list[dict[str, Any]]) -> list[list[str]]:
    """The feature table's cells, in :data:`FEATURE_HEADERS` order."""
    return [[f["server"], f"{f['package']} {f['version']}", f["http1"], f["http2"],
             f["websocket"], f["http3"], f["workers"], f["licence"]] for f in features]


# --- the published figures ---------------------------------------------------------------------


def load_published(path: Path = PUBLISHED) -> dict[str, Any]:
    """The published figures file (see ``bench/published/servers.json``)."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def published_row(published: dict[str, Any], endpoint: str, server: str, base: str
                  ) -> dict[str, Any] | None:
    """``{"rps", "rss_mb", "pct_of_base"}`` published for ``server`` on ``endpoint``, the
    last the published RPS as a % of ``base``'s; None when the paper has no such row."""
    rows = published["endpoints"].get(endpoint, {}).get("rows", {})
    row = rows.get(server)
    if row is None:
        return None
    base_rps = rows.get(base, {}).get("rps")
    pct = 100.0 * row["rps"] / base_rps if base_rps else None
    return {"rps": row["rps"], "rss_mb": row["rss_mb"], "pct_of_base": pct}


# --- rows --------------------------------------------------------------------------------------


def rows_json(results: list[RowResult], base: str, published: dict[str, Any],
              workers: int) -> list[dict[str, Any]]:
    """The ``rows`` of results.json: :func:`bench.layers.row_json`'s keys (``layer`` renamed
    ``endpoint``; ``pct_of_below`` is the RPS as a % of the ``base`` server's on the same
    endpoint, ``below`` names that row) plus ``path``, ``workers`` and ``published``."""
    bases = {r.plan.layer: row_json(r, None) for r in results if r.plan.server == base}
    out = []
    for result in results:
        plan = result.plan
        row = dict(bases[plan.layer] if plan.server == base
                   else row_json(result, bases.get(plan.layer)))
        row = {"endpoint": row.pop("layer"), **row}
        row["path"] = ENDPOINTS[row["endpoint"]].path
        row["workers"] = workers
        row["published"] = published_row(published, row["endpoint"], plan.server, base)
        out.append(row)
    return out


HEADERS = ["Endpoint", "Server", "RPS", "min–max", "p99 ms", "Errors", "RSS MB",
           "% of {base}", "Published RPS", "Published RSS MB", "Published % of {base}"]
RIGHT = [False, False, True, True, True, True, True, True, True, True, True]


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def headers(base: str) -> list[str]:
    """:data:`HEADERS` with the base server's name."""
    return [h.format(base=base) for h in HEADERS]


def table_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    """Each row's cells in :data:`HEADERS` order (a failed or skipped row says so)."""
    cells = []
    for row in rows:
        pub = row["published"] or {}
        published = [_fmt(pub.get("rps"), ",.0f"), _fmt(pub.get("rss_mb"), ".1f"),
                     _fmt(pub.get("pct_of_base"), ".0f", " %")]
        if row["status"] != "ok" or row["rps_median"] is None:
            cells.append([row["endpoint"], row["server"], row["status"], *["–"] * 5,
                          *published])
            continue
        flag = " *" if row["spread_flag"] else ""
        pct = 100.0 if row["below"] is None else row["pct_of_below"]
        cells.append([
            row["endpoint"], row["server"], f"{row['rps_median']:,.0f}{flag}",
            f"{row['rps_min']:,.0f}–{row['rps_max']:,.0f}", _fmt(row["p99_ms"], ".2f"),
            f"{row['errors']:,}", _fmt(row["rss_peak_mb"], ".1f"), _fmt(pct, ".0f", " %"),
            *published,
        ])
    return cells


def provenance(data: dict[str, Any]) -> list[str]:
    """The lines every report of this module and :mod:`bench.load` ends "How it ran" with."""
    machine, git = data["machine"], data.get("git")
    lines = [f"machine: {machine['cpu_model']}, {machine['cores']} cores; "
             f"Python {data['python']['version']}; {data['date']}"]
    lines.append("toyservers: not a git checkout" if git is None else
                 f"toyservers at commit {git['commit'][:12]}"
                 + (", with uncommitted changes" if git["dirty"] else ""))
    return lines


def how_it_ran(data: dict[str, Any]) -> list[str]:
    """The "How it ran" lines, from results.json's content."""
    s = data["settings"]
    pub = data["published"]
    setup = pub["setup"]
    versions = ", ".join(f"{k} {v}" for k, v in setup["servers"].items())
    lines = [
        data["pinning"]["text"],
        f"wrk {data['wrk']['version']}: {s['threads']} thread(s), {s['connections']} "
        f"connections, {s['duration_s']} s per run, {s['warmup_s']} s warm-up, {s['runs']} "
        "run(s) per row; GET through bench/lua/get_bearer.lua; RPS is the median, with "
        "min–max over runs",
        f"{s['workers']} worker process(es) per server; RSS is the peak over the measured "
        "runs of the server's whole process tree (a master and its workers summed)",
        f"activities: redis-server {data['redis']['version']} on a free loopback port, no "
        f"persistence, {s['users']} users with {s['activities']} activities each, on wrk's "
        "CPU when pinned; wrk sends one user's JWT (HS256) as the bearer token",
        f"% of {s['server']}: RPS over the {s['server']} row of the same endpoint, in this "
        "run; the published column computes the same ratio from the paper's figures",
        f"published: {pub['source']} Setup: {setup['load_generator']} with "
        f"{setup['load_generator_workers']} worker processes on {setup['machine']}; "
        f"{versions}",
    ]
    return [*lines, *provenance(data), "* marks runs spread more than 10 %"]


def chart_data(rows: list[dict[str, Any]], key: str = "rps_median"
               ) -> tuple[list[str], list[float], list[float], list[float]]:
    """Labels, values, minima and maxima of the rows with a figure for ``key``."""
    ok = [r for r in rows if r["status"] == "ok" and r[key] is not None]
    labels = [f"{r['endpoint']}: {r['server']}" for r in ok]
    values = [float(r[key]) for r in ok]
    if key == "rps_median":
        return labels, values, [r["rps_min"] for r in ok], [r["rps_max"] for r in ok]
    return labels, values, values, values


def write_outputs(out: Path, data: dict[str, Any]) -> list[Path]:
    """Write results.json, results.md, servers.png (RPS) and servers-rss.png into ``out``."""
    rows = data["rows"]
    base = data["settings"]["server"]
    how = how_it_ran(data)
    notes = [f"{r['endpoint']} ({r['server']}) {r['status']}: {r['error']}"
             for r in rows if r["status"] != "ok"]
    notes += [f"{f['server']}: {f['workers_note']}" for f in data["features"]
              if f["workers_note"]]
    json_path, md_path = out / "results.json", out / "results.md"
    rps_png, rss_png = out / "servers.png", out / "servers-rss.png"
    report.write_json(json_path, data)
    report.write_markdown(md_path, "bench servers: ASGI servers on three endpoints", how,
                          headers(base), table_cells(rows), notes, RIGHT)
    with md_path.open("a", encoding="utf-8") as md:
        md.write("\n**What each server offers**\n\n")
        md.write(report.markdown_table(FEATURE_HEADERS, feature_cells(data["features"])))
        md.write("\nGenerated from the registry (toyservers/registry.py) and each "
                 "distribution's installed metadata.\n")
    labels, values, lows, highs = chart_data(rows)
    report.bar_chart(rps_png, labels, values, lows, highs,
                     title="The same FastAPI app on each server (requests/s, median)",
                     xlabel="requests per second (min–max whiskers)",
                     subtitle=data["pinning"]["text"])
    labels, values, lows, highs = chart_data(rows, "rss_peak_mb")
    report.bar_chart(rss_png, labels, values, lows, highs,
                     title="Peak RSS of each server's process tree under load (MB)",
                     xlabel="MB (10^6 bytes)", subtitle=data["pinning"]["text"])
    return [json_path, md_path, rps_png, rss_png]


# --- measuring ---------------------------------------------------------------------------------




def print_outcome(progress: Progress, label: str, measurement: Measurement) -> None:
    """One line for a measured row, or a panel with the failed server's log tail."""
    if measurement.status == "ok":
        rps = summarize([s.rps for s in measurement.measured]).median
        progress.console.print(f"[green]✓[/] {label}: {rps:,.0f} requests/s")
    elif measurement.status == "skipped":
        progress.console.print(f"[yellow]–[/] {label} skipped: {measurement.error}")
    else:
        progress.console.print(Panel(measurement.log_tail or "(empty log)",
                                     title=f"[red]✗ {label} failed:[/] {measurement.error}",
                                     title_align="left"))


def measure_rows(settings: Settings, pinning: Pinning, wrk: str, token: str,
                 env: dict[str, str], logs: Path, progress: Progress, task: Any
                 ) -> list[RowResult]:
    """Measure every (endpoint, server) row in order."""
    results = []
    for endpoint_name in settings.endpoints:
        endpoint = ENDPOINTS[endpoint_name]
        generator = WrkGet(wrk, endpoint.path, token if endpoint.auth else "")
        for name in settings.servers:
            spec = get(name)
            plan = RowPlan(endpoint.name, name, APP, spec.description, "asgi")
            label = f"{endpoint.name} ({name})"
            port = settings.pick_port()
            try:
                argv = server_argv(spec, settings.host, port, settings.workers)
            except ValueError as exc:
                measurement = Measurement(status="skipped", error=str(exc))
                progress.advance(task, settings.steps)
            else:
                measurement = measure_server(
                    argv, port, label=label, method=settings, pinning=pinning,
                    generator=generator, log_path=logs / f"{endpoint.name}-{name}.log",
                    progress=report.RichProgress(progress, task), check=checker(endpoint, token),
                    env=env)
            print_outcome(progress, label, measurement)
            results.append(RowResult(plan, measurement))
    return results


def measure(settings: Settings, console: Console, out: Path) -> dict[str, Any]:
    """Measure every row and return results.json's content.

    Raises:
        UsageProblem: wrk or redis-server is missing, a name is unknown, a CPU or the port
            is unusable.
    """
    validate(settings)
    wrk = load_generator("wrk")
    check_port(settings.host, settings.port)
    pinning = decide_pinning(settings, usable_cpus(), client="wrk")
    if pinning.server_cpu is None and settings.pin:
        console.print(f"[yellow]note:[/] {pinning.text}")
    published = load_published()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC)
    token = servers_app.make_token(servers_app.username(1))
    try:
        redis = RedisServer(host=settings.host, cpu=pinning.load_cpu)
    except RedisMissing as exc:
        raise UsageProblem(str(exc)) from None
    with redis, kept_on(pinning.load_cpu):
        servers_app.seed(redis.host, redis.port, users=USERS, activities=ACTIVITIES)
        env = {"SERVERS_APP_REDIS": redis.address, "SERVERS_APP_SECRET": servers_app.secret()}
        with report.progress_bar(console) as progress:
            total = settings.steps * len(settings.endpoints) * len(settings.servers)
            task = progress.add_task("starting", total=total)
            results = measure_rows(settings, pinning, wrk.path, token, env, logs, progress,
                                   task)
        redis_info = {"version": redis_version(redis.path), "path": redis.path,
                      "command": redis.argv(Path("<throwaway folder>"))}
    features = [feature_row(get(name)) for name in settings.servers]
    return {
        "experiment": "servers",
        "date": started.isoformat(timespec="seconds"),
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "settings": {
            "connections": settings.connections, "threads": settings.threads,
            "duration_s": settings.duration, "warmup_s": settings.warmup,
            "runs": settings.runs, "server": settings.server,
            "compare": [c for c in settings.servers if c != settings.server],
            "endpoints": list(settings.endpoints), "workers": settings.workers,
            "host": settings.host, "timeout_s": settings.timeout, "app": APP,
            "lua_script": str(GET_BEARER), "users": USERS, "activities": ACTIVITIES,
        },
        "pinning": {"server_cpu": pinning.server_cpu, "load_cpu": pinning.load_cpu,
                    "text": pinning.text},
        **environment(wrk),
        "redis": redis_info,
        "published": {"source": published["source"], "setup": published["setup"],
                      "file": str(PUBLISHED.relative_to(PUBLISHED.parent.parent.parent))},
        "features": features,
        "rows": rows_json(results, settings.server, published, settings.workers),
    }


# --- the command -------------------------------------------------------------------------------


def command(
    connections: Annotated[int, typer.Option(min=1, help="wrk connections.")] = 10,
    threads: Annotated[int, typer.Option(min=1, help="wrk threads.")] = 1,
    duration: Annotated[int, typer.Option(min=1, help="Seconds per measured run.")] = 10,
    warmup: Annotated[int, typer.Option(min=0, help="Seconds of warm-up per row (0: none).")
                      ] = 2,
    runs: Annotated[int, typer.Option(min=1, help="Measured runs per row.")] = 3,
    server: Annotated[str, typer.Option(
        help="The server every row is a percentage of.")] = DEFAULT_SERVER,
    compare: Annotated[str, typer.Option(
        help="Comma-separated servers measured beside --server ('' for none).")
    ] = ",".join(DEFAULT_COMPARE),
    endpoints: Annotated[str, typer.Option(
        help="Comma-separated endpoints: shortbody, longbody, activities.")
    ] = ",".join(ENDPOINTS),
    workers: Annotated[int, typer.Option(
        min=1, help="Worker processes per server. 1 (the default) is pinned to one CPU with "
                    "wrk on another; more share that CPU unless --no-pin.")] = 1,
    pin: Annotated[bool, typer.Option(help="Pin the server and wrk to separate CPUs.")] = True,
    server_cpu: Annotated[int, typer.Option(help="CPU for the server when pinned.")] = 0,
    wrk_cpu: Annotated[int, typer.Option(help="CPU for wrk (and redis) when pinned.")] = 1,
    host: Annotated[str, typer.Option(help="Address the servers listen on.")] = "127.0.0.1",
    output: Annotated[Path | None, typer.Option(
        help="Folder for results.json, results.md and the charts "
             "[default: results/servers-<timestamp>]")] = None,
) -> None:
    """ASGI servers side by side on a short body, a long body and a JWT + Redis endpoint,
    with the published figures beside ours."""
    console, errors = consoles(180)
    settings = Settings(connections=connections, threads=threads, duration=duration,
                        warmup=warmup, runs=runs, server=server, compare=names(compare),
                        endpoints=names(endpoints), workers=workers, pin=pin,
                        server_cpu=server_cpu, load_cpu=wrk_cpu, host=host)
    out = output if output is not None else report.default_output("servers")
    with user_mistakes(errors):
        validate(settings)
        report.prepare_output(out)
        data = measure(settings, console, out)
    console.print(report.rich_table("What each server offers", FEATURE_HEADERS,
                                    feature_cells(data["features"])))
    finish(console, errors, "bench servers: ASGI servers on three endpoints",
           headers(settings.server), table_cells(data["rows"]), how_it_ran(data), RIGHT,
           data["rows"], lambda: write_outputs(out, data))


def register(app: typer.Typer) -> None:
    """Add ``servers`` to the ``bench`` CLI."""
    app.command("servers")(command)

