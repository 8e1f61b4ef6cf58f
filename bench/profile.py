"""``bench profile``: where the time goes inside one layer while wrk loads it.

``bench profile --layer fastapi --server uvicorn --duration 5`` starts the layer's app (the
same apps ``bench layers`` measures) in a subprocess under a profiler, checks one real request
comes back as the echoed JSON, drives it with wrk and the POST/JSON Lua script for
``--duration`` seconds, then sends SIGINT: the server shuts down, the profiler stops and the
subprocess writes its report before it exits. The folder (``--output``, default
``results/profile-<layer>-<server>-<timestamp>/``) then holds:

==============================  ==========================================================
``profile.txt``                 pyinstrument: the call tree, % of the profiled wall time
``profile-top.txt``             pyinstrument: the same tree, branches of 3 % or more
``profile.html``                pyinstrument: the interactive report (``--no-html``: none)
``profile.pstats``              cProfile: the raw statistics (``python -m pstats FILE``)
``profile.txt``                 cProfile: the top functions by cumulative and by own time,
                                with µs per request
``results.json``                the command, machine, versions, and wrk's summary
==============================  ==========================================================

How the subprocess profiles: ``python -m bench.profile --child ...`` imports the app first,
so import time stays out of the report, then starts the profiler (pyinstrument's
``Profiler`` or ``cProfile.Profile``) around the server's blocking run: ``uvicorn.run``, a
toy server's ``run()``, or ``apps.raw_user.serve`` on uvloop. Servers that run the app in a
worker process of their own (granian, hypercorn, gunicorn) cannot be profiled this way and
are refused.

Profilers change what they measure: cProfile traces every call and slows call-heavy code
much more than the rest; pyinstrument samples the stack every millisecond and costs little.
Compare shares within one report, not figures across profilers or with ``bench layers``.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import platform
import pstats
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.console import Console

from apps.user import SAMPLE_BODY
from bench import report
from bench.command import consoles
from bench.harness import (
    Method,
    UsageProblem,
    check_echo,
    check_port,
    decide_pinning,
    environment,
    kept_on,
    load_generator,
    run_once,
)
from bench.layers import APPS
from bench.loadgen import Load, LoadGenerator
from bench.machine import usable_cpus
from bench.process import ServerProcess, ServerStartError, free_port, kill_tree
from bench.wrk import POST_JSON
from toyservers.registry import SERVERS

#: Every layer ``bench layers`` measures in Python (axum is not Python: nothing to profile).
LAYERS = ("asyncio", "asgi", "starlette", "fastapi")
PROFILERS = ("pyinstrument", "cprofile")
#: The asyncio layer's own server: ``apps/raw_user.py`` is its own server.
RAW = "raw"
DEFAULT_SERVER = "uvicorn"
#: ASGI servers that run the app in the process we start, so a profiler in it sees the app.
PROFILABLE = ("uvicorn", "uvicorn-h11", "toy-raw", "toy-h11", "toy-httptools", "toy-anyio",
              "toy-anyio-trio")
#: Rows in each table of the cProfile report.
TOP = 25
#: pyinstrument's ``profile-top.txt`` keeps branches with at least this share of the time.
TOP_THRESHOLD = 0.03
#: Seconds the subprocess gets after SIGINT to shut down and write its report.
REPORT_TIMEOUT = 120.0
#: Files whose frames pyinstrument's call tree keeps visible (it folds other library frames).
SHOW_REGEX = (r".*[\\/](apps|toyservers|bench|uvicorn|starlette|fastapi|pydantic|msgspec|"
              r"httptools|h11|anyio)[\\/].*")
ROOT = Path(__file__).resolve().parent.parent


# --- what to run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One layer on one server: ``app`` is ``"module:attr"`` (the raw module for asyncio)."""

    layer: str
    server: str
    app: str


def resolve(layer: str, server: str | None, profiler: str) -> Target:
    """Check the names and return what to run.

    ``server`` None means ``raw`` for the asyncio layer and ``uvicorn`` for the others.

    Raises:
        UsageProblem: an unknown layer, profiler or server, a server that cannot be profiled
            in-process, or a server that does not fit the layer.
    """
    if layer not in LAYERS:
        raise UsageProblem(f"unknown layer {layer!r} (known: {', '.join(LAYERS)})")
    if profiler not in PROFILERS:
        raise UsageProblem(f"unknown profiler {profiler!r} (known: {', '.join(PROFILERS)})")
    if layer == "asyncio":
        if server not in (None, RAW):
            raise UsageProblem(f"the asyncio layer is its own server ({RAW}): "
                               f"drop --server {server}")
        return Target(layer, RAW, "apps.raw_user")
    name = server or DEFAULT_SERVER
    if name == RAW:
        raise UsageProblem(f"server {RAW!r} only runs the asyncio layer; "
                           f"ASGI layers need one of: {', '.join(PROFILABLE)}")
    if name not in SERVERS:
        raise UsageProblem(f"unknown server {name!r} (profilable: {', '.join(PROFILABLE)})")
    if name not in PROFILABLE:
        raise UsageProblem(f"{name} runs the app outside the process bench starts, so a "
                           f"profiler cannot see it (profilable: {', '.join(PROFILABLE)})")
    return Target(layer, name, APPS[layer])


