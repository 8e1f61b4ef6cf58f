"""``bench``: the wrk summary reader, the statistics, the writers, user errors, what a run writes.

Nothing here asserts a speed: figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from apps.user import SAMPLE_BODY
from bench import harness, layers, native, report
from bench.harness import UsageProblem, check_echo, decide_pinning, git_state, validate_servers
from bench.layers import (
    RowPlan,
    RowResult,
    Settings,
    below_of,
    plan_rows,
    rows_json,
)
from bench.layers_report import HEADERS, how_it_ran, table_cells, write_outputs
from bench.loadgen import RunSummary
from bench.machine import usable_cpus
from bench.process import ServerProcess, ServerStartError, free_port
from bench.rounds import Measurement, RssSampler, Run
from bench.stats import SPREAD_LIMIT, comparison_columns, paired, summarize, us_per_request
from bench.wrk import POST_JSON, WrkError, parse_summary, wrk_command
from toyservers.registry import get

HAVE_WRK = shutil.which("wrk") is not None
needs_wrk = pytest.mark.skipif(not HAVE_WRK, reason="wrk is not installed (make test installs it)")

# What post_json.lua's done() writes, byte for byte as wrk produced it on a real run.
LUA_OUTPUT = (
    '{"requests": 163890, "duration_us": 2099522, "bytes": 19339020, "errors": {"connect": 0, '
    '"read": 0, "write": 0, "status": 3, "timeout": 1}, "latency_us": {"min": 18, "mean": '
    '135.962, "max": 4693, "stdev": 162.025, "p50": 112, "p90": 196, "p99": 402, '
    '"p99.9": 2941}}\n'
)


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


# --- reading the Lua hook's JSON -------------------------------------------------------------


def test_parse_summary_reads_what_the_lua_hook_writes() -> None:
    summary = parse_summary(LUA_OUTPUT)
    assert summary.requests == 163890
    assert summary.duration_us == 2099522
    assert summary.errors == {"connect": 0, "read": 0, "write": 0, "status": 3, "timeout": 1}
    assert summary.error_total == 4
    assert summary.latency_us["p99"] == 402.0
    assert summary.latency_us["p99.9"] == 2941.0
    assert summary.latency_us["mean"] == pytest.approx(135.962)
    assert summary.rps == pytest.approx(163890 / 2.099522)


def test_parse_summary_accepts_an_empty_run() -> None:
    data = json.loads(LUA_OUTPUT)
    data.update(requests=0, bytes=0)
    data["latency_us"] = dict.fromkeys(data["latency_us"])
    summary = parse_summary(json.dumps(data))
    assert summary.rps == 0.0
    assert summary.latency_us["p50"] is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not JSON"),
        ("requests: 12", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (LUA_OUTPUT.replace('"timeout": 1', '"timeouts": 1'), "timeout"),
        (LUA_OUTPUT.replace('"requests": 163890', '"requests": "many"'), "many"),
        (LUA_OUTPUT.replace('"p99": 402, ', ""), "p99"),
    ],
)
def test_parse_summary_rejects_what_it_cannot_read(text: str, message: str) -> None:
    with pytest.raises(WrkError, match=message):
        parse_summary(text)


def test_lua_script_posts_the_user_as_json() -> None:
    script = POST_JSON.read_text()
    assert 'wrk.method = "POST"' in script
    assert 'wrk.headers["Content-Type"] = "application/json"' in script
    assert SAMPLE_BODY.decode() in script
    assert "os.getenv(\"BENCH_WRK_JSON\")" in script
    assert "function done(summary, latency, requests)" in script


def test_wrk_command_pins_with_taskset_and_names_the_script() -> None:
    argv = wrk_command("/usr/bin/wrk", "http://127.0.0.1:1/", connections=10, threads=1,
                       duration=3, cpu=1, timeout=2)
    if shutil.which("taskset"):
        assert argv[1:3] == ["-c", "1"]
    assert argv[-1] == "http://127.0.0.1:1/"
    assert argv[argv.index("--script") + 1] == str(POST_JSON)
    assert argv[argv.index("--duration") + 1] == "3s"
    unpinned = wrk_command("wrk", "http://x/", connections=1, threads=1, duration=1)
    assert unpinned[0] == "wrk"


# --- statistics ------------------------------------------------------------------------------


def test_summarize_gives_median_min_max_and_spread() -> None:
    spread = summarize([90.0, 110.0, 100.0])
    assert (spread.median, spread.minimum, spread.maximum) == (100.0, 90.0, 110.0)
    assert spread.spread == pytest.approx(0.2)
    assert spread.flagged
    assert summarize([10.0, 20.0]).median == 15.0


def test_spread_is_flagged_only_above_the_limit() -> None:
    assert SPREAD_LIMIT == pytest.approx(0.10)
    assert summarize([95.0, 100.0, 105.0]).spread == pytest.approx(0.10)
    assert not summarize([95.0, 100.0, 105.0]).flagged
    assert summarize([94.0, 100.0, 106.0]).flagged
    assert summarize([100.0]).spread == 0.0
    assert not summarize([100.0]).flagged


def test_summarize_refuses_no_runs() -> None:
    with pytest.raises(ValueError, match="no runs"):
        summarize([])


def test_derived_columns() -> None:
    assert us_per_request(20_000) == pytest.approx(50.0)
    assert us_per_request(0) is None


def test_rows_are_compared_round_by_round() -> None:
    pair = paired({0: 10_000.0, 1: 20_000.0}, {0: 20_000.0, 1: 40_000.0, 2: 1.0})
    assert pair is not None and pair.rounds == 2  # round 2 has no partner
    assert (pair.us_added.minimum, pair.us_added.maximum) == pytest.approx((25.0, 50.0))
    assert pair.pct_of_below.median == pytest.approx(50.0) and not pair.noisy
    assert paired({0: 10_000.0}, {1: 10_000.0}) is None


def test_rounds_that_disagree_on_the_sign_are_noise_not_a_figure() -> None:
    # a drift between rounds: the row is faster in one round, slower in the next
    mine, below = {0: 11_000.0, 1: 9_000.0, 2: 10_500.0}, {0: 10_000.0, 1: 10_000.0, 2: 10_000.0}
    row = {"rps_runs": list(mine.values()), "rounds": [0, 1, 2], "layer": "asgi",
           "server": "toy", "below": "asgi/bare"}
    row.update(comparison_columns(row, {"rps_runs": list(below.values()), "rounds": [0, 1, 2]}))
    assert row["noisy"] and row["us_added"] < 0
    assert report.added_cell(row) == "noise (-9.1…+11.1)"
    (note,) = report.noise_notes([row])
    assert note.startswith("asgi (toy) against asgi (bare): the rounds gave -9.1 to +11.1 µs")
    assert "cannot say which is faster" in note
    # one round cannot be judged: its figure is printed without a range
    row.update(comparison_columns({"rps_runs": [9_000.0]}, {"rps_runs": [10_000.0]}))
    assert (row["noisy"], report.added_cell(row)) == (False, "+11.1")


# --- rows and writers, from synthetic runs -----------------------------------------------------


def summary(rps: float, *, errors: int = 0, p50: float = 500.0, p99: float = 2000.0
            ) -> RunSummary:
    return RunSummary(
        requests=int(rps), duration_us=1_000_000, bytes=int(rps) * 100,
        errors={"connect": 0, "read": 0, "write": 0, "status": errors, "timeout": 0},
        latency_us={"min": 50.0, "mean": 600.0, "max": 9000.0, "stdev": 100.0, "p50": p50,
                    "p90": 1000.0, "p99": p99, "p99.9": 5000.0},
    )


def result(layer: str, server: str, rps: list[float], rss: int = 30_000_000,
           errors: int = 0) -> RowResult:
    plan = RowPlan(layer, server, f"apps.{layer}:app", f"{layer} on {server}")
    runs = [Run("warmup", ["wrk"], summary(1.0), 1)]
    runs += [Run("measured", ["wrk"], summary(r, errors=errors), rss) for r in rps]
    return RowResult(plan, Measurement(command=["serve", layer], runs=runs))


def synthetic_rows() -> list[RowResult]:
    failed = RowResult(RowPlan("asgi", "toy-httptools", "apps.asgi_user:app", "ours"),
                       Measurement(status="failed", command=["toyserve"],
                                   error="server did not start",
                                   log_tail="ModuleNotFoundError: toyservers.httptools_server"))
    return [
        result("axum", "axum", [60_000.0]),
        result("asyncio", "raw", [78_000.0, 80_000.0, 82_000.0]),
        result("asgi", "uvicorn", [20_000.0, 19_000.0, 21_000.0], rss=35_500_000),
        failed,
        result("starlette", "uvicorn", [10_000.0, 12_000.0, 14_000.0], errors=2),
        result("fastapi", "uvicorn", [5_000.0, 5_000.0, 5_000.0]),
    ]


def test_rows_compare_each_layer_with_the_one_below() -> None:
    rows = {(r["layer"], r["server"]): r for r in rows_json(synthetic_rows())}
    asgi = rows[("asgi", "uvicorn")]
    assert asgi["below"] == "asyncio/raw"
    assert asgi["rps_median"] == 20_000.0
    assert asgi["rps_runs"] == [20_000.0, 19_000.0, 21_000.0]
    assert (asgi["rps_min"], asgi["rps_max"]) == (19_000.0, 21_000.0)
    assert asgi["us_per_request"] == pytest.approx(50.0)
    # round by round against asyncio's runs of the same round, then the median (min, max)
    added = [1e6 / 20_000 - 1e6 / 78_000, 1e6 / 19_000 - 1e6 / 80_000,
             1e6 / 21_000 - 1e6 / 82_000]
    assert asgi["us_added"] == pytest.approx(sorted(added)[1])
    assert (asgi["us_added_min"], asgi["us_added_max"]) == pytest.approx((min(added), max(added)))
    assert asgi["pct_of_below"] == pytest.approx(100 * 21_000 / 82_000)
    assert (asgi["pct_min"], asgi["pct_max"]) == pytest.approx((100 * 19 / 80, 100 * 20 / 78))
    assert asgi["rounds_compared"] == 3 and not asgi["noisy"]
    assert asgi["rss_peak_mb"] == pytest.approx(35.5)
    assert (asgi["p50_ms"], asgi["p99_ms"]) == (0.5, 2.0)
    assert rows[("starlette", "uvicorn")]["below"] == "asgi/uvicorn"
    assert rows[("starlette", "uvicorn")]["spread_flag"]
    assert rows[("starlette", "uvicorn")]["errors"] == 6
    assert rows[("fastapi", "uvicorn")]["pct_of_below"] == pytest.approx(5_000 / 12_000 * 100)
    # starlette's rounds 10k, 12k, 14k against asgi's 20k, 19k, 21k: the median of the ratios
    assert rows[("starlette", "uvicorn")]["pct_of_below"] == pytest.approx(100 * 12 / 19)
    assert rows[("axum", "axum")]["below"] is None
    assert rows[("asyncio", "raw")]["us_added"] is None
    failed = rows[("asgi", "toy-httptools")]
    assert failed["status"] == "failed"
    assert failed["rps_median"] is None
    assert "ModuleNotFoundError" in failed["log_tail"]
    assert all(len(r["runs"]) == 4 for r in rows.values() if r["status"] == "ok" and
               r["layer"] != "axum")


def test_table_cells_mark_spread_and_failures() -> None:
    cells = table_cells(rows_json(synthetic_rows()))
    assert [c[0] for c in cells] == ["axum", "asyncio", "asgi", "asgi", "starlette", "fastapi"]
    assert cells[2][2] == "20,000"
    assert cells[3][2] == "failed"
    assert cells[4][2] == "12,000 *"
    assert cells[2][11] == "25.6 % (24–26)"
    assert cells[2][10] == "+37.2 (+35.4…+40.1)"
    assert all(len(c) == len(HEADERS) for c in cells)


def results_data(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "experiment": "layers", "date": "2026-01-01T00:00:00+00:00", "command": ["bench"],
        "settings": {"connections": 10, "threads": 1, "duration_s": 10, "warmup_s": 2,
                     "runs": 3, "server": "uvicorn", "compare": ["toy-httptools"]},
        "pinning": {"server_cpu": 0, "wrk_cpu": 1, "text": "pinned: server on CPU 0"},
        "machine": {"cpu_model": "Test CPU", "cores": 2}, "python": {"version": "3.11.0"},
        "packages": {"uvicorn": "0.0"}, "wrk": {"version": "4.1.0"},
        "axum": {"built": True, "note": "axum: cached build"}, "rows": rows,
    }


def test_writers_produce_json_markdown_and_png(tmp_path: Path) -> None:
    data = results_data(rows_json(synthetic_rows()))
    paths = write_outputs(tmp_path, data)
    assert [p.name for p in paths] == ["results.json", "results.md", "layers.png"]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["rows"][2]["rps_median"] == 20_000.0
    for key in ("layer", "server", "rps_median", "rps_runs", "p50_ms", "p99_ms", "errors",
                "rss_peak_mb", "us_per_request", "us_added", "pct_of_below"):
        assert all(key in row for row in saved["rows"])
    md = (tmp_path / "results.md").read_text()
    assert "| Layer | Server | RPS |" in md
    assert "| asgi | uvicorn | 20,000 | 19,000–21,000 |" in md
    assert "| asgi | toy-httptools | failed |" in md
    assert "pinned: server on CPU 0" in md
    assert "asgi (toy-httptools) failed: server did not start" in md
    png = (tmp_path / "layers.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000


def test_markdown_table_escapes_pipes() -> None:
    table = report.markdown_table(["a", "b"], [["x|y", "1"]], [False, True])
    assert table.splitlines() == ["| a | b |", "|---|---:|", "| x\\|y | 1 |"]


def test_prepare_output_refuses_an_unwritable_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(report.OutputError, match="cannot write results to"):
        report.prepare_output(blocker / "results")
    assert report.prepare_output(tmp_path / "a" / "b").is_dir()


# --- planning, pinning and user errors -----------------------------------------------------------


def test_default_rows_put_toy_httptools_beside_uvicorn() -> None:
    names = [(p.layer, p.server) for p in plan_rows(Settings(bare=False))]
    assert names == [("axum", "axum"), ("asyncio", "raw"), ("asgi", "uvicorn"),
                     ("asgi", "toy-httptools"), ("starlette", "uvicorn"),
                     ("fastapi", "uvicorn")]
    with_bare = [(p.layer, p.server) for p in plan_rows(Settings())]
    assert with_bare == [("axum", "axum"), ("asyncio", "raw"), ("asgi", "bare"),
                         ("asgi", "uvicorn"), ("asgi", "toy-httptools"),
                         ("starlette", "uvicorn"), ("fastapi", "uvicorn")]
    other = plan_rows(Settings(server="hypercorn", compare=("hypercorn", "granian"), axum=False,
                               bare=False))
    assert [(p.layer, p.server) for p in other] == [
        ("asyncio", "raw"), ("asgi", "hypercorn"), ("asgi", "granian"),
        ("starlette", "hypercorn"), ("fastapi", "hypercorn")]


def test_compare_layers_add_framework_rows_compared_with_their_own_asgi_row() -> None:
    settings = Settings(compare=("toy-httptools",), compare_layers=("asgi", "starlette"),
                        axum=False, bare=False)
    plans = plan_rows(settings)
    assert [(p.layer, p.server) for p in plans] == [
        ("asyncio", "raw"), ("asgi", "uvicorn"), ("asgi", "toy-httptools"),
        ("starlette", "uvicorn"), ("starlette", "toy-httptools"), ("fastapi", "uvicorn")]
    starlette_toy = plans[4]
    below = below_of(starlette_toy, plans)
    assert below is not None and (below.layer, below.server) == ("asgi", "toy-httptools")


def test_unknown_compare_layer_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.cli", "layers", "--compare-layers", "asgi,django",
         "--output", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "unknown layer 'django' in --compare-layers" in result.stderr
    assert "Traceback" not in result.stderr


def test_pinning_decisions() -> None:
    assert decide_pinning(Settings(), [0, 1]).server_cpu == 0
    assert decide_pinning(Settings(), [0, 1]).load_cpu == 1
    assert decide_pinning(Settings(pin=False), [0, 1]).server_cpu is None
    lone = decide_pinning(Settings(), [0])
    assert lone.server_cpu is None and "only 1 usable core" in lone.text
    with pytest.raises(UsageProblem, match="--wrk-cpu 7 cannot be used"):
        decide_pinning(Settings(load_cpu=7), [0, 1])
    with pytest.raises(UsageProblem, match="must differ"):
        decide_pinning(Settings(server_cpu=1, load_cpu=1), [0, 1])


def test_validate_servers_names_the_known_ones() -> None:
    with pytest.raises(UsageProblem, match=r"unknown server 'nope' \(known: .*uvicorn"):
        validate_servers(["uvicorn", "nope"])
    with pytest.raises(UsageProblem, match="gunicorn serves WSGI"):
        validate_servers(["gunicorn"])
    validate_servers(["uvicorn", "hypercorn", "toy-h11"])
    with pytest.raises(UsageProblem, match="bare is a baseline"):
        validate_servers(["uvicorn", "bare"])


def test_cli_unknown_server_is_one_line() -> None:
    out = run_cli("layers", "--server", "nope")
    assert out.returncode == 2
    assert out.stderr.strip().startswith("error: unknown server 'nope' (known:")
    assert "Traceback" not in out.stderr


def test_cli_unwritable_output_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = run_cli("layers", "--output", str(blocker / "x"))
    assert out.returncode == 2
    assert "error: cannot write results to" in out.stderr
    assert "Traceback" not in out.stderr


def test_cli_wrk_missing_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}
    out = run_cli("layers", "--output", str(tmp_path / "out"), env=env)
    assert out.returncode == 2
    assert out.stderr.strip().startswith("error: wrk not found")


@needs_wrk
def test_cli_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_cli("layers", "--port", str(port), "--output", str(tmp_path))
    assert out.returncode == 2
    assert f"error: port {port} on 127.0.0.1 cannot be used" in out.stderr


@needs_wrk
@pytest.mark.skipif(len(usable_cpus()) < 2, reason="pinning needs 2 usable CPUs")
def test_cli_unusable_cpu_is_one_line(tmp_path: Path) -> None:
    out = run_cli("layers", "--server-cpu", "999", "--output", str(tmp_path))
    assert out.returncode == 2
    assert "error: --server-cpu 999 cannot be used" in out.stderr


def test_axum_is_skipped_with_a_note_without_cargo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "find_cargo", lambda: None)
    build = native.ensure_axum()
    assert build.binary is None
    assert "cargo not found" in build.note


def test_axum_freshness_follows_the_sources(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    for name in ("Cargo.toml", "Cargo.lock", "src/main.rs"):
        (tmp_path / name).write_text("x")
    binary = tmp_path / "axum-user"
    assert not native.is_fresh(binary, tmp_path)
    binary.write_text("")
    os.utime(binary, (2_000_000_000, 2_000_000_000))
    assert native.is_fresh(binary, tmp_path)
    os.utime(tmp_path / "src/main.rs", (2_000_000_001, 2_000_000_001))
    assert not native.is_fresh(binary, tmp_path)


# --- the bare baseline row ------------------------------------------------------------------


def test_bare_row_sits_between_asyncio_and_the_asgi_servers() -> None:
    plans = plan_rows(Settings(axum=False, compare=("toy-httptools", "uvicorn-h11")))
    assert [(p.layer, p.server) for p in plans][:5] == [
        ("asyncio", "raw"), ("asgi", "bare"), ("asgi", "uvicorn"), ("asgi", "toy-httptools"),
        ("asgi", "uvicorn-h11")]
    bare = plans[1]
    assert bare.app == "apps.asgi_user:app"
    assert layers.server_argv(bare, "127.0.0.1", 9, None)[1].endswith(
        "lessons/code/05-speed/bare_httptools.py")

    def below(server: str) -> tuple[str, str] | None:
        plan = next(p for p in plans if (p.layer, p.server) == ("asgi", server))
        found = below_of(plan, plans)
        return (found.layer, found.server) if found else None

    assert below("bare") == ("asyncio", "raw")
    assert below("uvicorn") == below("toy-httptools") == below("uvicorn-h11") == ("asgi", "bare")
    starlette = next(p for p in plans if p.layer == "starlette")
    found = below_of(starlette, plans)
    assert found is not None and (found.layer, found.server) == ("asgi", "uvicorn")


def test_asgi_servers_are_compared_with_bare_when_it_ran() -> None:
    rows = [result("asyncio", "raw", [80_000.0]), result("asgi", "bare", [40_000.0]),
            result("asgi", "uvicorn", [20_000.0])]
    derived = {(r["layer"], r["server"]): r for r in rows_json(rows)}
    assert derived[("asgi", "bare")]["below"] == "asyncio/raw"
    assert derived[("asgi", "bare")]["us_added"] == pytest.approx(25.0 - 12.5)
    uvicorn = derived[("asgi", "uvicorn")]
    assert uvicorn["below"] == "asgi/bare"
    assert uvicorn["us_added"] == pytest.approx(50.0 - 25.0)  # what uvicorn adds over bare
    assert uvicorn["pct_of_below"] == pytest.approx(50.0)


def test_a_duplicate_compare_name_is_planned_once() -> None:
    plans = plan_rows(Settings(axum=False, compare=("toy-h11", "toy-h11")))
    assert [(p.layer, p.server) for p in plans].count(("asgi", "toy-h11")) == 1


def test_how_it_ran_explains_the_bare_row_and_the_commit() -> None:
    data = results_data([])
    data["settings"]["bare"] = True
    data["git"] = {"commit": "0123456789abcdef" * 2 + "01234567", "dirty": True}
    lines = how_it_ran(data)
    assert any(line.startswith("bare: the pure ASGI app on lessons/code/05-speed/"
                               "bare_httptools.py") for line in lines)
    assert "the other asgi rows with bare" in lines[-1]
    assert "toyservers at commit 0123456789ab, with uncommitted changes" in lines
    data["settings"]["bare"], data["git"] = False, None
    lines = how_it_ran(data)
    assert not any(line.startswith("bare:") for line in lines)
    assert "compare asgi with asyncio" in lines[-1]
    assert "toyservers: not a git checkout" in lines


# --- results.json: the project's commit -------------------------------------------------------


def assert_commit(git: dict[str, Any] | None) -> None:
    """``git`` is what results.json records for this checkout (other commits may land while a
    test runs, so the hash is checked for its shape, not compared)."""
    assert git is not None, "the tests run in a git checkout"
    assert re.fullmatch(r"[0-9a-f]{40}", git["commit"]) and isinstance(git["dirty"], bool)


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                         check=True, timeout=30)
    return out.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_state_records_the_commit_and_whether_the_tree_is_dirty(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "a")
    head = git(repo, "rev-parse", "HEAD")
    assert git_state(repo) == {"commit": head, "dirty": False}
    (repo / "a.txt").write_text("changed\n")
    assert git_state(repo) == {"commit": head, "dirty": True}
    git(repo, "checkout", "-q", "a.txt")
    (repo / "new.txt").write_text("untracked\n")
    assert git_state(repo) == {"commit": head, "dirty": True}
    (repo / "new.txt").unlink()
    (repo / "lessons" / "results" / "layers").mkdir(parents=True)  # a run's output: not code
    (repo / "lessons" / "results" / "layers" / "results.json").write_text("{}\n")
    assert git_state(repo) == {"commit": head, "dirty": False}
    outside = tmp_path / "not-a-checkout"
    outside.mkdir()
    assert git_state(outside) is None


def test_environment_records_git_and_the_load_generator() -> None:
    class Fake:
        name, path = "fake", "/bin/fake"

        def version(self) -> str:
            return "9.9"

    data = harness.environment(Fake())  # type: ignore[arg-type]
    assert_commit(data["git"])
    assert data["load_generator"] == "fake"
    assert data["fake"] == {"path": "/bin/fake", "version": "9.9"}
    assert {"machine", "python", "packages"} <= set(data)


# --- measuring pieces against real processes ------------------------------------------------------


def test_rss_sampler_sees_a_process_tree_grow() -> None:
    code = "import sys; block = b'x' * 50_000_000; print('ready', flush=True); sys.stdin.read()"
    with subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == b"ready"
            with RssSampler(child.pid, interval=0.01) as sampler:
                pass
            assert sampler.peak > 50_000_000
        finally:
            child.kill()
            child.wait(timeout=10)


def test_check_echo_accepts_the_echo_and_refuses_anything_else() -> None:
    port = free_port()
    with ServerProcess(get("uvicorn").command("apps.asgi_user:app", "127.0.0.1", port),
                       port=port):
        assert check_echo("127.0.0.1", port) is None
        assert "status 400" in str(check_echo("127.0.0.1", port, body=b"{oops"))
    port = free_port()
    with ServerProcess(get("uvicorn").command("tests.support.echo_app:app", "127.0.0.1", port),
                       port=port):
        assert "not the echoed user" in str(check_echo("127.0.0.1", port))
    assert "check request failed" in str(check_echo("127.0.0.1", free_port(), timeout=2))


@needs_wrk
@pytest.mark.wrk
def test_a_failed_row_is_reported_and_the_run_goes_on(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    real = layers.server_argv
    crash = [sys.executable, "-c", "import sys; print('boom: no such app'); sys.exit(3)"]

    def argv(plan: RowPlan, host: str, port: int, binary: Path | None) -> list[str]:
        return real(plan, host, port, binary) if plan.layer == "asyncio" else crash

    monkeypatch.setattr(layers, "server_argv", argv)
    console = Console(file=io.StringIO())
    settings = Settings(duration=1, warmup=0, runs=1, compare=(), axum=False)
    data = layers.measure(settings, console, tmp_path)
    rows = {r["layer"]: r for r in data["rows"]}
    assert rows["asyncio"]["status"] == "ok" and rows["asyncio"]["rps_median"] > 0
    for layer in ("asgi", "starlette", "fastapi"):
        assert rows[layer]["status"] == "failed"
        assert "boom: no such app" in rows[layer]["log_tail"]
    assert rows["asgi"]["pct_of_below"] is None
    assert_commit(data["git"])
    assert data["load_generator"] == "wrk" and data["wrk"]["version"]


# --- what a whole run writes --------------------------------------------------------------------


def check_a_layers_run(out: Path, stdout: str) -> None:
    """What a shortened ``bench layers`` run (one run of 1 s a row, no warm-up) printed and
    wrote in ``out``: its title; every row that ran with requests, no error, its one round
    and its CPU time; wrk's version, the machine, a table line per row and the chart. The
    runs are the pages' (tests/test_page_bench_commands.py calls this on each timed one
    without --wsgi), among them lesson 6's rows: raw, bare, uvicorn and our servers, and
    Starlette and FastAPI on uvicorn."""
    assert "bench layers: the cost of each layer" in stdout
    data = json.loads((out / "results.json").read_text())
    for row in data["rows"]:
        if row["status"] == "ok":
            assert row["rps_median"] > 0
            assert row["errors"] == 0
            assert len(row["rps_runs"]) == 1 and row["rounds"] == [0]
            assert row["cpu_us_per_request"] > 0  # the server's CPU time was read
    assert data["wrk"]["version"]
    assert data["machine"]["cores"] >= 1
    assert (out / "results.md").read_text().count("\n|") >= len(data["rows"])
    assert (out / "layers.png").read_bytes().startswith(b"\x89PNG")


# --- the WSGI rows (--wsgi) -----------------------------------------------------------------

WSGI_NAMES = ["toy-wsgi-gthread", "gunicorn", "gunicorn-gthread", "waitress", "bjoern"]


def test_wsgi_rows_come_after_the_asgi_ones_on_every_wsgi_server() -> None:
    assert not any(p.interface == "wsgi" for p in plan_rows(Settings(axum=False)))
    plans = plan_rows(Settings(axum=False, bare=False, compare=(), wsgi=True, wsgi_threads=6))
    names = [(p.layer, p.server) for p in plans]
    assert names == [("asyncio", "raw"), ("asgi", "uvicorn"), ("starlette", "uvicorn"),
                     ("fastapi", "uvicorn"),
                     *[("wsgi", n) for n in WSGI_NAMES], *[("flask", n) for n in WSGI_NAMES]]
    assert [p.interface for p in plans[:4]] == [None, "asgi", "asgi", "asgi"]
    wsgi = {(p.layer, p.server): p for p in plans if p.interface == "wsgi"}
    assert len(wsgi) == 10
    assert wsgi[("wsgi", "waitress")].app == "apps.wsgi_user:app"
    assert wsgi[("flask", "waitress")].app == "apps.flask_user:app"
    threads = {server: wsgi[("wsgi", server)].threads for server in WSGI_NAMES}
    assert threads == {"toy-wsgi-gthread": 6, "gunicorn": None, "gunicorn-gthread": 6,
                       "waitress": 6, "bjoern": None}

    def argv(server: str) -> list[str]:
        return layers.server_argv(wsgi[("flask", server)], "127.0.0.1", 9, None)

    toy = argv("toy-wsgi-gthread")
    assert toy[toy.index("--server") + 1] == "toy-wsgi"
    assert toy[toy.index("--worker-class") + 1] == "gthread"
    assert toy[toy.index("--threads") + 1] == "6"
    assert "--worker-class" not in argv("gunicorn")
    assert argv("gunicorn-gthread")[-5:] == ["--worker-class", "gthread", "--threads", "6",
                                             "apps.flask_user:app"]
    assert "--threads=6" in argv("waitress")
    assert argv("bjoern")[1:4] == ["-m", "bench.bjoern_launcher", "apps.flask_user:app"]


def test_wsgi_rows_compare_with_asyncio_and_flask_with_wsgi_on_the_same_server() -> None:
    plans = plan_rows(Settings(axum=False, compare=(), wsgi=True))
    for plan in plans:
        found = below_of(plan, plans)
        if plan.layer == "wsgi":
            assert found is not None and (found.layer, found.server) == ("asyncio", "raw")
        elif plan.layer == "flask":
            assert found is not None and (found.layer, found.server) == ("wsgi", plan.server)
    rows = [result("asyncio", "raw", [80_000.0]), result("wsgi", "gunicorn", [8_000.0]),
            result("flask", "gunicorn", [4_000.0])]
    derived = {(r["layer"], r["server"]): r for r in rows_json(rows)}
    assert derived[("wsgi", "gunicorn")]["below"] == "asyncio/raw"
    assert derived[("wsgi", "gunicorn")]["us_added"] == pytest.approx(125.0 - 12.5)
    assert derived[("flask", "gunicorn")]["below"] == "wsgi/gunicorn"
    assert derived[("flask", "gunicorn")]["pct_of_below"] == pytest.approx(50.0)


def test_how_it_ran_explains_the_wsgi_rows() -> None:
    data = results_data([])
    data["settings"].update(bare=False, wsgi=True, wsgi_threads=10)
    data["bjoern"] = {"installed": False, "note": "bjoern rows skipped: not installed"}
    lines = how_it_ran(data)
    assert any(line.startswith("WSGI rows: one process each") and "10 threads" in line
               for line in lines)
    assert "bjoern rows skipped: not installed" in lines
    assert "wsgi with asyncio" in lines[-1] and "flask with wsgi on the same server" in lines[-1]
    data["settings"]["wsgi"] = False
    assert not any("WSGI" in line or "wsgi" in line for line in how_it_ran(data))


def test_bjoern_missing_is_a_note_and_its_rows_are_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "_bjoern" else real(name, *a))
    installed, note = layers.bjoern_status()
    assert not installed
    assert note.startswith("bjoern rows skipped: bjoern is not installed")
    planned: list[RowPlan] = []
    monkeypatch.setattr(layers, "measure_all",
                        lambda plans, *args: planned.extend(plans) or [])
    console = Console(file=io.StringIO(), width=300)
    data = layers.measure(Settings(axum=False, compare=(), wsgi=True), console, tmp_path)
    assert data["bjoern"] == {"installed": False, "note": note}
    assert note in console.file.getvalue()  # type: ignore[attr-defined]
    assert [p.server for p in planned if p.layer == "wsgi"] == WSGI_NAMES[:-1]
    assert not any(p.server == "bjoern" for p in planned)


def test_the_bjoern_launcher_says_what_to_install_when_bjoern_is_missing() -> None:
    code = ("import sys; sys.modules['bjoern'] = None; "
            "from bench.bjoern_launcher import main; main(['apps.wsgi_user:app'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    assert "bjoern is not installed" in out.stderr and "libev-dev" in out.stderr
    assert "Traceback" not in out.stderr


@needs_wrk
@pytest.mark.wrk
def test_wsgi_rows_smoke_on_toy_wsgi_and_gunicorn(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny real run of the wsgi and flask rows on toy-wsgi gthread and gunicorn sync (the
    ASGI rows are left out to keep it short; asyncio stays as the wsgi rows' below)."""
    monkeypatch.setattr(layers, "WSGI_SERVERS", layers.WSGI_SERVERS[:2])
    real = layers.plan_rows
    monkeypatch.setattr(layers, "plan_rows", lambda settings: [
        p for p in real(settings) if p.layer not in ("asgi", "starlette", "fastapi")])
    console = Console(file=io.StringIO())
    settings = Settings(duration=1, warmup=0, runs=1, compare=(), axum=False, bare=False,
                        wsgi=True, wsgi_threads=4)
    data = layers.measure(settings, console, tmp_path)
    rows = {(r["layer"], r["server"]): r for r in data["rows"]}
    assert list(rows) == [("asyncio", "raw"), ("wsgi", "toy-wsgi-gthread"), ("wsgi", "gunicorn"),
                          ("flask", "toy-wsgi-gthread"), ("flask", "gunicorn")]
    for key, row in rows.items():
        assert row["status"] == "ok", (key, row["error"], row["log_tail"])
        assert row["rps_median"] > 0 and row["errors"] == 0, key
        assert row["rss_peak_mb"] > 0
    assert rows[("wsgi", "gunicorn")]["interface"] == "wsgi"
    assert rows[("wsgi", "toy-wsgi-gthread")]["threads"] == 4
    assert rows[("flask", "gunicorn")]["below"] == "wsgi/gunicorn"
    assert rows[("flask", "gunicorn")]["pct_of_below"] is not None
    assert data["settings"]["wsgi"] is True and "bjoern" in data
    write_outputs(tmp_path, data)
    md = (tmp_path / "results.md").read_text()
    assert "| wsgi | toy-wsgi-gthread |" in md and "| flask | gunicorn |" in md
    assert "WSGI rows: one process each" in md


def test_a_port_another_process_took_first_is_not_taken_for_the_servers() -> None:
    """free_port's pick can be bound by a process running beside us before our server binds
    it: the server then fails to start, and the port still answers. wait_for_port must say
    the server exited, not that it is ready (a check request would reach the other one)."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        code = ("import socket, sys, time; s = socket.socket(); time.sleep(0.3); "
                f"s.bind(('127.0.0.1', {port}))")  # the slow start-up, then the bind fails
        with pytest.raises(ServerStartError, match="exited"):
            with ServerProcess([sys.executable, "-c", code], port=port, startup_timeout=10):
                pass
