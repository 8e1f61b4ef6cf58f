"""Lesson 13 (WebSocket): its programs print what the page shows, and its transcript is current.

- ``lessons/code/13-websocket/handshake.py`` and ``frame.py`` need no server: their commands
  are cut out of the page and run, and must print the page's ``text`` blocks.
- "Run it" starts toy-raw with the echo app as printed, runs the websockets client tab and the
  raw-socket tab against it, and compares each with what the page shows (the raw-socket tab's
  output is the "On the wire" transcript).
- ``lessons/code/13-websocket/client.py`` against toy-raw must print the committed
  ``lessons/transcripts/13-ws-frames.txt`` (the 101's ``date`` value aside); regenerate with
  ``UPDATE_TRANSCRIPTS=1 pytest tests/test_lessons_ws.py``.
- The Autobahn tables come from ``lessons/results/autobahn-toys`` and ``lessons/results/autobahn``,
  the committed ``bench autobahn`` runs of every section on the servers ``make lesson-results``
  names, and the toys' run holds the issue's target: every case OK or INFORMATIONAL on every
  toy with WebSocket over HTTP/1.1; the ``bench ws`` table
  from ``lessons/results/ws``, whose figures hold what "Measure it" says of them (it prints
  none).
- "WebSocket over HTTP/2" includes the RFC 8441 transcript and the program that prints it
  (``tests/test_h2_websocket.py`` keeps the transcript current).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tests.support.pages import blocks, run_tab, same_output, section, started, tabs

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "lessons" / "13-websocket.md"
CODE = ROOT / "lessons" / "code" / "13-websocket"
TRANSCRIPT = ROOT / "lessons" / "transcripts" / "13-ws-frames.txt"
RESULTS = ROOT / "lessons" / "results" / "autobahn"
TOY_RESULTS = ROOT / "lessons" / "results" / "autobahn-toys"
#: The toys Autobahn runs against over HTTP/1.1 (toy-h2's WebSocket over HTTP/2 has its own
#: RFC 8441 client: tests/test_h2_websocket.py).
AUTOBAHN_TOYS = ("toy-raw", "toy-h11", "toy-httptools", "toy-anyio", "toy-anyio-trio")
WS_RESULTS = ROOT / "lessons" / "results" / "ws" / "results.json"


def without_date(text: str) -> str:
    """``text`` with the 101's ``date`` value masked: it changes every second."""
    return re.sub(r"(?im)^(< date: ).*$", r"\1<date>", text)


def run_it_server() -> str:
    """The server command "Run it" prints (its first ``sh`` block, before the tabs)."""
    (command,) = blocks(section(PAGE, "Run it").split("===", 1)[0], "sh")
    return command


def test_handshake_prints_what_the_page_shows() -> None:
    text = section(PAGE, "The opening handshake by hand")
    (command,) = blocks(text, "sh")
    request, shown = blocks(text, "text")
    same_output(shown, run_tab("sh", command, 0))
    # the request the page shows is the one client.py sends (and prints in the transcript)
    sent = [line[2:] for line in TRANSCRIPT.read_text().splitlines() if line.startswith("> ")]
    assert request.splitlines() == sent[:sent.index("")], sent


def test_frame_commands_print_what_the_page_shows() -> None:
    text = section(PAGE, "One frame, byte by byte")
    hello, lengths = blocks(text, "sh")
    _layout, hello_shown, lengths_shown = blocks(text, "text")
    same_output(hello_shown, run_tab("sh", hello, 0))
    same_output(lengths_shown, run_tab("sh", lengths, 0))


def test_run_it_commands_run_as_printed() -> None:
    run_it = tabs(section(PAGE, "Run it"))
    assert set(run_it) == {"websockets", "raw socket"}
    with started(run_it_server()) as server:
        client = run_it["websockets"]
        same_output(client.expected or "", run_tab(client.language, client.code, server.port))
        printed = run_tab("sh", run_it["raw socket"].code, server.port)
        assert without_date(printed) == without_date(TRANSCRIPT.read_text())


def test_frame_transcript_matches_what_client_py_prints() -> None:
    with started(run_it_server()) as server:
        captured = run_tab("sh", f".venv/bin/python {CODE.relative_to(ROOT)}/client.py 8000",
                           server.port)
    if os.environ.get("UPDATE_TRANSCRIPTS") == "1":
        TRANSCRIPT.write_text(captured)
    assert TRANSCRIPT.exists(), f"{TRANSCRIPT} is missing: run with UPDATE_TRANSCRIPTS=1"
    assert without_date(TRANSCRIPT.read_text()) == without_date(captured), (
        f"{TRANSCRIPT.name} is stale: rerun with UPDATE_TRANSCRIPTS=1 and review the diff")
    assert "FIN=1 pong" in captured and "(the server closed the connection)" in captured


def test_the_autobahn_table_is_the_committed_run() -> None:
    text = PAGE.read_text()
    assert '--8<-- "lessons/results/autobahn/results.md"' in text
    data = json.loads((RESULTS / "results.json").read_text())
    rows = {row["server"]: row for row in data["rows"]}
    assert "uvicorn" in rows, sorted(rows)


def test_every_toy_passes_every_autobahn_case_in_the_committed_run() -> None:
    """All 517 cases on every toy: OK or INFORMATIONAL, none NON-STRICT, FAILED or
    UNIMPLEMENTED (the issue's target), in the run the page includes."""
    assert '--8<-- "lessons/results/autobahn-toys/results.md"' in PAGE.read_text()
    data = json.loads((TOY_RESULTS / "results.json").read_text())
    assert data["cases"] in ("*", ["*"]), data["cases"]
    rows = {row["server"]: row for row in data["rows"]}
    assert sorted(rows) == sorted(AUTOBAHN_TOYS)
    for server, row in rows.items():
        counts = row["counts"]
        assert sum(counts.values()) == 517, (server, counts)
        bad = {case: verdict for case, verdict in row["not_ok"].items()
               if verdict != "INFORMATIONAL"}
        assert not bad, (server, bad)


def test_the_rfc8441_section_shows_the_transcript_and_its_program() -> None:
    text = section(PAGE, "WebSocket over HTTP/2 (RFC 8441)")
    assert '--8<-- "lessons/transcripts/13-rfc8441-frames.txt"' in text
    assert '--8<-- "lessons/code/13-websocket/h2_client.py:conversation"' in text
    assert ".venv/bin/python lessons/code/13-websocket/h2_client.py 8000" in " ".join(
        text.split())


def test_what_measure_it_says_of_the_ws_table_holds() -> None:
    """"Measure it" reads the committed ``bench ws`` run without printing a figure: toy-raw's
    CPU per message below uvicorn's at every connection count, the wsproto servers' and
    daphne's above it, and toy-raw's KiB per idle connection under half of uvicorn's."""
    text = section(PAGE, "Measure it")
    assert '--8<-- "lessons/results/ws/results.md"' in text
    data = json.loads(WS_RESULTS.read_text())
    assert data["settings"]["reference"] == "uvicorn"
    cost = {(row["server"], row["connections"]): row["cpu_vs_reference"]
            for row in data["rows"] if row["status"] == "ok"}
    for connections in data["settings"]["connections"]:
        assert cost[("toy-raw", connections)] < 100, connections
        for server in ("uvicorn-wsproto", "hypercorn", "daphne"):
            assert cost[(server, connections)] > 100, (server, connections)
    idle = {row["server"]: row for row in data["idle"]}
    assert idle["toy-raw"]["vs_reference"] < 50, idle["toy-raw"]
    assert "less than half of uvicorn's" in " ".join(text.split())
