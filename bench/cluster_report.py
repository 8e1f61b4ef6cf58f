"""How ``bench cluster`` reports: five tables, the "How it ran" lines, and the files it writes.

Everything here reads results.json's content (:func:`bench.cluster.measure`), so a committed
results file can be laid out again without measuring. The hop table is ``bench layers``'
shape (RPS over rounds, µs added per round against ``direct``); the scenario tables count
requests: per backend, and failed.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import report
from bench.cluster_ws import HEADERS as WS_HEADERS
from bench.cluster_ws import ws_cells
from bench.report import added_cell, cell, noise_notes, pct_cell, provenance

HOP_HEADERS = ["Path", "RPS", "min–max", "p50 ms", "p99 ms", "Errors", "proxy CPU µs/req",
               "backend CPU µs/req", "CPU µs added", "µs added", "% of direct"]
HOP_RIGHT = [False, *[True] * 10]
Section = tuple[str, list[str], list[list[str]], list[bool]]


def summaries(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The wrk summaries of a scenario row's runs, in round order."""
    return [run["summary"] for run in row["runs"]]


def median_of(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def not_run(row: dict[str, Any], width: int, *first: str) -> list[str] | None:
    """The cells of a row that did not run (its status, then dashes), else None."""
    if row["status"] == "ok" and row["runs"]:
        return None
    return [*first, row["status"], *["–"] * (width - len(first) - 1)]


# --- the tables --------------------------------------------------------------------------------


def hop_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    cells = []
    for row in rows:
        if row["status"] != "ok" or row["rps_median"] is None:
            cells.append([row["layer"], row["status"], *["–"] * 9])
            continue
        flag = " *" if row["spread_flag"] else ""
        cells.append([
            row["layer"], f"{row['rps_median']:,.0f}{flag}",
            f"{row['rps_min']:,.0f}–{row['rps_max']:,.0f}", cell(row["p50_ms"], ".2f"),
            cell(row["p99_ms"], ".2f"), f"{row['errors']:,}", cell(row.get("proxy_cpu_us")),
            cell(row.get("backends_cpu_us")), cpu_added_cell(row), added_cell(row),
            pct_cell(row)])
    return cells


def cpu_added_cell(row: dict[str, Any]) -> str:
    """The "CPU µs added" cell: the median over rounds, with their min…max."""
    if row.get("cpu_added") is None:
        return "–"
    if row["cpu_added_min"] == row["cpu_added_max"]:
        return f"{row['cpu_added']:+.1f}"
    return (f"{row['cpu_added']:+.1f} ({row['cpu_added_min']:+.1f}…"
            f"{row['cpu_added_max']:+.1f})")


def balance_cells(rows: list[dict[str, Any]], backends: int) -> list[list[str]]:
    cells = []
    for row in rows:
        width = 5 + backends
        skipped = not_run(row, width, row["proxy"], row["balance"])
        if skipped:
            cells.append(skipped)
            continue
        runs = summaries(row)
        rps = [s["rps"] for s in runs]
        p99 = median_of([s["latency_us"]["p99"] / 1000 for s in runs
                         if s["latency_us"]["p99"] is not None])
        errors = sum(sum(s["errors"].values()) for s in runs)
        shares = []
        for i in range(backends):
            name = f"b{i + 1}"
            per = [100 * run["per_backend"][name] / max(sum(run["per_backend"].values()), 1)
                   for run in row["runs"]]
            shares.append(f"{median_of(per) or 0:.1f} %")
        cells.append([row["proxy"], row["balance"], f"{median_of(rps) or 0:,.0f}",
                      cell(p99, ".2f"), f"{errors:,}", *shares])
    return cells


def failed_cells(rows: list[dict[str, Any]], variant: str) -> list[list[str]]:
    """The failover or rolling table: requests, failed per round, and by kind over all."""
    cells = []
    for row in rows:
        skipped = not_run(row, 6, row["proxy"], row[variant])
        if skipped:
            cells.append(skipped)
            continue
        runs = summaries(row)
        failed = [run["failed"] for run in row["runs"]]
        kinds: dict[str, int] = {}
        for summary in runs:
            for kind, count in summary["errors"].items():
                kinds[kind] = kinds.get(kind, 0) + count
        how = ", ".join(f"{kind} {count:,}" for kind, count in kinds.items() if count) or "–"
        cells.append([row["proxy"], row[variant],
                      f"{median_of([s['requests'] for s in runs]) or 0:,.0f}",
                      ", ".join(map(str, failed)), f"{median_of(failed) or 0:g}", how])
    return cells


def table_sections(data: dict[str, Any]) -> list[Section]:
    """Each table measured: its title, headers, cells and right-alignment, hop first."""
    backends = data["settings"]["backends"]
    names = [f"b{i + 1}" + (" (slow)" if i == 0 else "") for i in range(backends)]
    failed_heads = ["requests (median)", "failed per round", "failed (median)",
                    "failures by kind (all rounds)"]
    sections: list[Section] = []
    if data["rows"]:
        sections.append(("bench cluster: the hop's cost", HOP_HEADERS, hop_cells(data["rows"]),
                         HOP_RIGHT))
    if data["balance"]:
        sections.append(("Balancing: share of requests per backend (median over rounds)",
                         ["Proxy", "Algorithm", "RPS", "p99 ms", "Errors", *names],
                         balance_cells(data["balance"], backends),
                         [False, False, *[True] * (3 + backends)]))
    if data["failover"]:
        sections.append(("Failover: b1 SIGKILLed halfway through each run",
                         ["Proxy", "Method", *failed_heads],
                         failed_cells(data["failover"], "method"),
                         [False, False, True, True, True, False]))
    if data["rolling"]:
        sections.append(("Rolling restart: every backend stopped and started in turn, "
                         "under POST load", ["Proxy", "How", *failed_heads],
                         failed_cells(data["rolling"], "how"),
                         [False, False, True, True, True, False]))
    if data.get("websocket"):
        sections.append(("WebSocket through nginx: an idle connection against "
                         "proxy_read_timeout", WS_HEADERS, ws_cells(data["websocket"]),
                         [False, False, True, True, True, True, False]))
    return sections


# --- the words around them ---------------------------------------------------------------------


def stop_seconds(row: dict[str, Any]) -> float | None:
    """A rolling row's median seconds from SIGTERM to a backend's exit, over every restart of
    every round (None when none ran)."""
    return median_of([steps["stop_s"] for run in row["runs"] for steps in run["steps"].values()])


def how_it_ran(data: dict[str, Any]) -> list[str]:
    """The "How it ran" lines, from results.json's content."""
    s, proxies = data["settings"], data["proxies"]
    lines = [data["placement"]["text"]]
    lines.append(
        f"wrk {data['wrk']['version']}: {s['threads']} thread(s), {s['connections']} "
        f"connections, {s['duration_s']} s per run, {s['runs']} interleaved round(s); hop "
        f"rows after a {s['warmup_s']} s warm-up each, every server up throughout")
    lines.append(f"backends: {s['server']} serving {s['app']}, one process each, on "
                 f"127.0.0.1 ports; {s['backends']} behind each proxy in the balance, failover "
                 "and rolling tables")
    for name, found in proxies.items():
        one = "one worker process" if name == "nginx" else "one thread"
        lines.append(f"{name} {found['version']} ({found['path']}): {one}, config generated "
                     "from bench/proxies/ (a copy in configs/)"
                     if found["path"] else f"{name}: not installed, its rows skipped")
    lines.append(f"hop: POST the user to one {s['server']} backend, directly or through the "
                 "proxy; proxy CPU µs/req is the proxy's process tree's CPU time per request, "
                 "backend CPU µs/req the backend's; CPU µs added is what the proxy and the "
                 "backend together spend per request over direct's backend, µs added is read "
                 "off the throughput (1e6 / RPS) and % of direct is the RPS's share; the three "
                 "are computed in each round against direct's run of the same round, then "
                 "given as the median (min…max); * marks runs spread more than 10 %")
    lines.append(f"balance: POST, b1 waits {s['slow_ms']:g} ms per request and the others "
                 "none; each backend's share of the requests it answered (GET /count before "
                 "and after each run)")
    lines.append(f"failover and rolling restart: every request waits {s['wait_ms']:g} ms in "
                 "the app; failed = every error wrk counted (5xx answers, connections "
                 "refused or reset, timeouts); a fresh proxy for each run (the killed backend "
                 "started again before it); rolling restarts run under POST and last as long "
                 "as the restart plus 1 s before and after")
    if data["rolling"]:
        lines.append("rolling restart, how: sigterm = SIGTERM only; reload = nginx reloaded "
                     "with the backend down first, and back after; drain = HAProxy's state "
                     "drain until no request is in progress, then SIGTERM; "
                     "idle-close-on-response = SIGTERM to backends run with "
                     "--idle-close-on-response (idle keep-alive connections answer once more, "
                     "with Connection: close, or wait for the proxy to close them); seconds a "
                     "backend took to exit after SIGTERM (median over all restarts): "
                     + ", ".join(f"{row['label']} {stop:.2f}" for row in data["rolling"]
                                 if (stop := stop_seconds(row)) is not None))
    if data.get("websocket"):
        row = data["websocket"][0]
        lines.append(f"WebSocket: one {row['server']} backend serving apps.ws_echo:app behind "
                     "nginx (Upgrade and Connection passed on); the client echoes one message, "
                     f"stays silent {row['idle_s']:g} s with its own pings off, then echoes "
                     "another: survived when it comes back; cut after = how long the silent "
                     "connection stayed open when nginx closed it")
    lines += provenance(data)
    lines.append("left out: WebSocket through HAProxy (its timeout tunnel) and backends in "
                 "network namespaces with tc netem delays (not built)")
    return lines


def notes_of(data: dict[str, Any]) -> list[str]:
    """Failed or skipped rows with their reasons, then the hop's noisy comparisons."""
    notes = []
    for key in ("rows", "balance", "failover", "rolling", "websocket"):
        for row in data.get(key, []):
            if row["status"] != "ok":
                notes.append(f"{row.get('label') or row['layer']} {row['status']}: "
                             f"{row['error']}")
    return notes + noise_notes(data["rows"], first="layer")


def markdown(data: dict[str, Any]) -> str:
    """results.md: every table, then "How it ran" and the notes."""
    parts = []
    for title, heads, cells, right in table_sections(data):
        parts.append(f"**{title}**\n\n{report.markdown_table(heads, cells, right)}")
    parts.append("**How it ran**\n\n" + "".join(f"- {line}\n" for line in how_it_ran(data)))
    notes = notes_of(data)
    if notes:
        parts.append("**Notes**\n\n" + "".join(f"- {note}\n" for note in notes))
    return "\n".join(parts)


def write_outputs(out: Path, data: dict[str, Any]) -> list[Path]:
    """Write results.json, results.md and cluster.png into ``out``; return their paths."""
    json_path, md_path, png_path = out / "results.json", out / "results.md", out / "cluster.png"
    report.write_json(json_path, data)
    md_path.write_text(markdown(data), encoding="utf-8")
    ok = [r for r in data["rows"] if r["status"] == "ok" and r["rps_median"] is not None]
    report.bar_chart(png_path, [r["layer"] for r in ok], [r["rps_median"] for r in ok],
                     [r["rps_min"] for r in ok], [r["rps_max"] for r in ok],
                     title="The same POST/JSON request, direct and through a proxy "
                           "(requests/s, median)",
                     xlabel="requests per second (min–max whiskers)",
                     subtitle=data["placement"]["text"][:110])
    return [json_path, md_path, png_path]
