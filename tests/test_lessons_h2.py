"""Lesson 10 (HTTP/2): its step server answers over h2c, and its frame transcript is current.

- ``lessons/code/10-http2/step1_server.py`` runs as a subprocess; httpx (HTTP/2 only, prior
  knowledge) and curl (``--http2-prior-knowledge``, the page's command) talk to it; a body
  bigger than the 65,535-byte initial window goes through both ways, so flow control works.
- ``lessons/code/10-http2/frames.py`` runs against it and its output must equal the committed
  ``lessons/transcripts/10-h2-frames.txt``; regenerate with ``UPDATE_TRANSCRIPTS=1 pytest
  tests/test_lessons_h2.py``.
- The page's numbers come from ``lessons/results/h2``, a committed ``bench h2`` run.
- The ramp: ``step2_bounded.py`` puts back a deadline, a limit and flow control, each with
  the hostile client that motivates it, run against step 1, which it defeats, and step 2,
  which bounds it (the step's ``H2Protocol`` served in this process, so the tests can read
  its tasks and write buffer).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import httpx
import pytest
from h2.errors import ErrorCodes

from bench.process import ServerProcess, free_port
from tests.support.hostile_clients import SMALL_BUFFER, load, small_listener
from tests.support.pages import (
    blocks,
    check_server_section,
    run_tab,
    same_output,
    section,
    started,
    tabs,
)

ROOT = Path(__file__).resolve().parent.parent
CODE = ROOT / "lessons" / "code" / "10-http2"
TRANSCRIPT = ROOT / "lessons" / "transcripts" / "10-h2-frames.txt"
PAGE = ROOT / "lessons" / "10-http2.md"
TIMEOUT = 10.0


def step_server() -> ServerProcess:
    port = free_port()
    return ServerProcess([sys.executable, str(CODE / "step1_server.py"), str(port)], port=port,
                         cwd=ROOT)


def test_step1_server_speaks_http2_with_prior_knowledge() -> None:
    with step_server() as server, httpx.Client(http1=False, http2=True,
                                                timeout=TIMEOUT) as client:
        hello = client.get(f"http://127.0.0.1:{server.port}/")
        assert hello.http_version == "HTTP/2" and hello.text == "hello over HTTP/2\n"
        body = os.urandom(300_000)  # > the initial window: needs WINDOW_UPDATEs both ways
        echoed = client.post(f"http://127.0.0.1:{server.port}/echo", content=body)
        assert echoed.status_code == 200 and echoed.content == body
        assert client.get(f"http://127.0.0.1:{server.port}/nope").status_code == 404


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_run_it_commands_run_as_printed() -> None:
    text = section(PAGE, "Run it")
    head, tail = text.split("===", 1)[0], text.split("toy-h2 also takes", 1)[1]
    (step1,), (toy_h2, upgrade), (shown,) = blocks(head, "sh"), blocks(tail, "sh"), \
        blocks(tail, "text")
    run_it = tabs(text)  # the last tab's text runs to the end: use only its code
    with started(step1) as server:
        same_output(run_it["curl"].expected or "", run_tab("sh", run_it["curl"].code, server.port))
        assert run_tab("python", run_it["httpx"].code, server.port) == "HTTP/2 300000\n"
        assert run_tab("sh", run_it["frames"].code, server.port) == TRANSCRIPT.read_text()
    with started(toy_h2) as server:
        same_output(shown, run_tab("sh", upgrade, server.port))  # upgraded: HTTP/2


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_step2_commands_run_as_printed() -> None:
    check_server_section(PAGE, "Step 2: a deadline, a limit, flow control")


def test_frame_transcript_matches_what_frames_py_prints() -> None:
    with step_server() as server:
        out = subprocess.run([sys.executable, str(CODE / "frames.py"), str(server.port)],
                             capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    captured = out.stdout
    if os.environ.get("UPDATE_TRANSCRIPTS") == "1":
        TRANSCRIPT.write_text(captured)
    assert TRANSCRIPT.exists(), f"{TRANSCRIPT} is missing: run with UPDATE_TRANSCRIPTS=1"
    assert TRANSCRIPT.read_text() == captured, (
        f"{TRANSCRIPT.name} is stale: rerun with UPDATE_TRANSCRIPTS=1 and review the diff")
    assert "HEADERS       stream=3" in captured and "GOAWAY" in captured


def test_the_pages_figures_come_from_the_committed_results() -> None:
    text = PAGE.read_text()
    assert '--8<-- "lessons/results/h2/results.md"' in text and "results/h2/h2.png" in text
    data = json.loads((ROOT / "lessons" / "results" / "h2" / "results.json").read_text())
    assert data["experiment"] == "h2" and data["rows"]
    assert "bench h2" in " ".join(data["command"])
    # no hand-typed throughput on the page: figures with "requests/s" or "req/s" are banned
    assert not re.search(r"\d[\d,.]*\s*(requests/s|req/s|RPS)", text), "a typed figure"


# --- the ramp: step 2 bounds what step 1 leaves open --------------------------------------------


def h2_client() -> h2.connection.H2Connection:
    """A client-side connection whose preface and SETTINGS are ready to send."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    return conn


