"""``bench download``: one big file downloaded from each server, its memory sampled throughout.

The app (:mod:`apps.download_app`) serves one file three ways: ``/pathsend`` (the ASGI
``http.response.pathsend`` extension: the server sends the file; the toys with
``sendfile(2)``, on uvloop and on asyncio's own loop alike), ``/chunks`` (the app reads it
64 KiB at a time and sends each piece as a body: every byte through the process) and
``/memory`` (the app reads it whole and sends one body). For each server (``--servers``:
toy-httptools and granian, the reference with pathsend, by default; a toy server once per
event loop of ``--toy-loops``) and each way (``--ways``), the bench starts the server afresh,
asks once for a path the app answers 404 (the app and the server warm, nothing of the file
read), then downloads the file with one GET, reading 64 KiB at a time, while a thread samples
the RSS of the server's whole process tree (psutil) every ``--interval`` seconds. Rows: the
server's RSS before the download (start), the highest sample during it (peak), after it
(end), the peak over the start, the CPU time the server's process tree spent on the download
(user + system: where the copies ``sendfile(2)`` saves show), the read system calls it made
(the kernel's count, ``syscr`` of ``/proc/<pid>/io``: ``read``, ``pread`` and ``sendfile``
count one each; a socket's ``recv`` and ``send`` count nowhere, so its write count would say
more about the event loop than the way, and is left out), and the download's rate.
A server that sends the file in bounded pieces stays flat; one that holds the body grows by
the file's size.

The file (``--size`` MiB of a repeated 4 KiB pattern) is written to a throwaway folder and
removed at the end. One download per row, no rounds: this measures memory, not speed (the
rate is a note, on a loopback socket).
"""

from __future__ import annotations

import http.client
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import psutil
import typer

from apps.download_app import FILE_ENV
from bench import report
from bench.command import consoles, invocation, logs_folder, names, user_mistakes
from bench.harness import ROOT, UsageProblem, environment, validate_servers
from bench.process import ServerProcess, free_port, tree_cpu_seconds, tree_rss
from toyservers.registry import SERVERS, get

APP = "apps.download_app:app"
DEFAULT_SERVERS = ("toy-httptools", "granian")
WAYS = ("pathsend", "chunks", "memory")
LOOPS = ("uvloop", "asyncio")
MIB = 1024 * 1024
READ_SIZE = 64 * 1024  # bytes the client reads at a time
HEADERS = ["Server", "Loop", "Way", "Start MiB", "Peak MiB", "End MiB", "Peak − start MiB",
           "CPU ms", "Read calls", "MiB/s", "Samples"]


@dataclass(frozen=True)
class Settings:
    """What ``bench download`` was asked to do: ``size`` MiB, RSS every ``interval`` s."""

    servers: tuple[str, ...] = DEFAULT_SERVERS
    ways: tuple[str, ...] = WAYS
    toy_loops: tuple[str, ...] = LOOPS
    size: int = 100
    interval: float = 0.01
    host: str = "127.0.0.1"


