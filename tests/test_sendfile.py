"""The sendfile way of a file body (``file_response.sendfile``: ``os.sendfile`` on the socket,
waiting for room on a duplicate of its descriptor) on the three asyncio HTTP/1.1 toys, on
uvloop (the toys' default loop, which has no ``loop.sendfile``) and on asyncio's own loop.

Spies on ``os.sendfile``, ``os.dup``, ``os.close`` and ``FlowControl`` record what the server
thread did, so each test can say the bytes went by ``os.sendfile`` and not through the process:

- every byte of a file went by ``os.sendfile``, none by ``os.pread``;
- a file larger than the socket buffers, to a client that reads only once the server found
  the socket full: after each ``BlockingIOError`` the server waited for a wake-up before it
  called again (no busy loop), and its memory did not grow by the file's size (the read way
  too: it waits on ``drain()``);
- a client that resets the connection mid-file: ``send()`` raises an OSError in the app, the
  duplicate and the file are closed, the server serves the next connection;
- pipelined requests around file responses, one behind a body from memory larger than the
  client's buffer: every response framed right (parsed by h11), in order;
- ``sendfile`` itself, on a socket pair, called while the transport still holds bytes: its
  first ``os.sendfile`` waits until they are out.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h11
import httpx
import pytest

from tests.support.protocol_harness import PROTOCOLS
from tests.support.running import HOST, serving
from toyservers import file_response
from toyservers._server import new_event_loop_factory
from toyservers.flow_control import FlowControl

NET_TIMEOUT = 10.0  # seconds, for every socket and HTTP call and every wait on the server
MIB = 1024 * 1024
BIG = 16 * MIB  # more than the server's socket buffer can grow to (tcp_wmem's 4 MiB) and more
PATTERN = bytes(range(256)) * 16  # 4 KiB, repeated to make the file
SMALL = 100_000  # bytes of the small file
RCVBUF = 64 * 1024  # the slow client's receive buffer: the server's sends fill quickly
MEMORY_BODY = 2 * MIB  # a body from memory, pipelined ahead of a file

#: Where a toy runs and how it sends a file: os.sendfile on either loop, the read loop.
WAYS = ("uvloop", "asyncio", "read")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("sendfile")
    big = folder / "big.bin"
    with big.open("wb") as out:
        for _ in range(BIG // len(PATTERN)):
            out.write(PATTERN)
    (folder / "small.bin").write_bytes(PATTERN * (SMALL // len(PATTERN)) + PATTERN[:SMALL % 4096])
    return {"big": big, "small": folder / "small.bin"}


def expected(offset: int, size: int) -> bytes:
    """The file's ``size`` bytes from ``offset`` (the file repeats ``PATTERN``)."""
    start = offset % len(PATTERN)
    return (PATTERN * (2 + size // len(PATTERN)))[start:start + size]


class Spy:
    """What the server thread did, in order: ``log`` holds ``("sendfile", bytes sent)``,
    ``("full",)`` (BlockingIOError), ``("wake",)`` (``FlowControl.resume_writing``) and
    ``("pread", bytes)``; ``dups`` the descriptors ``os.dup`` made, ``closed`` those
    ``os.close`` closed. ``full`` is set at the first BlockingIOError (the read way: at the
    transport's first ``pause_writing``); ``rss`` is the highest RSS seen at any entry."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.dups: list[int] = []
        self.closed: list[int] = []
        self.full = threading.Event()
        self.rss = 0
        sendfile, pread, dup, close = os.sendfile, os.pread, os.dup, os.close
        resume, pause = FlowControl.resume_writing, FlowControl.pause_writing

        def spy_sendfile(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
            try:
                sent = sendfile(out_fd, in_fd, offset, count)
            except BlockingIOError:
                self.note("full")
                self.full.set()
                raise
            self.note("sendfile", sent)
            return sent

        def spy_pread(fd: int, size: int, offset: int) -> bytes:
            data = pread(fd, size, offset)
            self.note("pread", len(data))
            return data

        def spy_dup(fd: int) -> int:
            self.dups.append(new := dup(fd))
            return new

        def spy_close(fd: int) -> None:
            self.closed.append(fd)
            close(fd)

        def spy_resume(flow: FlowControl) -> None:
            self.note("wake")
            resume(flow)

        def spy_pause(flow: FlowControl) -> None:
            self.full.set()
            pause(flow)

        monkeypatch.setattr(os, "sendfile", spy_sendfile)
        monkeypatch.setattr(os, "pread", spy_pread)
        monkeypatch.setattr(os, "dup", spy_dup)
        monkeypatch.setattr(os, "close", spy_close)
        monkeypatch.setattr(FlowControl, "resume_writing", spy_resume)
        monkeypatch.setattr(FlowControl, "pause_writing", spy_pause)

    def note(self, *entry: Any) -> None:
        self.log.append(entry)
        self.rss = max(self.rss, rss())

    def sent(self, kind: str) -> int:
        return sum(entry[1] for entry in self.log if entry[0] == kind)


def rss() -> int:
    """This process's resident set size, bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def make_app(files: dict[str, Path], outcome: list[BaseException | None],
             done: threading.Event) -> Any:
    """``/big`` and ``/small`` by pathsend (with their Content-Length), ``/chunked`` the small
    file without one, ``/memory`` a ``MEMORY_BODY``-byte body from memory. What a pathsend's
    ``send()`` raised (or None) goes to ``outcome``, then ``done`` is set."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        name = "small" if path == "/chunked" else path[1:]
        head = [] if path == "/chunked" else [
            (b"content-length", b"%d" % (MEMORY_BODY if path == "/memory" else
                                         files[name].stat().st_size))]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        if path == "/memory":
            await send({"type": "http.response.body", "body": expected(0, MEMORY_BODY)})
            return
        try:
            await send({"type": "http.response.pathsend", "path": str(files[name])})
        except OSError as exc:
            outcome.append(exc)
            raise
        else:
            outcome.append(None)
        finally:
            done.set()

    return app


@pytest.fixture(params=[(toy, way) for toy in PROTOCOLS for way in WAYS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def server(request: pytest.FixtureRequest, files: dict[str, Path],
           monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, str, Spy, Any]]:
    """A toy serving ``make_app`` the way asked; yields its port, the way, the spy and the
    app's ``(outcome, done)``."""
    toy, way = request.param
    if way == "read":
        monkeypatch.setattr(file_response, "can_sendfile", lambda transport: False)
    spy = Spy(monkeypatch)
    outcome: list[BaseException | None] = []
    done = threading.Event()
    with serving(toy, make_app(files, outcome, done),
                 loop="uvloop" if way == "uvloop" else "asyncio") as port:
        yield port, way, spy, (outcome, done)


def slow_client(port: int) -> socket.socket:
    """A connection whose receive buffer is small, so the server's socket fills fast."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)  # before connect: the window
    sock.settimeout(NET_TIMEOUT)
    sock.connect((HOST, port))
    return sock


def test_every_byte_goes_by_sendfile(server: tuple[int, str, Spy, Any]) -> None:
    port, way, spy, _ = server
    with httpx.Client(base_url=f"http://{HOST}:{port}", timeout=NET_TIMEOUT) as client:
        small = client.get("/small")
        chunked = client.get("/chunked")
    assert small.content == chunked.content == expected(0, SMALL)
    assert chunked.headers["transfer-encoding"] == "chunked"
    if way == "read":
        assert (spy.sent("sendfile"), spy.sent("pread")) == (0, 2 * SMALL)
    else:
        assert (spy.sent("sendfile"), spy.sent("pread")) == (2 * SMALL, 0)


def test_a_slow_reader_holds_the_file_back_without_a_busy_loop(
        server: tuple[int, str, Spy, Any]) -> None:
    """The client reads only once the server found its socket full, then reads all, 64 KiB at
    a time: the server waited for room each time (a wake-up between a BlockingIOError and the
    next call), and its memory stayed well under the file's size above where it began."""
    port, way, spy, (outcome, done) = server
    with slow_client(port) as sock:
        before = rss()
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        assert spy.full.wait(NET_TIMEOUT), "the server never found the socket full"
        received = 0
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(RCVBUF)
        head, _, data = head.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"content-length: %d" % BIG in head.lower()
        while True:
            assert data == expected(received, len(data))
            received += len(data)
            if received >= BIG:
                break
            data = sock.recv(RCVBUF)
            assert data, f"the connection closed after {received} bytes"
        assert done.wait(NET_TIMEOUT) and outcome == [None]
    assert received == BIG
    assert spy.rss - before < BIG // 2, f"the server grew by {(spy.rss - before) // MIB} MiB"
    if way == "read":
        return
    assert spy.sent("sendfile") == BIG and spy.sent("pread") == 0
    kinds = [entry[0] for entry in spy.log]
    assert "full" in kinds
    waiting = False  # a BlockingIOError seen, no wake-up since
    for kind in kinds:
        assert not (waiting and kind in ("sendfile", "full")), "called again without waiting"
        waiting = kind == "full" or (waiting and kind != "wake")
    assert spy.dups and set(spy.dups) <= set(spy.closed)  # waited on a duplicate, closed it


def test_a_client_that_resets_mid_file(server: tuple[int, str, Spy, Any],
                                       files: dict[str, Path]) -> None:
    """The client resets the connection while the server waits for room: the app's ``send()``
    raises an OSError, nothing the file send opened stays open, the server goes on serving."""
    port, way, spy, (outcome, done) = server
    sock = slow_client(port)
    try:
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        assert spy.full.wait(NET_TIMEOUT), "the server never found the socket full"
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        sock.close()  # with SO_LINGER 0: a reset
    assert done.wait(NET_TIMEOUT), "the app's send() never returned"
    assert len(outcome) == 1 and isinstance(outcome[0], OSError), outcome
    assert set(spy.dups) <= set(spy.closed)
    links = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
             if os.path.islink(f"/proc/self/fd/{fd}")]
    assert str(files["big"]) not in links  # pathsend's file is closed
    response = httpx.get(f"http://{HOST}:{port}/small", timeout=NET_TIMEOUT)
    assert response.content == expected(0, SMALL)


