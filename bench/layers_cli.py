"""``bench layers``, the command: the timed run (:mod:`bench.layers`) or, with ``--count
instructions``, the counted one (:mod:`bench.instructions`), with one set of options.

It sits above both modules, which share the row plan (``bench.instructions`` imports
``bench.layers``' ``Settings`` and ``plan_rows``), so neither imports the other back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bench import command as options
from bench import instructions, report
from bench.command import consoles, finish, names, user_mistakes
from bench.harness import validate_servers
from bench.layers import (
    DEFAULT_COMPARE,
    DEFAULT_SERVER,
    WSGI_THREADS,
    Settings,
    measure,
    validate_layers,
)
from bench.layers_report import EXACT, HEADERS, RIGHT, how_it_ran, table_cells, write_outputs
from bench.report import noise_notes

# --- the command ---------------------------------------------------------------------------


def command(
    connections: options.Connections = 10,
    threads: options.Threads = 1,
    duration: options.Duration = 10,
    warmup: options.Warmup = 2,
    runs: options.Runs = 3,
    server: Annotated[str, typer.Option(help="ASGI server under the asgi, starlette and "
                                             "fastapi rows.")] = DEFAULT_SERVER,
    compare: Annotated[str, typer.Option(help="Comma-separated servers that each add an asgi "
                                              "row ('' for none).")] = DEFAULT_COMPARE,
    compare_layers: Annotated[str, typer.Option(
        help="Comma-separated layers (asgi, starlette, fastapi) the --compare servers get rows "
             "in.")] = "asgi",
    axum: Annotated[bool, typer.Option(help="Add the Rust axum ceiling (built with cargo).")
                    ] = True,
    bare: Annotated[bool, typer.Option(
        help="Add the bare baseline below the ASGI servers: the pure ASGI app on httptools "
             "with no checks, limits or timers; the other asgi rows compare with it.")] = True,
    wsgi: Annotated[bool, typer.Option(
        help="Add the WSGI rows after the ASGI ones: the pure WSGI app, then Flask, each on "
             "toy-wsgi (gthread), gunicorn (sync), gunicorn (gthread), waitress and bjoern, "
             "one process each; wsgi rows compare with asyncio (there is no bare WSGI "
             "baseline), flask with wsgi on the same server. bjoern's rows are skipped with a "
             "note where it is not installed.")] = False,
    wsgi_threads: Annotated[int, typer.Option(
        min=1, help="App threads of toy-wsgi gthread, gunicorn gthread and waitress. 10 = one "
                    "per wrk connection, so no request waits for a thread. They do not need "
                    "one per keep-alive connection (all three park idle ones in a selector "
                    "and serve 10 connections on 1 thread with 0 errors); fewer only cost "
                    "throughput.")] = WSGI_THREADS,
    pin: options.Pin = True,
    server_cpu: options.ServerCpu = 0,
    wrk_cpu: options.WrkCpu = 1,
    host: options.Host = "127.0.0.1",
    port: options.Port = 0,
    output: Annotated[Path | None, typer.Option(
        help="Folder for results.json, results.md and layers.png "
             "[default: results/layers-<timestamp>]")] = None,
    count: Annotated[str, typer.Option(
        help="time: wrk's requests per second; instructions: instructions per request "
             "counted under valgrind's callgrind (Linux), the same within 0.3 % from run to "
             "run on one machine, busy or not (bench/instructions.py).")] = "time",
    requests: Annotated[int, typer.Option(
        min=1, help="With --count instructions: requests counted per row.")] = 1000,
) -> None:
    """The cost of each layer: raw asyncio, an ASGI server, Starlette and FastAPI under wrk
    (with --wsgi: WSGI servers and Flask too)."""
    console, errors = consoles()
    settings = Settings(connections=connections, threads=threads, duration=duration,
                        warmup=warmup, runs=runs, server=server, compare=names(compare),
                        compare_layers=names(compare_layers), axum=axum, bare=bare,
                        wsgi=wsgi, wsgi_threads=wsgi_threads, pin=pin,
                        server_cpu=server_cpu, load_cpu=wrk_cpu, host=host, port=port)
    out = output if output is not None else report.default_output("layers")
    if count != "time":
        instructions.command(count, settings, requests, out)
        return
    with user_mistakes(errors):
        validate_servers([settings.server, *settings.compare])
        validate_layers(settings.compare_layers)
        report.prepare_output(out)
        data = measure(settings, console, out)
    finish(console, errors, "bench layers: the cost of each layer", HEADERS,
           table_cells(data["rows"]), how_it_ran(data), RIGHT, data["rows"],
           lambda: write_outputs(out, data), noise_notes(data["rows"], exact=EXACT))


def register(app: typer.Typer) -> None:
    """Add ``layers`` to the ``bench`` CLI."""
    app.command("layers")(command)