def child_argv(target: Target, profiler: str, out: Path, host: str, port: int,
               html: bool) -> list[str]:
    """The exact argv of the profiled server subprocess (``python -m bench.profile --child``)."""
    argv = [sys.executable, "-m", "bench.profile", "--child", "--layer", target.layer,
            "--server", target.server, "--profiler", profiler, "--output", str(out),
            "--host", host, "--port", str(port)]
    return argv if html else [*argv, "--no-html"]


# --- the profiled subprocess -----------------------------------------------------------------


#: Modules each server imports lazily when it starts; imported before profiling starts.
PRELOAD = {
    "uvicorn": ("uvicorn", "uvicorn.protocols.http.httptools_impl",
                "uvicorn.protocols.websockets.auto", "uvicorn.lifespan.on"),
    "uvicorn-h11": ("uvicorn", "uvicorn.protocols.http.h11_impl",
                    "uvicorn.protocols.websockets.auto", "uvicorn.lifespan.on"),
    RAW: ("uvloop",),
}


def _preload(target: Target) -> None:
    """Import the server's modules so their import time stays out of the profile."""
    spec = SERVERS.get(target.server)
    names = PRELOAD.get(target.server) or ((spec.module,) if spec and spec.module else ())
    for name in names:
        importlib.import_module(name)


def _serve(target: Target, host: str, port: int, app: Any) -> None:
    """Block serving ``app`` as ``target`` says, until SIGINT or SIGTERM."""
    if target.layer == "asyncio":
        import uvloop

        from apps.raw_user import serve

        uvloop.run(serve(host, port))
    elif target.server in ("uvicorn", "uvicorn-h11"):
        import uvicorn

        http = "h11" if target.server == "uvicorn-h11" else "httptools"
        uvicorn.run(app, host=host, port=port, http=http, loop="uvloop", log_level="warning",
                    access_log=False)
    else:
        from toyservers.config import Config

        module = SERVERS[target.server].load()
        module.run(app, Config(host=host, port=port, loop="uvloop", access_log=False,
                               log_level="warning"))


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def child(argv: Sequence[str]) -> int:
    """The subprocess: import the app, profile the server's run, write the report on exit.

    SIGTERM is turned into KeyboardInterrupt so that a server which re-raises the signal
    after its graceful shutdown (uvicorn does) still lets the report be written.
    """
    parser = argparse.ArgumentParser(prog="python -m bench.profile --child")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--layer", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--profiler", choices=PROFILERS, required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--no-html", action="store_true")
    args = parser.parse_args(argv)
    target = resolve(args.layer, args.server, args.profiler)
    app: Any = None
    if target.layer != "asyncio":
        module_name, _, attr = target.app.partition(":")
        app = getattr(importlib.import_module(module_name), attr)
    else:
        importlib.import_module(target.app)
    _preload(target)
    signal.signal(signal.SIGTERM, _interrupt)
    out: Path = args.output
    if args.profiler == "cprofile":
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
        try:
            _serve(target, args.host, args.port, app)
        except KeyboardInterrupt:
            pass
        finally:
            profile.disable()
            profile.dump_stats(out / "profile.pstats")
        return 0
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.001, async_mode="disabled")
    profiler.start(target_description=f"bench profile: {target.layer} on {target.server}")
    try:
        _serve(target, args.host, args.port, app)
    except KeyboardInterrupt:
        pass
    finally:
        session = profiler.stop()
        write_pyinstrument(session, out, html=not args.no_html)
    return 0


def write_pyinstrument(session: Any, out: Path, *, html: bool) -> list[Path]:
    """Render a pyinstrument ``Session`` into ``out``; return the paths written.

    ``profile.txt`` is the call tree down to branches of 1 % of the profiled wall time,
    ``profile-top.txt`` the same down to :data:`TOP_THRESHOLD`, and with ``html``,
    ``profile.html`` is pyinstrument's interactive report. Library frames outside
    :data:`SHOW_REGEX` are folded into "frames hidden" lines.
    """
    from pyinstrument.renderers import ConsoleRenderer, HTMLRenderer

    options = {"show_regex": SHOW_REGEX}
    paths = [out / "profile.txt", out / "profile-top.txt"]
    for path, threshold in zip(paths, (0.01, TOP_THRESHOLD), strict=True):
        tree = ConsoleRenderer(unicode=True, color=False, time="percent_of_total",
                               processor_options={**options, "filter_threshold": threshold})
        path.write_text(tree.render(session), encoding="utf-8")
    if html:
        paths.append(out / "profile.html")
        paths[2].write_text(HTMLRenderer().render(session), encoding="utf-8")
    return paths