@dataclass
class Served:
    """What one hostile client's run against a step's H2Protocol left to look at."""

    result: Any  # what the attack returned
    protocols: list[Any]  # the protocol objects the server made
    peak_buffer: int  # the largest any connection's write buffer got, bytes


def serve_step(name: str, attack: Callable[[int, list[Any]], Awaitable[Any]], **settings: Any
               ) -> Served:
    """Serve ``lessons/code/10-http2/<name>``'s H2Protocol in this process (after setting the
    module's ``settings``), run ``attack(port, protocols)`` and sample the write buffers
    meanwhile; the connections are aborted after it (so read their state in ``attack``)."""
    module = load(CODE / name)
    for key, value in settings.items():
        setattr(module, key, value)
    protocols: list[Any] = []
    peak = 0

    def factory() -> Any:
        protocols.append(module.H2Protocol())
        return protocols[-1]

    async def watch() -> None:
        nonlocal peak
        while True:
            await asyncio.sleep(0.005)
            for protocol in protocols:
                if getattr(protocol, "transport", None) is not None:
                    peak = max(peak, protocol.transport.get_write_buffer_size())

    async def main() -> Any:
        server = await asyncio.get_running_loop().create_server(factory, sock=small_listener())
        async with server:
            watcher = asyncio.ensure_future(watch())
            try:
                return await attack(server.sockets[0].getsockname()[1], protocols)
            finally:
                watcher.cancel()
                for protocol in protocols:
                    protocol.transport.abort()
                await asyncio.sleep(0)

    result = asyncio.run(main())
    return Served(result, protocols, peak)


def test_step2_closes_a_connection_that_opens_no_stream() -> None:
    """A client that sends the preface and then nothing: step 1 keeps it for ever; step 2
    sends GOAWAY (NO_ERROR) once it has had no stream open for IDLE_SECONDS."""
    async def idle(port: int, protocols: list[Any]) -> tuple[bytes, bool]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(h2_client().data_to_send())
        received, closed = b"", False
        with contextlib.suppress(TimeoutError):
            while chunk := await asyncio.wait_for(reader.read(65536), 1.5):
                received += chunk
            closed = True
        writer.close()
        return received, closed

    assert serve_step("step1_server.py", idle).result[1] is False
    received, closed = serve_step("step2_bounded.py", idle, IDLE_SECONDS=0.5).result
    ended = [event.error_code for event in h2_client().receive_data(received)
             if isinstance(event, h2.events.ConnectionTerminated)]
    assert closed and ended == [ErrorCodes.NO_ERROR]


async def read_until_ping_ack_or_close(reader: asyncio.StreamReader,
                                       client: h2.connection.H2Connection) -> None:
    """Read what the server sends until it acknowledges the client's PING (it has then
    handled every frame sent before it, RFC 9113 §6.7) or closes, within TIMEOUT seconds."""
    async with asyncio.timeout(TIMEOUT):
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                try:
                    events = client.receive_data(chunk)
                except h2.exceptions.ProtocolError:
                    continue  # frames on streams the client reset: only the ACK matters
                if any(isinstance(event, h2.events.PingAckReceived) for event in events):
                    return


