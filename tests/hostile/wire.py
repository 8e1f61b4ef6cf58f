"""A raw-socket HTTP/1.1 client for hostile input: write bytes, read until close, split responses.

Deliberately independent of the servers' parsers: responses are split by hand from the bytes
received (status line, fields, then a body framed by Content-Length, chunked, or the close;
RFC 9112 §6.3 read from the client side).
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Response:
    """One parsed response: ``status``, ``headers`` as (lower-case name, value) bytes, ``body``."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        """The value of the first field named ``name`` (lower case), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def closes(self) -> bool:
        """True when a ``Connection`` field lists ``close`` (RFC 9110 §7.6.1)."""
        tokens = b",".join(v for k, v in self.headers if k == b"connection").lower()
        return b"close" in [t.strip() for t in tokens.split(b",")]

    def json(self) -> Any:
        """The body decoded as JSON (the echo app's answer)."""
        return json.loads(self.body)


@dataclass
class Exchange:
    """What one connection produced.

    Attributes:
        data: every byte received, in order.
        closed: the server closed (EOF or reset) before the deadline.
        reset: the close was a TCP reset rather than a FIN.
        responses: ``data`` split into responses; ``rest`` is what did not parse as one.
    """

    data: bytes
    closed: bool
    reset: bool = False
    responses: list[Response] = field(default_factory=list)
    rest: bytes = b""

    def describe(self, limit: int = 400) -> str:
        """A short human-readable account for assertion messages."""
        shown = self.data if len(self.data) <= limit else self.data[:limit] + b"..."
        state = "reset" if self.reset else "closed" if self.closed else "still open"
        return f"connection {state}; received {len(self.data)} bytes: {shown!r}"


def connect(address: tuple[str, int], timeout: float) -> socket.socket:
    """A TCP connection to ``address`` with ``timeout`` seconds on every call."""
    return socket.create_connection(address, timeout=timeout)


def send_all(sock: socket.socket, data: bytes) -> None:
    """Write ``data``; a server that already closed (it may, on bad input) is not an error here."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


def read_until_close(sock: socket.socket, deadline: float, *,
                     stop_after: int | None = None) -> Exchange:
    """Read until the server closes or ``deadline`` (a ``time.monotonic()`` value) passes.

    With ``stop_after``, return as soon as that many complete responses have arrived (for
    tests that keep the connection open afterwards).
    """
    received = bytearray()
    closed = reset = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            closed = reset = True
            break
        if not chunk:
            closed = True
            break
        received += chunk
        if stop_after is not None and len(split_responses(bytes(received))[0]) >= stop_after:
            break
    responses, rest = split_responses(bytes(received))
    return Exchange(bytes(received), closed, reset, responses, rest)


def exchange(address: tuple[str, int], data: bytes, timeout: float) -> Exchange:
    """Open a connection, write ``data`` at once, read until close or ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    with connect(address, timeout) as sock:
        send_all(sock, data)
        return read_until_close(sock, deadline)


def still_silent(sock: socket.socket) -> bool:
    """True when nothing (no data, no close) has arrived on ``sock`` yet; does not block."""
    sock.setblocking(False)  # a socket with a timeout would wait in poll() before recv
    try:
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except ConnectionResetError:
        return False
    return False  # data or EOF (b"") arrived: the server has answered or closed


def _read_line(data: bytes, pos: int) -> tuple[bytes, int] | None:
    end = data.find(b"\r\n", pos)
    if end < 0:
        return None
    return data[pos:end], end + 2


def _chunked_body(data: bytes, pos: int) -> tuple[bytes, int] | None:
    body = bytearray()
    while True:
        line = _read_line(data, pos)
        if line is None:
            return None
        size_text, pos = line
        size = int(size_text.split(b";")[0].strip(), 16)
        if size == 0:
            while True:  # trailer section, then the empty line
                line = _read_line(data, pos)
                if line is None:
                    return None
                text, pos = line
                if not text:
                    return bytes(body), pos
        if len(data) < pos + size + 2:
            return None
        body += data[pos:pos + size]
        pos += size + 2


def split_responses(data: bytes) -> tuple[list[Response], bytes]:
    """Split ``data`` into complete responses; also return the bytes left over.

    A response with neither Content-Length nor chunked framing runs to the end of ``data``
    (close-delimited). 1xx, 204 and 304 have no body. Malformed input ends the split; what
    remains is returned as the rest.
    """
    responses: list[Response] = []
    pos = 0
    while pos < len(data):
        head_end = data.find(b"\r\n\r\n", pos)
        if head_end < 0:
            break
        lines = data[pos:head_end].split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            break
        status = int(parts[1])
        headers: list[tuple[bytes, bytes]] = []
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers.append((name.strip().lower(), value.strip()))
        start = head_end + 4
        response = Response(status, headers, b"")
        length = response.header(b"content-length")
        coding = response.header(b"transfer-encoding")
        if status < 200 or status in (204, 304):
            end = start
        elif coding is not None and coding.lower().endswith(b"chunked"):
            try:
                parsed = _chunked_body(data, start)
            except ValueError:
                break
            if parsed is None:
                break
            response.body, end = parsed
        elif length is not None and length.isdigit():
            end = start + int(length)
            if end > len(data):
                break
            response.body = data[start:end]
        else:
            end = len(data)
            response.body = data[start:end]
        if status >= 200:
            responses.append(response)
        pos = end
    return responses, data[pos:]
