"""Writers shared by every ``bench`` subcommand: a rich table, results.json/.md, a bar chart.

A table is given as column headers plus rows of already formatted cells (:func:`cell`), so
each experiment decides its columns and this module only lays them out. :func:`prepare_output`
checks an output folder is writable before any measuring starts; :func:`load_published` reads
the published figures an experiment stands beside; :func:`provenance` gives the lines every
report ends "How it ran" with.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

#: The published figures each experiment compares with: ``<experiment>.json``.
PUBLISHED_DIR = Path(__file__).resolve().parent / "published"


def progress_bar(console: Console) -> Progress:
    """The progress bar every subcommand shows while it measures: what runs now, and runs
    done out of the total (one task's ``completed``/``total`` counts runs)."""
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                    TextColumn("{task.completed}/{task.total} runs"), TimeElapsedColumn(),
                    console=console)


class RichProgress:
    """The harness's :class:`bench.harness.Progress` on one task of a rich progress bar."""

    def __init__(self, progress: Progress, task: Any) -> None:
        self.progress = progress
        self.task = task

    def update(self, description: str) -> None:
        """Say what runs now."""
        self.progress.update(self.task, description=description)

    def advance(self, steps: int = 1) -> None:
        """Count ``steps`` runs done."""
        self.progress.advance(self.task, steps)


class OutputError(RuntimeError):
    """The output folder cannot be created or written; the message says which and why."""


def default_output(name: str, now: datetime | None = None, root: Path = Path("results")) -> Path:
    """``results/<name>-YYYYmmdd-HHMMSS`` for ``now`` (local time)."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    return root / f"{name}-{stamp}"


def prepare_output(path: Path) -> Path:
    """Create ``path`` (and parents) and prove it is writable by writing a probe file.

    Raises:
        OutputError: the folder cannot be created or written.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OutputError(f"cannot write results to {path}: {reason}") from None
    return path


def load_published(name: str, folder: Path = PUBLISHED_DIR) -> dict[str, Any]:
    """The published figures of experiment ``name`` (``bench/published/<name>.json``).

    Raises:
        OSError: the file cannot be read; ValueError: it is not JSON.
    """
    data: dict[str, Any] = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
    return data


def cell(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    """One table cell: ``value`` formatted by ``spec`` with ``suffix``, or "–" for None."""
    return "–" if value is None else f"{value:{spec}}{suffix}"


def added_cell(row: dict[str, Any]) -> str:
    """The "µs added" cell of a compared row (:func:`bench.stats.comparison_columns`): the
    median over rounds with the rounds' min…max, or ``noise`` and the range when the rounds
    disagree on the sign, so a difference the machine's noise could have made is never
    printed as a fact."""
    if row.get("us_added") is None:
        return "–"
    spread = f"{row['us_added_min']:+.1f}…{row['us_added_max']:+.1f}"
    if row.get("noisy"):
        return f"noise ({spread})"
    if row.get("rounds_compared", 0) < 2:
        return f"{row['us_added']:+.1f}"
    return f"{row['us_added']:+.1f} ({spread})"


def pct_cell(row: dict[str, Any]) -> str:
    """The "% of below" cell: the median over rounds with their min–max, ``*`` when they
    spread more than :data:`bench.stats.SPREAD_LIMIT`."""
    if row.get("pct_of_below") is None:
        return "–"
    if row.get("rounds_compared", 0) < 2:
        return f"{row['pct_of_below']:.1f} %"
    flag = " *" if row.get("pct_spread_flag") else ""
    return f"{row['pct_of_below']:.1f} % ({row['pct_min']:.0f}–{row['pct_max']:.0f}){flag}"


def noise_notes(rows: list[dict[str, Any]], first: str = "layer",
                exact: str | None = None) -> list[str]:
    """One sentence per compared row whose rounds disagree on which row is faster, naming
    the rows as "<first> (<server>)"; ``exact`` names a command that counts instructions
    instead of timing, where there is one."""
    notes = []
    for row in rows:
        if row.get("noisy"):
            layer, server = str(row["below"]).split("/", 1)
            notes.append(
                f"{row[first]} ({row['server']}) against {layer} ({server}): the rounds gave "
                f"{row['us_added_min']:+.1f} to {row['us_added_max']:+.1f} µs added, so this "
                "run cannot say which is faster; the machine was too noisy for that claim "
                "(try more --runs or a quieter machine"
                + (f", or {exact}, which counts instructions instead of timing)" if exact
                   else ")"))
    return notes


def provenance(data: dict[str, Any]) -> list[str]:
    """The machine line and the git line of a results.json's content (``machine``,
    ``python``, ``date``, ``git`` as :func:`bench.harness.environment` records them)."""
    machine, git = data["machine"], data.get("git")
    return [f"machine: {machine['cpu_model']}, {machine['cores']} cores; "
            f"Python {data['python']['version']}; {data['date']}",
            "toyservers: not a git checkout" if git is None else
            f"toyservers at commit {git['commit'][:12]}"
            + (", with uncommitted changes" if git["dirty"] else "")]


def write_json(path: Path, data: dict[str, Any]) -> None:
    """``data`` as indented UTF-8 JSON with a final newline."""
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
                   right: Sequence[bool] | None = None) -> str:
    """A GitHub-flavoured Markdown table; ``right[i]`` right-aligns column ``i``."""
    align = right or [False] * len(headers)

    def escape(cell: str) -> str:
        return cell.replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(escape(h) for h in headers) + " |",
        "|" + "|".join("---:" if r else "---" for r in align) + "|",
    ]
    lines += ["| " + " | ".join(escape(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, title: str, how: Sequence[str], headers: Sequence[str],
                   rows: Sequence[Sequence[str]], notes: Sequence[str] = (),
                   right: Sequence[bool] | None = None) -> None:
    """A Markdown report: a title, the table, then "How it ran" and notes as bullet lists.

    The title and the parts are bold lines, not headings: the lesson pages include these
    files inside an admonition, where a heading would enter the page's table of contents
    (an ``#`` there hid every section after it from the sidebar)."""
    parts = [f"**{title}**\n", markdown_table(headers, rows, right), "**How it ran**\n"]
    parts.append("".join(f"- {line}\n" for line in how))
    if notes:
        parts.append("\n**Notes**\n\n" + "".join(f"- {note}\n" for note in notes))
    path.write_text("\n".join(parts), encoding="utf-8")


def rich_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]],
               caption: str = "", right: Sequence[bool] | None = None) -> Table:
    """The same table for the terminal."""
    align = right or [False] * len(headers)
    table = Table(title=title, caption=caption, caption_justify="left")
    for header, is_right in zip(headers, align, strict=True):
        table.add_column(header, justify="right" if is_right else "left", no_wrap=is_right)
    for row in rows:
        table.add_row(*row)
    return table