def test_step2_ends_a_rapid_reset_flood() -> None:
    """Rapid reset (CVE-2023-44487): 1,000 streams, each reset as soon as it is opened. Step 1
    never sees the resets, and 1,000 apps wait for a body for ever; step 2 stops each one, and
    ends the connection once the client is past MAX_RESETS in RESET_INTERVAL."""
    async def rapid_reset(port: int, protocols: list[Any]) -> tuple[int, int, int]:
        """Apps still waiting, streams the server knows of, resets it counted."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = h2_client()
        for _ in range(1000):
            stream_id = client.get_next_available_stream_id()
            client.send_headers(stream_id, [(":method", "POST"), (":path", "/echo"),
                                            (":scheme", "http"), (":authority", "x")])
            client.reset_stream(stream_id)
            writer.write(client.data_to_send())
        client.ping(b"flooded!")  # its ACK says the server has read every frame before it
        writer.write(client.data_to_send())
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        await read_until_ping_ack_or_close(reader, client)
        writer.close()
        (protocol,) = protocols
        tasks = protocol.tasks.values() if isinstance(protocol.tasks, dict) else protocol.tasks
        return (sum(not task.done() for task in tasks), len(protocol.tasks),
                len(getattr(protocol, "resets", [])))

    assert serve_step("step1_server.py", rapid_reset).result == (1000, 1000, 0)
    limit = load(CODE / "step2_bounded.py").MAX_RESETS
    assert serve_step("step2_bounded.py", rapid_reset).result == (0, 0, limit + 1)


async def flood_held(protocols: list[Any]) -> None:
    """Wait, polling within TIMEOUT seconds, until the server has either piled over 1 MiB of
    answers (step 1) or stopped reading (step 2): after either, its buffer's peak is known."""
    async with asyncio.timeout(TIMEOUT):
        while not any(protocol.transport.get_write_buffer_size() > 1 << 20
                      or not protocol.transport.is_reading() for protocol in protocols):
            await asyncio.sleep(0.01)  # polling interval


def test_step2_stops_reading_while_its_answers_are_not_read() -> None:
    """A PING flood from a client that reads nothing (CVE-2019-9512): step 1 reads on, and h2's
    PING ACKs pile up in its write buffer; step 2 stops reading past the high-water mark, so
    its buffer stays near 64 KiB while the flood waits in the client's. (The kernel's buffers
    are kept small on both sides, so what piles up is the server's own.)"""
    async def ping_flood(port: int, protocols: list[Any]) -> int:
        loop = asyncio.get_running_loop()
        client = h2_client()
        preface = client.data_to_send()
        for _ in range(1000):
            client.ping(b"12345678")
        flood = preface + client.data_to_send() * 240  # 240 x 1,000 PING frames: 4 MB
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
            sock.setblocking(False)
            await loop.sock_connect(sock, ("127.0.0.1", port))
            sent, end = 0, loop.time() + 2.0
            while sent < len(flood) and loop.time() < end:
                try:
                    sent += sock.send(flood[sent:sent + 65536])
                except BlockingIOError:
                    await asyncio.sleep(0.01)
            await flood_held(protocols)
        return sent

    unbounded = serve_step("step1_server.py", ping_flood).peak_buffer
    bounded = serve_step("step2_bounded.py", ping_flood).peak_buffer
    assert unbounded > 1 << 20 and bounded <= 256 << 10, (unbounded, bounded)


@pytest.mark.parametrize("name", ["step1_server.py", "step2_bounded.py"])
def test_a_larger_initial_window_wakes_a_sender_waiting_on_an_empty_one(name: str) -> None:
    """RFC 9113 §6.9.2 (h2spec http2/6.9.2/1): with SETTINGS_INITIAL_WINDOW_SIZE 0 the app's
    body waits; a SETTINGS frame raising it gives every stream credit, as a WINDOW_UPDATE
    does, and the body must then go out. The client raises it only once the response's
    HEADERS arrived: the app is by then waiting on the empty window (send() writes the
    headers and reaches the window check with no await between)."""
    async def raise_the_window(port: int, protocols: list[Any]) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = h2_client()
        client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        client.send_headers(1, [(":method", "GET"), (":path", "/"), (":scheme", "http"),
                                (":authority", "x")], end_stream=True)
        writer.write(client.data_to_send())
        body, raised = b"", False
        while True:
            data = await asyncio.wait_for(reader.read(65536), TIMEOUT)
            assert data, "the server closed the connection"
            for event in client.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived) and not raised:
                    client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 65535})
                    raised = True
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data
                elif isinstance(event, h2.events.StreamEnded):
                    writer.close()
                    return body
            writer.write(client.data_to_send())

    assert serve_step(name, raise_the_window).result == b"hello over HTTP/2\n"
