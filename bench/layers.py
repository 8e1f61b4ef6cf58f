"""``bench layers``: what each layer between the socket and FastAPI costs.

The same POST/JSON request (``apps.user.SAMPLE_BODY``) goes through each layer in turn,
bottom up, under wrk with the same connections, threads and duration:

==========  ===========================  ==================================================
layer       server                       app
==========  ===========================  ==================================================
axum        ``axum`` (Rust, tokio)       ``bench/axum``: the native ceiling, one thread
asyncio     ``raw``                      ``apps/raw_user.py``: a Protocol, no interface
asgi        ``bare`` (``--no-bare``:     ``apps/asgi_user.py`` on the least server that
            none)                        runs it: httptools, one Task per request, nothing
                                         else (``lessons/code/05-speed/bare_httptools.py``)
asgi        ``--server`` and each of     ``apps/asgi_user.py``: pure ASGI
            ``--compare``
starlette   ``--server``                 ``apps/starlette_user.py``
fastapi     ``--server``                 ``apps/fastapi_user.py``: a pydantic model
wsgi        each of ``WSGI_SERVERS``     ``apps/wsgi_user.py``: pure WSGI (``--wsgi``)
flask       each of ``WSGI_SERVERS``     ``apps/flask_user.py``: Flask (``--wsgi``)
==========  ===========================  ==================================================

``--wsgi`` adds the WSGI rows after the ASGI ones: the pure WSGI app and then Flask, each on
toy-wsgi (gthread worker), gunicorn (sync worker), gunicorn (gthread worker), waitress and
bjoern, one process each, under the same wrk load. The threaded servers get ``--wsgi-threads``
app threads (10 by default, one per wrk connection: see :data:`WSGI_THREADS`). bjoern builds
from source against libev; where it is not installed its rows are left out with one note.

``--compare-layers`` (default ``asgi``) names the layers the ``--compare`` servers get rows
in: ``--compare toy-httptools --compare-layers asgi,starlette`` also measures Starlette on
toy-httptools beside Starlette on ``--server``, in the same run.

Method (:mod:`bench.harness` and :mod:`bench.rounds`, the same for every experiment): every
row's server starts on a free port (pinned to one CPU, wrk to another), is checked with one
real request (the echoed JSON) and warmed up; then ``--runs`` interleaved rounds each run wrk
once against every row, while a thread samples the RSS of the server's process tree and its
CPU time is read before and after; then every server stops. A row that fails is reported with
its log tail and the run goes on. Interleaving is what makes the comparisons honest on a
machine whose speed drifts: µs added and % of below are computed within each round, against
the row below's run of the same round, and reported as the median with min…max; when the
rounds disagree on which row is faster, the table says ``noise`` instead of a figure. This
module only says which rows to measure and how to report them.

The "layer below" that µs added and % of below compare with: the ``bare`` row compares with
``asyncio``, and the other ``asgi`` rows with ``bare`` (with ``asyncio`` when there is no bare
row), so an ASGI server's row shows what that server adds over the bare minimum: its checks,
limits, timers and features, the price of correctness. ``starlette`` compares with the
``asgi`` row of the same server; ``fastapi`` with ``starlette``. ``axum`` and ``asyncio`` have
none: axum is a ceiling beside the stack. The ``wsgi`` rows compare with ``asyncio``: there is
no bare WSGI baseline, and the raw row is the same endpoint in the same Python with no server
and no interface at all, the floor every Python row stands on, so a ``wsgi`` row's µs added is
the whole WSGI server (threads, parsing, environ, start_response). ``flask`` compares with the
``wsgi`` row of the same server: what Flask adds over the bare callable.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from apps.user import SAMPLE_BODY
from bench import report
from bench.command import (
    invocation,
    logs_folder,
    measure_and_print,
    pinning_for,
)
from bench.extra_servers import BARE
from bench.harness import (
    Method,
    Pinning,
    UsageProblem,
    environment,
    kept_on,
    load_generator,
    validate_servers,
)
from bench.loadgen import LoadGenerator
from bench.native import NativeBuild, ensure_axum
from bench.rounds import Contender
from bench.rows import RowPlan, RowResult, row_json
from bench.wrk import POST_JSON
from toyservers.registry import SERVERS, get

DEFAULT_SERVER = "uvicorn"
#: ``--compare`` by default: our fastest server's asgi row beside uvicorn's.
DEFAULT_COMPARE = "toy-httptools"

APPS = {
    "asgi": "apps.asgi_user:app",
    "starlette": "apps.starlette_user:app",
    "fastapi": "apps.fastapi_user:app",
    "wsgi": "apps.wsgi_user:app",
    "flask": "apps.flask_user:app",
}

#: App threads for the threaded WSGI servers (``--wsgi-threads``). One per wrk connection, so
#: a request never waits for a free thread and the row measures the server, not its pool size.
#: Not because they need one thread per keep-alive connection: toy-wsgi's and gunicorn's
#: gthread workers and waitress all park idle connections in a selector on their main thread,
#: and each served wrk's 10 connections with 0 errors on 1 thread. Fewer threads only cost
#: throughput (2 s runs on the shared 2-core development machine, 2026-11-25, 1 -> 10 threads:
#: toy-wsgi 9.3k -> 11.5k, gunicorn gthread 5.2k -> 6.5k, waitress 6.9k -> 10.3k requests/s).
WSGI_THREADS = 10


@dataclass(frozen=True)
class WsgiServer:
    """One server under the ``wsgi`` and ``flask`` rows.

    Attributes:
        name: the row's server name (a registry name, or one plus its worker model).
        spec: the registry name that starts it.
        threaded: run the app in ``--wsgi-threads`` threads (gthread; waitress's pool).
        model: one line on how it serves, for the row's description.
    """

    name: str
    spec: str
    threaded: bool
    model: str


#: The WSGI rows' servers, in table order: ours first, then the references.
WSGI_SERVERS = (
    WsgiServer("toy-wsgi-gthread", "toy-wsgi-gthread", True, "toy-wsgi, gthread worker"),
    WsgiServer("gunicorn", "gunicorn", False,
               "gunicorn, sync worker (one connection at a time, closed after each response)"),
    WsgiServer("gunicorn-gthread", "gunicorn-gthread", True, "gunicorn, gthread worker"),
    WsgiServer("waitress", "waitress", True, "waitress, one I/O thread and a pool"),
    WsgiServer("bjoern", "bjoern", False, "bjoern, C on libev, one thread"),
)

# --- what to run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings(Method):
    """Everything ``bench layers`` was asked to do: the harness's :class:`Method` (load,
    runs, pinning; durations in whole seconds) plus which rows to measure.

    Attributes:
        server: the ASGI server under the asgi, starlette and fastapi rows.
        compare: servers that each add a row in ``compare_layers``.
        compare_layers: layers the ``compare`` servers get rows in.
        axum: add the Rust axum ceiling row.
        bare: add the ``bare`` baseline row below the ASGI servers.
        wsgi: add the ``wsgi`` and ``flask`` rows on :data:`WSGI_SERVERS`.
        wsgi_threads: app threads of the threaded WSGI servers.
    """

    server: str = DEFAULT_SERVER
    compare: tuple[str, ...] = (DEFAULT_COMPARE,)
    compare_layers: tuple[str, ...] = ("asgi",)
    axum: bool = True
    bare: bool = True
    wsgi: bool = False
    wsgi_threads: int = WSGI_THREADS


def plan_rows(settings: Settings) -> list[RowPlan]:
    """The rows of the table, bottom up (see the module docstring)."""
    spec = SERVERS[settings.server]
    plans = []
    if settings.axum:
        plans.append(RowPlan("axum", "axum", "bench/axum", "Rust: axum + serde, one tokio thread",
                             None))
    plans.append(RowPlan("asyncio", "raw", "apps.raw_user",
                         "asyncio Protocol on uvloop, request split by hand", None))
    if settings.bare:
        plans.append(RowPlan("asgi", BARE.name, APPS["asgi"], "pure ASGI app on the bare "
                             "baseline: httptools, one Task per request, nothing else"))
    descriptions = {"asgi": "pure ASGI app on {}", "starlette": "Starlette on {}",
                    "fastapi": "FastAPI + pydantic on {}"}
    for layer in ("asgi", "starlette", "fastapi"):
        servers = [spec.name]
        if layer in settings.compare_layers:
            servers += [name for name in dict.fromkeys(settings.compare)
                        if name != spec.name]
        for name in servers:
            label = SERVERS[name].description if layer == "asgi" else name
            plans.append(RowPlan(layer, name, APPS[layer], descriptions[layer].format(label)))
    if settings.wsgi:
        plans += wsgi_rows(settings.wsgi_threads)
    return plans


def wsgi_rows(threads: int) -> list[RowPlan]:
    """The ``wsgi`` rows and then the ``flask`` rows, one per :data:`WSGI_SERVERS` entry."""
    plans = []
    for layer, what in (("wsgi", "pure WSGI app"), ("flask", "Flask")):
        for server in WSGI_SERVERS:
            count = threads if server.threaded else None
            model = server.model + (f", {count} threads" if count else "")
            plans.append(RowPlan(layer, server.name, APPS[layer], f"{what} on {model}", "wsgi",
                                 server.spec if server.spec != server.name else None, count))
    return plans


def server_argv(plan: RowPlan, host: str, port: int, axum_binary: Path | None) -> list[str]:
    """The exact argv that serves ``plan``'s app on ``host:port``."""
    if plan.layer == "axum":
        if axum_binary is None:
            raise ValueError("the axum row needs a built binary")
        return [str(axum_binary), "--host", host, "--port", str(port)]
    if plan.layer == "asyncio":
        return [sys.executable, "-m", "apps.raw_user", "--host", host, "--port", str(port)]
    return get(plan.spec or plan.server).command(plan.app, host, port, threads=plan.threads)


