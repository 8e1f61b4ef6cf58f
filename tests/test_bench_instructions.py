"""``bench layers --count instructions`` and ``bench profile --profiler callgrind``: the
arithmetic of the table, the files, the client, the user mistakes, and the command's wiring
with the counting faked.

The counting itself, under valgrind, is exercised by tests/test_instruction_counts.py.
"""

from __future__ import annotations

import io
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import instructions
from bench.harness import UsageProblem
from bench.instructions import (
    MISSING,
    check_request,
    dump_total,
    find_callgrind,
    is_idle,
    read_response,
    request_bytes,
    wait_idle,
)
from bench.instructions_report import (
    Count,
    Windows,
    added,
    how_it_ran,
    per_request,
    ratio,
    rows_json,
    table_cells,
    write_outputs,
)
from bench.layers import Settings, plan_rows
from bench.profile_report import write_callgrind

ROOT = Path(__file__).resolve().parent.parent
on_linux = pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc (Linux)")


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True,
                          text=True, timeout=60, env=env, cwd=ROOT)


# --- the table's arithmetic --------------------------------------------------------------------


def test_per_request_added_and_ratio() -> None:
    assert per_request(92_585_805, 1000) == 92585.8
    assert per_request(None, 1000) is None and per_request(5, 0) is None
    assert added(110_082.3, 92_585.8) == 17496.5
    assert added(90.0, 100.0) == -10.0  # fewer than the row below: said, not hidden
    assert added(None, 1.0) is None and added(1.0, None) is None
    assert ratio(110_082.3, 92_585.8) == 1.189
    assert ratio(1.0, None) is None and ratio(1.0, 0.0) is None


def counts(settings: Settings, totals: dict[str, int | None], requests: int = 1000
           ) -> list[Count]:
    out = []
    for plan in plan_rows(settings):
        total = totals.get(f"{plan.layer}/{plan.server}")
        if total is None:
            out.append(Count(plan, ["valgrind", "server"], status="failed", requests=requests,
                             error="server did not start"))
            continue
        out.append(Count(plan, ["valgrind", "server"], requests=requests, instructions=total,
                         windows=Windows(total + 5000, 5000, 2.5, ["valgrind", "server"]),
                         dump=f"callgrind/{plan.layer}-{plan.server}.out.1"))
    return out


SETTINGS = Settings(axum=False, compare=("toy-httptools",))
TOTALS: dict[str, int | None] = {
    "asyncio/raw": 45_577_720, "asgi/bare": 92_585_805, "asgi/uvicorn": 135_965_232,
    "asgi/toy-httptools": 110_082_337, "starlette/uvicorn": 222_154_054,
    "fastapi/uvicorn": None,
}


def test_rows_compare_each_row_with_the_row_below() -> None:
    rows = {f"{r['layer']}/{r['server']}": r for r in rows_json(counts(SETTINGS, TOTALS))}
    assert rows["asyncio/raw"]["below"] is None
    assert rows["asyncio/raw"]["ratio_to_below"] is None
    assert rows["asgi/bare"]["below"] == "asyncio/raw"
    assert rows["asgi/toy-httptools"]["below"] == "asgi/bare"
    assert rows["asgi/toy-httptools"]["instructions_per_request"] == 110082.3
    assert rows["asgi/toy-httptools"]["added_per_request"] == 17496.5
    assert rows["asgi/toy-httptools"]["ratio_to_below"] == 1.189
    assert rows["starlette/uvicorn"]["below"] == "asgi/uvicorn"
    assert rows["starlette/uvicorn"]["ratio_to_below"] == 1.634
    assert rows["asgi/bare"]["busy_instructions"] == 92_590_805
    assert rows["asgi/bare"]["idle_instructions"] == 5000
    failed = rows["fastapi/uvicorn"]
    assert failed["status"] == "failed" and failed["below"] == "starlette/uvicorn"
    assert failed["instructions_per_request"] is None and failed["added_per_request"] is None


def test_table_cells_format_counts_and_leave_failed_rows_empty() -> None:
    cells = table_cells(rows_json(counts(SETTINGS, TOTALS)))
    assert cells[0] == ["asyncio", "raw", "45,578", "–", "–"]
    assert cells[3] == ["asgi", "toy-httptools", "110,082", "+17,496", "1.19×"]
    assert cells[-1] == ["fastapi", "uvicorn", "failed", "–", "–"]


