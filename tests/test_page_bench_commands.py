"""Every ``bench`` command on every page runs with the arguments it is printed with, to a report.

The pages print ``bench`` commands in ``sh`` blocks (``.venv/bin/bench layers --compare ...``,
``make bench ARGS="h2 --duration 5"``) and a few inline (``.venv/bin/bench profile --layer
starlette --duration 5``). Run as printed they take from half a minute to an hour each (10 s
runs, 3 per row, a warm-up, up to 45 rows), far past ``make test``'s budget, so each one runs
here with every argument as printed and the time options it takes repeated after them, where
the last one wins (click's rule for a single-valued option): ``--duration 1 --runs 1
--warmup 0``; ``bench autobahn``, whose cases are not timed load, gets ``--exclude`` with the
five cases of its quick sections that only wait a second each (``QUICK_EXCLUDE``, the
conformance row's short form). What is left is the whole experiment at its shortest: every
row's server started fresh and checked, the load generator run against it, the report printed
and its files written. For ``bench layers``, ``bench cluster`` and ``bench conformance``
these are the only real runs in make test, and their own test modules' checks of a whole
run's output apply to them (:func:`check_whole_run`). A command that names a server the
registry lacks, an app that no longer imports, a flag that was renamed or an output folder
it cannot write fails here.

``.venv/bin/bench`` lines run in an empty folder, so a relative ``--output`` (such as
``lessons/results/layers``, which holds the committed figures) lands there and not in the
checkout; ``make bench`` lines run from the repository's root, through make as printed, with
``--output`` into the test's folder added to ``ARGS``. Commands that differ only in their time
options and output folder run once (through make where a page prints it so). Nor does a
``bench layers``, ``servers`` or ``workers`` command run whose rows another command measures
with the same other options (lesson 5's ``layers --compare toy-httptools`` is a part of
lesson 6's ``--compare toy-raw,toy-h11,toy-httptools,uvicorn-h11``): click parses its
options, its rows are planned (:func:`planned`) and its "Measure it" share is checked from
them.

The full-length runs are the committed results the pages include, and no page prints them:
``make lesson-results`` writes every folder of ``lessons/results/``, one Makefile line each,
and each folder's ``results.json`` must record that line's command, so a page cannot show
figures that line did not write. Those lines run here shortened too. A page's commands write
under ``results/`` (a reader's run never overwrites what a page includes), and a "Measure it"
section takes under a minute of load as printed: checked here from the rows each shortened
run measured and the time options the page prints (or the defaults).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main

from bench import layers
from bench.cli import app
from bench.command import names, row_names
from bench.native import ensure_axum, ensure_wsload, find_cargo
from bench.workers import ROW_NAMES, parse_concurrency
from bench.wstest import QUICK_EXCLUDE, find_wstest
from tests.support.pages import BIN, ROOT, blocks, section
from tests.test_bench import check_a_layers_run
from tests.test_bench_cluster import check_a_whole_run
from tests.test_bench_conformance import check_the_matrices

LESSONS = ROOT / "lessons"
#: The options every subcommand with a duration takes, at their least: click keeps the last;
#: and autobahn's cases that wait on Autobahn's clock, left out.
SHORTEST = {"--duration": "1", "--runs": "1", "--warmup": "0",
            "--exclude": ",".join(QUICK_EXCLUDE)}
#: What each subcommand takes of :data:`SHORTEST` (concurrency has no duration: it times one
#: burst of requests; profile has one run and no warm-up; conformance runs the suite).
TIME_OPTIONS = {
    "layers": ("--duration", "--runs", "--warmup"),
    "servers": ("--duration", "--runs", "--warmup"),
    "load": ("--duration", "--runs", "--warmup"),
    "workers": ("--duration", "--runs", "--warmup"),
    "h2": ("--duration", "--runs", "--warmup"),
    "cluster": ("--duration", "--runs", "--warmup"),
    "concurrency": ("--runs", "--warmup"),
    "profile": ("--duration",),
    "conformance": (),
    "autobahn": ("--exclude",),
    "download": (),
    "ws": ("--duration", "--runs", "--warmup"),
}
#: A "Measure it" section's bench commands, all together, take at most this much load, seconds:
#: rows x (warm-up + runs x duration), with the options as printed; for ``bench ws``, plus its
#: idle rows x runs x the seconds each run holds its idle connections open.
MEASURE_IT_SECONDS = 60
#: The tools a subcommand drives (make test installs them all).
TOOLS = {"layers": ("wrk",), "servers": ("wrk", "redis-server"), "load": ("wrk",),
         "workers": ("wrk",), "h2": ("wrk", "h2load"), "cluster": ("wrk", "nginx", "haproxy"),
         "concurrency": (), "profile": ("wrk",), "conformance": (), "autobahn": (),
         "download": (), "ws": ()}  # ws drives its own client, built with cargo (checked below)


@dataclass(frozen=True)
class PageCommand:
    """One ``bench`` command as a page prints it.

    Attributes:
        page: the page's file name (``Makefile`` for ``make lesson-results``' lines).
        text: the command, continuation lines joined, comment cut.
        via_make: printed as ``make bench ARGS="..."`` rather than ``.venv/bin/bench ...``.
        args: the arguments after ``bench`` (for make: the words of ``ARGS``).
        section: the title of the ``##`` section that prints it ("" for prose mentions).
    """

    page: str
    text: str
    via_make: bool
    args: tuple[str, ...]
    section: str = ""

    @property
    def subcommand(self) -> str:
        return self.args[0]

    def key(self) -> tuple[str, ...]:
        """What the shortened run depends on: the arguments without the time options and
        ``--output`` (and their values)."""
        dropped = {*TIME_OPTIONS[self.subcommand], "--output"}
        kept, skip = [], False
        for word in self.args:
            if skip:
                skip = False
            elif word in dropped:
                skip = True
            elif word.split("=", 1)[0] not in dropped:
                kept.append(word)
        return tuple(kept)

    def shortened(self) -> list[str]:
        """The arguments as printed, then the time options at their least."""
        extra = [w for option in TIME_OPTIONS[self.subcommand]
                 for w in (option, SHORTEST[option])]
        return [*self.args, *extra]


def option(self: PageCommand, name: str) -> int:
    """The value of time option ``name`` (``--duration``...) as printed, or its default; the
    last one printed wins, as in click."""
    value = None
    for word, following in zip(self.args, self.args[1:], strict=False):
        if word == name:
            value = following
    if value is None:
        command = GROUP.commands[self.subcommand]
        value = next(p.default for p in command.params if p.opts[0] == name)
    return int(value)  # type: ignore[arg-type]


def load_seconds(command: PageCommand, rows: int, idle_rows: int = 0, hold: float = 0.0
                 ) -> float:
    """Seconds of load ``command`` puts on ``rows`` rows as printed: each row's warm-up, then
    every run (the interleaved rounds run each row once per run); and on ``idle_rows`` (bench
    ws: one per server), each run's ``hold`` seconds with its idle connections open (a fresh
    server per run, no warm-up)."""
    runs = option(command, "--runs")
    return (rows * (option(command, "--warmup") + runs * option(command, "--duration"))
            + idle_rows * runs * hold)


def parse(page: str, line: str, section: str = "") -> PageCommand | None:
    """The command on ``line``, or None when the line is no ``bench`` command (or elides its
    arguments with ``...``, as prose does: ``make bench ARGS="servers ..."``). Prose that
    names a command without its path (``bench servers --endpoints longbody``) counts as the
    ``.venv/bin/bench`` command."""
    line = line.split(" #", 1)[0].strip()
    if "..." in line:
        return None
    if line.startswith(("bench ", ".venv/bin/bench ", "$(VENV)/bin/bench ")):
        return PageCommand(page, line, False, tuple(shlex.split(line)[1:]), section)
    match = re.fullmatch(r'make bench ARGS="([^"]+)"', line)
    if match:
        return PageCommand(page, line, True, tuple(shlex.split(match.group(1))), section)
    return None


def page_commands(prose: bool = False) -> list[PageCommand]:
    """Every ``bench`` command on every page, in page order: ``sh`` block lines, then inline
    code spans that hold a whole command (``.venv/bin/bench ...``, ``make bench ARGS=...``);
    with ``prose``, also the spans that name one without its path (``bench workers ...``)."""
    found = []
    start = r"\.venv/bin/bench|make bench|bench" if prose else r"\.venv/bin/bench|make bench"
    for page in sorted(LESSONS.glob("*.md")):
        text = page.read_text()
        assert not re.search(r"^ *```(bash|shell|console)\b", text, re.MULTILINE), (
            f"{page.name}: commands go in ```sh blocks, the ones the tests read")
        parts = re.split(r"^## (.+)\n", text, flags=re.M)
        for title, body in zip(["", *parts[1::2]], parts[::2], strict=True):
            lines = [line for block in blocks(body, "sh")
                     for line in block.replace("\\\n", " ").splitlines()]
            found += [c for c in (parse(page.name, line, title) for line in lines) if c]
        spans = re.findall(rf"`((?:{start}) [a-z][^`]*)`", text)
        found += [c for c in (parse(page.name, line) for line in spans) if c is not None]
    return found


def lesson_results() -> list[PageCommand]:
    """The bench lines of the Makefile's ``lesson-results`` target, which writes
    ``lessons/results/``."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nlesson-results:", 1)[1].split("\n\n", 1)[0]
    lines = [line.strip() for line in recipe.splitlines()[1:]]
    return [c for c in (parse("Makefile", line) for line in lines) if c is not None]


