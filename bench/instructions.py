"""``bench layers --count instructions``: what each layer costs, counted in instructions.

Wall-clock figures move with whatever else the machine is doing; the number of instructions
a server executes to answer a request hardly does. This mode runs every row of ``bench
layers`` (the same rows, apps and request bytes as the wrk POST/JSON test:
:func:`bench.layers.plan_rows`, :func:`bench.layers.server_argv`) under valgrind's callgrind
and reports instructions per request, the instructions added over the row below
(:func:`bench.layers.below_of`) and the ratio to it (:mod:`bench.instructions_report`).
rustc's performance suite and SQLite track their speed the same way.

How one row is counted (:func:`count_server`):

1. the server starts under ``valgrind --tool=callgrind --instr-atstart=no`` with
   ``PYTHONHASHSEED=0``: valgrind runs it without counting, so start-up costs no
   instructions and little time (2 s for bare);
2. one POST checks the echo (:func:`bench.harness.check_echo`), then one keep-alive
   connection sends :data:`WARMUP` requests, uncounted, so CPython's specializing
   interpreter, the allocators and every cache are warm;
3. ``callgrind_control -i on`` then ``-z`` (count from zero), ``--requests`` requests on the
   same connection, then ``callgrind_control -d`` writes the busy window's dump
   (``callgrind/*.out.1`` in the output folder: ``callgrind_annotate`` on it says which
   functions the instructions went to); only then does the connection close. The window
   holds exactly ``--requests`` request/response cycles: no start-up, accept or close;
4. the idle window: ``-z`` again, as many seconds as the busy window lasted with no
   connection open, ``-d`` (``*.out.2``). What a server does by the clock and not per
   request (uvicorn wakes ten times a second to refresh its Date header and check its
   limits: 233k instructions a second idle; each toy server's once-a-second Date refresh
   and keep-alive timer: 59k; bare: 19) lands in the busy window in proportion to its
   length, and callgrind makes it last seconds, longer on a busy machine; the idle window
   holds the same ticks, give or take one, and is subtracted. Instructions per request =
   (busy - idle) / requests. Natively, at thousands of requests a second, those ticks are
   a rounding error; under callgrind they were 1 % of uvicorn's count, and more when the
   machine was busy.

The client (:class:`Client`) is this module's, not wrk: wrk runs for a duration, so
requests would be in flight at either end of the window; this one sends a fixed count with
exactly wrk's bytes (:func:`request_bytes`), on one connection, and sends each request only
once the server is idle: its thread asleep in ``epoll_wait`` (:func:`wait_idle`). Without
that wait the count depends on timing, because one turn of an event loop serves whatever it
finds ready. With ten connections a turn serves several requests and shares its own cost
among them; on one connection, whether the next request has arrived before the server's
last turn for the previous one decides whether the two share a turn. Measured on the
2-core development machine (2026-11-27, bare, 2000 requests after 500): ten connections
89.0k instructions per request, one connection 91.0k, both 0.1 % apart from run to run on a
quiet machine, but four runs on one connection while other work shared the machine spread
from 91.0k to 91.7k (0.8 %), all of it in extra turns of uvloop's loop. Waiting for idle,
every request costs one whole turn from sleep to sleep, and bare counted the same total to
the instruction in every run, quiet or under ``stress-ng --cpu 2``.

What still differs between two runs. Two whole tables (eleven rows, from axum to FastAPI,
1000 requests each; 2026-11-27), the second with ``stress-ng --cpu 2`` on top of a machine
already shared with other work (load average 8): axum, raw and bare the same to the
instruction or 0.01 %, every other row within 0.14 % (uvicorn, 135,151 and 134,968; the
toy servers within 0.04 %). Before the idle window was subtracted, the same comparison
differed by up to 1.3 % (uvicorn-h11; FastAPI on uvicorn 1.2 %). The regression test's ratios
to bare (tests/test_instruction_counts.py) repeat within 0.22 %. Inside 2 % by far. What
remains:

- the clock, give or take one tick: the idle window's ticks each wake the loop from its
  sleep, which a tick that falls among requests does not, so a slow window subtracts a
  little too much (uvicorn's lower figure above is the stressed run's, its window 3.7 s
  against 2.2 s);
- memory layout: what start-up allocated decides where a request's objects fall in
  pymalloc's pools, and so how much freeing them costs. A longer environment variable made
  bare count 23 more instructions per request (0.025 %), all in ``_PyObject_Malloc`` and
  ``_PyObject_Free``; compiling a changed module at start-up instead of loading its
  ``.pyc``, 0.24 % more. So the server runs with a fixed environment
  (:func:`server_environment`) and fresh bytecode caches (:func:`compile_sources`); the
  paths and the interpreter build remain part of what is counted: compare counts from one
  machine and one checkout. Address-space randomization moved no count in 28 runs of bare.

Rows are counted :func:`default_jobs` at a time (two where two CPUs are usable): each server
runs alone in its own valgrind and waits for its own client, so what runs beside it changes
the time, not the count (bare counted beside toy-httptools: 8 instructions per request more
than alone, within the layout effect above).
"""

