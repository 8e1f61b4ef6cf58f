"""Lesson 10's section on Early Hints and trailers: its transcript is current, its commands run.

- ``lessons/code/10-http2/hints_trailers.py`` runs against its own app on toy-httptools and
  its output must equal the committed ``lessons/transcripts/10-hints-trailers.txt``;
  regenerate with ``UPDATE_TRANSCRIPTS=1 pytest tests/test_lessons_hints.py``.
- The section's commands (the server, curl ``--raw`` and ``-v``, the script) run as printed
  and print what the page shows.
- The section's table of HTTP/2 frames is what toy-h2 sends for the same app (h2 client).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import h2.config
import h2.connection
import h2.events
import pytest

from tests.support.pages import ROOT, blocks, run_tab, same_output, section, started

PAGE = ROOT / "lessons" / "10-http2.md"
SCRIPT = ROOT / "lessons" / "code" / "10-http2" / "hints_trailers.py"
TRANSCRIPT = ROOT / "lessons" / "transcripts" / "10-hints-trailers.txt"
TIMEOUT = 10.0


def test_transcript_matches_what_the_script_prints() -> None:
    server_command = blocks(section(PAGE, "Early Hints and trailers, on the wire"), "sh")[0]
    with started(server_command) as server:
        out = subprocess.run([sys.executable, str(SCRIPT), str(server.port)],
                             capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    if os.environ.get("UPDATE_TRANSCRIPTS") == "1":
        TRANSCRIPT.write_text(out.stdout)
    assert TRANSCRIPT.exists(), f"{TRANSCRIPT} is missing: run with UPDATE_TRANSCRIPTS=1"
    assert TRANSCRIPT.read_text() == out.stdout, (
        f"{TRANSCRIPT.name} is stale: rerun with UPDATE_TRANSCRIPTS=1 and review the diff")
    # the two 103s come first; the last chunk, then the trailer section, end the response
    assert out.stdout.count("HTTP/1.1 103 Early Hints") == 2
    assert out.stdout.index("103 Early Hints") < out.stdout.index("HTTP/1.1 200 OK")
    assert out.stdout.rstrip().endswith(
        "0\\r\\n\n    server-timing: app;dur=1.5\\r\\n\n    \\r\\n")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_commands_run_as_printed() -> None:
    text = section(PAGE, "Early Hints and trailers, on the wire")
    server_command, curls, script = blocks(text, "sh")
    (shown,) = blocks(text, "text")[1:]  # the first text block is the transcript's snippet
    with started(server_command) as server:
        same_output(shown, run_tab("sh", curls, server.port))
        assert run_tab("sh", script, server.port) == TRANSCRIPT.read_text()


def test_the_http2_table_is_what_toy_h2_sends() -> None:
    """The section's frame table, row by row, against toy-h2's events for the same app: two
    interim responses (HEADERS without END_STREAM), the response, two DATA, then trailers (a
    last HEADERS, with END_STREAM)."""
    text = section(PAGE, "Early Hints and trailers, on the wire")
    rows = [line.split("|")[1:3] for line in text.splitlines() if line.startswith("| `")]
    table = [(frame.strip(" `"), flags.replace("`", "").strip()) for frame, flags in rows]
    command = blocks(text, "sh")[0].replace("toy-httptools", "toy-h2")
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    seen: list[tuple[str, str]] = []
    with started(command) as server, socket.create_connection(
            ("127.0.0.1", server.port), timeout=TIMEOUT) as sock:
        conn.initiate_connection()
        conn.send_headers(1, [(":method", "GET"), (":scheme", "http"), (":path", "/"),
                              (":authority", "127.0.0.1")], end_stream=True)
        sock.sendall(conn.data_to_send())
        while not seen or seen[-1][1] != "END_HEADERS, END_STREAM":
            data = sock.recv(65536)
            assert data, "toy-h2 closed the connection"
            for event in conn.receive_data(data):
                if isinstance(event, (h2.events.InformationalResponseReceived,
                                      h2.events.ResponseReceived)):
                    seen.append(("HEADERS", "END_HEADERS"))
                elif isinstance(event, h2.events.DataReceived):
                    seen.append(("DATA", "-"))
                elif isinstance(event, h2.events.TrailersReceived):
                    assert event.stream_ended is not None
                    assert event.headers == [(b"server-timing", b"app;dur=1.5")]
                    seen.append(("HEADERS", "END_HEADERS, END_STREAM"))
                elif isinstance(event, h2.events.StreamEnded):
                    assert seen[-1][0] == "HEADERS", "END_STREAM came on DATA, not trailers"
            sock.sendall(conn.data_to_send())
    assert seen == table
