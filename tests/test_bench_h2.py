"""``bench h2``: h2load's summary reader, the row plan, the goals' arithmetic, and a smoke run.

Nothing here asserts a speed: figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from apps.h2_bodies import LONG_BODY, LONG_SIZE, SHORT_BODY, app
from bench.h2_plan import REFERENCE, RowPlan, Settings, choose_servers, plan_rows
from bench.h2_report import goals
from bench.h2load import H2Load, H2LoadError, parse_summary, percentiles, read_log
from bench.harness import UsageProblem
from bench.loadgen import Load

needs_h2load = pytest.mark.skipif(shutil.which("h2load") is None,
                                  reason="h2load is not installed (make test installs it)")

# h2load 1.52.0's summary of a real 2 s run (-c 4 -m 10) against hypercorn.
H2LOAD_OUTPUT = """\
starting benchmark...
Application protocol: h2c

finished in 2.00s, 1993.00 req/s, 154.24KB/s
requests: 3986 total, 4026 started, 3986 done, 3986 succeeded, 0 failed, 2 errored, 1 timeout
status codes: 3980 2xx, 0 3xx, 4 4xx, 2 5xx
traffic: 308.49KB (315889) total, 19.72KB (20191) headers (space savings 95.18%), 182.95KB (1\
87342) data
                     min         max         mean         sd        +/- sd
