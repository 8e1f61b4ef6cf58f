"""toy-h2: an HTTP/2 ASGI server on asyncio, framed by the sans-IO ``h2`` library.

I/O model: one ``asyncio.Protocol`` per connection feeds what it reads to an
``h2.connection.H2Connection``, which parses frames, keeps each stream's state machine and the
flow-control windows, and answers SETTINGS and PING itself; we turn its events into ASGI and
write its ``data_to_send()`` back (toy-h11's rhythm with h11). Each stream is an ASGI ``http``
scope with its own ``RequestResponseCycle`` (``toyservers/h2_stream.py``) and Task. One port,
three ways in: over TLS, ALPN picks ``h2`` or HTTP/1.1; every connection starts on
toy-httptools' protocol (``HTTP1ToH2Protocol``), whose ``handle_upgrade`` hands it over when
ALPN chose h2, its first bytes are the HTTP/2 preface (prior knowledge: llhttp spots it, so
HTTP/1.1 pays nothing) or a request asks ``Upgrade: h2c``.
What h2 leaves to a server (request checks, the h2c upgrade, the abuse budgets, DATA within
the windows) is sans-IO, in ``toyservers/http2.py``; this module is the I/O around it.

Flow control is credit: we grant the client more (WINDOW_UPDATE) only as the app's
``receive()`` takes body, so a slow app holds the client back; ``send()`` waits for the
client's. Attacks (http2.py's docstring lists them, with their bounds) end the connection
with GOAWAY ENHANCE_YOUR_CALM; besides, h2 gets ``MAX_FEED`` bytes per loop turn and we stop
reading while our write buffer is full. A malformed request ends its own stream alone.

WebSocket: over HTTP/1.1 it is toy-httptools' (``Upgrade: websocket``); over HTTP/2 (RFC 8441)
our SETTINGS say ``ENABLE_CONNECT_PROTOCOL`` (unless ``--ws none``), and an extended CONNECT
(``:protocol websocket``) makes its stream a WebSocket (``toyservers/h2_websocket.py``) beside
the requests on the same connection; the WebSockets' keepalive pings and close deadlines share
one timer per connection (``ws_timers``, made at the first).

Deliberately left out: server push (browsers dropped it, Chrome in 106: 103 Early Hints does
its job, and toy-h2 sends them), priorities (RFC 9113 §5.3.2 deprecates them), request
trailers (dropped), CONNECT as a tunnel (501), ``sendfile(2)`` (a file body, pathsend or
zerocopysend, is read in 64 KiB pieces: DATA frames are built in the process),
``http.response.debug`` (asgiref: not for production).

Spec: RFC 9113 §3 (starting), §5 (streams, flow control), §6.5 (SETTINGS), §6.8 (GOAWAY),
§8 (HTTP semantics); RFC 7540 §3.2 (h2c); RFC 7541 (HPACK); RFC 7301 (ALPN); RFC 8441
(WebSocket); ASGI HTTP spec 2.4 and its HTTP Trailers, Early Hints (RFC 8297), Path Send and
Zero Copy Send extensions.

Compare with: hypercorn/protocol/h2.py and http_stream.py; h2's asyncio example server."""

from __future__ import annotations

import asyncio
import base64
import logging
from functools import cached_property
from typing import Any

import h2.events
import h2.exceptions
from h2.errors import ErrorCodes