def distinct(commands: list[PageCommand]) -> list[PageCommand]:
    """One command per :meth:`PageCommand.key`: the first page that prints it. Where a ``make
    bench`` line and a ``.venv/bin/bench`` line print the same arguments, the make line runs:
    it runs the same bench after make's own steps, so both paths are checked."""
    seen: dict[tuple[str, ...], PageCommand] = {}
    for command in sorted(commands, key=lambda c: not c.via_make):  # stable: page order
        seen.setdefault(command.key(), command)
    return sorted(seen.values(), key=commands.index)


#: The pages' commands, read once: those printed as commands, and with the prose mentions;
#: then the lines that write the committed results.
COMMANDS = page_commands()
MENTIONED = page_commands(prose=True)
COMMITTED = lesson_results()
#: ``bench conformance`` over every server is the conformance suite itself, which ``make test``
#: runs; its shortened form is the pages' ``--servers`` runs. ``bench layers --count
#: instructions`` has no time options to shorten (every row under callgrind: minutes); its
#: own tests run it (tests/test_bench_instructions.py, tests/test_instruction_counts.py). The
#: committed ``bench autobahn`` plays all 517 cases on five servers (30 min); the pages' runs
#: of a few sections, and the conformance suite's autobahn row, check the command. The
#: committed ``bench ws``, even shortened, holds 1,000 idle connections on every WebSocket
#: server (80 s), and the committed ``bench h2`` runs every row of every workload (92 s): the
#: pages' shorter runs (lesson 13, servers.md; lesson 10's ``make h2``) check those commands.
DISTINCT = distinct([*COMMANDS, *(c for c in COMMITTED
                                  if c.subcommand not in ("conformance", "autobahn", "ws", "h2")
                                  and "--count" not in c.args)])