time for request:     2.01ms     21.61ms      9.64ms      3.48ms    62.27%
"""


def test_h2load_summary_is_read_into_the_common_fields() -> None:
    summary = parse_summary(H2LOAD_OUTPUT, [100.0, 300.0, 200.0])
    assert summary.requests == 3986 and summary.duration_us == 2_000_000
    assert summary.errors == {"connect": 0, "read": 1, "write": 0, "status": 6, "timeout": 1}
    assert summary.bytes == 315889 and summary.tool == "h2load"
    assert summary.latency_us["p50"] == 200.0 and summary.latency_us["max"] == 300.0
    assert summary.rps == pytest.approx(1993.0)


def test_h2load_without_a_summary_is_an_error() -> None:
    with pytest.raises(H2LoadError, match="no summary"):
        parse_summary("No protocol negotiated. Aborted.\n", [])


def test_percentiles_are_nearest_rank_from_the_log_file() -> None:
    log = "".join(f"1795579043279045\t200\t{d}\n" for d in range(1, 1001)) + "garbage\n"
    durations = read_log(log)
    assert len(durations) == 1000
    values = percentiles(durations)
    assert (values["p50"], values["p90"], values["p99"], values["p99.9"]) == (
        500.0, 900.0, 990.0, 999.0)
    assert values["mean"] == pytest.approx(500.5)
    assert percentiles([])["p99"] is None


def test_h2load_command_posts_the_body_with_streams_per_connection() -> None:
    argv = H2Load("/usr/bin/h2load", streams=10).command(
        "https://127.0.0.1:1/", Load(connections=4, duration=3), cpu=None)
    assert argv[:7] == ["/usr/bin/h2load", "-D", "3", "-c", "4", "-m", "10"]
    assert "-d" in argv and "content-type: application/json" in argv
    assert argv[-1] == "https://127.0.0.1:1/"
    get = H2Load("h2load", method="GET").command("http://x/short", Load(), cpu=None)
    assert "-d" not in get and get[get.index("-m") + 1] == "1"


def _call(path: str, method: str = "GET") -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": []}
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_bodies_app_serves_22_bytes_and_430_kb() -> None:
    assert len(SHORT_BODY) == 22 and len(LONG_BODY) == LONG_SIZE == 430_000
    assert _call("/short") == (200, SHORT_BODY)
    assert _call("/long") == (200, LONG_BODY)
    assert _call("/short", "HEAD") == (200, b"")
    assert _call("/")[0] == 405  # the user app: POST only


def test_rows_sweep_connections_by_streams_for_each_protocol_a_server_speaks() -> None:
    settings = Settings(workloads=("post",), sweep_connections=(1, 10), sweep_streams=(1, 10))
    plans = plan_rows(settings, ["hypercorn", "granian"])
    h1 = [p for p in plans if p.protocol == "http/1.1"]
    assert {(p.connections, p.streams) for p in h1} == {(1, 1), (10, 1)}
    for protocol in ("h2c", "h2"):
        points = {(p.connections, p.streams, p.server) for p in plans if p.protocol == protocol}
        assert len(points) == 2 * 2 * 2
    no_h1 = plan_rows(Settings(workloads=("short",), h1=False, modes=("h2c",)), ["granian"])
    assert [(p.protocol, p.streams) for p in no_h1] == [("h2c", 1), ("h2c", 10)]


def test_servers_without_http2_are_left_out_with_a_note() -> None:
    settings = Settings(server="uvicorn", compare=("hypercorn",))
    chosen, notes = choose_servers(settings, ["uvicorn", "hypercorn"])
    assert chosen == ["hypercorn"]
    assert any("uvicorn rows skipped: it speaks no HTTP/2" in n for n in notes)
    with pytest.raises(UsageProblem, match="unknown server 'nginx'"):
        choose_servers(Settings(compare=("nginx",)), ["hypercorn"])


def _row(server: str, rps: float, rss: float, streams: int = 10) -> dict[str, Any]:
    return {"workload": "post", "protocol": "h2c", "connections": 10, "streams": streams,
            "server": server, "status": "ok", "rps_median": rps, "rss_peak_mb": rss}


def test_goals_show_their_arithmetic() -> None:
    met = goals([_row("toy-h2", 1400.0, 50.0), _row(REFERENCE, 1000.0, 70.0),
                 _row("toy-h2", 1.0, 1.0, streams=1)])
    assert [g["met"] for g in met] == [True, True]
    assert met[0]["arithmetic"] == "1,400 / 1,000 = 1.40× (≥ 1.3)"  # rows without rounds
    assert met[1]["arithmetic"] == "50.0 MB ≤ 70.0 MB"
    missed = goals([_row("toy-h2", 1200.0, 80.0), _row(REFERENCE, 1000.0, 70.0)])
    assert [g["met"] for g in missed] == [False, False]
    absent = goals([_row(REFERENCE, 1000.0, 70.0)])
    assert [g["met"] for g in absent] == [None, None]
    assert absent[0]["arithmetic"] == "no toy-h2 row"
    failed = {**_row("toy-h2", 0.0, 0.0), "status": "failed", "rps_median": None}
    assert goals([failed, _row(REFERENCE, 1000.0, 70.0)])[0]["arithmetic"] == (
        "the toy-h2 row failed")


def test_bad_sweep_is_one_line(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "bench.cli", "h2", "--streams", "1,ten",
                          "--output", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "--streams takes comma-separated whole numbers" in run.stderr
    assert "Traceback" not in run.stderr


@needs_h2load
@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_bench_h2_smoke(tmp_path: Path) -> None:
    out = tmp_path / "h2"
    run = subprocess.run(
        [sys.executable, "-m", "bench.cli", "h2", "--server", "toy-h2", "--compare", "",
         "--workloads", "short", "--connections", "2", "--streams", "4", "--duration", "1",
         "--warmup", "0", "--runs", "1", "--output", str(out)],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "bench h2: HTTP/2 against HTTP/1.1" in run.stdout
    data = json.loads((out / "results.json").read_text())
    asked = {("short", "http/1.1", 2, 1), ("short", "h2c", 2, 4), ("short", "h2", 2, 4)}
    got = {(r["workload"], r["protocol"], r["connections"], r["streams"]): r
           for r in data["rows"]}
    assert set(got) == asked
    for key, row in got.items():
        assert row["status"] == "ok", (key, row["error"], row["log_tail"])
        assert row["server"] == "toy-h2" and row["rps_median"] > 0
        assert row["rss_peak_mb"] > 0 and row["p99_ms"] is not None
        assert row["vs_reference"] is None  # no hypercorn row to divide by
        assert row["command"] and all(run["command"] for run in row["runs"])
    assert got[("short", "h2", 2, 4)]["runs"][0]["command"][-1].startswith("https://")
    assert got[("short", "http/1.1", 2, 1)]["tool"] == "wrk"
    for key in ("machine", "python", "packages", "git", "h2load", "wrk", "settings",
                "pinning", "command", "goals", "notes"):
        assert key in data, key
    assert data["h2load"]["version"] != "unknown"
    assert data["goals"] == []  # no post rows asked for
    assert (out / "results.md").read_text().startswith("**bench h2")
    assert (out / "h2.png").stat().st_size > 0


def test_plan_label() -> None:
    assert RowPlan("post", "granian", "h2c", 10, 10).label == "post h2c 10×10 granian"
