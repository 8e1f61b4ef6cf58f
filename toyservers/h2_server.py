"""toy-h2: an HTTP/2 ASGI server on asyncio, framed by the sans-IO ``h2`` library.

I/O model: one ``asyncio.Protocol`` per connection feeds what it reads to an
``h2.connection.H2Connection``, which parses frames, keeps each stream's state machine and the
flow-control windows, and answers SETTINGS and PING itself; we turn its events into ASGI and
write its ``data_to_send()`` back (toy-h11's rhythm with h11). Each stream is an ASGI ``http``
scope with its own ``RequestResponseCycle`` and Task. One port, three ways in: over TLS, ALPN
picks ``h2`` or HTTP/1.1; over cleartext a connection starts on toy-httptools' protocol
(``HTTP1Protocol``), which hands it over when its first bytes are the HTTP/2 preface (prior
knowledge: llhttp spots it, so HTTP/1.1 pays nothing) or a request asks ``Upgrade: h2c``.
What h2 leaves to a server (request checks, the h2c upgrade, the abuse budgets, DATA within
the windows) is sans-IO, in ``toyservers/http2.py``; this module is the I/O around it.

Flow control is credit: we grant the client more (WINDOW_UPDATE) only as the app's
``receive()`` takes body, so a slow app holds the client back; ``send()`` waits for the
client's. Attacks (http2.py's docstring lists them, with their bounds) end the connection
with GOAWAY ENHANCE_YOUR_CALM; besides, h2 gets ``MAX_FEED`` bytes per loop turn and we stop
reading while our write buffer is full. A malformed request ends its own stream alone.

Deliberately left out: server push (browsers dropped it, Chrome in 106: 103 Early Hints does
its job), priorities (RFC 9113 §5.3.2 deprecates them), request trailers (dropped), CONNECT
(501), WebSockets over HTTP/2.

Spec: RFC 9113 §3 (starting), §5 (streams, flow control), §6.5 (SETTINGS), §6.8 (GOAWAY),
§8 (HTTP semantics); RFC 7540 §3.2 (h2c); RFC 7541 (HPACK); RFC 7301 (ALPN); ASGI HTTP spec
2.4 and its HTTP Trailers extension.

Compare with: hypercorn/protocol/h2.py and http_stream.py; h2's asyncio example server."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from typing import Any

import h2.events
import h2.exceptions
from h2.errors import ErrorCodes

from toyservers import access_log, asgi, http2
from toyservers._server import run_server, serve_protocol
from toyservers._types import ASGIApp, Headers, Message, Scope
from toyservers.asgi import ClientDisconnected, at_concurrency_limit, http_scope, log_access
from toyservers.config import Config
from toyservers.httptools_server import NO_MESSAGE, HttpToolsProtocol
from toyservers.protocol import HTTPProtocol
from toyservers.state import ServerState

logger = logging.getLogger("toyservers.error")

# --- Constants ------------------------------------------------------------------------------------

# Bytes handed to h2 per loop turn. One read can hold megabytes (uvloop reads all the socket
# has) and h2 parses all it is given in one call: a flooding connection held the loop for 4 to
# 15 s. 64 KiB is four full DATA frames, a few ms of parsing at worst.
MAX_FEED = 65536

# --- Protocol interface ---------------------------------------------------------------------------


class H2Protocol(HTTPProtocol):
    """One HTTP/2 connection: h2 events in, one RequestResponseCycle per stream out."""

    def __init__(self, state: ServerState, upgrade: tuple[bytes, Scope] | None = None) -> None:
        super().__init__(state)
        self.upgrade = upgrade  # after Upgrade: h2c, its HTTP2-Settings and request scope
        self.conn, self.decoder = http2.connection(self.config.max_header_size)
        self.streams: dict[int, RequestResponseCycle] = {}
        self.access_log = access_log.enabled(self.config)
        self.closing = False  # GOAWAY sent: streams in flight finish, new ones are refused
        self.closed = False  # close() called: the events still in hand are dropped
        self.budget = http2.FloodBudget(self.loop.time)
        self.scanner = http2.FrameScanner(self.config.max_header_size)
        self.held, self.held_at = b"", 0  # bytes read, h2 has those before held_at

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Send our SETTINGS (RFC 9113 §3.4); after ``Upgrade: h2c``, first the 101, and the
        upgrade request becomes stream 1 (``upgrade``: its HTTP2-Settings and scope)."""
        super().connection_made(transport)
        if self.upgrade is None:
            self.conn.initiate_connection()
        else:
            try:
                self.conn.initiate_upgrade_connection(base64.urlsafe_b64encode(self.upgrade[0]))
            except h2.exceptions.ProtocolError:  # a setting out of range (RFC 9113 §6.5.2)
                return self.transport.close()
            self.transport.write(http2.SWITCHING)
            RequestResponseCycle.open(self, 1, self.upgrade[1], more_body=False)
        http2.stop_enforcing_stream_limit(self.conn)  # on_request refuses streams past it
        self.flush()

    # --8<-- [start:data_received]
    def data_received(self, data: bytes) -> None:
        if self.held_at < len(self.held):  # a read is still being fed: this one queues
            self.held, self.held_at = self.held[self.held_at:] + data, 0
        else:
            self.held, self.held_at = data, 0
            self.feed()

    def feed(self) -> None:
        """Hand h2 the next ``MAX_FEED`` bytes held, their frame headers scanned first; the
        rest waits, reading paused, for the next loop turn, so other connections get theirs."""
        data = self.held[self.held_at:self.held_at + MAX_FEED]
        self.held_at += len(data)
        if not data:
            return
        if self.held_at < len(self.held):
            self.flow.pause_reading()
            self.loop.call_soon(self.feed)
        elif not self.flow.write_paused:
            self.flow.resume_reading()
        try:  # FrameRefused: a frame refused by its header, or past the FloodBudget
            for event in http2.receive(self.conn, self.scanner, self.budget, data):
                kind = type(event)
                if kind is h2.events.DataReceived:
                    self.on_data(event)  # type: ignore[arg-type]
                elif kind is h2.events.RequestReceived:
                    self.on_request(event)  # type: ignore[arg-type]
                elif kind is h2.events.StreamEnded:
                    if cycle := self.streams.get(event.stream_id):  # type: ignore[attr-defined]
                        cycle.on_end()
                elif kind is h2.events.WindowUpdated or kind is h2.events.RemoteSettingsChanged:
                    # Credit for one stream, or for all (stream 0, or a new initial window size)
                    sid = getattr(event, "stream_id", 0)
                    for cycle in [self.streams[sid]] if sid in self.streams else \
                            self.streams.values():
                        cycle.wake_sender()
                elif kind is h2.events.StreamReset:
                    self.on_reset(event.stream_id)  # type: ignore[attr-defined]
                elif kind is h2.events.ConnectionTerminated:  # the client's GOAWAY: h2 sends
                    self.close()  # no frames after it, so nothing in flight can finish
                if self.closed:
                    return
        except http2.FrameRefused as exc:
            logger.warning("closing HTTP/2 connection from %s: %s", self.client, exc.reason)
            self.conn.close_connection(exc.code)
            return self.close()
        except h2.exceptions.ProtocolError as exc:  # h2 queued a GOAWAY with the error code
            logger.debug("HTTP/2 connection error from %s: %s", self.client, exc)
            return self.close()
        self.flush()
    # --8<-- [end:data_received]

    def flush(self) -> None:  # what h2 framed (responses, ACKs, WINDOW_UPDATEs): one write
        data = self.conn.data_to_send()
        if data and not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        """Write what h2 queued (a GOAWAY) and close in stages (``lingering_close``): a client
        still sending reads our GOAWAY, not a reset. Apps still running see http.disconnect."""
        self.flush()
        self.closed = True
        self.deadline.close()
        self.drop()
        self.lingering_close()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.drop()

    def drop(self) -> None:  # the connection ends: bytes held are dropped, apps see disconnect
        self.held, self.held_at = b"", 0
        for cycle in self.streams.values():
            cycle.disconnect()  # their sends raise ClientDisconnected
        self.streams.clear()

    def pause_writing(self) -> None:  # the client reads nothing: nor do we, so no flood of
        super().pause_writing()  # frames that h2 answers (PING...) can pile answers up here
        self.flow.pause_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self.held_at == len(self.held):  # else feed() resumes once the held bytes are in
            self.flow.resume_reading()

    def on_request(self, event: h2.events.RequestReceived) -> None:
        """Check a request, build its scope, and start its app. A stream past the limit is
        refused, a malformed one reset (RFC 9113 §5.1.2, §8.1.1), each on its own."""
        sid, ended = event.stream_id, event.stream_ended is not None
        if self.closing or len(self.streams) >= http2.MAX_CONCURRENT_STREAMS:
            return self.reset(sid, ErrorCodes.REFUSED_STREAM)  # §6.8: none after GOAWAY
        try:
            length, (status, method, raw_path, query, headers) = http2.request_head(
                event.headers or (), self.decoder.taken, ended, self.config.max_headers)
        except ValueError:
            return self.reset(sid, ErrorCodes.PROTOCOL_ERROR)
        scope = http_scope(self, method, "2", raw_path, query, headers)
        if not status and at_concurrency_limit(self.state):
            status = 503  # RFC 9110 §15.6.4, as uvicorn's limit_concurrency
        cycle = RequestResponseCycle.open(self, sid, scope, not ended, run=not status)
        cycle.content_length = length
        if status:
            cycle.send_error(status)

    def on_data(self, event: h2.events.DataReceived) -> None:
        """Body for a stream's app; the credit goes back as the app takes it."""
        sid, data, length = event.stream_id, event.data or b"", event.flow_controlled_length or 0
        if not data and not event.stream_ended:
            self.budget.spend(0, 1)  # an empty DATA frame flood (CVE-2019-9518)
        cycle = self.streams.get(sid)
        if cycle is not None and not (cycle.response_complete or cycle.disconnected):
            cycle.body_size += len(data)
            limit = self.config.max_body_size
            if cycle.content_length is not None and cycle.body_size > cycle.content_length:
                cycle.malformed()  # more than it declared
            elif limit is not None and cycle.body_size > limit:
                cycle.send_error(413)  # RFC 9110 §15.5.14
            else:
                cycle.body += data
                cycle.credit += length
                self.deadline.set("body", self.config.timeout_body)  # moved on by each DATA
                return cycle.wake()
        self.conn.acknowledge_received_data(length, sid)  # nobody will read it

    def on_reset(self, sid: int) -> None:
        """The client reset a stream: its app sees ``http.disconnect``; budgeted (rapid reset)."""
        if cycle := self.streams.pop(sid, None):
            cycle.disconnect()
        self.stream_done()
        self.budget.spend(1, 0)

    def reset(self, sid: int, code: ErrorCodes) -> None:
        """Refuse a stream whose app never ran with RST_STREAM ``code`` (a stream error, RFC
        9113 §5.4.2); budgeted as a reset: each costs us a frame and the client nothing."""
        self.conn.reset_stream(sid, code)
        self.budget.spend(1, 0)

    def stream_done(self) -> None:
        """After a stream: with none left, close if shutting down, else start the idle deadline."""
        if not self.streams:
            if self.closing:
                self.close()
            else:
                self.deadline.set("idle", self.config.timeout_keep_alive)

    def on_timeout(self, kind: str) -> None:
        """``idle``: no stream for ``timeout_keep_alive`` s: GOAWAY, close. ``body``: no DATA for
        ``timeout_body`` s while apps wait for body: 408 on their streams (RFC 9110 §15.5.9)."""
        if kind == "body":
            for cycle in [c for c in self.streams.values() if c.more_body and c.waiter]:
                cycle.send_error(408)
            if any(c.more_body for c in self.streams.values()):
                self.deadline.set("body", self.config.timeout_body)
        elif not self.streams:
            self.conn.close_connection()
            self.close()

    def shutdown(self) -> None:
        """GOAWAY with the last stream taken (RFC 9113 §6.8, framed by us: h2 sends nothing
        after its own); streams in flight finish, then we close."""
        if self.closing or self.transport.is_closing():
            return
        self.closing = True
        self.flush()
        self.transport.write(http2.goaway(self.conn.highest_inbound_stream_id))
        self.stream_done()


