"""How ``bench layers`` reports: the table, the "How it ran" lines, and the files it writes.

Everything here reads results.json's content (:func:`bench.layers.measure`), so a committed
results file can be laid out again without measuring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import report
from bench.report import added_cell, cell, noise_notes, pct_cell, provenance

HEADERS = ["Layer", "Server", "RPS", "min–max", "p50 ms", "p99 ms", "Errors", "RSS MB",
           "µs/req", "CPU µs/req", "µs added", "% of below"]
RIGHT = [False, False, True, True, True, True, True, True, True, True, True, True]
#: The command that counts instructions instead of timing, named where the timing was noisy.
EXACT = "bench layers --count instructions"


def table_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    """The formatted cells of each row, in :data:`HEADERS` order.

    A flagged spread marks the RPS with ``*``; a failed or skipped row says so in the RPS
    column and leaves the rest empty.
    """
    cells = []
    for row in rows:
        if row["status"] != "ok" or row["rps_median"] is None:
            cells.append([row["layer"], row["server"], row["status"], *["–"] * 9])
            continue
        flag = " *" if row["spread_flag"] else ""
        cells.append([
            row["layer"], row["server"], f"{row['rps_median']:,.0f}{flag}",
            f"{row['rps_min']:,.0f}–{row['rps_max']:,.0f}",
            cell(row["p50_ms"], ".2f"), cell(row["p99_ms"], ".2f"), f"{row['errors']:,}",
            cell(row["rss_peak_mb"], ".1f"), cell(row["us_per_request"], ".1f"),
            cell(row.get("cpu_us_per_request"), ".1f"), added_cell(row), pct_cell(row),
        ])
    return cells


def chart_data(rows: list[dict[str, Any]]) -> tuple[list[str], list[float], list[float],
                                                     list[float]]:
    """Labels, medians, minima and maxima of the rows that produced a number."""
    ok = [r for r in rows if r["status"] == "ok" and r["rps_median"] is not None]
    labels = [f"{r['layer']} ({r['server']})" for r in ok]
    return (labels, [r["rps_median"] for r in ok], [r["rps_min"] for r in ok],
            [r["rps_max"] for r in ok])


def how_it_ran(data: dict[str, Any]) -> list[str]:
    """The "how it ran" lines of the report, from results.json's content."""
    s = data["settings"]
    generator = data.get("load_generator", "wrk")
    lines = [data["pinning"]["text"]]
    lines.append(
        f"{generator} {data[generator]['version']}: {s['threads']} thread(s), "
        f"{s['connections']} connections, {s['duration_s']} s per run, {s['warmup_s']} s "
        f"warm-up, then {s['runs']} interleaved round(s) (one run of every row per round, "
        "every server up throughout); RPS is the median, with min–max over rounds"
    )
    lines.append("CPU µs/req: the server's process tree's user + system CPU time over each "
                 "run divided by its requests (median); µs added and % of below are computed "
                 "in each round against the row below's run of the same round, then given as "
                 "the median (min…max over rounds)")
    layers = ", ".join(s.get("compare_layers", ["asgi"]))
    lines.append(f"ASGI rows on {s['server']}; compared in the {layers} rows: "
                 + (", ".join(s["compare"]) if s["compare"] else "none"))
    bare = bool(s.get("bare"))
    if bare:
        lines.append("bare: the pure ASGI app on lessons/code/05-speed/bare_httptools.py "
                     "(httptools, one Task per request, keep-alive, no checks, limits or "
                     "timers): a baseline nobody should deploy, not a server")
    lines.append(data["axum"]["note"])
    if data["axum"]["built"]:
        lines.append("axum runs a current_thread tokio runtime: one thread, a one-core ceiling")
    lines += provenance(data)
    wsgi = bool(s.get("wsgi"))
    if wsgi:
        lines.append(f"WSGI rows: one process each; toy-wsgi-gthread, gunicorn-gthread and "
                     f"waitress run the app in {s['wsgi_threads']} threads (one per wrk "
                     "connection; all three park idle keep-alive connections in a selector, "
                     "so fewer would only cost throughput); gunicorn's sync worker serves one "
                     "connection at a time and closes it after each response, so wrk "
                     "reconnects for every request; bjoern runs the app on its one libev "
                     "thread")
        lines.append(data.get("bjoern", {}).get("note", "bjoern: unknown"))
    asgi = ("bare with asyncio and the other asgi rows with bare, so they show what each "
            "server adds over the bare minimum" if bare else "asgi with asyncio")
    footnote = (f"µs added and % of below compare {asgi}; starlette with asgi on the same "
                "server, fastapi with starlette; ")
    if wsgi:
        footnote += ("wsgi with asyncio (no bare WSGI baseline exists: the raw row is the same "
                     "endpoint with no server and no interface, so a wsgi row's µs added is "
                     "its whole server), flask with wsgi on the same server; ")
    lines.append(footnote + "* marks runs spread more than 10 %; noise (a…b) marks a "
                 "comparison whose rounds disagree on which row is faster")
    return lines


def notes_of(rows: list[dict[str, Any]]) -> list[str]:
    """The notes under the table: each failed or skipped row, then each comparison the
    machine was too noisy to decide (:func:`bench.report.noise_notes`)."""
    failed = [f"{r['layer']} ({r['server']}) {r['status']}: {r['error']}"
              for r in rows if r["status"] != "ok"]
    return failed + noise_notes(rows, exact=EXACT)


def write_outputs(out: Path, data: dict[str, Any]) -> list[Path]:
    """Write results.json, results.md and layers.png into ``out``; return their paths."""
    rows = data["rows"]
    cells = table_cells(rows)
    how = how_it_ran(data)
    notes = notes_of(rows)
    json_path, md_path, png_path = out / "results.json", out / "results.md", out / "layers.png"
    report.write_json(json_path, data)
    report.write_markdown(md_path, "bench layers: the cost of each layer", how, HEADERS, cells,
                          notes, RIGHT)
    labels, values, lows, highs = chart_data(rows)
    report.bar_chart(png_path, labels, values, lows, highs,
                     title="The same POST/JSON endpoint, layer by layer (requests/s, median)",
                     xlabel="requests per second (min–max whiskers)",
                     subtitle=data["pinning"]["text"])
    return [json_path, md_path, png_path]


