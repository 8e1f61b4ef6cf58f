"""How ``bench layers --count instructions`` reports: what a row's count is (:class:`Count`,
:class:`Windows`: :mod:`bench.instructions` makes them, this module reads them), each row's
figures, the table, the "How it ran" lines, and the files it writes.

The arithmetic (:func:`per_request`, :func:`added`, :func:`ratio`) is on instructions per
request; a row is compared with the row :func:`bench.layers.below_of` names, as in the
wall-clock table. Everything after :func:`rows_json` reads results.json's content, so a
committed results file can be laid out again without counting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import report
from bench.layers import below_of
from bench.report import cell, provenance
from bench.rows import RowPlan

HEADERS = ["Layer", "Server", "instructions/req", "added", "× below"]
RIGHT = [False, False, True, True, True]
TITLE = "bench layers --count instructions: the cost of each layer"


@dataclass
class Count:
    """One row's outcome: ``status`` ``"ok"`` with ``instructions`` (what ``requests``
    requests cost: :attr:`Windows.requests_only`) and the :class:`Windows` it came from, or
    ``"failed"`` with ``error`` and the server's ``log_tail``. ``command`` is the exact argv
    (valgrind's and the server's); ``dump`` the busy window's file name."""

    plan: RowPlan
    command: list[str] = field(default_factory=list)
    status: str = "ok"
    requests: int = 0
    instructions: int | None = None
    windows: Windows | None = None
    dump: str | None = None
    error: str | None = None
    log_tail: str | None = None


@dataclass(frozen=True)
class Windows:
    """The two windows :func:`bench.instructions.count_server` counts: ``busy`` instructions
    while ``requests`` requests were served in ``seconds`` seconds, then ``idle`` instructions
    in as many seconds with no connection open; ``command`` the exact argv."""

    busy: int
    idle: int
    seconds: float
    command: list[str]

    @property
    def requests_only(self) -> int:
        """The busy window less the idle one: what the server did by the clock cancels."""
        return self.busy - self.idle


def per_request(instructions: int | None, requests: int) -> float | None:
    """Instructions per request, to 0.1; None without a count (or without requests)."""
    if instructions is None or requests <= 0:
        return None
    return round(instructions / requests, 1)


def added(value: float | None, below: float | None) -> float | None:
    """Instructions per request this row adds over the row below (negative when it needs
    fewer); None when either is missing."""
    if value is None or below is None:
        return None
    return round(value - below, 1)


def ratio(value: float | None, below: float | None) -> float | None:
    """This row's instructions per request over the row below's, to 0.001; None when either
    is missing or the one below is 0."""
    if value is None or not below:
        return None
    return round(value / below, 3)


def rows_json(counts: list[Count]) -> list[dict[str, Any]]:
    """results.json's ``rows``, one per count, in order.

    Keys: ``layer``, ``server``, ``interface``, ``description``, ``app``, ``status``,
    ``error``, ``log_tail``, ``command`` (valgrind's and the server's argv), ``requests``,
    ``instructions`` (what the requests cost: ``busy_instructions``, counted over
    ``window_s`` seconds while they were served, less ``idle_instructions``, counted over as
    long with no connection), ``instructions_per_request``,
    ``added_per_request``, ``ratio_to_below``, ``below`` (``"layer/server"`` or None) and
    ``dump`` (the callgrind file, relative to the output folder, or None).
    """
    plans = [c.plan for c in counts]
    done: dict[Any, dict[str, Any]] = {}
    rows = []
    for count in counts:
        plan, windows = count.plan, count.windows
        below_plan = below_of(plan, plans)
        below = done.get(below_plan) if below_plan is not None else None
        value = per_request(count.instructions, count.requests)
        below_value = below["instructions_per_request"] if below else None
        row = {
            "layer": plan.layer, "server": plan.server, "interface": plan.interface,
            "description": plan.description, "app": plan.app, "status": count.status,
            "error": count.error, "log_tail": count.log_tail, "command": count.command,
            "requests": count.requests, "instructions": count.instructions,
            "busy_instructions": windows.busy if windows else None,
            "idle_instructions": windows.idle if windows else None,
            "window_s": windows.seconds if windows else None,
            "instructions_per_request": value, "added_per_request": added(value, below_value),
            "ratio_to_below": ratio(value, below_value),
            "below": f"{below['layer']}/{below['server']}" if below else None,
            "dump": count.dump,
        }
        done[plan] = row
        rows.append(row)
    return rows


def table_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    """The formatted cells of each row, in :data:`HEADERS` order; a failed row says so in
    the count column and leaves the rest empty."""
    cells = []
    for row in rows:
        if row["instructions_per_request"] is None:
            cells.append([row["layer"], row["server"], row["status"], "–", "–"])
            continue
        cells.append([row["layer"], row["server"], f"{row['instructions_per_request']:,.0f}",
                      cell(row["added_per_request"], "+,.0f"),
                      cell(row["ratio_to_below"], ".2f", "×")])
    return cells


def how_it_ran(data: dict[str, Any]) -> list[str]:
    """The "how it ran" lines of the report, from results.json's content."""
    s = data["settings"]
    lines = [
        f"{data['valgrind']['version']} callgrind: {s['requests']:,} requests counted per row "
        f"after {s['warmup_requests']:,} uncounted, on {s['connections']} keep-alive "
        "connection, each sent once the server slept in epoll_wait; start-up, connects and "
        "closes are not counted, and as long a time idle is subtracted (what the server does "
        f"by the clock); PYTHONHASHSEED={s['pythonhashseed']}; rows counted {s['jobs']} at a "
        "time",
        "the request is wrk's POST/JSON test, byte for byte; two runs agree within 0.3 %, "
        "busy machine or not (bench/instructions.py says why not exactly)",
        f"ASGI rows on {s['server']}; compared in the {', '.join(s['compare_layers'])} rows: "
        + (", ".join(s["compare"]) or "none"),
    ]
    if s["bare"]:
        lines.append("bare: the pure ASGI app on lessons/code/05-speed/bare_httptools.py "
                     "(httptools, one Task per request, keep-alive, no checks, limits or "
                     "timers): a baseline nobody should deploy, not a server")
    lines.append(data["axum"]["note"])
    lines += provenance(data)
    asgi = "bare with asyncio and the other asgi rows with bare" if s["bare"] else \
        "asgi with asyncio"
    lines.append(f"added and × below compare {asgi}; starlette with asgi on the same server, "
                 "fastapi with starlette; callgrind_annotate on a row's dump (callgrind/ in "
                 "the output folder) says where its instructions go")
    return lines


def write_outputs(out: Path, data: dict[str, Any]) -> list[Path]:
    """Write results.json and results.md into ``out``; return their paths."""
    rows = data["rows"]
    notes = [f"{r['layer']} ({r['server']}) {r['status']}: {r['error']}"
             for r in rows if r["status"] != "ok"]
    json_path, md_path = out / "results.json", out / "results.md"
    report.write_json(json_path, data)
    report.write_markdown(md_path, TITLE, how_it_ran(data), HEADERS, table_cells(rows), notes,
                          RIGHT)
    return [json_path, md_path]
