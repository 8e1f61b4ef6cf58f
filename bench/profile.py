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

``--profiler callgrind`` counts instead of timing, and needs no wrk: the layer's server runs
under valgrind's callgrind exactly as one row of ``bench layers --count instructions``
(:func:`bench.instructions.count_server`: start-up and warm-up excluded, 1000 requests
counted), and the folder holds ``callgrind.out.1`` (the dump of the requests' window;
``callgrind.out.2`` is as long a time idle) and ``profile.txt``
(``callgrind_annotate``'s functions by inclusive and by self instructions, per C function:
the interpreter, httptools, uvloop, libc; Python code shows as the interpreter's eval loop).

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
import platform
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.console import Console

from apps.user import SAMPLE_BODY
from bench import command as options
from bench import report
from bench.command import consoles, invocation
from bench.harness import (
    Method,
    UsageProblem,
    check_echo,
    check_port,
    decide_pinning,
    environment,
    kept_on,
    load_generator,
)
from bench.instructions import REQUESTS, count_server, find_callgrind
from bench.layers import APPS, server_argv
from bench.loadgen import Load, LoadGenerator
from bench.machine import usable_cpus
from bench.process import ServerProcess, ServerStartError, free_port, kill_tree
from bench.profile_report import report_files, write_callgrind, write_pyinstrument
from bench.rounds import run_once
from bench.rows import RowPlan
from bench.wrk import POST_JSON
from toyservers.registry import SERVERS

#: Every layer ``bench layers`` measures in Python (axum is not Python: nothing to profile).
LAYERS = ("asyncio", "asgi", "starlette", "fastapi")
PROFILERS = ("pyinstrument", "cprofile", "callgrind")
#: The asyncio layer's own server: ``apps/raw_user.py`` is its own server.
RAW = "raw"
DEFAULT_SERVER = "uvicorn"
#: ASGI servers that run the app in the process we start, so a profiler in it sees the app.
PROFILABLE = ("uvicorn", "uvicorn-h11", "toy-raw", "toy-h11", "toy-httptools", "toy-anyio",
              "toy-anyio-trio")
#: Seconds the subprocess gets after SIGINT to shut down and write its report.
REPORT_TIMEOUT = 120.0
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
        "command": invocation(),
        "layer": target.layer, "server": target.server, "app": target.app,
        "profiler": {"name": profiler,
                     "version": version("pyinstrument") if profiler == "pyinstrument"
                     else platform.python_version()},
        "server_command": argv, "server_exit_status": status,
        "wrk_command": command,
        "settings": {"duration_s": duration, "connections": connections, "threads": threads,
                     "host": host, "body": SAMPLE_BODY.decode(), "lua_script": str(POST_JSON)},
        "pinning": pinning.to_json(),
        **environment(generator),
        "files": [p.name for p in files],
    }
    data[generator.name]["summary"] = summary.to_json()
    return data


def callgrind_profile(target: Target, *, host: str, out: Path, console: Console
                      ) -> dict[str, Any]:
    """Count ``target`` as ``bench layers --count instructions`` counts a row
    (:func:`bench.instructions.count_server`, :data:`bench.instructions.REQUESTS` requests),
    write ``profile.txt`` (:func:`bench.profile_report.write_callgrind`) beside the dump, and
    return results.json's content.

    Raises:
        UsageProblem: no valgrind on Linux.
        RuntimeError: the server did not start or answer, or callgrind failed.
    """
    callgrind = find_callgrind()
    annotate = shutil.which("callgrind_annotate")
    if annotate is None:
        raise UsageProblem("callgrind_annotate is missing: it comes with valgrind")
    check_port(host, 0)
    port = free_port(host)
    argv = server_argv(RowPlan(target.layer, target.server, target.app, ""), host, port, None)
    dump = out / "callgrind.out"
    started = datetime.now(UTC)
    with console.status(f"{target.layer} on {target.server}: {REQUESTS:,} requests under "
                        "callgrind"):
        windows = count_server(callgrind, argv, port, host=host, requests=REQUESTS,
                               dump=dump, log_path=out / "server.log")
    dump.unlink(missing_ok=True)  # the whole run's, written at exit
    files = write_callgrind(dump.with_name("callgrind.out.1"), out, annotate, windows.busy,
                            REQUESTS)
    return {
        "experiment": "profile", "date": started.isoformat(timespec="seconds"),
        "command": invocation(), "layer": target.layer, "server": target.server,
        "app": target.app, "profiler": {"name": "callgrind", "version": callgrind.version()},
        "server_command": windows.command, "requests": REQUESTS,
        "busy_instructions": windows.busy, "idle_instructions": windows.idle,
        "window_s": windows.seconds,
        "instructions_per_request": round(windows.requests_only / REQUESTS, 1),
        **environment(),
        "files": [p.name for p in files] + ["callgrind.out.1", "callgrind.out.2"],
    }


def command(
    layer: Annotated[str, typer.Option(help=f"Layer to profile: {', '.join(LAYERS)}.")
                     ] = "fastapi",
    server: Annotated[str | None, typer.Option(
        help=f"Server under the layer: {', '.join(PROFILABLE)} [default: uvicorn; raw for "
             "asyncio]")] = None,
    duration: Annotated[int, typer.Option(min=1, help="Seconds of wrk load.")] = 5,
    profiler: Annotated[str, typer.Option(
        help="pyinstrument (sampling), cprofile (tracing) or callgrind (instructions per C "
             f"function over {REQUESTS:,} requests; valgrind, Linux).")] = "pyinstrument",
    connections: options.Connections = 10,
    threads: options.Threads = 1,
    pin: options.Pin = True,
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
        if profiler == "callgrind":
            find_callgrind()
        else:
            generator = load_generator("wrk")
        out = output if output is not None else report.default_output(
            f"profile-{target.layer}-{target.server}")
        report.prepare_output(out)
        if profiler == "callgrind":
            data = callgrind_profile(target, host=host, out=out.resolve(), console=console)
        else:
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
    if profiler == "callgrind":
        console.print(f"{target.layer} on {target.server} under callgrind: "
                      f"{data['instructions_per_request']:,.0f} instructions per request")
    else:
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
