"""How ``bench servers`` reports: the table beside the published figures, the feature table,
the "How it ran" lines, the two charts and the files.

The feature table (protocols, built-in worker processes, licence) is generated from the
registry (:class:`toyservers.registry.ServerSpec`) and each installed distribution's metadata
(``License-Expression``, ``License``, or the licence classifier), not typed here. Everything
else reads results.json's content (:func:`bench.servers.measure`).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

from bench import report
from bench.report import cell, noise_notes, pct_cell, provenance
from toyservers.registry import ServerSpec


def licence(distribution: str) -> str:
    """The licence an installed distribution declares: ``License-Expression``, else a
    one-line ``License`` field, else its ``License ::`` classifier; ``"unknown"`` otherwise."""
    try:
        meta = importlib.metadata.metadata(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
    expression = meta["License-Expression"]
    if expression:
        return str(expression)
    text = str(meta["License"] or "").strip()
    if text and "\n" not in text and len(text) <= 40:
        return text
    for classifier in meta.get_all("Classifier") or []:
        if classifier.startswith("License ::"):
            return str(classifier).rsplit("::", 1)[1].strip().removesuffix(" License")
    return "unknown"


def installed(distribution: str) -> bool:
    """True when ``distribution`` is installed."""
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def feature_row(spec: ServerSpec) -> dict[str, Any]:
    """One server's features, from the registry and its distribution's metadata.

    Keys: ``server``, ``package``, ``version``, ``http1``, ``http2`` (``"h2, h2c"``,
    ``"h2"``, ``"h2c"`` or ``"no"``), ``websocket``, ``http3`` (``"no"``, or what it needs),
    ``workers`` (``"--workers N"`` or ``"no"``), ``workers_note`` (why not), ``licence``.
    """
    protocols = spec.protocols
    h2 = ", ".join(p for p in ("h2", "h2c") if p in protocols) or "no"
    optional = dict(spec.optional_protocols)
    if "h3" in protocols:
        h3 = "yes"
    elif "h3" in optional:
        need = optional["h3"]
        h3 = f"with {need} ({'installed' if installed(need) else 'not installed'})"
    else:
        h3 = "no"
    return {
        "server": spec.name, "package": spec.package, "version": spec.version(),
        "http1": "yes" if "http/1.1" in protocols else "no", "http2": h2,
        "websocket": "yes" if "websocket" in protocols else "no", "http3": h3,
        "workers": "--workers N" if spec.multiprocess else "no",
        "workers_note": spec.one_process, "licence": licence(spec.package),
    }


FEATURE_HEADERS = ["Server", "Version", "HTTP/1.1", "HTTP/2", "WebSocket", "HTTP/3",
                   "Worker processes", "Licence"]


def feature_cells(features: list[dict[str, Any]]) -> list[list[str]]:
    """The feature table's cells, in :data:`FEATURE_HEADERS` order."""
    return [[f["server"], f"{f['package']} {f['version']}", f["http1"], f["http2"],
             f["websocket"], f["http3"], f["workers"], f["licence"]] for f in features]


# --- the results table -------------------------------------------------------------------------

HEADERS = ["Endpoint", "Server", "RPS", "min–max", "p99 ms", "Errors", "RSS MB", "CPU µs/req",
           "% of {base}", "Published RPS", "Published RSS MB", "Published % of {base}"]
RIGHT = [False, False, True, True, True, True, True, True, True, True, True, True]


def headers(base: str) -> list[str]:
    """:data:`HEADERS` with the base server's name."""
    return [h.format(base=base) for h in HEADERS]


def table_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    """Each row's cells in :data:`HEADERS` order (a failed or skipped row says so)."""
    cells = []
    for row in rows:
        pub = row["published"] or {}
        published = [cell(pub.get("rps"), ",.0f"), cell(pub.get("rss_mb"), ".1f"),
                     cell(pub.get("pct_of_base"), ".0f", " %")]
        if row["status"] != "ok" or row["rps_median"] is None:
            cells.append([row["endpoint"], row["server"], row["status"], *["–"] * 6,
                          *published])
            continue
        flag = " *" if row["spread_flag"] else ""
        cells.append([
            row["endpoint"], row["server"], f"{row['rps_median']:,.0f}{flag}",
            f"{row['rps_min']:,.0f}–{row['rps_max']:,.0f}", cell(row["p99_ms"], ".2f"),
            f"{row['errors']:,}", cell(row["rss_peak_mb"], ".1f"),
            cell(row.get("cpu_us_per_request"), ".1f"),
            "100 %" if row["below"] is None else pct_cell(row), *published,
        ])
    return cells


