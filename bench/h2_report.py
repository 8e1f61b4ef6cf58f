"""How ``bench h2`` reports: each row's results.json entry, the ratio to the reference
server, the goals of issue 11 with their arithmetic, the table, "How it ran" and the files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import report
from bench.h2_plan import (
    APP,
    DEFAULT_SERVER,
    GOAL_RATIO,
    GOAL_STREAMS,
    REFERENCE,
    WORKLOADS,
    RowPlan,
)
from bench.report import cell, provenance
from bench.rounds import Measurement
from bench.rows import measured_columns
from bench.stats import by_round, no_run_columns, paired


@dataclass
class RowResult:
    """A row's plan and what the harness measured for it."""

    plan: RowPlan
    measurement: Measurement = field(default_factory=Measurement)


def row_json(result: RowResult) -> dict[str, Any]:
    """The ``rows`` entry of results.json for one row.

    Keys: ``workload``, ``server``, ``protocol``, ``connections``, ``streams``, ``tool``,
    ``status``, ``error``, ``log_tail``, ``command`` (the server's argv); ``rps_median``,
    ``rps_runs``, ``rps_min``, ``rps_max`` (req/s), ``spread_pct``, ``spread_flag``;
    ``p50_ms``, ``p90_ms``, ``p99_ms`` (median over runs); ``errors``, ``errors_by_kind``;
    ``rss_peak_mb`` (10^6 bytes, the largest over measured runs); ``rounds``,
    ``cpu_us_per_request`` and ``cpu_us_runs`` (:func:`bench.rows.measured_columns`);
    ``vs_reference``, ``vs_reference_min``, ``vs_reference_max`` (filled by
    :func:`rows_json`); ``runs`` (every run with its load generator's argv).
    """
    plan, measurement = result.plan, result.measurement
    row: dict[str, Any] = {
        "workload": plan.workload, "server": plan.server, "protocol": plan.protocol,
        "connections": plan.connections, "streams": plan.streams,
        "tool": "wrk" if plan.protocol == "http/1.1" else "h2load",
        "status": measurement.status, "error": measurement.error,
        "log_tail": measurement.log_tail, "command": measurement.command,
        **no_run_columns(), "vs_reference": None, "vs_reference_min": None,
        "vs_reference_max": None,
        "runs": [run.to_json() for run in measurement.runs],
    }
    if measurement.status != "ok" or not measurement.measured:
        return row
    row.update(measured_columns(measurement))
    return row


def _key(row: dict[str, Any]) -> tuple[str, str, int, int]:
    return row["workload"], row["protocol"], row["connections"], row["streams"]


def rows_json(results: Sequence[RowResult]) -> list[dict[str, Any]]:
    """Every row's :func:`row_json`, with ``vs_reference``: its RPS over :data:`REFERENCE`'s
    in the same workload, protocol and sweep point, computed in each round against the
    reference's run of the same round, then the median (``_min``, ``_max``: over rounds;
    None without both rows)."""
    rows = [row_json(r) for r in results]
    reference = {_key(r): r for r in rows if r["server"] == REFERENCE}
    for row in rows:
        base = reference.get(_key(row))
        pair = paired(by_round(row), by_round(base)) if base is not None else None
        if pair is not None:
            ratio = pair.pct_of_below
            row.update(vs_reference=ratio.median / 100, vs_reference_min=ratio.minimum / 100,
                       vs_reference_max=ratio.maximum / 100)
    return rows


def goals(rows: Sequence[dict[str, Any]], server: str = DEFAULT_SERVER) -> list[dict[str, Any]]:
    """Issue 11's goals for every ``post`` sweep point at ``-m`` :data:`GOAL_STREAMS`: one
    entry per (protocol, connections) and goal, ``{"goal", "protocol", "connections", "met"
    (True, False, or None when a row is missing), "arithmetic"}``."""
    out = []
    found = {(_key(r), r["server"]): r for r in rows}
    points = sorted({(r["protocol"], r["connections"]) for r in rows
                     if r["workload"] == "post" and r["streams"] == GOAL_STREAMS})
    for protocol, connections in points:
        key = ("post", protocol, connections, GOAL_STREAMS)
        mine, theirs = found.get((key, server)), found.get((key, REFERENCE))
        where = f"post, {protocol}, -c {connections} -m {GOAL_STREAMS}"
        rps_goal = f"{server} RPS ≥ {GOAL_RATIO}× {REFERENCE}'s ({where})"
        rss_goal = f"{server} peak RSS ≤ {REFERENCE}'s ({where})"
        problem = next((f"no {name} row" if row is None else f"the {name} row {row['status']}"
                        for name, row in ((server, mine), (REFERENCE, theirs))
                        if row is None or row["status"] != "ok" or not row["rps_median"]),
                       None)
        if problem is not None or mine is None or theirs is None:
            for goal in (rps_goal, rss_goal):
                out.append({"goal": goal, "protocol": protocol, "connections": connections,
                            "met": None, "arithmetic": problem})
            continue
        ratio = mine.get("vs_reference") or mine["rps_median"] / theirs["rps_median"]
        how = (f"median over rounds of {server}/{REFERENCE} in the same round "
               f"(medians {mine['rps_median']:,.0f} and {theirs['rps_median']:,.0f})"
               if mine.get("vs_reference") else
               f"{mine['rps_median']:,.0f} / {theirs['rps_median']:,.0f}")
        out.append({"goal": rps_goal, "protocol": protocol, "connections": connections,
                    "met": ratio >= GOAL_RATIO,
                    "arithmetic": f"{how} = {ratio:.2f}× "
                                  f"({'≥' if ratio >= GOAL_RATIO else '<'} {GOAL_RATIO})"})
        a, b = mine["rss_peak_mb"], theirs["rss_peak_mb"]
        out.append({"goal": rss_goal, "protocol": protocol, "connections": connections,
                    "met": a <= b,
                    "arithmetic": f"{a:.1f} MB {'≤' if a <= b else '>'} {b:.1f} MB"})
    return out