def below_of(plan: RowPlan, plans: list[RowPlan]) -> RowPlan | None:
    """The row ``plan`` is compared with (module docstring), or None."""
    if plan.layer == "asgi" and plan.server != BARE.name:
        bare = next((p for p in plans if p.layer == "asgi" and p.server == BARE.name), None)
        if bare is not None:
            return bare
    wanted: tuple[str, str | None] | None = {
        "asgi": ("asyncio", None),
        "starlette": ("asgi", plan.server),
        "fastapi": ("starlette", plan.server),
        "wsgi": ("asyncio", None),
        "flask": ("wsgi", plan.server),
    }.get(plan.layer)
    if wanted is None:
        return None
    layer, server = wanted
    for other in plans:
        if other.layer == layer and (server is None or other.server == server):
            return other
    return None


def rows_json(results: list[RowResult]) -> list[dict[str, Any]]:
    """Every row's :func:`row_json`, each compared with its :func:`below_of` row."""
    plans = [r.plan for r in results]
    done: dict[RowPlan, dict[str, Any]] = {}
    out = []
    for result in results:
        below_plan = below_of(result.plan, plans)
        below = done.get(below_plan) if below_plan is not None else None
        row = row_json(result, below)
        done[result.plan] = row
        out.append(row)
    return out