class HTTP1ToH2Protocol(HttpToolsProtocol):
    """toy-httptools' HTTP/1.1 protocol, which hands its connection to ``H2Protocol`` when the
    TLS handshake chose ``h2``, the client opens with the preface, or asks ``Upgrade: h2c``."""

    __slots__ = ()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2":
            self.stop_reading()  # RFC 9113 §3.2: "h2" over TLS, chosen by ALPN
            self.switch_protocol(H2Protocol(self.state))

    # --8<-- [start:hand_over]
    def handle_upgrade(self, scope: Scope | None, data: bytes) -> bool:
        """Take the connection for HTTP/2: by prior knowledge (``scope`` None: its first bytes
        were the preface, RFC 9113 §3.4) or for a request asking ``Upgrade: h2c`` with valid
        ``HTTP2-Settings`` (RFC 7540 §3.2), which becomes stream 1. Anything else is answered
        as HTTP/1.1 (False), and so is either way in over TLS, where only ALPN picks h2 (RFC
        9113 §3.3: h2c is cleartext only; the h2c-smuggling pattern)."""
        if self.scheme == "https":
            return False
        upgrade = None if scope is None else http2.h2c_upgrade(scope)  # HTTP2-Settings, scope
        if scope is not None and upgrade is None:
            return False
        self.stop_reading()
        self.switch_protocol(H2Protocol(self.state, upgrade), data)
        return True
    # --8<-- [end:hand_over]

    def status_for(self, exc: Exception, data: bytes, phase: int, messages: int) -> int:
        """As toy-httptools', but a connection whose first line is no HTTP/1.x request line
        at all is closed unanswered: its client speaks another protocol (an HTTP/2 client
        with a bad preface: RFC 9113 §3.4, a connection error; no HTTP/1.1 answer)."""
        status = super().status_for(exc, data, phase, messages)
        if status in (400, 501) and phase == NO_MESSAGE and self.messages == 1 and \
                b" HTTP/" not in data.partition(b"\n")[0]:
            self.stop_reading()
            self.transport.close()
            return 0
        return status