def write_file(path: Path, size: int) -> None:
    """``size`` MiB of a repeated 4 KiB pattern at ``path``."""
    block = bytes(range(256)) * 16
    with path.open("wb") as file:
        for _ in range(size * MIB // len(block)):
            file.write(block)


def tree_read_calls(pid: int) -> int:
    """Read system calls made so far by ``pid`` and its descendants (psutil's ``io_counters``,
    ``syscr`` of ``/proc/<pid>/io``); 0 where the platform has no such count."""
    reads = 0
    try:
        parent = psutil.Process(pid)
        for proc in (parent, *parent.children(recursive=True)):
            reads += proc.io_counters().read_count
    except (psutil.NoSuchProcess, psutil.AccessDenied, AttributeError):
        return 0
    return reads


def download(host: str, port: int, path: str) -> int:
    """GET ``path`` and read the body ``READ_SIZE`` bytes at a time; its size. Raises
    UsageProblem for a status other than 200."""
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        if response.status != 200:
            raise UsageProblem(f"GET {path} answered {response.status}")
        received = 0
        while piece := response.read(READ_SIZE):
            received += len(piece)
        return received
    finally:
        conn.close()


def measure_row(settings: Settings, server: str, loop: str | None, way: str, file: Path,
                logs: Path) -> dict[str, Any]:
    """One row: the server (a toy on ``loop``) started afresh, warmed by one request, one
    download sampled."""
    port = free_port(settings.host)
    argv = get(server).command(APP, settings.host, port)
    if loop is not None:
        argv += ["--loop", loop]  # toyserve's option, as uvicorn's
    env = {**os.environ, FILE_ENV: str(file)}
    with ServerProcess(argv, host=settings.host, port=port, cwd=ROOT, env=env,
                       log_path=logs / f"{server}-{loop or 'own'}-{way}.log") as process:
        conn = http.client.HTTPConnection(settings.host, port, timeout=10)
        conn.request("GET", "/warm-up")  # a 404: the app runs, the file is not read
        conn.getresponse().read()
        conn.close()
        start, cpu = tree_rss(process.pid), tree_cpu_seconds(process.pid)
        reads = tree_read_calls(process.pid)
        samples: list[int] = []
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                samples.append(tree_rss(process.pid))
                done.wait(settings.interval)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        began = time.perf_counter()
        try:
            received = download(settings.host, port, f"/{way}")
        finally:
            done.set()
            sampler.join()
        seconds = time.perf_counter() - began
        end, cpu = tree_rss(process.pid), tree_cpu_seconds(process.pid) - cpu
        reads = tree_read_calls(process.pid) - reads
    if received != settings.size * MIB:
        raise UsageProblem(f"{server} sent {received} bytes of {settings.size * MIB}")
    peak = max([start, end, *samples])
    return {"server": server, "loop": loop, "way": way, "status": "ok", "error": None,
            "bytes": received, "seconds": seconds, "cpu_ms": cpu * 1000,
            "read_calls": reads,
            "mib_per_s": received / MIB / seconds, "rss_start_mib": start / MIB,
            "rss_peak_mib": peak / MIB, "rss_end_mib": end / MIB,
            "rss_growth_mib": (peak - start) / MIB, "samples": len(samples)}


def cells(row: dict[str, Any]) -> list[str]:
    return [row["server"], row["loop"] or "its own", row["way"], f"{row['rss_start_mib']:.1f}",
            f"{row['rss_peak_mib']:.1f}", f"{row['rss_end_mib']:.1f}",
            f"{row['rss_growth_mib']:+.1f}", f"{row['cpu_ms']:.0f}", f"{row['read_calls']:,}",
            f"{row['mib_per_s']:.0f}", str(row["samples"])]


def how_it_ran(data: dict[str, Any]) -> list[str]:
    settings = data["settings"]
    return [f"one GET of a {settings['size_mib']} MiB file per row, read {READ_SIZE // 1024} "
            "KiB at a time over loopback, each server started afresh and warmed by one request "
            "that reads nothing of the file",
            f"RSS of the server's whole process tree (psutil) every {settings['interval_s']} s "
            "during the download; start is before it, end after it",
            "pathsend: the app sends one http.response.pathsend message (a toy server, on either "
            "event loop, sends the file with sendfile(2)); chunks: the app reads the file 64 KiB "
            "at a time and sends each piece as an http.response.body; memory: the app reads the "
            "file whole and sends it as one http.response.body",
            "CPU ms: user + system CPU time of the server's process tree during the download, "
            "counted by the kernel in clock ticks (10 ms on most Linux systems); read calls: "
            "the read system calls the kernel counted for it meanwhile (syscr of "
            "/proc/<pid>/io: read, pread and sendfile count one each, a socket's recv none)",
            f"command: {' '.join(data['command'])}", *report.provenance(data)]


def command(
    servers: Annotated[str, typer.Option(
        help="Comma-separated ASGI servers.")] = ",".join(DEFAULT_SERVERS),
    ways: Annotated[str, typer.Option(
        help="Comma-separated ways to send the file: pathsend, chunks, memory.")] = ",".join(WAYS),
    toy_loops: Annotated[str, typer.Option(
        help="Comma-separated event loops each toy server runs on: uvloop, asyncio.")
    ] = ",".join(LOOPS),
    size: Annotated[int, typer.Option(min=1, help="The file's size, MiB.")] = 100,
    interval: Annotated[float, typer.Option(
        min=0.001, help="Seconds between two RSS samples.")] = 0.01,
    host: Annotated[str, typer.Option(help="Address the servers listen on.")] = "127.0.0.1",
    output: Annotated[Path | None, typer.Option(
        help="Folder for results.json and results.md [default: results/download-<timestamp>]")
    ] = None,
) -> None:
    """A big file downloaded with pathsend (and read by the app, in pieces or whole), the
    server's memory sampled during the download: flat, or the file's size."""
    console, errors = consoles(150)
    settings = Settings(servers=names(servers), ways=names(ways), toy_loops=names(toy_loops),
                        size=size, interval=interval, host=host)
    out = output if output is not None else report.default_output("download")
    with user_mistakes(errors):
        validate_servers(settings.servers)
        unknown = [w for w in settings.ways if w not in WAYS]
        if unknown or not settings.ways:
            raise UsageProblem(f"unknown way {unknown[:1]} (known: {', '.join(WAYS)})")
        if not settings.toy_loops or any(loop not in LOOPS for loop in settings.toy_loops):
            raise UsageProblem(f"--toy-loops takes {', '.join(LOOPS)}")
        report.prepare_output(out)
        started = datetime.now(UTC)
        rows = []
        with tempfile.TemporaryDirectory(prefix="bench-download-") as folder:
            file = Path(folder) / "big.bin"
            write_file(file, settings.size)
            for server in settings.servers:
                toy = SERVERS[server].kind == "toy"
                for loop in settings.toy_loops if toy else (None,):
                    for way in settings.ways:
                        console.print(f"{server} {loop or ''} {way}: {settings.size} MiB")
                        rows.append(measure_row(settings, server, loop, way, file,
                                                logs_folder(out)))
    data = {"date": started.isoformat(timespec="seconds"), "command": invocation(),
            "settings": {"servers": list(settings.servers), "ways": list(settings.ways),
                         "toy_loops": list(settings.toy_loops),
                         "size_mib": settings.size, "interval_s": settings.interval,
                         "host": settings.host, "app": APP},
            **environment(), "rows": rows}
    title = f"bench download: a {settings.size} MiB file, the server's RSS during the download"
    table = [cells(row) for row in rows]
    right = [False, False, False, *[True] * (len(HEADERS) - 3)]
    console.print(report.rich_table(title, HEADERS, table, right=right))
    for line in how_it_ran(data):
        console.print(line)
    report.write_json(out / "results.json", data)
    report.write_markdown(out / "results.md", title, how_it_ran(data), HEADERS, table,
                          right=right)
    console.print(f"wrote {out / 'results.json'}, {out / 'results.md'}")


def register(app: typer.Typer) -> None:
    """Add ``download`` to the ``bench`` CLI."""
    app.command("download")(command)