# --- measuring -----------------------------------------------------------------------------


def validate_layers(layers: tuple[str, ...]) -> None:
    """UsageProblem unless every name in ``layers`` is asgi, starlette or fastapi."""
    unknown = [name for name in layers if name not in ("asgi", "starlette", "fastapi")]
    if unknown:
        raise UsageProblem(f"unknown layer {unknown[0]!r} in --compare-layers "
                           "(known: asgi, starlette, fastapi)")


def bjoern_status() -> tuple[bool, str]:
    """Whether bjoern can run here, and one line for the report either way."""
    if importlib.util.find_spec("_bjoern") is None:
        return False, ("bjoern rows skipped: bjoern is not installed (it builds from source "
                       "against libev: scripts/ensure-tools.sh libev cc, then pip install "
                       "bjoern; make layers ARGS=--wsgi does both)")
    return True, f"bjoern {get('bjoern').version()}: built from source against libev"


def contender(plan: RowPlan, settings: Settings, generator: LoadGenerator,
              axum_binary: Path | None, logs: Path) -> Contender:
    """How the rounds measure ``plan``'s row (:mod:`bench.rounds`)."""
    return Contender(f"{plan.layer} ({plan.server})",
                     lambda port: server_argv(plan, settings.host, port, axum_binary),
                     generator, settings.load(settings.duration),
                     logs / f"{plan.layer}-{plan.server}.log")