#: The CLI as click sees it, with a subcommand per experiment.
GROUP = typer.main.get_command(app)
#: Per subcommand whose rows are known before it runs, the options that only choose rows.
ROW_OPTIONS = {"layers": {"server", "compare", "compare_layers", "axum", "bare", "wsgi",
                          "wsgi_threads"},
               "servers": {"server", "compare", "endpoints"},
               "workers": {"compare", "concurrency"}}


def planned(command: PageCommand) -> tuple[dict[str, Any], frozenset[Any]] | None:
    """For a ``bench layers`` (timed), ``bench servers`` or ``bench workers`` command: its
    options other than the rows' and the time options, as click parses them, and the rows it
    would measure (layers: :func:`bench.layers.plan_rows`; servers: each server at each
    endpoint; workers: each row at each concurrency). None for the other subcommands."""
    name = command.subcommand
    if name not in ROW_OPTIONS:
        return None
    params = GROUP.commands[name].make_context(name, list(command.args[1:])).params
    if name == "layers":
        if params["count"] != "time":
            return None
        settings = layers.Settings(
            server=params["server"], compare=names(params["compare"]),
            compare_layers=names(params["compare_layers"]), axum=params["axum"],
            bare=params["bare"], wsgi=params["wsgi"], wsgi_threads=params["wsgi_threads"])
        rows = frozenset(layers.plan_rows(settings))
    elif name == "servers":
        servers = dict.fromkeys((params["server"], *names(params["compare"])))
        rows = frozenset((server, endpoint) for server in servers
                         for endpoint in names(params["endpoints"]))
    else:
        rows = frozenset((row, connections) for row in row_names(params["compare"], ROW_NAMES)
                         for connections in parse_concurrency(params["concurrency"]))
    skipped = {*ROW_OPTIONS[name], *(o.lstrip("-") for o in TIME_OPTIONS[name]), "output"}
    return {k: v for k, v in params.items() if k not in skipped}, rows