# --- ASGI interface -------------------------------------------------------------------------------


class RequestResponseCycle(asgi.RequestResponseCycle):
    """One stream: ``send`` frames through h2 within the peer's windows; ``receive`` (the
    base's) gives the stream's credit back as the app takes the body."""

    protocol: H2Protocol

    def __init__(self, protocol: H2Protocol, scope: Scope, stream_id: int,
                 expect_100: bool) -> None:
        super().__init__(protocol, scope, expect_100)
        self.conn, self.stream_id = protocol.conn, stream_id
        self.credit = 0  # bytes of body received, not yet granted back (WINDOW_UPDATE)
        self.body_size = 0
        self.content_length: int | None = None  # the request's, DATA is checked against
        self.response = http2.Response(scope["method"])
        self.window: asyncio.Future[None] | None = None  # send() waiting for credit

    @classmethod
    def open(cls, protocol: H2Protocol, sid: int, scope: Scope, more_body: bool,
             run: bool = True) -> RequestResponseCycle:
        """Register stream ``sid``'s cycle (trailers offered) and start its app if ``run``."""
        scope["extensions"] = {**scope.get("extensions", {}), "http.response.trailers": {}}
        expect = more_body and http2.expects_continue(scope["headers"])
        protocol.streams[sid] = cycle = cls(protocol, scope, sid, expect)
        cycle.more_body = more_body
        if more_body or protocol.deadline.kind == "idle":  # no longer idle; see on_timeout
            protocol.deadline.set("body", protocol.config.timeout_body)
        if run:
            cycle.start_task(protocol.app)
        return cycle

    def on_end(self) -> None:
        """The client ended the stream: the body is whole, unless it is short of its
        Content-Length (RFC 9113 §8.1.1: malformed, RST_STREAM PROTOCOL_ERROR)."""
        self.more_body = False
        if self.content_length not in (None, self.body_size):
            self.malformed()
        self.wake()

    def malformed(self) -> None:  # RFC 9113 §8.1.1: a stream error; budgeted as a reset
        self.reset(ErrorCodes.PROTOCOL_ERROR)
        self.protocol.budget.spend(1, 0)

    def wake_sender(self) -> None:
        if self.window is not None and not self.window.done():
            self.window.set_result(None)

    def disconnect(self) -> None:
        super().disconnect()
        self.wake_sender()

    def write_continue(self) -> None:
        if not self.response_started:  # RFC 9113 §8.1: an interim response, in its own
            self.conn.send_headers(self.stream_id, [(b":status", b"100")])  # HEADERS
            self.protocol.flush()

    def resume_reading(self) -> None:  # credit goes back once the app has the body: receive()
        pass

    async def receive(self) -> Message:
        """The base's; then the credit of the body the app took goes back (RFC 9113 §6.9)."""
        message = await super().receive()
        if self.credit and not self.disconnected:
            self.conn.acknowledge_received_data(self.credit, self.stream_id)
            self.credit = 0
            self.protocol.flush()
        return message

    # --8<-- [start:send]
    async def send(self, message: Message) -> None:
        """``http.response.start``, ``.body`` and ``.trailers``. Raises ClientDisconnected once
        the stream is gone, http1.ResponseError for fields ``check_response`` refuses, and
        RuntimeError for a message out of order."""
        protocol = self.protocol
        if protocol.flow.write_paused and not self.disconnected:
            await protocol.flow.drain()
        if self.disconnected:
            raise ClientDisconnected
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', got {kind!r}")
            self.response.start(message, protocol.state.default_headers)
            self.response_started = True
            if protocol.access_log:
                log_access(protocol.client, self.scope, message["status"])
        elif self.response_complete:
            raise RuntimeError(f"unexpected {kind!r} after the response")
        elif kind == "http.response.body":
            await self.send_body(*self.response.body(message))
        elif kind == "http.response.trailers":  # ASGI: trailers may come in parts
            if (fields := self.response.trailer(message)) is not None:
                self.conn.send_headers(self.stream_id, fields, end_stream=True)
                self.complete()
        else:
            raise RuntimeError(f"unexpected {kind!r} in the response")
    # --8<-- [end:send]

    async def send_body(self, head: Headers | None, body: bytes, end: bool) -> None:
        """The HEADERS frame first (``head``, on the first body), then DATA frames within the
        client's windows (``http2.send_data``), waiting while a window is shut (RFC 9113
        §6.9); END_STREAM on the last frame if ``end``."""
        if head is not None:
            self.conn.send_headers(self.stream_id, head, end_stream=end and not body)
            if end and not body:
                return self.complete()
        rest = memoryview(body)
        while not self.disconnected:
            rest, frames = http2.send_data(self.conn, self.stream_id, rest, end)
            self.protocol.budget.earn(2 * frames)  # the WINDOW_UPDATEs a reader owes for them
            if not rest:
                break
            await self.wait_for_window()
        if self.disconnected:
            raise ClientDisconnected
        if end:
            self.complete()
        else:
            self.protocol.flush()

    async def wait_for_window(self) -> None:
        """Wait for credit (a WINDOW_UPDATE), at most ``timeout_body`` seconds: a client that
        took none of our body that long is treated as one that paused its own body that long
        (a slow reader): the stream is reset (CANCEL) and send() raises ClientDisconnected, so
        no client holds streams, apps and their buffers for ever at a zero window."""
        self.protocol.flush()
        self.window = self.protocol.loop.create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self.window), self.protocol.config.timeout_body)
        except TimeoutError:
            self.reset(ErrorCodes.CANCEL)
        self.window = None

    def reset(self, code: ErrorCodes) -> None:
        """End the stream with RST_STREAM ``code`` (RFC 9113 §5.4.2: the connection goes on):
        the app sees http.disconnect and its send() raises ClientDisconnected."""
        with contextlib.suppress(h2.exceptions.ProtocolError):  # the stream is gone already
            self.conn.reset_stream(self.stream_id, code)
        self.disconnect()
        self.complete()

    def complete(self) -> None:
        """The response is out: end the stream's cycle; a request body still coming is
        refused with RST_STREAM NO_ERROR (RFC 9113 §8.1), its credit returned."""
        self.response_complete = True
        protocol = self.protocol
        with contextlib.suppress(h2.exceptions.ProtocolError):  # the stream is gone already
            if self.more_body and not self.disconnected:
                self.conn.reset_stream(self.stream_id, ErrorCodes.NO_ERROR)
            if self.credit:
                self.conn.acknowledge_received_data(self.credit, self.stream_id)
        self.credit = 0
        protocol.flush()
        self.wake()
        if protocol.streams.get(self.stream_id) is self:
            del protocol.streams[self.stream_id]
            protocol.stream_done()

    def send_error(self, status: int) -> None:
        """Answer ``status`` on this stream when no byte of the response is out, else reset
        it with INTERNAL_ERROR (RFC 9113 §8.1: the stream ends, the connection goes on)."""
        protocol = self.protocol
        if self.response_complete or protocol.transport.is_closing():
            return
        if self.response_started and self.response.head is None:  # the head is out already
            return self.reset(ErrorCodes.INTERNAL_ERROR)
        if protocol.access_log and not self.response_started:
            log_access(protocol.client, self.scope, status)
        self.response_started, self.response.head = True, None
        with contextlib.suppress(h2.exceptions.ProtocolError):  # the stream is gone already
            http2.send_error(self.conn, self.stream_id, status, protocol.state.default_headers)
        self.complete()
        self.disconnect()  # the app, if running, sees http.disconnect


# --- Serving --------------------------------------------------------------------------------------


async def serve(app: ASGIApp, config: Config, **options: Any) -> None:
    """Serve ``app`` over HTTP/2 and HTTP/1.1 on one port until ``shutdown`` is set (or
    SIGINT/SIGTERM). The options (``sock``, ``ready``, ``shutdown``, ``stop_accepting``) and
    the errors are ``serve_protocol``'s."""
    await serve_protocol(HTTP1ToH2Protocol, app, config, name="toy-h2",
                         alpn_protocols=["h2", "http/1.1"], **options)


def run(app: ASGIApp, config: Config) -> None:
    """Block serving ``app`` on the configured event loop (``toyserve --server toy-h2``)."""
    run_server(serve, app, config)