# --- the cProfile table ----------------------------------------------------------------------


def short_path(path: str, prefixes: Sequence[str]) -> str:
    """``path`` relative to the longest of ``prefixes`` it starts with, else unchanged."""
    for prefix in sorted(prefixes, key=len, reverse=True):
        if prefix and path.startswith(prefix.rstrip(os.sep) + os.sep):
            return path[len(prefix.rstrip(os.sep)) + 1:]
    return path


def _prefixes() -> list[str]:
    paths = sysconfig.get_paths()
    return [str(ROOT), paths["purelib"], paths["platlib"], paths["stdlib"]]


def pstats_table(stats: pstats.Stats, requests: int, top: int = TOP,
                 prefixes: Sequence[str] | None = None) -> str:
    """The cProfile report: the ``top`` functions by cumulative time, then by own time.

    Columns: calls, own time and cumulative time in seconds, cumulative µs per request
    (``requests`` from wrk; "–" when 0), and ``file:line(function)`` with the file relative
    to site-packages, the standard library or this repository.
    """
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = (
        stats.stats  # type: ignore[attr-defined]
    )
    where = list(prefixes) if prefixes is not None else _prefixes()
    total = float(stats.total_tt)  # type: ignore[attr-defined]

    def name(key: tuple[str, int, str]) -> str:
        file, line, func = key
        if file == "~":
            return func
        return f"{short_path(file, where)}:{line}({func})"

    def section(title: str, order: int) -> list[str]:
        rows = sorted(raw.items(), key=lambda item: item[1][order], reverse=True)[:top]
        lines = [title, f"{'calls':>10} {'own s':>8} {'cum s':>8} {'cum µs/req':>11}  function"]
        for key, (_, calls, own, cum, _callers) in rows:
            per_request = f"{cum * 1e6 / requests:,.1f}" if requests else "–"
            lines.append(f"{calls:>10,} {own:>8.3f} {cum:>8.3f} {per_request:>11}  {name(key)}")
        return lines

    head = [f"cProfile: {total:.3f} s of profiled time, {requests:,} requests answered", ""]
    by_cum = section(f"Top {top} by cumulative time (the function and what it calls)", 3)
    by_own = section(f"Top {top} by own time (the function's body alone)", 2)
    return "\n".join([*head, *by_cum, "", *by_own]) + "\n"


# --- the command ---------------------------------------------------------------------------


def profile(target: Target, profiler: str, *, duration: int, connections: int, threads: int,
            pin: bool, host: str, html: bool, out: Path, console: Console,
            generator: LoadGenerator | None = None) -> dict[str, Any]:
    """Run the profiled server under the load generator (wrk unless ``generator`` is given)
    for ``duration`` seconds and return results.json's content.

    Raises:
        UsageProblem: wrk is missing, the host cannot be bound, or the pinning is impossible.
        RuntimeError: the server did not start or answer, wrk failed, or no report appeared
            (the message says which, with the server's log tail).
    """
    generator = generator if generator is not None else load_generator("wrk")
    check_port(host, 0)
    pinning = decide_pinning(Method(pin=pin), usable_cpus(), client=generator.name)
    port = free_port(host)
    argv = child_argv(target, profiler, out, host, port, html)
    server = ServerProcess(argv, host=host, port=port, cpu=pinning.server_cpu, cwd=ROOT,
                           startup_timeout=60.0, log_path=out / "server.log")
    url = f"http://{host}:{port}/"
    load = Load(connections=connections, threads=threads, duration=duration)
    command = generator.command(url, load, cpu=pinning.load_cpu)
    started = datetime.now(UTC)
    try:
        with console.status(f"{target.layer} on {target.server}: starting under {profiler}"):
            server.start()
        with kept_on(pinning.load_cpu):
            problem = check_echo(host, port)
            if problem is not None:
                raise RuntimeError(f"{problem}\n{server.log_tail(15)}")
            with console.status(f"{target.layer} on {target.server}: {generator.name} for "
                                f"{duration} s"):
                run = run_once(generator, url, load, kind="measured", pid=server.pid,
                               cpu=pinning.load_cpu)
        if run.summary is None:
            raise RuntimeError(f"{generator.name} failed: {run.error}\n{server.log_tail(15)}")
        with console.status("stopping the server: the profiler writes its report"):
            assert server.proc is not None
            server.proc.send_signal(signal.SIGINT)
            try:
                status = server.proc.wait(timeout=REPORT_TIMEOUT)
            except subprocess.TimeoutExpired:
                kill_tree(server.pid)
                raise RuntimeError(f"the server did not exit {REPORT_TIMEOUT:g} s after SIGINT"
                                   f"\n{server.log_tail(15)}") from None
    except ServerStartError as exc:
        raise RuntimeError(f"the profiled server did not start: {exc}") from None
    finally:
        server.stop()
        log = out / "server.log"
        if log.is_file() and log.stat().st_size == 0:
            log.unlink()
    summary = run.summary
    files = report_files(out, profiler, html, summary.requests)
    missing = [p.name for p in files if not p.is_file()]
    if missing:
        raise RuntimeError(f"the profiler wrote no {', '.join(missing)} (exit status {status})"
                           f"\n{server.log_tail(15)}")
    from importlib.metadata import version

    data: dict[str, Any] = {
        "experiment": "profile",
        "date": started.isoformat(timespec="seconds"),
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "layer": target.layer, "server": target.server, "app": target.app,
        "profiler": {"name": profiler,
                     "version": version("pyinstrument") if profiler == "pyinstrument"
                     else platform.python_version()},
        "server_command": argv, "server_exit_status": status,
        "wrk_command": command,
        "settings": {"duration_s": duration, "connections": connections, "threads": threads,
                     "host": host, "body": SAMPLE_BODY.decode(), "lua_script": str(POST_JSON)},
        "pinning": {"server_cpu": pinning.server_cpu, "load_cpu": pinning.load_cpu,
                    "text": pinning.text},
        **environment(generator),
        "files": [p.name for p in files],
    }
    data[generator.name]["summary"] = summary.to_json()
    return data


