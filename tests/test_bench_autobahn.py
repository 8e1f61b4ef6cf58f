"""``bench autobahn`` and :mod:`bench.wstest`: Autobahn's report read back, the servers chosen,
the echo app it runs against, and one short real run.

The conformance suite's ``autobahn`` row runs sections 1-7 and 10 (less five cases that only
wait) on every server; here the command's own pieces are checked without Autobahn (a report
written by hand), then, where Autobahn|Testsuite is installed, a run of a few cases against
uvicorn.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect as ws_connect

from bench.autobahn import choose_servers, notes, summarize_report, table_cells
from bench.harness import UsageProblem
from bench.process import ServerProcess, free_port
from bench.wstest import (
    AUTOBAHN_PASS,
    MISSING,
    STRICT_PASS,
    WstestError,
    case_key,
    compact_ids,
    find_wstest,
    install_dir,
    parse_report,
    write_spec,
)
from toyservers.registry import SERVERS, get

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[1]


def entry(behavior: str, close: str = "OK", duration: int = 10) -> dict[str, object]:
    return {"behavior": behavior, "behaviorClose": close, "duration": duration,
            "remoteCloseCode": 1000, "reportfile": "x.json"}


INDEX = {"srv": {
    "1.1.1": entry("OK"), "10.1.1": entry("OK", duration=2000), "2.10": entry("OK"),
    "2.9": entry("OK"), "3.2": entry("NON-STRICT"), "7.1.6": entry("INFORMATIONAL"),
    "7.1.5": entry("FAILED", "WRONG CODE"), "12.1.1": entry("UNIMPLEMENTED", duration=500),
}}


@pytest.fixture
def report_file(tmp_path: Path) -> Path:
    path = tmp_path / "index.json"
    path.write_text(json.dumps(INDEX))
    return path


def test_the_report_is_read_case_by_case(report_file: Path) -> None:
    report = parse_report(report_file, "srv")
    assert report.counts() == {"OK": 4, "NON-STRICT": 1, "INFORMATIONAL": 1, "FAILED": 1,
                               "UNIMPLEMENTED": 1}
    assert report.cases["7.1.5"].behavior_close == "WRONG CODE"
    assert report.summary() == ("8 cases: 4 OK, 1 NON-STRICT, 1 INFORMATIONAL, 1 FAILED, "
                                "1 UNIMPLEMENTED")
    # in case order (2.9 before 2.10, 10 after 7), by the stricter bar or by Autobahn's
    assert list(report.failing(STRICT_PASS)) == ["3.2", "7.1.5", "12.1.1"]
    assert report.failing(AUTOBAHN_PASS) == {"7.1.5": "FAILED", "12.1.1": "UNIMPLEMENTED"}
    assert sorted(INDEX["srv"], key=case_key)[:4] == ["1.1.1", "2.9", "2.10", "3.2"]


def test_a_missing_report_or_agent_is_one_error(report_file: Path, tmp_path: Path) -> None:
    with pytest.raises(WstestError, match="no Autobahn report for other"):
        parse_report(report_file, "other")
    with pytest.raises(WstestError, match="no Autobahn report for srv"):
        parse_report(tmp_path / "missing.json", "srv")


def test_sections_are_timed_by_autobahns_clock(report_file: Path) -> None:
    summary = summarize_report(parse_report(report_file, "srv"))
    assert summary["cases"] == 8
    assert summary["section_seconds"] == {"1": 0.0, "2": 0.0, "3": 0.0, "7": 0.0, "10": 2.0,
                                          "12": 0.5}
    assert summary["not_ok"] == {"3.2": "NON-STRICT", "7.1.5": "FAILED",
                                 "7.1.6": "INFORMATIONAL", "12.1.1": "UNIMPLEMENTED"}
    assert list(summary["behaviors"]) == ["1.1.1", "2.9", "2.10", "3.2", "7.1.5", "7.1.6",
                                          "10.1.1", "12.1.1"]
    row = {"server": "srv", "version": "1", "status": "ok", "seconds": 12.3, **summary}
    assert table_cells([row])[0] == ["srv", "1", "8", "4", "1", "1", "1", "1", "12"]
    assert notes({"rows": [row], "notes": ["x left out"]}) == [
        "srv, not OK: NON-STRICT 3.2; INFORMATIONAL 7.1.6; FAILED 7.1.5; UNIMPLEMENTED 12.1.1",
        "x left out"]
    failed = {"server": "x", "version": "2", "status": "failed", "error": "exited"}
    assert table_cells([failed])[0][-1] == "failed: exited"


def test_whole_sections_with_one_behavior_are_written_as_patterns() -> None:
    behaviors = {f"12.{i}.{j}": "UNIMPLEMENTED" for i in (1, 2) for j in range(1, 19)}
    behaviors |= {"9.3.1": "FAILED", "9.3.2": "FAILED", "9.4.1": "FAILED", "9.4.2": "OK",
                  "1.1.1": "FAILED", "1.1.2": "OK", "3.2": "NON-STRICT"}
    assert compact_ids(behaviors, "UNIMPLEMENTED") == ["12.*"]
    assert compact_ids(behaviors, "FAILED") == ["1.1.1", "9.3.*", "9.4.1"]
    assert compact_ids(behaviors, "NON-STRICT") == ["3.2"]  # a section of one case: its id
    assert compact_ids(behaviors, "OK") == ["1.1.2", "9.4.2"]


def test_the_spec_file_names_one_server_and_the_cases(tmp_path: Path) -> None:
    write_spec(tmp_path / "spec.json", "ws://127.0.0.1:1/", "srv", tmp_path / "out",
               ["1.*", "10.*"], ["9.*"])
    spec = json.loads((tmp_path / "spec.json").read_text())
    assert spec["servers"] == [{"agent": "srv", "url": "ws://127.0.0.1:1/"}]
    assert (spec["cases"], spec["exclude-cases"]) == (["1.*", "10.*"], ["9.*"])
    assert spec["outdir"] == str(tmp_path / "out")


def test_the_install_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("AUTOBAHN_DIR", str(tmp_path))
    assert install_dir() == tmp_path and find_wstest() is None
    script = tmp_path / "wstest"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert find_wstest() == script
    monkeypatch.delenv("AUTOBAHN_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert install_dir().parent == tmp_path / "toyservers"


def test_the_servers_are_those_that_speak_websocket() -> None:
    chosen, notes = choose_servers(())
    assert chosen and all("websocket" in SERVERS[n].protocols for n in chosen)
    assert {"uvicorn", "hypercorn"} <= set(chosen)
    no_ws = next((n for n, s in SERVERS.items()
                  if s.interface == "asgi" and s.kind == "toy" and "websocket" not in s.protocols),
                 None)
    if no_ws is not None:
        chosen, notes = choose_servers(("uvicorn", no_ws))
        assert chosen == ["uvicorn"] and notes[0].startswith(f"{no_ws} left out")
    with pytest.raises(UsageProblem, match="unknown server 'nginx'"):
        choose_servers(("nginx",))


def test_without_autobahn_the_command_says_so_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.cli", "autobahn", "--servers", "uvicorn", "--output",
         str(tmp_path / "out")], capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "AUTOBAHN_DIR": str(tmp_path / "nothing")})
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip() == f"error: {MISSING}"


# --- the echo app ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def echo_port() -> Iterator[int]:
    port = free_port()
    with ServerProcess(get("uvicorn").command("apps.ws_echo:app", HOST, port), port=port,
                       cwd=ROOT):
        yield port


def test_the_echo_app_sends_every_message_back_in_its_kind(echo_port: int) -> None:
    with ws_connect(f"ws://{HOST}:{echo_port}/any/path", open_timeout=5) as ws:
        for message in ("hello", b"\x00\x01binary", "", b"", "é" * 1000):
            ws.send(message)
            assert ws.recv(timeout=5) == message


def test_the_echo_app_answers_http_with_one_line(echo_port: int) -> None:
    response = httpx.get(f"http://{HOST}:{echo_port}/", timeout=5)
    assert response.status_code == 200 and "WebSocket echo" in response.text
    assert httpx.post(f"http://{HOST}:{echo_port}/", content=b"x", timeout=5).status_code == 405


# --- a short real run ---------------------------------------------------------------------------


@pytest.mark.skipif(find_wstest() is None, reason=MISSING)
def test_bench_autobahn_runs_a_few_cases(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.cli", "autobahn", "--servers", "hypercorn",
         "--cases", "1.1.1,1.1.2,5.1", "--output", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    data = json.loads((tmp_path / "results.json").read_text())
    row = data["rows"][0]
    assert (row["server"], row["status"], row["cases"]) == ("hypercorn", "ok", 3)
    assert row["counts"]["OK"] == 3 and row["not_ok"] == {}
    assert data["command"][:2] == ["bench", "autobahn"] and data["cases"] == ["1.1.1", "1.1.2",
                                                                               "5.1"]
    assert "| hypercorn |" in (tmp_path / "results.md").read_text()