def measure_all(plans: list[RowPlan], settings: Settings, pinning: Pinning,
                generator: LoadGenerator, axum_binary: Path | None, logs: Path,
                progress: Progress) -> list[RowResult]:
    """Measure ``plans`` in interleaved rounds and print one line per row."""
    contenders = [contender(plan, settings, generator, axum_binary, logs) for plan in plans]
    measurements = measure_and_print(contenders, settings, pinning, progress)
    return [RowResult(plan, m) for plan, m in zip(plans, measurements, strict=True)]


def measure(settings: Settings, console: Console, out: Path) -> dict[str, Any]:
    """Measure every row and return results.json's content (see :func:`write_outputs`).

    Raises:
        UsageProblem: wrk is missing, a server name is unknown, a CPU or the port is unusable.
    """
    generator = load_generator("wrk")
    validate_servers([settings.server, *settings.compare])
    pinning = pinning_for(settings, console, client=generator.name)
    if settings.axum:
        with console.status("axum: building the native ceiling with cargo (once, then cached)"):
            native = ensure_axum()
    else:
        native = NativeBuild(None, "axum row skipped (--no-axum)")
    console.print(native.note)
    plans = plan_rows(settings)
    if native.binary is None:
        plans = [p for p in plans if p.layer != "axum"]
    bjoern = {"installed": False, "note": "no WSGI rows (--wsgi not given)"}
    if settings.wsgi:
        installed, note = bjoern_status()
        bjoern = {"installed": installed, "note": note}
        console.print(note, highlight=False)
        if not installed:
            plans = [p for p in plans if (p.spec or p.server) != "bjoern"]
    env = environment(generator)  # git's state before this run writes its own files
    logs = logs_folder(out)
    started = datetime.now(UTC)
    with kept_on(pinning.load_cpu), report.progress_bar(console) as progress:
        results = measure_all(plans, settings, pinning, generator, native.binary, logs,
                              progress)
    return {
        "experiment": "layers",
        "date": started.isoformat(timespec="seconds"),
        "command": invocation(),
        "settings": {
            "connections": settings.connections, "threads": settings.threads,
            "duration_s": settings.duration, "warmup_s": settings.warmup,
            "runs": settings.runs, "server": settings.server,
            "compare": [c for c in settings.compare if c != settings.server],
            "compare_layers": list(settings.compare_layers), "bare": settings.bare,
            "wsgi": settings.wsgi, "wsgi_threads": settings.wsgi_threads,
            "host": settings.host, "timeout_s": settings.timeout,
            "body": SAMPLE_BODY.decode(), "lua_script": str(POST_JSON),
        },
        "pinning": pinning.to_json(),
        **env,
        "axum": {"built": native.binary is not None, "note": native.note,
                 "build_command": native.command, "rustc": native.rustc,
                 "runtime": "tokio current_thread"},
        "bjoern": bjoern,
        "rows": rows_json(results),
    }
