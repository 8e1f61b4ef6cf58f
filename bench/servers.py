"""``bench servers``: the ASGI servers side by side on three endpoints, beside a published paper.

The same FastAPI app (:mod:`apps.servers_app`) on every server, the same wrk load
(``bench/lua/get_bearer.lua``: GET, and the bearer token on the real endpoint):

============  ====================  =======================================================
endpoint      path                  what it measures
============  ====================  =======================================================
shortbody     ``/api/shortbody``    a 22-byte body: the server's cost per request
longbody      ``/api/longbody``     a 430,000-byte body: the server's write path
pathsend      ``/api/pathsend``     the same bytes from a file: ``http.response.pathsend``
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

Method (:mod:`bench.harness` and :mod:`bench.rounds`): every row's server starts, is checked
with one real request and warmed up; then ``--runs`` interleaved rounds run wrk once against
every row while sampling RSS and CPU time, and every process tree stops at the end. The % of
``--server`` is computed in each round against that server's run of the same round and given
as the median (min–max over rounds).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress

from apps import servers_app
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
from bench.redis_server import RedisMissing, RedisServer, redis_version
from bench.report import load_published, noise_notes
from bench.rounds import Contender, Measurement, measure_rounds
from bench.rows import RowPlan, RowResult, row_json
from bench.servers_report import (
    FEATURE_HEADERS,
    RIGHT,
    feature_cells,
    feature_row,
    headers,
    how_it_ran,
    table_cells,
    write_outputs,
)
from bench.wrk_get import GET_BEARER, WrkGet
from toyservers.registry import SERVERS, ServerSpec, get

APP = "apps.servers_app:app"
DEFAULT_SERVER = "uvicorn"
DEFAULT_COMPARE = ("hypercorn", "daphne", "granian", "toy-raw", "toy-h11", "toy-httptools")
#: The published figures and their source.
PUBLISHED = report.PUBLISHED_DIR / "servers.json"
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
                                 Endpoint("pathsend", "/api/pathsend"),
                                 Endpoint("activities", "/api/activities", auth=True))}

#: What runs without ``--endpoints``: pathsend is asked for by name (the lesson's comparison).
DEFAULT_ENDPOINTS = ("shortbody", "longbody", "activities")


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
    endpoints: tuple[str, ...] = DEFAULT_ENDPOINTS
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


def checker(endpoint: Endpoint, token: str) -> Callable[[str, int], str | None]:
    """The harness's check for ``endpoint``: None when one request comes back right."""

    def check(host: str, port: int) -> str | None:
        try:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            status, _, body = fetch(host, port, endpoint.path, headers=headers)
        except (OSError, http.client.HTTPException) as exc:
            return f"check request failed: {exc!r}"
        if status != 200:
            return f"check request got status {status}: {body[:200]!r}"
        if endpoint.name == "shortbody" and body != servers_app.SHORT_BODY:
            return f"check request got {body[:100]!r}, not the short body"
        if endpoint.name in ("longbody", "pathsend") and body != servers_app.LONG_BODY:
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


# --- the published figures ---------------------------------------------------------------------


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


# --- measuring ---------------------------------------------------------------------------------

def measure_rows(settings: Settings, pinning: Pinning, wrk: str, token: str,
                 env: dict[str, str], logs: Path, progress: Progress) -> list[RowResult]:
    """Measure every (endpoint, server) row in interleaved rounds (:mod:`bench.rounds`); a
    server that cannot run at ``--workers`` is a skipped row."""
    plans: list[RowPlan] = []
    contenders: dict[int, Contender] = {}
    skipped: dict[int, Measurement] = {}
    for endpoint_name in settings.endpoints:
        endpoint = ENDPOINTS[endpoint_name]
        generator = WrkGet(wrk, endpoint.path, token if endpoint.auth else "")
        for name in settings.servers:
            spec = get(name)
            plans.append(RowPlan(endpoint.name, name, APP, spec.description, "asgi"))
            try:
                server_argv(spec, settings.host, 0, settings.workers)
            except ValueError as exc:
                skipped[len(plans) - 1] = Measurement(status="skipped", error=str(exc))
                continue
            contenders[len(plans) - 1] = Contender(
                f"{endpoint.name} ({name})",
                partial(server_argv, spec, settings.host, workers=settings.workers),
                generator, settings.load(settings.duration),
                logs / f"{endpoint.name}-{name}.log", checker(endpoint, token), env=env)
    task = progress.add_task("starting", total=settings.steps * len(contenders))
    measured = dict(zip(contenders, measure_rounds(list(contenders.values()), settings,
                                                   pinning, report.RichProgress(progress, task)),
                        strict=True))
    results = []
    for index, plan in enumerate(plans):
        measurement = measured.get(index) or skipped[index]
        print_outcome(progress.console, f"{plan.layer} ({plan.server})", measurement)
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
    pinning = pinning_for(settings, console)
    published = load_published("servers")
    logs = logs_folder(out)
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
            results = measure_rows(settings, pinning, wrk.path, token, env, logs, progress)
        redis_info = {"version": redis_version(redis.path), "path": redis.path,
                      "command": redis.argv(Path("<throwaway folder>"))}
    features = [feature_row(get(name)) for name in settings.servers]
    return {
        "experiment": "servers",
        "date": started.isoformat(timespec="seconds"),
        "command": invocation(),
        "settings": {
            "connections": settings.connections, "threads": settings.threads,
            "duration_s": settings.duration, "warmup_s": settings.warmup,
            "runs": settings.runs, "server": settings.server,
            "compare": [c for c in settings.servers if c != settings.server],
            "endpoints": list(settings.endpoints), "workers": settings.workers,
            "host": settings.host, "timeout_s": settings.timeout, "app": APP,
            "lua_script": str(GET_BEARER), "users": USERS, "activities": ACTIVITIES,
        },
        "pinning": pinning.to_json(),
        **environment(wrk),
        "redis": redis_info,
        "published": {"source": published["source"], "setup": published["setup"],
                      "file": str(PUBLISHED.relative_to(PUBLISHED.parent.parent.parent))},
        "features": features,
        "rows": rows_json(results, settings.server, published, settings.workers),
    }


# --- the command -------------------------------------------------------------------------------


def command(
    connections: options.Connections = 10,
    threads: options.Threads = 1,
    duration: options.Duration = 10,
    warmup: options.Warmup = 2,
    runs: options.Runs = 3,
    server: Annotated[str, typer.Option(
        help="The server every row is a percentage of.")] = DEFAULT_SERVER,
    compare: Annotated[str, typer.Option(
        help="Comma-separated servers measured beside --server ('' for none).")
    ] = ",".join(DEFAULT_COMPARE),
    endpoints: Annotated[str, typer.Option(
        help="Comma-separated endpoints: shortbody, longbody, pathsend, activities.")
    ] = ",".join(DEFAULT_ENDPOINTS),
    workers: Annotated[int, typer.Option(
        min=1, help="Worker processes per server. 1 (the default) is pinned to one CPU with "
                    "wrk on another; more share that CPU unless --no-pin.")] = 1,
    pin: options.Pin = True,
    server_cpu: options.ServerCpu = 0,
    wrk_cpu: Annotated[int, typer.Option(help="CPU for wrk (and redis) when pinned.")] = 1,
    host: options.Host = "127.0.0.1",
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
           data["rows"], lambda: write_outputs(out, data), noise_notes(data["rows"], "endpoint"))


def register(app: typer.Typer) -> None:
    """Add ``servers`` to the ``bench`` CLI."""
    app.command("servers")(command)