def bar_chart(path: Path, labels: Sequence[str], values: Sequence[float],
              lows: Sequence[float], highs: Sequence[float], *, title: str,
              xlabel: str, subtitle: str = "") -> None:
    """A horizontal bar chart (PNG) of ``values`` with min-max whiskers, first label on top.

    Uses matplotlib's Agg backend, so it needs no display.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height = 1.2 + 0.5 * max(len(labels), 1)
    fig, ax = plt.subplots(figsize=(9, height))
    try:
        positions = list(range(len(labels)))
        errors = [
            [max(v - lo, 0.0) for v, lo in zip(values, lows, strict=True)],
            [max(hi - v, 0.0) for v, hi in zip(values, highs, strict=True)],
        ]
        bars = ax.barh(positions, values, xerr=errors, color="#4c72b0", capsize=3)
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=6, fontsize=8)
        ax.set_yticks(positions, labels=labels)
        ax.invert_yaxis()
        ax.set_xlabel(xlabel)
        ax.set_title(title + (f"\n{subtitle}" if subtitle else ""), fontsize=10)
        ax.margins(x=0.15)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


def timeline_chart(path: Path, panels: Sequence[tuple[str, Sequence[tuple[str, float, float]]]],
                   *, title: str, subtitle: str = "") -> None:
    """One panel per ``(label, requests)``, one horizontal bar per request from its start to
    its end (seconds), in the order sent, first on top; ``"slow"`` requests in red, every
    other kind in blue. The panels share the time axis, so blocking shows as long blue bars.
    Uses matplotlib's Agg backend (PNG, no display).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    count = max(len(panels), 1)
    fig, axes = plt.subplots(count, 1, figsize=(9, 0.9 + 1.5 * count), sharex=True,
                             squeeze=False)
    try:
        colours = {"slow": "#c44e52"}
        for ax, (label, requests) in zip(axes[:, 0], panels, strict=False):
            for i, (kind, start, end) in enumerate(requests):
                ax.barh(i, max(end - start, 0.002), left=start, height=0.8,
                        color=colours.get(kind, "#4c72b0"))
            ax.set_ylim(len(requests) - 0.4, -0.6)
            ax.set_yticks([])
            ax.set_title(label, fontsize=8, loc="left")
        axes[-1, 0].set_xlabel("seconds since the burst was sent")
        fig.legend(handles=[Patch(color="#c44e52", label="slow"),
                            Patch(color="#4c72b0", label="fast")],
                   loc="upper right", fontsize=8)
        fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