def test_pipelined_requests_around_file_responses(server: tuple[int, str, Spy, Any]) -> None:
    """Six requests in one write: a body from memory larger than the client's buffer (the
    transport still holds it when the next response's head is written behind it), then file
    responses with and without a Content-Length and a HEAD. h11, as the client, checks each
    response's framing; each body is the file's."""
    port, way, spy, _ = server
    paths = [("GET", "/memory"), ("GET", "/small"), ("GET", "/chunked"), ("HEAD", "/small"),
             ("GET", "/big"), ("GET", "/small")]
    requests = b"".join(b"%s %s HTTP/1.1\r\nHost: x\r\n\r\n" % (method.encode(), path.encode())
                        for method, path in paths)
    with slow_client(port) as sock:
        sock.sendall(requests)
        client = h11.Connection(h11.CLIENT)
        for method, path in paths:
            client.send(h11.Request(method=method, target=path, headers=[("Host", "x")]))
            client.send(h11.EndOfMessage())
            body = bytearray()
            while True:
                event = client.next_event()
                if event is h11.NEED_DATA:
                    client.receive_data(sock.recv(RCVBUF))
                elif isinstance(event, h11.Response):
                    assert event.status_code == 200, (path, event)
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
            size = {"/memory": MEMORY_BODY, "/big": BIG}.get(path, SMALL)
            assert bytes(body) == (b"" if method == "HEAD" else expected(0, size)), path
            client.start_next_cycle()
    if way != "read":
        assert spy.sent("sendfile") == BIG + 3 * SMALL and spy.sent("pread") == 0