def results(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "experiment": "layers", "count": "instructions", "date": "2026-11-27T14:00:00+00:00",
        "command": ["bench", "layers", "--count", "instructions"],
        "settings": {"requests": 1000, "warmup_requests": 500, "connections": 1, "jobs": 2,
                     "server": "uvicorn", "compare": ["toy-httptools"],
                     "compare_layers": ["asgi"], "bare": True, "host": "127.0.0.1",
                     "pythonhashseed": "0", "request": "POST / HTTP/1.1\r\n..."},
        "machine": {"cpu_model": "AMD EPYC", "cores": 2}, "python": {"version": "3.11.7"},
        "git": None, "valgrind": {"path": "/usr/bin/valgrind", "version": "valgrind-3.19.0"},
        "axum": {"built": False, "note": "axum row skipped (--no-axum)"}, "rows": rows,
    }


def test_results_files_hold_the_table_and_how_it_ran(tmp_path: Path) -> None:
    data = results(rows_json(counts(SETTINGS, TOTALS)))
    paths = write_outputs(tmp_path, data)
    assert [p.name for p in paths] == ["results.json", "results.md"]
    assert json.loads(paths[0].read_text()) == data
    md = paths[1].read_text()
    assert "| asgi | toy-httptools | 110,082 | +17,496 | 1.19× |" in md
    assert "valgrind-3.19.0 callgrind: 1,000 requests counted per row after 500" in md
    assert "fastapi (uvicorn) failed: server did not start" in md
    lines = how_it_ran(data)
    assert any("compared in the asgi rows: toy-httptools" in line for line in lines)
    assert any(line.startswith("added and × below compare bare with asyncio") for line in lines)


# --- the client and the dump ------------------------------------------------------------------


def test_request_is_wrks_post_json_byte_for_byte() -> None:
    # captured from wrk 4.1 with bench/lua/post_json.lua against a listening socket
    assert request_bytes("127.0.0.1", 18777) == (
        b'POST / HTTP/1.1\r\nHost: 127.0.0.1:18777\r\nContent-Length: 52\r\n'
        b'Content-Type: application/json\r\n\r\n'
        b'{"id": 1, "name": "user", "email": "user@email.com"}')


def test_read_response_reads_exactly_one_response() -> None:
    stream = io.BytesIO(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
                        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                        b"2\r\n{}\r\n0\r\n\r\nHTTP/1.1 500 Oops\r\n")
    read_response(stream)
    read_response(stream)
    with pytest.raises(RuntimeError, match="500 Oops'. not 200"):
        read_response(stream)
    with pytest.raises(RuntimeError, match="neither Content-Length nor chunked"):
        read_response(io.BytesIO(b"HTTP/1.1 200 OK\r\n\r\n"))
    with pytest.raises(RuntimeError, match="closed the connection mid-response"):
        read_response(io.BytesIO(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"))


def test_dump_total_reads_the_summary_line(tmp_path: Path) -> None:
    dump = tmp_path / "x.out.1"
    dump.write_text("# callgrind format\nevents: Ir\nsummary: 92585805\n\nfn=main\n1 5\n"
                    "totals: 92585809\n")
    assert dump_total(dump) == 92585805
    dump.write_text("events: Ir\n")
    with pytest.raises(ValueError, match="no summary"):
        dump_total(dump)


@on_linux
def test_wait_idle_sees_a_process_asleep_in_epoll_wait() -> None:
    code = "import select, sys; e = select.epoll(); print(flush=True); e.poll()"
    sleeper = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert sleeper.stdout is not None and sleeper.stdout.readline() == b"\n"
        wait_idle(sleeper.pid, timeout=30)
        assert is_idle(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait(10)
        sleeper.stdout.close()
    assert not is_idle(os.getpid())  # running this test: not asleep
    with pytest.raises(RuntimeError, match="did not go back to waiting in epoll_wait"):
        wait_idle(os.getpid(), timeout=0.05)


# --- user mistakes -------------------------------------------------------------------------


def test_valgrind_is_needed_on_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageProblem, match="runs on Linux .this is Darwin."):
        find_callgrind("Darwin")
    monkeypatch.setattr(instructions.shutil, "which", lambda name: None)
    with pytest.raises(UsageProblem) as caught:
        find_callgrind("Linux")
    assert str(caught.value) == MISSING


def test_check_request_refuses_what_it_cannot_count() -> None:
    with pytest.raises(UsageProblem, match="unknown --count 'cycles'"):
        check_request("cycles", Settings(), 100)
    with pytest.raises(UsageProblem, match="drop --wsgi"):
        check_request("instructions", Settings(wsgi=True), 100)
    with pytest.raises(UsageProblem, match="unknown server 'nope'"):
        check_request("instructions", Settings(server="nope"), 100)


def test_cli_without_valgrind_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # no valgrind on it
    out = run_cli("layers", "--count", "instructions", "--output", str(tmp_path / "out"),
                  env=env)
    assert out.returncode == 2
    expected = MISSING if platform.system() == "Linux" else "runs on Linux"
    assert out.stderr.strip().startswith("error: ") and expected in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "out").exists()


def test_cli_unknown_count_is_one_line(tmp_path: Path) -> None:
    out = run_cli("layers", "--count", "cycles", "--output", str(tmp_path / "out"))
    assert out.returncode == 2
    assert out.stderr.strip() == "error: unknown --count 'cycles' (known: time, instructions)"


def test_cli_profile_callgrind_without_valgrind_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}
    out = run_cli("profile", "--profiler", "callgrind", "--layer", "asgi", "--output",
                  str(tmp_path / "out"), env=env)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr


