"""How ``bench profile`` reports: pyinstrument's call trees, and cProfile's table of the top
functions with µs per request.

``profile.txt`` and ``profile-top.txt`` (pyinstrument: the call tree down to branches of 1 %
and of :data:`TOP_THRESHOLD` of the profiled wall time) and ``profile.html``; or, for cProfile,
``profile.txt`` built from ``profile.pstats`` (:func:`pstats_table`). Paths are shown relative
to site-packages, the standard library or this repository.
"""

from __future__ import annotations

import io
import os
import pstats
import subprocess
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Rows in each table of the cProfile report.
TOP = 25
#: pyinstrument's ``profile-top.txt`` keeps branches with at least this share of the time.
TOP_THRESHOLD = 0.03
#: Files whose frames pyinstrument's call tree keeps visible (it folds other library frames).
SHOW_REGEX = (r".*[\\/](apps|toyservers|bench|uvicorn|starlette|fastapi|pydantic|msgspec|"
              r"httptools|h11|anyio)[\\/].*")
ROOT = Path(__file__).resolve().parent.parent


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


def write_callgrind(dump: Path, out: Path, annotate: str, total: int, requests: int
                    ) -> list[Path]:
    """``profile.txt`` from a callgrind dump of ``total`` instructions over ``requests``
    requests: ``callgrind_annotate``'s functions by inclusive instructions (the function and
    what it calls), then by self (its body alone); return its path.

    CPython's functions appear as the C functions of the interpreter (a Python function's
    body is ``_PyEval_EvalFrameDefault``), so the table says where instructions go between
    the interpreter, the parsers in C (httptools, uvloop) and libc; cProfile splits the Python.

    Raises:
        RuntimeError: callgrind_annotate failed.
    """
    sections = []
    for inclusive, title in (("yes", "inclusive (the function and what it calls)"),
                             ("no", "self (the function's body alone)")):
        done = subprocess.run([annotate, f"--inclusive={inclusive}", str(dump)],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"callgrind_annotate failed: {done.stderr.strip()[-300:]}")
        sections.append(f"=== By {title} ===\n{done.stdout}")
    head = (f"callgrind: {total:,} instructions over {requests:,} requests, "
            f"{total / requests:,.0f} per request ({dump.name}: callgrind_annotate FILE)\n\n")
    path = out / "profile.txt"
    path.write_text(head + "\n".join(sections), encoding="utf-8")
    return [path]


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