from __future__ import annotations

import compileall
import os
import platform
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from rich.console import Console

from apps.user import SAMPLE_BODY
from bench import report
from bench.command import consoles, finish, invocation, logs_folder, user_mistakes
from bench.harness import UsageProblem, check_echo, environment, validate_servers
from bench.instructions_report import (
    HEADERS,
    RIGHT,
    TITLE,
    Count,
    Windows,
    how_it_ran,
    rows_json,
    table_cells,
    write_outputs,
)
from bench.layers import Settings, plan_rows, server_argv, validate_layers
from bench.machine import usable_cpus
from bench.native import NativeBuild, ensure_axum
from bench.process import ServerProcess, ServerStartError
from bench.rows import RowPlan

#: The repository: where :func:`compile_sources` finds ``toyservers`` and ``apps``.
ROOT = Path(__file__).resolve().parent.parent
#: Requests counted per row (``--requests``).
REQUESTS = 1000
#: Requests sent before counting starts, on the same connection.
WARMUP = 500
#: Seconds between two looks at whether the server is idle (:func:`wait_idle`).
IDLE_POLL = 0.0002
#: Seconds one response, one connect or one ``callgrind_control`` may take.
TIMEOUT = 60.0
#: Seconds a server gets to listen under valgrind (FastAPI's imports take the longest).
STARTUP_TIMEOUT = 180.0
#: The one line a missing valgrind gets (``make layers ARGS="--count instructions"`` and
#: ``make test`` install it).
MISSING = ("--count instructions needs valgrind (its callgrind tool): install the package "
           "valgrind (e.g. 'sudo apt-get install valgrind'); make layers ARGS=\"--count "
           "instructions\" installs it")


# --- valgrind ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Callgrind:
    """The two programs this mode runs: ``valgrind`` and ``callgrind_control`` (paths)."""

    valgrind: str
    control: str

    def version(self) -> str:
        """``valgrind --version`` (e.g. ``valgrind-3.19.0``)."""
        out = subprocess.run([self.valgrind, "--version"], capture_output=True, text=True,
                             timeout=30)
        return out.stdout.strip()

    def argv(self, server: list[str], dump: Path) -> list[str]:
        """``server`` under callgrind, not counting until told, dumping to ``dump``, in the
        environment :func:`server_environment` gives (``env -i``: nothing else)."""
        names = [f"{name}={value}" for name, value in server_environment().items()]
        return ["env", "-i", *names, self.valgrind, "--tool=callgrind", "--instr-atstart=no",
                f"--callgrind-out-file={dump}", *server]

    def tell(self, pid: int, *flags: str) -> None:
        """Run ``callgrind_control FLAGS PID`` (``-i on``, ``-z``, ``-d``).

        Raises:
            RuntimeError: it failed or took more than :data:`TIMEOUT` seconds.
        """
        try:
            out = subprocess.run([self.control, *flags, str(pid)], capture_output=True,
                                 text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"callgrind_control {' '.join(flags)} took over "
                               f"{TIMEOUT:g} s") from None
        if out.returncode != 0:
            raise RuntimeError(f"callgrind_control {' '.join(flags)} failed: "
                               f"{(out.stdout + out.stderr).strip()[-300:]}")


