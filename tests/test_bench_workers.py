"""``bench concurrency`` and ``bench workers``: their apps, the upstream, the predictions, the
user mistakes, and one short real run of each (servers on 127.0.0.1, wrk for workers).

Nothing here asserts a speed. The concurrency smoke run asserts only what blocking makes
certain: one sync process answers 3 slow requests one after another (at least 3 slow times);
so does lesson 12's "Run it" by hand: behind a 3 s ``time.sleep`` /fast waits over 2 s, behind
``asyncio.sleep`` under 1 s.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from apps import concurrency_app
from bench import concurrency, report, upstream, workers
from bench.process import ServerProcess, free_port
from tests.support.pages import ROOT, blocks, check_tabs, run_tab, section, started, tabs
from toyservers.registry import get

needs_wrk = pytest.mark.skipif(shutil.which("wrk") is None,
                               reason="wrk is not installed (make test installs it)")


def run_cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


# --- pure parts ------------------------------------------------------------------------------


def test_slow_seconds_reads_the_query_and_clamps_it() -> None:
    assert concurrency_app.slow_seconds("seconds=0.25") == 0.25
    assert concurrency_app.slow_seconds("") == 1.0
    assert concurrency_app.slow_seconds("seconds=abc") == 1.0
    assert concurrency_app.slow_seconds("seconds=-3") == 0.0
    assert concurrency_app.slow_seconds("seconds=1e9") == concurrency_app.MAX_SLOW


def test_upstream_delay_header() -> None:
    assert upstream.delay_ms([(b"X-Delay-Ms", b"150")]) == 150
    assert upstream.delay_ms([(b"x-delay-ms", b"nope")]) == 0
    assert upstream.delay_ms([]) == 0
    assert upstream.delay_ms([(b"x-delay-ms", b"99999999")]) == upstream.MAX_DELAY_MS


def test_expected_totals_follow_the_slots() -> None:
    rows = {row.name: concurrency.expected_total(row) for row in concurrency.ROWS}
    assert rows["gunicorn-sync-1"] == 3 and rows["uvicorn-time.sleep"] == 3
    assert rows["gunicorn-sync-4"] == 1 and rows["uvicorn"] == 1
    assert concurrency.burst_paths(0.5)[:3] == [("slow", "/slow?seconds=0.5")] * 3
    assert len(concurrency.burst_paths(0.5)) == 18


@pytest.mark.parametrize(("model", "connections", "expected"), [
    ("sync", 10, 4 / 0.17),          # 4 workers, one request each: bounded by the wait
    ("gthread", 5, 5 / 0.17),        # 16 threads, 5 connections
    ("async", 100, 1 / 0.02),        # the one core saturates: 1 / c
    ("gevent", 2, 2 / 0.17),         # two connections, two in flight
])
def test_predict_rps(model: str, connections: int, expected: float) -> None:
    got = workers.predict_rps(model, workers=4, threads=4, connections=connections,
                              cpu_s=0.02, wait_s=0.15, cores=1)
    assert math.isclose(got, expected)


def test_a_row_whose_module_is_missing_is_skipped_with_its_reason() -> None:
    row = workers.Row("x", "gunicorn", "wsgi", "gevent", "x", "gevent", "no_such_module_here")
    reason = workers.skip_reason(row)
    assert reason is not None and "no_such_module_here is not installed" in reason
    argv = workers.server_argv(row, workers.Settings(), 8000)
    assert argv[-3:] == ["--worker-class", "gevent", workers.APPS["wsgi"]]


def test_published_files_name_their_source() -> None:
    for data in (report.load_published("concurrency"), report.load_published("workers")):
        assert "issue 10" in data["source"]
    assert report.load_published("workers")["rows"]["gunicorn-sync"]["rps"] == 9.8


# --- the apps on real servers ----------------------------------------------------------------


@pytest.mark.parametrize(("spec", "app"), [("toy-wsgi", "wsgi_app"),
                                           ("toy-httptools", "asgi_app"),
                                           ("toy-httptools", "asgi_blocking_app")])
def test_concurrency_apps_answer_fast_slow_and_404(spec: str, app: str) -> None:
    port = free_port()
    argv = get(spec).command(f"apps.concurrency_app:{app}", "127.0.0.1", port)
    with ServerProcess(argv, port=port) as server, httpx.Client(base_url=server.url,
                                                                timeout=10) as client:
        assert client.get("/fast").text == "fast\n"
        assert client.get("/slow?seconds=0.05").text == "slow\n"
        assert client.get("/nope").status_code == 404


def test_workers_app_calls_the_upstream_with_the_delay() -> None:
    up_port, port = free_port(), free_port()
    up_argv = get(upstream.SERVER).command("bench.upstream:app", "127.0.0.1", up_port)
    env = {"BENCH_UPSTREAM": f"http://127.0.0.1:{up_port}/", "BENCH_UPSTREAM_DELAY_MS": "20"}
    with ServerProcess(up_argv, port=up_port):
        for spec, app in (("toy-wsgi", "flask_app"), ("toy-httptools", "fastapi_app")):
            argv = get(spec).command(f"apps.workers_app:{app}", "127.0.0.1", port)
            with ServerProcess(argv, port=port, env=env):
                assert workers.check_app("127.0.0.1", port) is None
                body = httpx.post(f"http://127.0.0.1:{port}/", json={}, timeout=10).json()
                assert body == {"fib": 75025, "upstream": "waited 20 ms"}


# --- the command line ------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ("concurrency", "--compare", "nope"),
    ("workers", "--compare", "gunicorn-sync,nope"),
    ("workers", "--concurrency", "10,x"),
])
def test_cli_mistakes_are_one_line(args: tuple[str, ...], tmp_path: Path) -> None:
    out = run_cli(*args, "--output", str(tmp_path / "out"))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().startswith("error: ") and len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr


def test_concurrency_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = run_cli("concurrency", "--slow", "0.4", "--warmup", "0",
                  "--compare", "gunicorn-sync-1,uvicorn", "--output", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "bench concurrency" in run.stdout
    data = json.loads((out / "results.json").read_text())
    for key in ("machine", "python", "packages", "git", "command", "published", "pinning"):
        assert key in data
    rows = {r["row"]: r for r in data["rows"]}
    assert list(rows) == ["gunicorn-sync-1", "uvicorn"]
    for row in rows.values():
        assert row["status"] == "ok", row
        assert row["command"] and len(row["bursts"][0]) == 18
        assert all(t["status"] == 200 for t in row["bursts"][0])
    # one sync process sleeps through the 3 slow requests one after another
    assert rows["gunicorn-sync-1"]["total_s"] >= 3 * 0.4 * 0.95
    assert rows["gunicorn-sync-1"]["published_over_slow"] == 3
    assert (out / "concurrency.png").stat().st_size > 0
    assert "| gunicorn-sync-1 |" in (out / "results.md").read_text()


@needs_wrk
def test_workers_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = run_cli("workers", "--duration", "1", "--warmup", "0", "--workers", "2",
                  "--concurrency", "4", "--compare", "gunicorn-sync,toy-httptools",
                  "--output", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "bench workers" in run.stdout
    data = json.loads((out / "results.json").read_text())
    for key in ("machine", "python", "packages", "git", "command", "published", "prediction",
                "upstream", "wrk"):
        assert key in data
    assert 0 < data["prediction"]["cpu_s"] < 1
    rows = data["rows"]
    assert [(r["row"], r["connections"]) for r in rows] == [("gunicorn-sync", 4),
                                                            ("toy-httptools", 4)]
    for row in rows:
        assert row["status"] == "ok", row
        assert row["rps_median"] > 0 and row["errors"] == 0
        assert row["predicted_rps"] > 0 and row["command"]
    assert rows[0]["published_rps"] == 9.8 and rows[1]["published_rps"] is None
    assert (out / "workers.png").stat().st_size > 0
    assert "| gunicorn-sync |" in (out / "results.md").read_text()


# --- the lesson's commands are the ones its results came from ---------------------------------

LESSON = Path(__file__).resolve().parent.parent / "lessons" / "12-blocking-and-workers.md"


@pytest.mark.parametrize("name", ["concurrency", "workers"])
def test_lesson_prints_the_command_its_results_recorded(name: str) -> None:
    """"Run it" prints the command the committed results recorded, without the ``--output
    lessons/results/...`` that ``make lesson-results`` adds (a reader's run writes under
    ``results/``)."""
    results = LESSON.parent / "results" / name / "results.json"
    data = json.loads(results.read_text())
    assert data["experiment"] == name
    assert all(row["status"] in ("ok", "skipped") for row in data["rows"]), name
    recorded = data["command"][1:]
    output = recorded.index("--output")
    assert recorded[output + 1] == f"lessons/results/{name}"
    printed = " ".join([".venv/bin/bench", *recorded[:output], *recorded[output + 2:]])
    run_it = LESSON.read_text().split("## Run it", 1)[1].split("\n## ", 1)[0]
    assert printed in run_it.splitlines(), printed


# --- the lesson's "Run it" by hand ---------------------------------------------------------------


def fast_took(printed: str) -> float:
    """Seconds from the tabs' ``/fast took 2.8 s`` line."""
    match = re.fullmatch(r"/fast took (\d+\.\d+) s\n", printed)
    assert match, printed
    return float(match.group(1))


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_run_it_by_hand_commands_run_as_printed() -> None:
    text = section(LESSON, "Run it").split("To watch the blocking by hand", 1)[1]
    blocking, _, awaiting = blocks(text, "sh")  # the one in between is the curl tab's
    assert sorted(tabs(text)) == ["curl", "httpx"]
    # the tabs' 0.2 s head start for /slow, lengthened so that a loaded machine, slow to start
    # the /slow client, still sends it first
    slack = {"sleep 0.2;": "sleep 0.6;", "time.sleep(0.2)": "time.sleep(0.6)"}
    with started(blocking) as server:  # /slow holds the loop for 3 s: /fast waits most of it
        for out in check_tabs(text, server.port, slack).values():
            assert 1.5 <= fast_took(out) < 5.0
    with started(awaiting) as server:
        for out in check_tabs(text, server.port, slack).values():
            assert fast_took(out) < 1.0


def test_exercise_command_runs_as_printed_with_the_solution() -> None:
    """Lesson 12's "Exercise" command, with the solution in place of the starter: one line per
    row and connection count of the committed results, its measurement beside the prediction
    the results file holds."""
    page = ROOT / "lessons" / "12-blocking-and-workers.md"
    (command,) = blocks(section(page, "Exercise"), "sh")
    out = run_tab("sh", command.replace("starter.py", "solution.py"), port=0)
    rows = json.loads((ROOT / "lessons" / "results" / "workers" / "results.json")
                      .read_text())["rows"]
    lines = out.splitlines()
    assert len(lines) == len(rows), out
    for line, row in zip(lines, rows, strict=True):
        match = re.fullmatch(r"(\S+) +c=(\d+) +measured +([\d.]+) +predicted +([\d.]+)", line)
        assert match, line
        assert (match.group(1), int(match.group(2))) == (row["row"], row["connections"]), line
        assert float(match.group(4)) == pytest.approx(row["predicted_rps"], abs=0.05), line
