"""``bench autobahn``: Autobahn|Testsuite, every section, against each WebSocket server.

The conformance suite's ``autobahn`` row runs sections 1-7 and 10 in ``make test``, but for
five cases that only wait (:data:`bench.wstest.QUICK_EXCLUDE`; about 2 s a server); this
command runs whatever ``--cases`` names (less ``--exclude``), all of it by default: section 9
(performance: text and binary messages up to 16 MiB, in one frame or in fragments, 1000
messages in a row) and 12-13 (permessage-deflate, with every window size and context
takeover) too, which take minutes a server. Each server (the registry's command line) serves
``apps/ws_echo.py`` on a free port, fresh for its run; ``wstest -m fuzzingclient``
(:mod:`bench.wstest`) plays the cases, and the report is read back case by case.

Servers: ``--servers A,B`` (registry names), by default every installed ASGI server whose
registry entry lists ``websocket``; a named server that speaks no WebSocket is left out with
a note, so a toy server joins the day its entry gains the protocol.

Output, in ``--output DIR`` (default ``results/autobahn-<timestamp>/``): ``results.json``
(machine, versions, git commit, command; per server its version, status, seconds, the count
per behavior, every case that was not OK with its behavior, and the seconds per section) and
``results.md`` (the same as a table); with ``--report``, Autobahn's own HTML report per
server under ``report/<server>/`` (``index.html``, one page per case). A server's log goes to
``logs/<server>.log``. Exit status: 0, 1 when no server could be run, 2 for a usage mistake
(Autobahn|Testsuite not installed, an unknown server).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from bench import report
from bench.command import consoles, finish, invocation, logs_folder, names, user_mistakes
from bench.harness import UsageProblem, environment, validate_servers
from bench.process import ServerProcess, ServerStartError, free_port
from bench.wstest import (
    ALL_CASES,
    ALL_TIMEOUT,
    BEHAVIORS,
    MISSING,
    VERSION,
    Report,
    WstestError,
    case_key,
    compact_ids,
    find_wstest,
    run_fuzzingclient,
)
from toyservers.registry import SERVERS, available

APP = "apps.ws_echo:app"
ROOT = Path(__file__).resolve().parent.parent
HEADERS = ["server", "version", "cases", *BEHAVIORS, "seconds"]
RIGHT = [False, False, True, *[True] * len(BEHAVIORS), True]


@dataclass(frozen=True)
class Settings:
    """What to run: the servers, the case patterns and the ones left out, where."""

    servers: tuple[str, ...]
    cases: tuple[str, ...] = ALL_CASES
    exclude: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    keep_report: bool = False
    timeout: float = ALL_TIMEOUT


def choose_servers(named: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The servers to run (``named``, or every installed one with WebSocket) and one note per
    named server left out because it speaks no WebSocket.

    Raises:
        UsageProblem: a name is unknown or not an ASGI server.
    """
    if not named:
        return [n for n in available() if "websocket" in SERVERS[n].protocols], []
    validate_servers(named)
    chosen = [n for n in named if "websocket" in SERVERS[n].protocols]
    notes = [f"{n} left out: it speaks no WebSocket (registry protocols: "
             f"{', '.join(sorted(SERVERS[n].protocols))})" for n in named if n not in chosen]
    return chosen, notes


def run_one(name: str, settings: Settings, out: Path, wstest: Path) -> dict[str, Any]:
    """One server's row: started fresh, the cases run, the report read; ``status`` is ``ok``
    or ``failed`` (with ``error`` and the server's ``log_tail``)."""
    row: dict[str, Any] = {"server": name, "version": SERVERS[name].version()}
    port = free_port(settings.host)
    command = SERVERS[name].command(APP, settings.host, port)
    process = ServerProcess(command, host=settings.host, port=port, cwd=ROOT,
                            log_path=logs_folder(out) / f"{name}.log")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"autobahn-{name}-") as tmp:
        try:
            with process:
                result = run_fuzzingclient(
                    f"ws://{settings.host}:{port}/", Path(tmp), agent=name,
                    cases=settings.cases, exclude=settings.exclude, timeout=settings.timeout,
                    wstest=wstest)
        except (ServerStartError, WstestError) as exc:
            return {**row, "status": "failed", "error": str(exc).splitlines()[0],
                    "log_tail": process.log_tail()}
        if settings.keep_report:
            shutil.copytree(Path(tmp) / "report", out / "report" / name, dirs_exist_ok=True)
    return {**row, "status": "ok", "seconds": round(time.monotonic() - started, 1),
            **summarize_report(result)}


def summarize_report(result: Report) -> dict[str, Any]:
    """``cases`` (how many), ``counts`` per behavior, ``not_ok`` (case id -> behavior),
    ``section_seconds`` (section number -> the seconds its cases took, by Autobahn's clock)
    and ``behaviors`` (every case id -> its behavior, in case order)."""
    sections: dict[str, float] = defaultdict(float)
    for case in result.cases.values():
        sections[case.case.split(".")[0]] += case.duration_ms / 1000
    ordered = sorted(result.cases, key=case_key)
    return {"cases": len(result.cases), "counts": result.counts(),
            "not_ok": result.failing(frozenset({"OK"})),
            "section_seconds": {k: round(sections[k], 1) for k in sorted(sections, key=int)},
            "behaviors": {case: result.cases[case].behavior for case in ordered}}