def covered(commands: list[PageCommand]) -> dict[PageCommand, PageCommand]:
    """The commands whose run another one's covers: the same subcommand and options but for
    the rows (and time options and output), and rows all among the other's (where the rows
    are the same, the first printed covers the later). ``make bench`` lines always run.
    Command -> the one that covers it."""
    plans = {c: plan for c in commands if (plan := planned(c)) is not None}
    found = {}
    for command, (rest, rows) in plans.items():
        for other, (other_rest, other_rows) in plans.items():
            if command.via_make or other is command or command.subcommand != other.subcommand:
                continue
            if rest == other_rest and (rows < other_rows or (
                    rows == other_rows and commands.index(other) < commands.index(command))):
                found[command] = other
                break
    return found


#: The commands that run: one per key, less those another one's run covers (their rows are
#: measured there, with the same settings; their options are parsed below).
COVERED = covered(DISTINCT)
RUN = [c for c in DISTINCT if c not in COVERED]


def test_the_pages_print_every_experiment() -> None:
    """The collection is not empty by accident: every subcommand appears on some page."""
    assert {c.subcommand for c in COMMANDS} == set(TIME_OPTIONS)
    assert len(COMMANDS) >= 20


@pytest.mark.parametrize("command", MENTIONED, ids=lambda c: f"{c.page}:{c.text}")
def test_every_bench_command_parses_as_printed(command: PageCommand) -> None:
    """Every printed command, prose mentions and its own durations included, names a
    subcommand and options that exist, with values of the right type and in range: click
    parses and converts the arguments as ``bench`` would, without running the experiment."""
    assert isinstance(GROUP, typer.core.TyperGroup)
    subcommand = GROUP.commands.get(command.subcommand)
    assert subcommand is not None, f"{command.text}: no subcommand {command.subcommand!r}"
    try:
        subcommand.make_context(command.subcommand, list(command.args[1:]))
    except typer._click.exceptions.ClickException as exc:  # the CLI's own click
        pytest.fail(f"{command.text}: {exc.format_message()}")
    except typer.Exit as exc:  # --help: printed, then exit status 0
        assert exc.exit_code == 0 and "--help" in command.args, command.text


def output_of(command: PageCommand) -> str | None:
    """Where ``command`` writes (its ``--output``), None for bench's default, ``results/``."""
    return command.args[command.args.index("--output") + 1] if "--output" in command.args else None


def test_make_lesson_results_writes_every_committed_folder() -> None:
    folders = sorted(p.name for p in (ROOT / "lessons" / "results").iterdir()
                     if p.is_dir() and any(p.glob("*.json")) and p.name != "published")
    written = sorted(Path(output_of(c) or "").name for c in COMMITTED)
    assert written == folders, (written, folders)
    assert all(output_of(c) == f"lessons/results/{Path(output_of(c) or '').name}"
               for c in COMMITTED)


