"""``bench ws``: ws-load's JSON read back, the rows' ratios and targets, and a short real run.

Nothing here asserts a speed: figures depend on the machine and on what else runs on it. The
short run checks the report's shape and that every figure is positive and plausible.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench import native
from bench.cli import app
from bench.harness import UsageProblem
from bench.loadgen import Load, LoadGenError
from bench.rounds import Measurement, Run
from bench.ws import choose_servers
from bench.ws_client import EchoSummary, WsLoad, parse_closed, parse_echo, parse_idle, ws_url
from bench.ws_report import (
    EchoResult,
    IdleRun,
    echo_rows,
    goal_lines,
    goals,
    how_it_ran,
    idle_rows,
    write_outputs,
)
from toyservers.registry import SERVERS, available

# ws-load's echo line from a real 3 s run (10 connections) against uvicorn.
ECHO_LINE = (
    '{"mode": "echo", "connections": 10, "opened": 10, "messages": 125015, "duration_us": '
    '3000997, "bytes": 128015360, "errors": {"connect": 0, "read": 0, "write": 0, "status": 0, '
    '"timeout": 0}, "latency_us": {"min": 77, "mean": 239.4, "p50": 231, "p90": 332, "p99": '
    '399, "p99.9": 1649, "max": 4123}, "cpu_seconds": 1.109412}')
IDLE_LINE = ('{"mode": "idle", "connections": 1000, "opened": 998, "errors": {"connect": 2, '
             '"read": 0, "write": 0, "status": 0, "timeout": 0}, "open_us": 283077}')


# --- reading ws-load's output ---------------------------------------------------------------


def test_the_echo_line_is_read_into_the_common_fields() -> None:
    summary = parse_echo(ECHO_LINE)
    assert summary.requests == 125015 and summary.duration_us == 3000997
    assert summary.rps == pytest.approx(125015 / 3.000997)
    assert summary.errors == {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    assert summary.latency_us["p50"] == 231.0 and summary.latency_us["p99.9"] == 1649.0
    assert summary.latency_us["mean"] == 239.4 and summary.bytes == 128015360
    assert summary.opened == 10 and summary.tool == "ws-load"
    assert summary.client_cpu_seconds == pytest.approx(1.109412)
    assert summary.client_cpu_share == pytest.approx(1.109412 / 3.000997)
    assert summary.to_json()["client_cpu_seconds"] == pytest.approx(1.109412)


def test_an_echo_run_with_no_message_back_has_no_latency() -> None:
    data = json.loads(ECHO_LINE)
    data.update(messages=0, bytes=0, latency_us=dict.fromkeys(data["latency_us"]))
    data["errors"]["connect"] = 10
    summary = parse_echo(json.dumps(data))
    assert summary.requests == 0 and summary.error_total == 10
    assert summary.latency_us["p99"] is None


@pytest.mark.parametrize(("line", "message"), [
    ("thread 'main' panicked", "not JSON"),
    ("[1, 2]", "not an object"),
    (IDLE_LINE, "expected ws-load's echo line"),
    (ECHO_LINE.replace('"messages": 125015, ', ""), "lacks or garbles 'messages'"),
    (ECHO_LINE.replace('"status": 0, ', ""), "lack a count"),
    (ECHO_LINE.replace('"p99": 399', '"p99": "fast"'), "lacks or garbles"),
])
def test_a_garbled_echo_line_is_one_clear_error(line: str, message: str) -> None:
    with pytest.raises(LoadGenError, match=message):
        parse_echo(line)


def test_the_idle_lines_are_read() -> None:
    opened = parse_idle(IDLE_LINE)
    assert (opened.connections, opened.opened, opened.open_us) == (1000, 998, 283077)
    assert opened.errors["connect"] == 2
    assert parse_closed('{"closed": 998, "cpu_seconds": 0.167772}') == (998, 0.167772)
    with pytest.raises(LoadGenError, match="expected ws-load's idle line"):
        parse_idle(ECHO_LINE)
    with pytest.raises(LoadGenError, match="closing line"):
        parse_closed('{"closed": "all"}')


def test_the_echo_command_asks_for_the_load() -> None:
    generator = WsLoad(Path("/opt/ws-load"))
    argv = generator.command("http://127.0.0.1:8000/", Load(connections=100, duration=5,
                                                             timeout=2.0, body=b"x" * 1024))
    assert argv == ["/opt/ws-load", "echo", "--url", "ws://127.0.0.1:8000/", "--connections",
                    "100", "--duration", "5", "--size", "1024", "--timeout", "2"]
    assert ws_url("ws://h:1/") == ws_url("http://h:1/") == "ws://h:1/"


def test_without_cargo_the_build_is_skipped_with_one_line(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(native, "find_cargo", lambda: None)
    build = native.ensure_wsload()
    assert build.binary is None and build.note.startswith("bench ws skipped: cargo not found")
    result = CliRunner().invoke(app, ["ws", "--servers", "toy-raw", "--output",
                                      str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "bench ws skipped: cargo not found" in result.output
    assert not (tmp_path / "out" / "results.json").exists()


def test_the_servers_are_the_ones_the_registry_says_speak_websocket() -> None:
    chosen, notes = choose_servers(())
    assert chosen and notes == []
    assert all("websocket" in SERVERS[name].protocols for name in chosen)
    assert set(chosen) == {n for n in available() if "websocket" in SERVERS[n].protocols}
    without = [n for n in available() if "websocket" not in SERVERS[n].protocols]
    if without:
        chosen, notes = choose_servers((without[0], "uvicorn"))
        assert chosen == ["uvicorn"] and notes[0].startswith(f"{without[0]} left out")
    with pytest.raises(UsageProblem, match="unknown server"):
        choose_servers(("no-such-server",))


# --- ratios and targets ---------------------------------------------------------------------


def echo_measurement(rates: list[float], cpu_seconds: float = 1.0) -> Measurement:
    """A measurement whose round ``i`` echoed ``rates[i]`` messages a second for 2 s."""
    runs = []
    for i, rate in enumerate(rates):
        summary = EchoSummary(requests=int(rate * 2), duration_us=2_000_000,
                              errors=dict.fromkeys(("connect", "read", "write", "status",
                                                    "timeout"), 0),
                              latency_us={"p50": 100.0, "p90": 150.0, "p99": 300.0},
                              tool="ws-load", opened=10, client_cpu_seconds=0.5)
        runs.append(Run("measured", ["ws-load"], summary, 30_000_000, cpu_seconds, i))
    return Measurement("ok", ["server"], runs)


def test_echo_ratios_are_taken_round_by_round() -> None:
    rows = echo_rows([EchoResult("toy-raw", 10, echo_measurement([12_000, 6_000, 9_000])),
                      EchoResult("uvicorn", 10, echo_measurement([10_000, 5_000, 10_000]))],
                     "uvicorn")
    toy, reference = rows
    assert toy["messages_per_s"] == 9_000 and toy["messages_per_s_runs"] == [12_000, 6_000,
                                                                              9_000]
    # per round: 120 %, 120 %, 90 %: the median, and noise since the rounds disagree
    assert toy["vs_reference"] == pytest.approx(120.0)
    assert (toy["vs_reference_min"], toy["vs_reference_max"]) == pytest.approx((90, 120))
    assert toy["vs_reference_noisy"] and toy["vs_reference_rounds"] == 3
    assert reference["vs_reference"] is None
    assert toy["server_cpu_pct"] == pytest.approx(50.0)  # 1 s of CPU over a 2 s window
    assert toy["client_cpu_pct"] == pytest.approx(25.0)
    assert toy["cpu_us_per_message"] == pytest.approx(1e6 / 18_000)
    # 1 s of CPU each run: µs per message 41.7, 83.3, 55.6 against 50, 100, 50
    assert toy["cpu_vs_reference"] == pytest.approx(100 * 10_000 / 12_000)
    assert toy["cpu_vs_reference_max"] == pytest.approx(100 * 10_000 / 9_000)
    assert toy["cpu_vs_reference_noisy"] and reference["cpu_vs_reference"] is None


def idle_run(server: str, round_index: int, kib: float) -> IdleRun:
    return IdleRun(server, round_index, ["server"], rss_before=30_000_000,
                   rss_open=30_000_000 + int(kib * 1024 * 1000), opened=1000)


def test_idle_rows_give_kib_per_connection_and_its_ratio() -> None:
    runs = [idle_run("toy-raw", r, kib) for r, kib in enumerate((8, 8, 9))]
    runs += [idle_run("uvicorn", r, kib) for r, kib in enumerate((19, 20, 20))]
    runs.append(IdleRun("daphne", 0, ["daphne"], error="server did not start"))
    toy, reference, failed = idle_rows(runs, ["toy-raw", "uvicorn", "daphne"], "uvicorn")
    assert toy["kib_per_connection"] == pytest.approx(8, abs=0.01)
    assert toy["kib_runs"] == pytest.approx([8, 8, 9], abs=0.01)
    # per round: 8/19, 8/20, 9/20: the median of the three
    assert toy["vs_reference"] == pytest.approx(100 * 8 / 19, abs=0.1)
    assert not toy["vs_reference_noisy"] and toy["opened"] == 1000
    assert reference["vs_reference"] is None and reference["status"] == "ok"
    assert failed["status"] == "failed" and failed["error"] == "server did not start"


def test_targets_hold_every_toy_row_to_issue_20s_figures() -> None:
    rows = echo_rows([EchoResult("toy-raw", 10, echo_measurement([13_000, 12_500])),
                      EchoResult("uvicorn", 10, echo_measurement([10_000, 10_000])),
                      EchoResult("toy-raw", 100, echo_measurement([1_000, 1_000])),
                      EchoResult("uvicorn", 100, echo_measurement([10_000, 10_000]))],
                     "uvicorn")
    idle = idle_rows([idle_run("toy-raw", 0, 25), idle_run("uvicorn", 0, 20)],
                     ["toy-raw", "uvicorn"], "uvicorn")
    found = goals(rows, idle, "uvicorn")
    assert [(g["server"], g["what"], g["met"]) for g in found] == [
        ("toy-raw", "speed", True), ("toy-raw", "memory", False)]
    assert found[0]["ratio"] == pytest.approx(1.275)
    assert found[1]["ratio"] == pytest.approx(1.25)
    lines = goal_lines({"goals": found, "settings": {"reference": "uvicorn"}})
    assert lines[0].startswith("toy-raw: messages/s at 10 connections 1.27x uvicorn")
    assert "≥ 1.2x: met; CPU µs per message 0.78x uvicorn's (rounds 0.77–0.80x)" in lines[0]
    assert lines[1].endswith("≤ 1x: not met")
    assert all(g["decided"] for g in found)


def test_a_target_the_rounds_straddle_is_undecided() -> None:
    rows = echo_rows([EchoResult("toy-raw", 10, echo_measurement([13_000, 11_000, 12_500])),
                      EchoResult("uvicorn", 10, echo_measurement([10_000, 10_000, 10_000]))],
                     "uvicorn")
    found = goals(rows, [], "uvicorn")
    assert found[0]["met"] and not found[0]["decided"]  # median 1.25x, one round 1.1x
    line = goal_lines({"goals": found, "settings": {"reference": "uvicorn"}})[0]
    assert "undecided: the rounds fall on both sides of it (their median meets it)" in line


# --- a short real run -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ws_load() -> Path:
    """The built ws-load (cargo builds it on first use: minutes on a new machine)."""
    if native.find_cargo() is None:
        pytest.skip("bench ws needs cargo to build its load generator (https://rustup.rs)")
    build = native.ensure_wsload()
    assert build.binary is not None, build.note
    return build.binary


@pytest.mark.timeout(900)
def test_a_short_run_writes_a_plausible_report(ws_load: Path, tmp_path: Path) -> None:
    out = tmp_path / "ws"
    run = subprocess.run(
        [sys.executable, "-m", "bench.cli", "ws", "--servers", "toy-raw,uvicorn",
         "--connections", "2", "--duration", "1", "--runs", "1", "--warmup", "0",
         "--idle", "200", "--output", str(out)],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "bench ws: WebSocket echo and idle connections" in run.stdout
    data = json.loads((out / "results.json").read_text())
    for key in ("machine", "python", "packages", "git", "ws-load", "settings", "pinning",
                "command", "goals", "notes", "rows", "idle", "ws_load_build"):
        assert key in data, key
    assert data["command"][:2] == ["bench", "ws"]
    assert [(r["server"], r["connections"]) for r in data["rows"]] == [("toy-raw", 2),
                                                                        ("uvicorn", 2)]
    for row in data["rows"]:
        assert row["status"] == "ok", (row["server"], row["error"], row["log_tail"])
        assert row["messages_per_s"] > 10 and row["errors"] == 0
        assert 0 < row["p50_ms"] <= row["p99_ms"] < 2000
        assert 0 < row["cpu_us_per_message"] < 100_000
        assert 0 < row["server_cpu_pct"] < 200 and 0 < row["client_cpu_pct"] < 200
        assert row["rss_peak_mb"] > 1
        measured = [r for r in row["runs"] if r["kind"] == "measured"]
        assert measured[0]["summary"]["opened"] == 2
        assert measured[0]["command"][1] == "echo"
    assert data["rows"][0]["vs_reference"] > 0 and data["rows"][1]["vs_reference"] is None
    for row in data["idle"]:
        assert row["status"] == "ok", (row["server"], row["error"], row["log_tail"])
        assert row["opened"] == 200 and row["errors"] == 0
        assert 0 < row["kib_per_connection"] < 1024
        assert row["rss_open_mb"] > row["rss_before_mb"] > 1
    assert [g["what"] for g in data["goals"]] == ["memory"]  # no row at 10 connections
    text = (out / "results.md").read_text()
    assert text.startswith("**bench ws") and "| toy-raw | 2 |" in text
    assert "RSS per idle connection, 200 open" in text and "command: bench ws" in text


def test_without_idle_rows_the_report_says_so(tmp_path: Path) -> None:
    rows = echo_rows([EchoResult("toy-raw", 10, echo_measurement([13_000]))], "uvicorn")
    data = {
        "command": ["bench", "ws", "--idle", "0"], "pinning": {"text": "not pinned"},
        "ws-load": {"version": "0.1.0"}, "ws_load_build": {"note": "ws-load: cached build"},
        "machine": {"cpu_model": "test", "cores": 2}, "python": {"version": "3.11"},
        "date": "2026-01-01", "git": None, "notes": [], "rows": rows, "idle": [],
        "goals": goals(rows, [], "uvicorn"),
        "settings": {"reference": "uvicorn", "message_bytes": 1024, "duration_s": 1,
                     "warmup_s": 0, "runs": 1, "idle_connections": 0, "idle_hold_s": 1.0}}
    assert "idle: no idle rows (--idle 0)" in how_it_ran(data)
    write_outputs(tmp_path, data)
    text = (tmp_path / "results.md").read_text()
    assert "RSS per idle connection" not in text and "| toy-raw | 10 | 13,000 |" in text