from toyservers import access_log, h2_websocket, http2
from toyservers._server import run_server, serve_protocol
from toyservers._types import ASGIApp, Scope
from toyservers.asgi import at_concurrency_limit, http_scope
from toyservers.config import Config
from toyservers.h2_stream import RequestResponseCycle, Stream
from toyservers.h2_websocket_timers import StreamTimers
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
        ``HTTP2-Settings`` (RFC 7540 §3.2), which becomes stream 1. Neither way in is taken
        over TLS, where only ALPN picks h2 (RFC 9113 §3.3: h2c is cleartext only; the
        h2c-smuggling pattern). Any other request asking Upgrade goes to toy-httptools' hook
        (a WebSocket handshake takes the connection; the rest is answered as HTTP/1.1)."""
        if scope is None and self.scheme == "https":
            return False
        upgrade = None if scope is None or self.scheme == "https" else http2.h2c_upgrade(scope)
        if scope is not None and upgrade is None:
            return super().handle_upgrade(scope, data)
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


class H2Protocol(HTTPProtocol):
    """One HTTP/2 connection: h2 events in, one RequestResponseCycle per stream out."""

    def __init__(self, state: ServerState, upgrade: tuple[bytes, Scope] | None = None) -> None:
        super().__init__(state)
        self.upgrade = upgrade  # after Upgrade: h2c, its HTTP2-Settings and request scope
        self.conn, self.decoder = http2.connection(self.config.max_header_size,
                                                   connect_protocol=self.config.ws != "none")
        self.streams: dict[int, Stream] = {}  # a request's cycle, or a WebSocket
        self.access_log = access_log.enabled(self.config)
        self.closing = False  # GOAWAY sent: streams in flight finish, new ones are refused
        self.closed = False  # close() called: the events still in hand are dropped
        self.budget = http2.FloodBudget(self.loop.time)
        self.scanner = http2.FrameScanner(self.config.max_header_size)

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
        """Hand h2 what came, at most ``MAX_FEED`` bytes a loop turn (``hold``), its frame
        headers scanned first (``http2.receive``), and act on h2's events."""
        if self.held:  # bytes held for the next turn: these queue behind them
            self.held += data
            return
        if len(data) > MAX_FEED:
            data, rest = data[:MAX_FEED], data[MAX_FEED:]
            self.hold(rest)
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

    @cached_property
    def ws_timers(self) -> StreamTimers:
        """The deadlines of its WebSocket streams (keepalive pings, close), made at the first."""
        return StreamTimers(self.loop, self.config)

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
        self.held = b""
        for cycle in self.streams.values():
            cycle.disconnect()  # their sends raise ClientDisconnected
        self.streams.clear()

    def pause_writing(self) -> None:  # the client reads nothing: nor do we, so no flood of
        super().pause_writing()  # frames that h2 answers (PING...) can pile answers up here
        self.flow.pause_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        if not self.held:  # else next_turn resumes once the held bytes are in
            self.flow.resume_reading()

    def keep_paused(self) -> bool:  # the client is not reading what we write
        return self.flow.write_paused

    def on_timeout(self, kind: str) -> None:
        """``idle``: no stream for ``timeout_keep_alive`` s: GOAWAY, close. ``body``: no DATA for
        ``timeout_body`` s while apps wait for body: 408 on their streams (RFC 9110 §15.5.9)."""
        if kind == "body":
            for cycle in [c for c in self.streams.values()
                          if isinstance(c, RequestResponseCycle) and c.more_body and c.waiter]:
                cycle.send_error(408)
            if any(c.more_body for c in self.streams.values()):
                self.deadline.set("body", self.config.timeout_body)
        elif not self.streams:
            self.conn.close_connection()
            self.close()

    def shutdown(self) -> None:
        """GOAWAY with the last stream taken (RFC 9113 §6.8, framed by us: h2 sends nothing
        after its own); streams in flight finish, WebSockets first closed with 1001, then we
        close. Not again, nor once closed (its FIN out, lingering: no write may follow)."""
        if self.closing or self.closed or self.transport.is_closing():
            return
        for stream in list(self.streams.values()):
            stream.shutdown()  # a WebSocket handshake's 503 ends its stream here
        self.closing = True  # only now: the last stream ending above must not close before GOAWAY
        self.flush()
        self.transport.write(http2.goaway(self.conn.highest_inbound_stream_id))
        self.on_response_complete()

    # --- ASGI interface ---------------------------------------------------------------------------
    # Streams in and out of ASGI: each request is a stream's RequestResponseCycle
    # (toyservers.h2_stream).

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
        if method == "CONNECT" and not status:  # only RFC 8441's extended CONNECT gets here
            if self.config.ws == "none":  # §3: we did not send the setting, so it is malformed
                return self.reset(sid, ErrorCodes.PROTOCOL_ERROR)
            return h2_websocket.open_stream(self, sid, scope, event.headers or (), ended)
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
        stream = self.streams.get(sid)
        if stream is None or not stream.on_data(data, length):
            self.conn.acknowledge_received_data(length, sid)  # nobody will read it

    def on_reset(self, sid: int) -> None:
        """The client reset a stream: its app sees ``http.disconnect``; budgeted (rapid reset)."""
        if cycle := self.streams.pop(sid, None):
            cycle.disconnect()
        self.on_response_complete()
        self.budget.spend(1, 0)

    def reset(self, sid: int, code: ErrorCodes) -> None:
        """Refuse a stream whose app never ran with RST_STREAM ``code`` (a stream error, RFC
        9113 §5.4.2); budgeted as a reset: each costs us a frame and the client nothing."""
        self.conn.reset_stream(sid, code)
        self.budget.spend(1, 0)

    def on_response_complete(self) -> None:
        """A stream ended (answered or reset): with none left, close if shutting down, else
        start the idle deadline."""
        if not self.streams:
            if self.closing:
                self.close()
            else:
                self.deadline.set("idle", self.config.timeout_keep_alive)


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
