"""A small HTTP/2 client for the conformance suite: h2's ``H2Connection`` on a blocking socket.

Clear text with prior knowledge (RFC 9113 §3.3) or TLS with ALPN (§3.2). Every read has a
deadline; an HTTP/1.1 server answering the preface with a 400 makes h2 raise ``ProtocolError``
at once, so a server that does not speak HTTP/2 fails a test fast instead of hanging it.

Flow control is the test's to choose: with ``auto_window`` the client hands back credit
(WINDOW_UPDATE) for every DATA frame as it arrives; without it, the server's send window
shrinks to nothing and stays there (§6.9), until :meth:`H2Client.open_window`.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.settings
import hpack
import hyperframe.frame as hf

from tests.conformance.support import HOST, IO_TIMEOUT


@dataclass
class StreamResult:
    """What arrived on one stream: interim responses (1xx, each as a list of its fields in
    order), response headers, body, trailers, and how it ended."""

    informational: list[list[tuple[str, str]]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    data: bytearray = field(default_factory=bytearray)
    trailers: dict[str, str] = field(default_factory=dict)
    ended: bool = False
    reset_code: int | None = None  # the RST_STREAM error code the server sent

    @property
    def status(self) -> int:
        return int(self.headers.get(":status", "0"))

    @property
    def done(self) -> bool:
        return self.ended or self.reset_code is not None


def _text_pairs(pairs: Sequence[tuple[bytes | str, bytes | str]] | None
                ) -> list[tuple[str, str]]:
    def s(x: bytes | str) -> str:
        return x.decode("latin-1") if isinstance(x, bytes) else x
    return [(s(k), s(v)) for k, v in pairs or []]


def _text(pairs: Sequence[tuple[bytes | str, bytes | str]] | None) -> dict[str, str]:
    return dict(_text_pairs(pairs))


class H2Client:
    """One HTTP/2 connection to 127.0.0.1:``port``.

    ``context``: TLS with ALPN (it must offer ``h2``). ``settings``: the client's SETTINGS
    (``h2.settings.SettingCodes`` to values) sent in its preface. ``auto_window``: give back
    flow-control credit for all received DATA at once. ``sock``: an already open socket
    (after an HTTP/1.1 Upgrade); with ``upgraded`` the connection starts as the RFC 7540
    §3.2 upgrade leaves it (stream 1 half closed by the client).
    """

    def __init__(self, port: int, *, context: ssl.SSLContext | None = None,
                 settings: dict[int, int] | None = None, auto_window: bool = True,
                 sock: socket.socket | None = None, upgraded: bytes | None = None,
                 timeout: float = IO_TIMEOUT) -> None:
        self.timeout = timeout
        self.auto_window = auto_window
        self.streams: dict[int, StreamResult] = {}
        self.terminated: h2.events.ConnectionTerminated | None = None
        self.eof = False
        self.settings_received = False
        raw = sock or socket.create_connection((HOST, port), timeout=timeout)
        self.sock: socket.socket = raw
        try:
            self._start(raw, context, settings, upgraded)
        except BaseException:  # a server that does not speak HTTP/2: no socket left open
            raw.close()
            self.sock.close()
            raise

    def _start(self, raw: socket.socket, context: ssl.SSLContext | None,
               settings: dict[int, int] | None, upgraded: bytes | None) -> None:
        if context is not None:
            self.sock = context.wrap_socket(raw, server_hostname=HOST)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        if settings:
            self.conn.local_settings = h2.settings.Settings(client=True,
                                                            initial_values=settings)
        if upgraded is not None:
            self.conn.initiate_upgrade_connection()
            self.streams[1] = StreamResult()
            self.flush()
            self.feed(upgraded)
        else:
            self.conn.initiate_connection()
            self.flush()
        # The server's preface is a SETTINGS frame (RFC 9113 §3.4): wait for it, so a server
        # that does not speak HTTP/2 fails here, at once, not in a later wait.
        self.pump(lambda: self.settings_received)
        assert self.settings_received, f"no HTTP/2 SETTINGS from the server (eof: {self.eof})"

    @property
    def alpn(self) -> str | None:
        """The protocol TLS chose (None in clear text)."""
        selected = getattr(self.sock, "selected_alpn_protocol", None)
        return selected() if selected else None

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> H2Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, method: str, path: str, *, headers: Sequence[tuple[str, str]] = (),
                body: bytes | None = None, end_stream: bool = True) -> int:
        """Open a stream with this request; ``body`` goes in DATA frames (it must fit the
        window); with ``end_stream`` False the request stays open for :meth:`send`."""
        stream_id = self.conn.get_next_available_stream_id()
        self.streams[stream_id] = StreamResult()
        head = [(":method", method), (":path", path), (":scheme",
                "https" if self.alpn else "http"), (":authority", f"{HOST}:1"), *headers]
        self.conn.send_headers(stream_id, head, end_stream=end_stream and not body)
        if body:
            self.conn.send_data(stream_id, body, end_stream=end_stream)
        self.flush()
        return stream_id

    def feed(self, data: bytes) -> None:
        """Hand bytes from the server to h2 and record the events."""
        for event in self.conn.receive_data(data):
            stream = self.streams.get(getattr(event, "stream_id", 0) or 0)
            if isinstance(event, h2.events.ResponseReceived) and stream is not None:
                stream.headers = _text(event.headers)
            elif isinstance(event, h2.events.InformationalResponseReceived) and stream:
                stream.informational.append(list(_text_pairs(event.headers)))
            elif isinstance(event, h2.events.TrailersReceived) and stream is not None:
                stream.trailers = _text(event.headers)
            elif isinstance(event, h2.events.DataReceived) and stream is not None:
                stream.data += event.data or b""
                if self.auto_window:
                    self.conn.acknowledge_received_data(event.flow_controlled_length or 0,
                                                        event.stream_id or 0)
            elif isinstance(event, h2.events.StreamEnded) and stream is not None:
                stream.ended = True
            elif isinstance(event, h2.events.StreamReset) and stream is not None:
                stream.reset_code = int(event.error_code or 0)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.terminated = event
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                self.settings_received = True
        self.flush()

    def pump(self, until: Callable[[], bool], timeout: float | None = None) -> bool:
        """Read and handle frames until ``until()`` is true (True), the connection ends or
        ``timeout`` seconds pass (False)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not until():
            left = deadline - time.monotonic()
            if left <= 0 or self.eof:
                return False
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return until()
            except (ConnectionResetError, ssl.SSLError):
                data = b""
            finally:
                self.sock.settimeout(self.timeout)
            if not data:
                self.eof = True
                return until()
            self.feed(data)
        return True

    def response(self, stream_id: int, timeout: float | None = None) -> StreamResult:
        """Wait for stream ``stream_id`` to end or be reset; AssertionError when it does not
        within ``timeout`` (default: the client's) or the connection ends first."""
        stream = self.streams[stream_id]
        self.pump(lambda: stream.done, timeout)
        assert stream.done, (f"stream {stream_id} not finished (status {stream.status}, "
                             f"{len(stream.data)} bytes; connection ended: "
                             f"{self.terminated or self.eof})")
        return stream

    def open_window(self, stream_id: int) -> None:
        """Give back credit for everything received so far, stream and connection, and
        from now on as DATA arrives."""
        self.auto_window = True
        received = len(self.streams[stream_id].data)
        if received:
            self.conn.acknowledge_received_data(received, stream_id)
        self.flush()