def how_it_ran(data: dict[str, Any]) -> list[str]:
    """The "How it ran" lines, from results.json's content."""
    s = data["settings"]
    pub = data["published"]
    setup = pub["setup"]
    versions = ", ".join(f"{k} {v}" for k, v in setup["servers"].items())
    lines = [
        data["pinning"]["text"],
        f"wrk {data['wrk']['version']}: {s['threads']} thread(s), {s['connections']} "
        f"connections, {s['duration_s']} s per run, {s['warmup_s']} s warm-up, then "
        f"{s['runs']} interleaved round(s) (one run of every row per round, every server up "
        "throughout); GET through bench/lua/get_bearer.lua; RPS is the median, with min–max "
        "over rounds; CPU µs/req is the server's process tree's user + system CPU time per "
        "request (median)",
        f"{s['workers']} worker process(es) per server; RSS is the peak over the measured "
        "runs of the server's whole process tree (a master and its workers summed)",
        f"activities: redis-server {data['redis']['version']} on a free loopback port, no "
        f"persistence, {s['users']} users with {s['activities']} activities each, on wrk's "
        "CPU when pinned; wrk sends one user's JWT (HS256) as the bearer token",
        f"% of {s['server']}: RPS over the {s['server']} row of the same endpoint, in each "
        "round against its run of the same round, then the median (min–max over rounds); "
        "the published column computes the same ratio from the paper's figures",
        f"published: {pub['source']} Setup: {setup['load_generator']} with "
        f"{setup['load_generator_workers']} worker processes on {setup['machine']}; "
        f"{versions}",
    ]
    return [*lines, *provenance(data), "* marks runs spread more than 10 %"]


def chart_data(rows: list[dict[str, Any]], key: str = "rps_median"
               ) -> tuple[list[str], list[float], list[float], list[float]]:
    """Labels, values, minima and maxima of the rows with a figure for ``key``."""
    ok = [r for r in rows if r["status"] == "ok" and r[key] is not None]
    labels = [f"{r['endpoint']}: {r['server']}" for r in ok]
    values = [float(r[key]) for r in ok]
    if key == "rps_median":
        return labels, values, [r["rps_min"] for r in ok], [r["rps_max"] for r in ok]
    return labels, values, values, values


def write_outputs(out: Path, data: dict[str, Any]) -> list[Path]:
    """Write results.json, results.md, servers.png (RPS) and servers-rss.png into ``out``."""
    rows = data["rows"]
    base = data["settings"]["server"]
    how = how_it_ran(data)
    notes = [f"{r['endpoint']} ({r['server']}) {r['status']}: {r['error']}"
             for r in rows if r["status"] != "ok"]
    notes += noise_notes(rows, "endpoint")
    notes += [f"{f['server']}: {f['workers_note']}" for f in data["features"]
              if f["workers_note"]]
    json_path, md_path = out / "results.json", out / "results.md"
    rps_png, rss_png = out / "servers.png", out / "servers-rss.png"
    report.write_json(json_path, data)
    report.write_markdown(md_path, "bench servers: ASGI servers on three endpoints", how,
                          headers(base), table_cells(rows), notes, RIGHT)
    with md_path.open("a", encoding="utf-8") as md:
        md.write("\n**What each server offers**\n\n")
        md.write(report.markdown_table(FEATURE_HEADERS, feature_cells(data["features"])))
        md.write("\nGenerated from the registry (toyservers/registry.py) and each "
                 "distribution's installed metadata.\n")
    labels, values, lows, highs = chart_data(rows)
    report.bar_chart(rps_png, labels, values, lows, highs,
                     title="The same FastAPI app on each server (requests/s, median)",
                     xlabel="requests per second (min–max whiskers)",
                     subtitle=data["pinning"]["text"])
    labels, values, lows, highs = chart_data(rows, "rss_peak_mb")
    report.bar_chart(rss_png, labels, values, lows, highs,
                     title="Peak RSS of each server's process tree under load (MB)",
                     xlabel="MB (10^6 bytes)", subtitle=data["pinning"]["text"])
    return [json_path, md_path, rps_png, rss_png]