def report_files(out: Path, profiler: str, html: bool, requests: int) -> list[Path]:
    """The report files for ``profiler`` in ``out``; for cProfile, write the table first."""
    if profiler == "cprofile":
        raw = out / "profile.pstats"
        table = out / "profile.txt"
        if raw.is_file():
            table.write_text(pstats_table(pstats.Stats(str(raw), stream=io.StringIO()),
                                          requests), encoding="utf-8")
        return [raw, table]
    names = ["profile.txt", "profile-top.txt", *(["profile.html"] if html else [])]
    return [out / name for name in names]


def command(
    layer: Annotated[str, typer.Option(help=f"Layer to profile: {', '.join(LAYERS)}.")
                     ] = "fastapi",
    server: Annotated[str | None, typer.Option(
        help=f"Server under the layer: {', '.join(PROFILABLE)} [default: uvicorn; raw for "
             "asyncio]")] = None,
    duration: Annotated[int, typer.Option(min=1, help="Seconds of wrk load.")] = 5,
    profiler: Annotated[str, typer.Option(help="pyinstrument (sampling) or cprofile "
                                               "(tracing).")] = "pyinstrument",
    connections: Annotated[int, typer.Option(min=1, help="wrk connections.")] = 10,
    threads: Annotated[int, typer.Option(min=1, help="wrk threads.")] = 1,
    pin: Annotated[bool, typer.Option(help="Pin the server and wrk to separate CPUs.")] = True,
    html: Annotated[bool, typer.Option(help="Also write pyinstrument's interactive HTML.")
                    ] = True,
    host: Annotated[str, typer.Option(help="Address the server listens on.")] = "127.0.0.1",
    output: Annotated[Path | None, typer.Option(
        help="Folder for the report and results.json "
             "[default: results/profile-<layer>-<server>-<timestamp>]")] = None,
) -> None:
    """Where the time goes in one layer: profile its server under wrk's POST/JSON load."""
    console, errors = consoles()
    try:
        target = resolve(layer, server, profiler)
        generator = load_generator("wrk")
        out = output if output is not None else report.default_output(
            f"profile-{target.layer}-{target.server}")
        report.prepare_output(out)
        data = profile(target, profiler, duration=duration, connections=connections,
                       threads=threads, pin=pin, host=host, html=html, out=out.resolve(),
                       console=console, generator=generator)
    except (UsageProblem, report.OutputError) as exc:
        errors.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from None
    except RuntimeError as exc:
        errors.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(1) from None
    report.write_json(out / "results.json", data)
    summary = data["wrk"]["summary"]
    console.print(f"{target.layer} on {target.server} under {profiler}: "
                  f"{summary['requests']:,} requests in {duration} s, "
                  f"{sum(summary['errors'].values())} errors")
    console.print("wrote " + ", ".join(str(out / name) for name in
                                       [*data["files"], "results.json"]))


def register(app: typer.Typer) -> None:
    """Add ``profile`` to the ``bench`` CLI."""
    app.command("profile")(command)


if __name__ == "__main__":
    if "--child" in sys.argv[1:]:
        sys.exit(child(sys.argv[1:]))
    sys.exit("usage: bench profile --help (this module runs as a subprocess of it)")