# --- the table -----------------------------------------------------------------------------

HEADERS = ["Workload", "Protocol", "c×m", "Server", "RPS", "min–max", "p50 ms", "p99 ms",
           "Errors", "RSS MB", "CPU µs/req", f"× {REFERENCE}"]
RIGHT = [False, False, True, False, True, True, True, True, True, True, True, True]


def ratio_cell(row: dict[str, Any]) -> str:
    """``× reference``: the median ratio, with the rounds' min–max when there are several."""
    ratio, low, high = row["vs_reference"], row.get("vs_reference_min"), row.get(
        "vs_reference_max")
    if ratio is None:
        return "–"
    if low is None or high is None or len(row.get("rps_runs") or []) < 2:
        return f"{ratio:.2f}×"
    return f"{ratio:.2f}× ({low:.2f}–{high:.2f})"


def table_cells(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The formatted cells of each row, in :data:`HEADERS` order; ``*`` marks a spread over
    10 %, and a failed row says so in the RPS column."""
    cells = []
    for row in rows:
        head = [row["workload"], row["protocol"], f"{row['connections']}×{row['streams']}",
                row["server"]]
        if row["status"] != "ok" or row["rps_median"] is None:
            cells.append([*head, row["status"], *["–"] * 7])
            continue
        flag = " *" if row["spread_flag"] else ""
        cells.append([
            *head, f"{row['rps_median']:,.0f}{flag}",
            f"{row['rps_min']:,.0f}–{row['rps_max']:,.0f}",
            cell(row["p50_ms"], ".2f"), cell(row["p99_ms"], ".2f"), f"{row['errors']:,}",
            cell(row["rss_peak_mb"], ".1f"), cell(row.get("cpu_us_per_request"), ".1f"),
            ratio_cell(row),
        ])
    return cells


def how_it_ran(data: dict[str, Any]) -> list[str]:
    """The "how it ran" lines of the report, from results.json's content."""
    s = data["settings"]
    lines = [data["pinning"]["text"]]
    tools = [f"h2load {data['h2load']['version']}"]
    if "wrk" in data:
        tools.append(f"wrk {data['wrk']['version']} (the http/1.1 rows)")
    lines.append(
        f"{', '.join(tools)}: {s['threads']} thread(s); c×m is connections × streams per "
        f"connection (h2load -c and -m); {s['duration_s']} s per run, {s['warmup_s']} s warm-up, "
        f"then {s['runs']} interleaved round(s) (one run of every row per round, every server "
        "up throughout); RPS is the median, with min–max over rounds; CPU µs/req is the "
        "server's process tree's user + system CPU time per request (median)")
    lines += [f"{name}: {WORKLOADS[name].description}" for name in s["workloads"]]
    lines.append("h2c: HTTP/2 in clear text with prior knowledge; h2: over TLS with ALPN "
                 "(a trustme certificate); http/1.1: wrk, one request at a time per connection")
    lines.append(f"× {REFERENCE}: the row's RPS over {REFERENCE}'s in the same workload, "
                 "protocol and c×m, in each round against its run of the same round, then the "
                 "median (min–max over rounds); * marks runs spread more than 10 %")
    lines.append(f"app: {APP} on every server; servers: {', '.join(s['servers'])}")
    lines += provenance(data)
    lines.append("command: `" + " ".join(data["command"]) + "`")
    return lines


def goal_lines(data: dict[str, Any]) -> list[str]:
    """One line per goal: met, not met or not measured, with its arithmetic."""
    words = {True: "met", False: "**not met**", None: "not measured"}
    return [f"{g['goal']}: {words[g['met']]} ({g['arithmetic']})" for g in data["goals"]]


def write_outputs(out: Path, data: dict[str, Any]) -> list[Path]:
    """Write results.json, results.md and h2.png into ``out``; return their paths."""
    rows = data["rows"]
    notes = [*goal_lines(data), *data["notes"]]
    notes += [f"{r['workload']} {r['protocol']} {r['connections']}×{r['streams']} "
              f"({r['server']}) {r['status']}: {r['error']}" for r in rows if r["status"] != "ok"]
    paths = out / "results.json", out / "results.md", out / "h2.png"
    report.write_json(paths[0], data)
    report.write_markdown(paths[1], "bench h2: HTTP/2 against HTTP/1.1, server by server",
                          how_it_ran(data), HEADERS, table_cells(rows), notes, RIGHT)
    ok = [r for r in rows if r["status"] == "ok" and r["rps_median"] is not None]
    report.bar_chart(paths[2], [f"{r['workload']} {r['protocol']} {r['connections']}×"
                                f"{r['streams']} {r['server']}" for r in ok],
                     [r["rps_median"] for r in ok], [r["rps_min"] for r in ok],
                     [r["rps_max"] for r in ok],
                     title="The same app over HTTP/1.1 (wrk) and HTTP/2 (h2load), requests/s",
                     xlabel="requests per second, median (min–max whiskers)",
                     subtitle=data["pinning"]["text"])
    return list(paths)