def table_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    """One line per server: its counts, or why it has none."""
    cells = []
    for row in rows:
        if row["status"] != "ok":
            cells.append([row["server"], row["version"], "–", *["–"] * len(BEHAVIORS),
                          f"failed: {row['error']}"])
            continue
        cells.append([row["server"], row["version"], str(row["cases"]),
                      *(str(row["counts"][b]) for b in BEHAVIORS), f"{row['seconds']:.0f}"])
    return cells


def how_it_ran(data: dict[str, Any]) -> list[str]:
    return [f"`{' '.join(data['command'])}`",
            f"Autobahn|Testsuite {data['autobahn_version']} (`wstest -m fuzzingclient`), "
            f"cases {', '.join(data['cases'])}"
            + (f" except {', '.join(data['exclude'])}" if data["exclude"] else "")
            + f", against `{APP}`", *report.provenance(data)]


def notes(data: dict[str, Any]) -> list[str]:
    """The cases that were not OK, per server and behavior (a section or subsection whose
    every case got the same one as its pattern, ``12.*``); then the servers left out."""
    lines = []
    for row in data["rows"]:
        if row["status"] != "ok" or not row["not_ok"]:
            continue
        parts = [f"{behavior} {', '.join(compact_ids(row['behaviors'], behavior))}"
                 for behavior in BEHAVIORS[1:] if row["counts"][behavior]]
        lines.append(f"{row['server']}, not OK: " + "; ".join(parts))
    return lines + list(data["notes"])


def write_outputs(out: Path, data: dict[str, Any]) -> list[Path]:
    """results.json and results.md in ``out``."""
    report.write_json(out / "results.json", data)
    report.write_markdown(out / "results.md", "bench autobahn: Autobahn|Testsuite per server",
                          how_it_ran(data), HEADERS, table_cells(data["rows"]), notes(data),
                          RIGHT)
    return [out / "results.json", out / "results.md"]


def measure(settings: Settings, out: Path, say: Any) -> dict[str, Any]:
    """Run every server in turn; results.json's content.

    Raises:
        UsageProblem: Autobahn|Testsuite is not installed, or a server name is wrong.
    """
    wstest = find_wstest()
    if wstest is None:
        raise UsageProblem(MISSING)
    servers, left_out = choose_servers(settings.servers)
    if not servers:
        raise UsageProblem("no server to run speaks WebSocket: " + "; ".join(left_out))
    data: dict[str, Any] = {"command": invocation(), "date": datetime.now(UTC).isoformat(),
                            **environment(), "autobahn_version": VERSION, "app": APP,
                            "cases": list(settings.cases), "exclude": list(settings.exclude),
                            "notes": left_out, "rows": []}
    for name in servers:
        say(f"running Autobahn|Testsuite against {name} ...")
        row = run_one(name, settings, out, wstest)
        say(f"  {name}: " + (", ".join(f"{n} {b}" for b, n in row["counts"].items() if n)
                              if row["status"] == "ok" else f"failed: {row['error']}"))
        data["rows"].append(row)
    return data


def command(
    servers: Annotated[str, typer.Option(
        help="Comma-separated registry names (default: every installed ASGI server whose "
             "registry entry lists websocket).")] = "",
    cases: Annotated[str, typer.Option(
        help="Comma-separated case patterns, Autobahn's: 1.*, 6.4.*, 9.1.1, * (all).")] = "*",
    exclude: Annotated[str, typer.Option(
        help="Comma-separated case patterns to leave out.")] = "",
    keep_report: Annotated[bool, typer.Option(
        "--report/--no-report", help="Keep Autobahn's HTML report per server in "
                                     "report/<server>/ (several MB each).")] = False,
    host: Annotated[str, typer.Option(help="Address the servers listen on.")] = "127.0.0.1",
    output: Annotated[Path | None, typer.Option(
        help="Folder for results.json and results.md "
             "[default: results/autobahn-<timestamp>]")] = None,
) -> None:
    """Autobahn|Testsuite (all sections by default) against each WebSocket server."""
    console, errors = consoles()
    out = output if output is not None else report.default_output("autobahn")
    with user_mistakes(errors):
        settings = Settings(servers=names(servers), cases=names(cases) or ALL_CASES,
                            exclude=names(exclude), host=host, keep_report=keep_report)
        report.prepare_output(out)
        data = measure(settings, out, lambda line: console.print(line, highlight=False))
    finish(console, errors, "bench autobahn: Autobahn|Testsuite per server", HEADERS,
           table_cells(data["rows"]), how_it_ran(data), RIGHT, data["rows"],
           lambda: write_outputs(out, data), notes(data))


def register(app: typer.Typer) -> None:
    """Add ``autobahn`` to the ``bench`` CLI."""
    app.command("autobahn")(command)