def compile_sources() -> None:
    """Bring the bytecode caches of ``toyservers`` and ``apps`` up to date. A server that
    compiles a module at start-up, instead of loading its ``.pyc``, allocates differently
    and counts differently afterwards: 0.24 % more for bare after one of its imports changed,
    in that run only. (Installed packages were compiled when pip installed them.)"""
    for package in ("toyservers", "apps"):
        compileall.compile_dir(ROOT / package, quiet=2)


def server_environment() -> dict[str, str]:
    """The whole environment of a counted server: ``PATH`` and ``HOME`` as here, a fixed
    hash seed, unbuffered output (for the log). Nothing else, because the environment is
    part of what is counted: its size moves what start-up allocates, so the same request's
    objects land differently in pymalloc's pools (one variable more, in a test runner or a
    shell, moved bare by up to 0.1 %)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"),
            "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1"}


def find_callgrind(system: str | None = None) -> Callgrind:
    """valgrind and callgrind_control on PATH.

    Raises:
        UsageProblem: not Linux (``system``, default ``platform.system()``), or either program
            is missing (:data:`MISSING`).
    """
    system = system or platform.system()
    if system != "Linux":
        raise UsageProblem(f"--count instructions needs valgrind's callgrind, which runs on "
                           f"Linux (this is {system}); use --count time here")
    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if valgrind is None or control is None:
        raise UsageProblem(MISSING)
    return Callgrind(valgrind, control)


def dump_total(path: Path) -> int:
    """The instructions (``Ir``) a callgrind dump counted: its ``summary:`` (or ``totals:``)
    line.

    Raises:
        ValueError: the file holds neither line.
    """
    text = path.read_text(errors="replace")
    found = re.search(r"^summary:\s*(\d+)", text, re.M) or re.search(r"^totals:\s*(\d+)",
                                                                     text, re.M)
    if found is None:
        raise ValueError(f"{path.name} has no summary: line")
    return int(found[1])


# --- the client --------------------------------------------------------------------------------


def request_bytes(host: str, port: int, body: bytes = SAMPLE_BODY) -> bytes:
    """The request wrk sends with ``bench/lua/post_json.lua``, byte for byte (as captured
    from wrk 4.1: its Host carries the port, Content-Length comes before Content-Type)."""
    head = (f"POST / HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {len(body)}\r\n"
            "Content-Type: application/json\r\n\r\n")
    return head.encode("ascii") + body


def read_response(stream: BinaryIO) -> None:
    """Read one whole response from ``stream`` (Content-Length or chunked, RFC 9112 §6).

    Raises:
        RuntimeError: its status is not 200, it has neither framing, or the connection
            closed first.
        OSError: the socket failed or timed out.
    """
    status = stream.readline()
    if not status.startswith(b"HTTP/1.1 200 "):
        raise RuntimeError(f"got {status.strip()!r}, not 200")
    fields = {}
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip().lower()
    if b"content-length" in fields:
        body = stream.read(int(fields[b"content-length"]))
    elif fields.get(b"transfer-encoding") == b"chunked":
        while size := int(stream.readline().split(b";")[0], 16):
            stream.read(size + 2)
        body = stream.readline()
    else:
        raise RuntimeError("a response with neither Content-Length nor chunked")
    if not body:
        raise RuntimeError("the server closed the connection mid-response")


def is_idle(pid: int) -> bool:
    """Whether process ``pid``'s main thread sleeps in ``epoll_wait``: every event loop here
    (uvloop's libuv, asyncio's selector, trio, tokio) waits there, and sleeps in it only when
    it has nothing left to run (``/proc/PID/stat``'s state ``S``, ``/proc/PID/wchan`` the
    kernel's ``do_epoll_wait`` or ``ep_poll``)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except (OSError, IndexError):
        return False
    return state == "S" and wchan in ("do_epoll_wait", "ep_poll")


def wait_idle(pid: int, timeout: float = TIMEOUT) -> None:
    """Poll :func:`is_idle` until it holds.

    Raises:
        RuntimeError: it did not within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while not is_idle(pid):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server did not go back to waiting in epoll_wait within "
                               f"{timeout:g} s (/proc/{pid}/wchan)")
        time.sleep(IDLE_POLL)  # the polling interval, not synchronisation


class Client:
    """One keep-alive connection to ``host:port`` that sends ``payload`` only once the server
    (process ``pid``) is idle and reads the whole response before the next; every socket
    operation is bounded by ``timeout`` seconds. Use as ``with Client(...) as client:``.

    Raises:
        OSError: on enter, the connection could not be made.
    """

    def __init__(self, host: str, port: int, payload: bytes, pid: int,
                 timeout: float = TIMEOUT) -> None:
        self.payload, self.pid = payload, pid
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.stream = self.sock.makefile("rb")

    def send(self, requests: int) -> None:
        """Send ``requests`` requests, one at a time, each once the server is idle."""
        for _ in range(requests):
            wait_idle(self.pid)
            self.sock.sendall(self.payload)
            read_response(self.stream)
        wait_idle(self.pid)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stream.close()
        self.sock.close()


# --- counting one row --------------------------------------------------------------------------


def count_server(callgrind: Callgrind, argv: list[str], port: int, *, host: str,
                 requests: int, dump: Path, log_path: Path, warmup: int = WARMUP
                 ) -> Windows:
    """Count the instructions the server ``argv`` (listening on ``host:port``) spends on
    ``requests`` requests, and in as long a time with nothing to do, as the module docstring
    says. The dumps are ``dump`` + ``.1`` (busy) and ``.2`` (idle).

    Raises:
        RuntimeError: the server did not start or answer, or callgrind failed (the message
            says which; the server's log is at ``log_path``).
    """
    compile_sources()
    command = callgrind.argv(argv, dump)
    server = ServerProcess(command, host=host, port=port,
                           startup_timeout=STARTUP_TIMEOUT, log_path=log_path)
    try:
        server.start()
    except ServerStartError as exc:
        raise RuntimeError(f"server did not start ({str(exc).splitlines()[0]})") from None
    try:
        problem = check_echo(host, port, timeout=TIMEOUT)
        if problem is not None:
            raise RuntimeError(problem)
        with Client(host, port, request_bytes(host, port), server.pid) as client:
            client.send(warmup)
            callgrind.tell(server.pid, "-i", "on")
            callgrind.tell(server.pid, "-z")
            started = time.monotonic()
            client.send(requests)
            seconds = time.monotonic() - started
            callgrind.tell(server.pid, "-d")
        wait_idle(server.pid)  # the close handled
        callgrind.tell(server.pid, "-z")
        time.sleep(seconds)  # the idle window: as long as the busy one, and nothing else
        callgrind.tell(server.pid, "-d")
    except OSError as exc:
        raise RuntimeError(f"the client failed: {exc!r}") from None
    finally:
        server.stop()
    busy, idle = (dump_total(dump.with_name(f"{dump.name}.{n}")) for n in (1, 2))
    return Windows(busy, idle, round(seconds, 3), command)


def count_row(plan: RowPlan, callgrind: Callgrind, settings: Settings, requests: int,
              axum_binary: Path | None, folder: Path) -> Count:
    """Count one row; never raises for a server that fails (the :class:`Count` says so).
    Dumps go to ``folder/callgrind``, the server's output to ``folder/logs``."""
    port = settings.pick_port()
    argv = server_argv(plan, settings.host, port, axum_binary)
    name = f"{plan.layer}-{plan.server}"
    dump = folder / "callgrind" / f"{name}.out"
    dump.parent.mkdir(parents=True, exist_ok=True)
    log_path = logs_folder(folder) / f"{name}.log"
    result = Count(plan, callgrind.argv(argv, dump), requests=requests)
    try:
        windows = count_server(callgrind, argv, port, host=settings.host, requests=requests,
                               dump=dump, log_path=log_path)
    except (RuntimeError, ValueError, OSError) as exc:
        result.status, result.error = "failed", str(exc)
        tail = log_path.read_text(errors="replace").splitlines()[-15:] \
            if log_path.is_file() else []
        result.log_tail = "\n".join(tail)
        return result
    result.command, result.windows = windows.command, windows
    result.instructions, result.dump = windows.requests_only, f"callgrind/{name}.out.1"
    dump.unlink(missing_ok=True)  # the whole-run dump written at exit, start-up excluded
    return result


def default_jobs() -> int:
    """Rows counted at a time: two when this process may use two CPUs or more, else one."""
    return 2 if len(usable_cpus()) >= 2 else 1


def count_all(plans: list[RowPlan], count: Callable[[RowPlan], Count], jobs: int,
              done: Callable[[Count], None]) -> list[Count]:
    """``count`` every plan, ``jobs`` at a time, calling ``done`` as each ends; return the
    counts in ``plans``' order."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(count, plan) for plan in plans]
        for future in futures:
            done(future.result())
        return [future.result() for future in futures]


# --- the command -------------------------------------------------------------------------------


def measure(settings: Settings, callgrind: Callgrind, requests: int, console: Console,
            out: Path) -> dict[str, Any]:
    """Count every row and return results.json's content
    (:func:`bench.instructions_report.write_outputs` says what it holds)."""
    if settings.axum:
        with console.status("axum: building the native ceiling with cargo (once, then cached)"):
            native = ensure_axum()
    else:
        native = NativeBuild(None, "axum row skipped (--no-axum)")
    console.print(native.note)
    plans = [p for p in plan_rows(settings) if p.layer != "axum" or native.binary is not None]
    jobs = default_jobs()
    started = datetime.now(UTC)
    env = environment()  # git's state before this run writes its own files

    def done(result: Count) -> None:
        label = f"{result.plan.layer} ({result.plan.server})"
        if result.instructions is not None:
            console.print(f"[green]✓[/] {label}: {result.instructions / requests:,.0f} "
                          "instructions per request")
        else:
            console.print(f"[red]✗[/] {label} failed: {result.error}", highlight=False)

    with console.status(f"counting {len(plans)} rows under callgrind, {jobs} at a time"):
        counts = count_all(plans, lambda plan: count_row(
            plan, callgrind, settings, requests, native.binary, out), jobs, done)
    return {
        "experiment": "layers", "count": "instructions",
        "date": started.isoformat(timespec="seconds"), "command": invocation(),
        "settings": {
            "requests": requests, "warmup_requests": WARMUP, "connections": 1,
            "jobs": jobs, "server": settings.server,
            "compare": [c for c in settings.compare if c != settings.server],
            "compare_layers": list(settings.compare_layers), "bare": settings.bare,
            "host": settings.host, "pythonhashseed": "0",
            "request": request_bytes(settings.host, 0).decode().replace(":0\r\n", ":PORT\r\n"),
        },
        **env,
        "valgrind": {"path": callgrind.valgrind, "version": callgrind.version()},
        "axum": {"built": native.binary is not None, "note": native.note,
                 "build_command": native.command, "rustc": native.rustc,
                 "runtime": "tokio current_thread"},
        "rows": rows_json(counts),
    }


def check_request(count: str, settings: Settings, requests: int) -> Callgrind:
    """Check what ``bench layers --count COUNT`` was asked; return the programs to run.

    Raises:
        UsageProblem: an unknown ``count``, ``--wsgi``, an unknown server or layer, or no
            valgrind on Linux.
    """
    if count != "instructions":
        raise UsageProblem(f"unknown --count {count!r} (known: time, instructions)")
    if settings.wsgi:
        raise UsageProblem("--count instructions counts the ASGI rows; the WSGI servers run "
                           "the app in threads or forked workers, which callgrind serializes "
                           "or does not follow: drop --wsgi")
    validate_servers([settings.server, *settings.compare])
    validate_layers(settings.compare_layers)
    return find_callgrind()


def command(count: str, settings: Settings, requests: int, out: Path) -> None:
    """``bench layers --count instructions``: check, count every row, print and write the
    table (exit statuses as :mod:`bench.command` says)."""
    console, errors = consoles()
    with user_mistakes(errors):
        callgrind = check_request(count, settings, requests)
        report.prepare_output(out)
        data = measure(settings, callgrind, requests, console, out)
    finish(console, errors, TITLE, HEADERS, table_cells(data["rows"]), how_it_ran(data), RIGHT,
           data["rows"], lambda: write_outputs(out, data))