# --- the command, with the counting faked ------------------------------------------------------


def test_cli_counts_every_row_and_writes_the_files(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """``bench layers --count instructions`` end to end but for valgrind: every planned row
    is counted once with the requested count, and the table and files come out."""
    from typer.testing import CliRunner

    from bench.cli import app

    asked: list[tuple[str, int]] = []

    def fake_count(callgrind: Any, argv: list[str], port: int, *, requests: int, dump: Path,
                   **_: Any) -> Windows:
        asked.append((dump.name, requests))
        busy = (100_000 if "bare" in dump.name else 50_000) * requests
        return Windows(busy + 700, 700, 1.5, ["valgrind", *argv])

    monkeypatch.setattr(instructions, "find_callgrind",
                        lambda: instructions.Callgrind("/bin/true", "/bin/true"))
    monkeypatch.setattr(instructions, "count_server", fake_count)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["layers", "--count", "instructions", "--no-axum",
                                      "--compare", "", "--requests", "40", "--output",
                                      str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(asked) == [("asgi-bare.out", 40), ("asgi-uvicorn.out", 40),
                             ("asyncio-raw.out", 40), ("fastapi-uvicorn.out", 40),
                             ("starlette-uvicorn.out", 40)]
    data = json.loads((out / "results.json").read_text())
    assert data["count"] == "instructions" and data["settings"]["requests"] == 40
    bare = next(r for r in data["rows"] if r["server"] == "bare")
    assert (bare["instructions_per_request"], bare["ratio_to_below"]) == (100000.0, 2.0)
    assert (bare["busy_instructions"], bare["idle_instructions"]) == (4_000_700, 700)
    assert "| asgi | uvicorn | 50,000 | -50,000 | 0.50× |" in (out / "results.md").read_text()


@pytest.mark.skipif(platform.system() != "Linux", reason="valgrind runs on Linux only")
def test_profile_txt_holds_callgrind_annotates_two_tables(tmp_path: Path) -> None:
    callgrind = find_callgrind()  # on Linux make test installs valgrind
    dump = tmp_path / "callgrind.out.1"
    subprocess.run([callgrind.valgrind, "--tool=callgrind", f"--callgrind-out-file={dump}",
                    "/bin/true"], check=True, capture_output=True, timeout=120)
    annotate = shutil.which("callgrind_annotate")
    assert annotate is not None
    [path] = write_callgrind(dump, tmp_path, annotate, dump_total(dump), 10)
    text = path.read_text()
    assert text.startswith(f"callgrind: {dump_total(dump):,} instructions over 10 requests")
    inclusive = text.index("=== By inclusive (the function and what it calls) ===")
    own = text.index("=== By self (the function's body alone) ===")
    assert inclusive < own and "PROGRAM TOTALS" in text[own:]


def test_cli_profile_callgrind_writes_the_report(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from bench import profile
    from bench.cli import app

    def fake_count(callgrind: Any, argv: list[str], port: int, **_: Any) -> Windows:
        assert argv[1:3] == ["-m", "apps.raw_user"]
        return Windows(45_600_000, 16_000, 1.6, ["valgrind", *argv])

    def fake_report(dump: Path, out: Path, annotate: str, total: int, requests: int
                    ) -> list[Path]:
        (out / "profile.txt").write_text(f"{total} over {requests}")
        return [out / "profile.txt"]

    monkeypatch.setattr(profile, "find_callgrind",
                        lambda: instructions.Callgrind("/bin/true", "/bin/true"))
    monkeypatch.setattr(profile.shutil, "which", lambda name: "/bin/true")
    monkeypatch.setattr(profile, "count_server", fake_count)
    monkeypatch.setattr(profile, "write_callgrind", fake_report)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["profile", "--profiler", "callgrind", "--layer",
                                      "asyncio", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "asyncio on raw under callgrind: 45,584 instructions per request" in result.output
    data = json.loads((out / "results.json").read_text())
    assert data["profiler"]["name"] == "callgrind" and data["requests"] == 1000
    assert (data["busy_instructions"], data["idle_instructions"]) == (45_600_000, 16_000)
    assert (out / "profile.txt").read_text() == "45600000 over 1000"
