"""What every ``bench`` subcommand does around its measurement, written once.

A subcommand parses its flags, then measures inside :func:`user_mistakes` (a mistake in the
flags or the output folder becomes one line and exit status 2; Ctrl-C stops the servers
started so far and exits 130), then hands its table to :func:`finish`, which prints it,
writes the files and exits 1 when no row produced a figure. The exit statuses are the ones
the CLI tests check: 0 done, 1 every row failed, 2 a user's mistake, 130 interrupted.

Around those: the typer options several subcommands share (:data:`Duration`, :data:`Runs`,
...: one declaration, one help text), :func:`pinning_for` (the address checked, the CPUs chosen),
:func:`logs_folder`, :func:`print_outcome` (one line per measured row) and
:func:`invocation` (the command line results.json records).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.panel import Panel
from rich.progress import Progress

from bench import report
from bench.harness import Method, Pinning, UsageProblem, check_port, decide_pinning
from bench.machine import usable_cpus
from bench.rounds import Contender, Measurement, measure_rounds, steps
from bench.stats import summarize

# --- the options several subcommands take (each gives its own default) -----------------------

Connections = Annotated[int, typer.Option(min=1, help="wrk connections.")]
Threads = Annotated[int, typer.Option(min=1, help="wrk threads.")]
Duration = Annotated[int, typer.Option(min=1, help="Seconds per measured run.")]
Warmup = Annotated[int, typer.Option(min=0, help="Seconds of warm-up per row (0: none).")]
Runs = Annotated[int, typer.Option(
    min=1, help="Measured rounds: each runs every row once, so drift falls on every row alike.")]
Pin = Annotated[bool, typer.Option(help="Pin the server and wrk to separate CPUs.")]
ServerCpu = Annotated[int, typer.Option(help="CPU for the server when pinned.")]
WrkCpu = Annotated[int, typer.Option(help="CPU for wrk when pinned.")]
Host = Annotated[str, typer.Option(help="Address the servers listen on.")]
Port = Annotated[int, typer.Option(
    min=0, max=65535, help="First port: every server is up at once, row i on PORT+i (0: a free "
                           "one per row).")]


def row_names(text: str, known: Sequence[str]) -> tuple[str, ...]:
    """Row names from ``--compare`` (comma-separated), each once, in the order given.

    Raises:
        UsageProblem: it names no row, or one not in ``known``.
    """
    chosen = tuple(dict.fromkeys(names(text)))
    if not chosen:
        raise UsageProblem(f"--compare names no row (known: {', '.join(known)})")
    for name in chosen:
        if name not in known:
            raise UsageProblem(f"unknown row {name!r} (known: {', '.join(known)})")
    return chosen


def invocation() -> list[str]:
    """How ``bench`` was called, for results.json's ``command``: the program's name (``bench``
    for ``python -m bench.cli`` too) and its arguments."""
    name = Path(sys.argv[0]).name
    return ["bench" if name in ("cli.py", "__main__.py") else name, *sys.argv[1:]]


def pinning_for(method: Method, console: Console, *, client: str = "wrk",
        flags: tuple[str, str] = ("--server-cpu", "--wrk-cpu")) -> Pinning:
    """Check ``method``'s address can be bound and choose the CPUs
    (:func:`bench.harness.decide_pinning`); say so on ``console`` when pinning was asked
    for and is impossible.

    Raises:
        UsageProblem: the address or port cannot be used, or a CPU cannot.
    """
    check_port(method.host, method.port)
    pinning = decide_pinning(method, usable_cpus(), client=client, flags=flags)
    if pinning.server_cpu is None and method.pin:
        console.print(f"[yellow]note:[/] {pinning.text}")
    return pinning


def logs_folder(out: Path) -> Path:
    """``out/logs``, created: where each server's output goes."""
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return logs


def print_outcome(console: Console, label: str, measurement: Measurement,
                  unit: str = "requests/s") -> None:
    """One line for a measured row (its median RPS, in ``unit``), one for a skipped row, or a
    panel with a failed server's log tail."""
    if measurement.status == "ok":
        rps = summarize([s.rps for s in measurement.measured]).median
        console.print(f"[green]✓[/] {label}: {rps:,.0f} {unit}")
    elif measurement.status == "skipped":
        console.print(f"[yellow]–[/] {label} skipped: {measurement.error}")
    else:
        console.print(Panel(measurement.log_tail or "(empty log)",
                            title=f"[red]✗ {label} failed:[/] {measurement.error}",
                            title_align="left"))


def measure_and_print(contenders: Sequence[Contender], method: Method, pinning: Pinning,
                      progress: Progress, unit: str = "requests/s") -> list[Measurement]:
    """:func:`bench.rounds.measure_rounds` under one task of ``progress``, then one line per
    row (:func:`print_outcome`, its rate in ``unit``); the measurements in ``contenders``'
    order."""
    task = progress.add_task("starting", total=sum(steps(c, method) for c in contenders))
    measurements = measure_rounds(contenders, method, pinning,
                                  report.RichProgress(progress, task))
    for contender, measurement in zip(contenders, measurements, strict=True):
        print_outcome(progress.console, contender.label, measurement, unit)
    return measurements


def names(text: str) -> tuple[str, ...]:
    """A comma-separated flag's items, stripped, empty ones dropped (``"a, b,"``: a, b)."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def consoles(width: int = 150) -> tuple[Console, Console]:
    """The subcommand's two consoles: stdout (the terminal's width, or ``width`` columns when
    piped, so a logged table keeps its shape) and stderr (error lines, never cut)."""
    return (Console(width=None if sys.stdout.isatty() else width),
            Console(stderr=True, soft_wrap=True))


@contextmanager
def user_mistakes(errors: Console) -> Iterator[None]:
    """Run the body; a :class:`UsageProblem` or :class:`report.OutputError` becomes one
    ``error:`` line on ``errors`` and ``typer.Exit(2)``; KeyboardInterrupt becomes
    ``typer.Exit(130)`` (the harness has already stopped every server it started)."""
    try:
        yield
    except (UsageProblem, report.OutputError) as exc:
        errors.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        errors.print("interrupted: the servers started so far were stopped")
        raise typer.Exit(130) from None


def finish(console: Console, errors: Console, title: str, heads: Sequence[str],
           cells: list[list[str]], how: Iterable[str], right: Sequence[bool],
           rows: Iterable[Mapping[str, Any]], write: Callable[[], list[Path]],
           notes: Iterable[str] = ()) -> None:
    """Print the rich table (``how`` as its caption, one line each) and ``notes`` after it,
    write the files (``write()`` returns their paths) and name them; raise ``typer.Exit(1)``
    when no row has ``status == "ok"`` (every server failed to start or to answer)."""
    console.print(report.rich_table(title, list(heads), cells, "\n".join(how), list(right)))
    for line in notes:
        console.print(line, highlight=False)
    console.print("wrote " + ", ".join(str(p) for p in write()))
    if not any(row["status"] == "ok" for row in rows):
        errors.print("[bold red]error:[/] every row failed (see the logs above)")
        raise typer.Exit(1)
