"""What every ``bench`` subcommand does around its measurement, written once.

A subcommand parses its flags, then measures inside :func:`user_mistakes` (a mistake in the
flags or the output folder becomes one line and exit status 2; Ctrl-C stops the servers
started so far and exits 130), then hands its table to :func:`finish`, which prints it,
writes the files and exits 1 when no row produced a figure. The exit statuses are the ones
the CLI tests check: 0 done, 1 every row failed, 2 a user's mistake, 130 interrupted.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from bench import report
from bench.harness import UsageProblem


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