@pytest.mark.parametrize("command", [c for c in COMMITTED if c.subcommand != "conformance"],
                         ids=lambda c: c.text)
def test_committed_results_were_written_by_make_lesson_results(command: PageCommand) -> None:
    folder = ROOT / (output_of(command) or "")
    recorded = json.loads((folder / "results.json").read_text())["command"]
    assert recorded[0] == "bench" and recorded[1:] == list(command.args), recorded


@pytest.mark.parametrize("command", MENTIONED, ids=lambda c: f"{c.page}:{c.text}")
def test_a_readers_run_never_overwrites_what_a_page_includes(command: PageCommand) -> None:
    """The committed figures change only through ``make lesson-results``: a command a page
    prints writes under ``results/`` (bench's default), never into ``lessons/``."""
    assert not (output_of(command) or "").startswith("lessons/"), command.text


def test_every_measure_it_section_prints_bench_commands() -> None:
    measure_it = {c.page for c in COMMANDS if c.section == "Measure it"}
    pages = {p.name for p in LESSONS.glob("[01]*.md")}
    assert measure_it == pages, pages - measure_it


def results_file(folder: Path) -> Path:
    """The one ``results.json`` (or conformance's first ``matrix*.json``) the run wrote under
    ``folder``: in it, or in the ``--output`` or default folder below it."""
    found = sorted(folder.rglob("results.json")) or sorted(folder.rglob("matrix*.json"))
    assert len(found) >= 1, f"no results file under {folder}: {sorted(folder.rglob('*'))}"
    return found[0]


def written(folder: Path) -> dict[str, Any]:
    """What :func:`results_file` holds."""
    return dict(json.loads(results_file(folder).read_text()))


def check_report(command: PageCommand, data: dict[str, Any]) -> None:
    """What every report of this subcommand must hold after a run that went well."""
    if command.subcommand == "profile":
        assert data["server_exit_status"] is not None
        return
    if command.subcommand == "conformance":
        return
    rows = data["rows"]
    if command.subcommand == "cluster":  # a table per scenario; "rows" is the hop's
        rows = [*rows, *data["balance"], *data["failover"], *data["rolling"],
                *data["websocket"]]
    if command.subcommand == "ws":  # "rows" is the echo's; the idle table has a row per server
        rows = [*rows, *data["idle"]]
    assert rows, "no row was measured"
    # "skipped" is a row the report explains and a student can fix (bjoern not built, gevent
    # missing: the page says how); "failed" is a server that did not start or answer.
    failed = [(row.get("server"), row.get("error")) for row in rows
              if row["status"] != "ok" and not (row["status"] == "skipped" and row["error"])]
    assert not failed, f"rows that did not run: {failed}"
    assert any(row["status"] == "ok" for row in rows)
    args = command.args
    if "--compare" in args and args[0] == "layers":
        compared = {name for name in args[args.index("--compare") + 1].split(",") if name}
        assert compared <= {row["server"] for row in rows}


@pytest.mark.slow
@pytest.mark.wrk
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("command", RUN, ids=lambda c: f"{c.page}:"
                         f"{'make ' if c.via_make else ''}{shlex.join(c.key())}")