@dataclass
class ShutdownLog:
    """What :func:`read_until_closed` saw: every GOAWAY as ``(error code, last stream id)``,
    in order, and the watched stream's response."""

    goaways: list[tuple[int, int]] = field(default_factory=list)
    stream: StreamResult = field(default_factory=StreamResult)


def read_until_closed(sock: socket.socket, stream_id: int, timeout: float) -> ShutdownLog:
    """Read frames off ``sock`` without a state machine until the server closes it (or
    ``timeout`` seconds pass), recording GOAWAYs and ``stream_id``'s response.

    h2's ``H2Connection`` closes itself on the first GOAWAY and rejects every frame after it,
    but RFC 9113 §6.8 lets a server send a first GOAWAY (last stream 2^31-1), a PING, then
    the final GOAWAY, and finish the streams in flight in between (hyper does). So this reads
    the frames with hyperframe and the header blocks with a fresh HPACK decoder (the
    connection must not have decoded a header block before), acknowledging SETTINGS and PING.
    """
    log, decoder, buffer = ShutdownLog(), hpack.Decoder(), b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        while len(buffer) >= 9:
            frame, length = hf.Frame.parse_frame_header(memoryview(buffer[:9]))
            if len(buffer) < 9 + length:
                break
            frame.parse_body(memoryview(buffer[9:9 + length]))
            buffer = buffer[9 + length:]
            if isinstance(frame, hf.GoAwayFrame):
                log.goaways.append((frame.error_code, frame.last_stream_id))
            elif isinstance(frame, hf.SettingsFrame) and "ACK" not in frame.flags:
                sock.sendall(hf.SettingsFrame(0, flags=["ACK"]).serialize())
            elif isinstance(frame, hf.PingFrame) and "ACK" not in frame.flags:
                sock.sendall(hf.PingFrame(0, opaque_data=frame.opaque_data,
                                          flags=["ACK"]).serialize())
            elif isinstance(frame, hf.HeadersFrame) and frame.stream_id == stream_id:
                headers = _text(decoder.decode(frame.data, raw=True))
                if ":status" in headers:
                    log.stream.headers = headers
                log.stream.ended = log.stream.ended or "END_STREAM" in frame.flags
            elif isinstance(frame, hf.DataFrame) and frame.stream_id == stream_id:
                log.stream.data += frame.data
                log.stream.ended = log.stream.ended or "END_STREAM" in frame.flags
            elif isinstance(frame, hf.RstStreamFrame) and frame.stream_id == stream_id:
                log.stream.reset_code = frame.error_code
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            data = sock.recv(65536)
        except TimeoutError:
            break
        except (ConnectionResetError, ssl.SSLError):
            data = b""
        if not data:
            break
        buffer += data
    return log


def tls_context(base: ssl.SSLContext) -> ssl.SSLContext:
    """A client context trusting what ``base`` trusts, offering ALPN ``h2`` then
    ``http/1.1`` (the server picks)."""
    context = ssl.create_default_context()
    context.load_verify_locations(cadata=_ca_pems(base))
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


def _ca_pems(context: ssl.SSLContext) -> str:
    certs = context.get_ca_certs(binary_form=True)
    return "".join(ssl.DER_cert_to_PEM_cert(der) for der in certs)
