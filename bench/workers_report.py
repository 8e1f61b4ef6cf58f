"""How ``bench workers`` reports: the table of measured beside predicted and published RPS,
"How it ran", the chart (measured bars, predicted ticks) and the files.

Everything here reads results.json's content (:func:`bench.workers.measure`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from apps.workers_app import DELAY_HEADER, FIB_N
from bench import report, upstream
from bench.report import cell, provenance
from bench.stats import by_round, paired

HEADERS = ("row", "model", "conns", "RPS", "p50 ms", "p99 ms", "errors", "CPU ms/req",
           "predicted", "meas./pred.", "x sync", "published RPS", "published x sync",
           "published s/req")
RIGHT = (False, False, True, True, True, True, True, True, True, True, True, True, True, True)


def times_sync(row: dict[str, Any], sync: dict[str, Any] | None) -> str:
    """``x sync``: ``row``'s RPS over gunicorn-sync's in each round, the median (min–max)."""
    pair = paired(by_round(row), by_round(sync)) if sync is not None else None
    if pair is None:
        return "–"
    ratio = pair.pct_of_below
    if pair.rounds < 2:
        return f"{ratio.median / 100:.2f}"
    return f"{ratio.median / 100:.2f} ({ratio.minimum / 100:.2f}–{ratio.maximum / 100:.2f})"


def table_cells(rows: list[dict[str, Any]], paper: dict[str, Any]) -> list[list[str]]:
    """Formatted cells of :data:`HEADERS`; ``x sync`` divides by gunicorn-sync's RPS at the
    same concurrency in the same run, ``published x sync`` the published figures alike."""
    sync = {r["connections"]: r for r in rows
            if r["row"] == "gunicorn-sync" and r["rps_median"]}
    paper_sync = paper["rows"]["gunicorn-sync"]["rps"]
    cells = []
    for r in rows:
        threads = f"x{r['threads']}" if r["threads"] else ""
        model = f"{r['workers']} {r['model']}{threads}"
        pub = r["published_rps"]
        pub_cells = [cell(pub), cell(pub / paper_sync if pub else None, ".2f"),
                     cell(r["published_s_per_request"], ".2f")]
        if r["status"] != "ok":
            cells.append([r["row"], model, str(r["connections"]), r["status"], "–", "–", "–",
                          "–", cell(r["predicted_rps"]), "–", "–", *pub_cells])
            continue
        cpu_us = r.get("cpu_us_per_request")
        cells.append([
            r["row"], model, str(r["connections"]), cell(r["rps_median"]), cell(r["p50_ms"], ".0f"),
            cell(r["p99_ms"], ".0f"), str(r["errors"]),
            cell(cpu_us / 1000 if cpu_us is not None else None, ".1f"), cell(r["predicted_rps"]),
            cell(r["measured_over_predicted"], ".2f"), times_sync(r, sync.get(r["connections"])),
            *pub_cells,
        ])
    return cells


def how_it_ran(data: dict[str, Any]) -> list[str]:
    """The "How it ran" lines of the report."""
    s, p, paper = data["settings"], data["prediction"], data["published"]
    lines = [
        f"each request: fib({FIB_N}) then GET the upstream (bench/upstream.py on "
        f"{upstream.SERVER}) with {DELAY_HEADER}: {s['delay_ms']}; wrk POSTs to / on N "
        f"connections (N = conns) for {s['duration_s']} s, in {s['runs']} interleaved "
        f"round(s) (one run of every row per round), each run on a freshly started server "
        f"after {s['warmup_s']} s of warm-up; RPS is the median; CPU ms/req is the server's "
        "process tree's user + system CPU time per request (median)",
        f"model: worker processes, worker class, xT threads per worker (every server runs "
        f"{s['workers']}); the server restarts for each run; x sync: RPS over "
        "gunicorn-sync's at the same conns, in each round against its run of the same round, "
        "then the median (min–max over rounds)",
        f"prediction: min(S / (c + d), K / c) with c = fib({FIB_N}) = "
        f"{1000 * p['cpu_s']:.1f} ms of CPU (median of {p['samples']}, measured on the "
        f"server's CPU), d = {1000 * p['wait_s']:.0f} ms, S = min(conns, requests in flight), "
        f"K = min(workers, {p['cores']} core(s) the server may use)",
        data["pinning"]["text"] + (f"; the upstream shares CPU {data['pinning']['load_cpu']} "
                                   "with wrk" if data["pinning"]["load_cpu"] is not None else ""),
        f"published: {paper['source']} (bench/published/workers.json); our uvicorn-workers "
        "row (uvicorn --workers) stands beside its gunicorn + uvicorn worker figure: "
        "uvicorn.workers is deprecated, the server in each worker is the same",
        *provenance(data),
    ]
    return lines


def chart(path: Path, rows: list[dict[str, Any]], subtitle: str) -> None:
    """Measured RPS (bars) and predicted RPS (black ticks) per row and concurrency (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r["status"] != "skipped"]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * max(len(shown), 1)))
    try:
        positions = list(range(len(shown)))
        values = [r["rps_median"] or 0.0 for r in shown]
        bars = ax.barh(positions, values, color="#4c72b0", label="measured (median)")
        ax.bar_label(bars, labels=[f"{v:.0f}" for v in values], padding=4, fontsize=8)
        ax.scatter([r["predicted_rps"] for r in shown], positions, marker="|", s=300,
                   color="black", label="predicted", zorder=3)
        ax.set_yticks(positions, labels=[f"{r['row']} (c={r['connections']})" for r in shown])
        ax.invert_yaxis()
        ax.set_xlabel("requests per second")
        ax.set_title("fib(25) then a 150 ms upstream call, per worker model\n" + subtitle,
                     fontsize=10)
        ax.legend(fontsize=8, loc="lower right")
        ax.margins(x=0.15)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


def write_outputs(out: Path, data: dict[str, Any]) -> list[Path]:
    """Write results.json, results.md and workers.png into ``out``; return their paths."""
    rows = data["rows"]
    json_path, md_path, png_path = out / "results.json", out / "results.md", out / "workers.png"
    report.write_json(json_path, data)
    notes = [f"{r['row']} (c={r['connections']}) {r['status']}: {r['error']}"
             for r in rows if r["status"] != "ok"]
    report.write_markdown(md_path, "bench workers: CPU then I/O, per worker model",
                          how_it_ran(data), HEADERS, table_cells(rows, data["published"]),
                          notes, RIGHT)
    chart(png_path, rows, data["pinning"]["text"])
    return [json_path, md_path, png_path]