def test_page_bench_command_runs_to_a_report(command: PageCommand, tmp_path: Path) -> None:
    needed = (*TOOLS[command.subcommand], *(("wrk", "curl") if command.via_make else ()))
    missing = [tool for tool in needed if shutil.which(tool) is None]
    if command.subcommand == "autobahn" and find_wstest() is None:
        missing.append("Autobahn|Testsuite")
    if command.subcommand == "ws" and find_cargo() is None:
        missing.append("cargo (bench ws builds its load generator with it)")
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (make test installs it)")
    if command.subcommand == "layers" and "--no-axum" not in command.args and find_cargo():
        # the axum row builds its binary with cargo on first use (minutes on a new machine):
        # build it here, under this test's own timeout, not under the run's below
        build = ensure_axum()
        assert build.binary is not None, build.note
    if command.subcommand == "ws":  # likewise its load generator, ws-load
        build = ensure_wsload()
        assert build.binary is not None, build.note
    out = tmp_path / "out"
    if command.via_make:
        if BIN != ROOT / ".venv" / "bin":
            pytest.skip("make bench runs the checkout's .venv, and this is another interpreter")
        args = shlex.join([*command.shortened(), "--output", str(out)])
        argv = ["make", "--no-print-directory", "bench", f"ARGS={args}"]
        cwd = ROOT
    else:
        out.mkdir()
        argv = [str(BIN / "bench"), *command.shortened()]
        cwd = out
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, (shlex.join(argv), result.stdout[-3000:],
                                    result.stderr[-3000:])
    assert "wrote " in result.stdout, result.stdout[-3000:]
    data = written(out)
    check_report(command, data)
    check_measure_it_time(command, data)
    check_whole_run(command, results_file(out).parent, result.stdout)


@pytest.mark.parametrize("command", list(COVERED), ids=lambda c: f"{c.page}:{shlex.join(c.key())}")
def test_a_covered_command_is_checked_from_the_rows_it_plans(command: PageCommand) -> None:
    """A command whose run another one's covers (:func:`covered`) is not run: its rows are
    measured in that run, and its "Measure it" share is checked here from the rows it plans
    (the axum row counted, as on a machine with cargo)."""
    plan = planned(command)
    assert plan is not None
    check_measure_it_time(command, {"rows": list(plan[1])})


def check_whole_run(command: PageCommand, out: Path, stdout: str) -> None:
    """For the experiments whose real runs in make test are the pages' commands, the checks
    their own test module makes of a whole run's output (``out``, the folder it wrote, and
    ``stdout``): ``bench layers`` (timed, without --wsgi), ``bench cluster`` with every
    scenario, and ``bench conformance``'s matrices for the servers named."""
    if command.subcommand == "layers" and "--wsgi" not in command.args \
            and "--count" not in command.args:
        check_a_layers_run(out, stdout)
    elif command.key() == ("cluster",):
        check_a_whole_run(out)
    elif command.subcommand == "conformance":
        named = command.args[command.args.index("--servers") + 1].split(",")
        check_the_matrices(out, named)


def check_measure_it_time(command: PageCommand, data: dict[str, Any]) -> None:
    """Every "Measure it" command with ``command``'s key takes its share of a minute of load
    as printed: :data:`MEASURE_IT_SECONDS` over the number of bench commands its section
    prints, from the rows this shortened run measured (skipped ones included: on a machine
    with bjoern they run), bench ws's idle rows with theirs."""
    if command.subcommand not in ("layers", "servers", "load", "workers", "h2", "ws"):
        return  # concurrency and profile have no runs x duration (and no Measure it)
    rows = len(data["rows"])
    idle_rows = len(data.get("idle", []))  # bench ws: a row per server, unless --idle 0
    hold = float(data["settings"]["idle_hold_s"]) if idle_rows else 0.0
    for printed in COMMANDS:
        if printed.section != "Measure it" or printed.key() != command.key():
            continue
        share = MEASURE_IT_SECONDS / sum(1 for c in COMMANDS if c.page == printed.page
                                         and c.section == "Measure it")
        seconds = load_seconds(printed, rows, idle_rows, hold)
        assert seconds <= share, (
            f"{printed.page}: {printed.text} puts {seconds:g} s of load on {rows} rows"
            f"{f' and {idle_rows} idle rows' if idle_rows else ''}; a "
            f"Measure it section takes under {MEASURE_IT_SECONDS} s, {share:g} s for this one")
        # what the section says of its one command: "45 seconds of load", "9 rows"
        if share == MEASURE_IT_SECONDS:
            text = " ".join(section(LESSONS / printed.page, "Measure it").split())
            for said in re.findall(r"(\d+) seconds of load", text):
                assert int(said) == seconds, f"{printed.page} says {said} s, it is {seconds}"
            for said in re.findall(r"(\d+) rows", text)[:1]:
                assert int(said) == rows, f"{printed.page} says {said} rows, it is {rows}"