class Connection(asyncio.Protocol):
    """The least protocol for ``file_response.sendfile``: a ``FlowControl`` fed by the
    transport's write signals and woken at the end, as ``HTTPProtocol`` does."""

    def connection_made(self, transport: Any) -> None:
        self.transport, self.flow = transport, FlowControl(transport)

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.flow.resume_writing()


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_the_file_waits_behind_what_the_transport_holds(
        loop: str, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """``sendfile`` called while the transport still holds 1 MiB the peer has not read: it
    calls ``os.sendfile`` only once the transport's buffer is empty, and the file's bytes
    reach the peer after those (a reader thread reads it all)."""
    spy = Spy(monkeypatch)
    holding: list[int] = []  # what the transport held at each os.sendfile call
    spied = os.sendfile

    def sendfile(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        holding.append(transport.get_write_buffer_size())
        return spied(out_fd, in_fd, offset, count)

    monkeypatch.setattr(os, "sendfile", sendfile)
    transport: Any = None
    ours, theirs = socket.socketpair()
    theirs.settimeout(NET_TIMEOUT)
    held = b"H" * MIB
    received = bytearray()
    reader = threading.Thread(target=lambda: received.extend(read_all(theirs)), daemon=True)

    async def main() -> int:
        nonlocal transport
        transport, connection = await asyncio.get_running_loop().connect_accepted_socket(
            Connection, ours)
        transport.write(held)
        assert transport.get_write_buffer_size() > 0  # the peer reads nothing yet
        body = file_response.open_body({"type": "http.response.pathsend",
                                        "path": str(files["small"])})
        sending = asyncio.ensure_future(file_response.sendfile(transport, connection.flow, body))
        await asyncio.sleep(0)  # (a turn of the loop: the send has begun, and must wait)
        reader.start()
        sent = await asyncio.wait_for(sending, NET_TIMEOUT)
        body.done(sent)
        transport.close()
        return sent

    event_loop = new_event_loop_factory(loop)()
    try:
        assert event_loop.run_until_complete(main()) == SMALL
    finally:
        event_loop.close()
    reader.join(NET_TIMEOUT)
    theirs.close()
    assert bytes(received) == held + expected(0, SMALL)
    assert holding and not any(holding)
    assert spy.log[0] == ("wake",)  # it waited before its first call
    assert set(spy.dups) <= set(spy.closed)


def read_all(sock: socket.socket) -> bytes:
    """Everything ``sock`` receives until the peer closes."""
    chunks = []
    while chunk := sock.recv(RCVBUF):
        chunks.append(chunk)
    return b"".join(chunks)
