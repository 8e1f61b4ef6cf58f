"""toy-h11: a sans-IO HTTP/1.1 ASGI server: h11 parses and frames, this module moves bytes.

I/O model: one ``asyncio.Protocol`` per connection owns an ``h11.Connection``, a state machine
that never touches a socket. ``data_received`` hands the bytes to ``receive_data`` and pulls
events out with ``next_event`` (``Request``, ``Data``, ``EndOfMessage``; ``NEED_DATA`` when it
wants more bytes, ``PAUSED`` when the client is ahead of us); the ASGI side turns the app's
messages into ``Response``/``Data``/``EndOfMessage`` events and ``conn.send`` turns those into
bytes for ``transport.write``. Each request runs the app in its own Task
(``RequestResponseCycle.run_asgi``); when both sides are ``DONE``, ``start_next_cycle`` readies
the connection for the next request. h11 checks the grammar; ``toyservers.h11_checks`` (shared
with toy-anyio) checks what h11 lets through and frames the app's messages as h11 events.
Where h11 decides otherwise than our contract (obs-fold, bare LF, repeated Content-Length, 501
for any Transfer-Encoding but ``chunked``, chunk extensions), toy-h11 goes with h11: see
``tests/hostile/corpus.py``.

ASGI extensions, through the shared cycle: ``tls``, early hints (103) and response trailers
(``toyservers.asgi_extensions``; h11 writes the trailer section: ``EndOfMessage(headers=...)``),
pathsend and zerocopysend (``toyservers.file_response``).

WebSocket: a request asking ``Upgrade: websocket`` goes to ``websocket_protocol.upgrade``
(``handle_upgrade``) with the bytes h11 holds after its head (``conn.trailing_data``), on
wsproto for ``--ws auto``, as uvicorn's h11 server does.

Deliberately left out: other protocol upgrades (served as plain HTTP), CONNECT
(501), HTTP/1.0 keep-alive (h11 always closes HTTP/1.0 connections, which RFC 9112 §9.3
allows), request trailers (h11 parses them; they are checked, then dropped),
``http.response.debug`` (asgiref: not for production), TLS beyond what asyncio's ``ssl=``
gives; ``sendfile(2)`` for a file body under TLS and before trailers: read in 64 KiB pieces
there.

Spec: RFC 9112 §2-§3 (message and request line), §5 (field syntax), §6-§7 (body length,
chunked coding), §9 (persistence, pipelining); RFC 9110 §5.5 (field values), §10.1.1 (Expect),
§15 (status codes), §7.8 (Upgrade); RFC 6455 §4.2 (the opening handshake). ASGI 3.0 HTTP
connection scope, ``http.request``, ``http.disconnect``,
``http.response.start`` and ``http.response.body``
(https://asgi.readthedocs.io/en/latest/specs/www.html), the HTTP Trailers, Early Hints (RFC
8297), Path Send and Zero Copy Send extensions; WebSocket via ``toyservers.asgi_websocket``;
lifespan via ``toyservers.lifespan``.

Compare with: uvicorn/protocols/http/h11_impl.py (``handle_websocket_upgrade`` too) and h11's
examples/trio-server.py.
"""

from __future__ import annotations

from typing import Any

import h11

from toyservers import h11_checks
from toyservers._server import run_server, serve_protocol
from toyservers._types import ASGIApp, Scope
from toyservers.config import Config
from toyservers.h11_checks import (
    H11Framer,
    H11Steps,
    fields_status,
    protocol_error_status,
    request_scope,
    take_body,
)
from toyservers.http1_cycle import HTTP1Protocol, RequestResponseCycle
from toyservers.state import ServerState

# --- Constants ------------------------------------------------------------------------------------

# Events pulled out of h11 in one go before the loop gets a turn: a burst of 1-byte chunks is
# 300k Data events of ~8 µs each, and no other connection may wait for all of them.
MAX_EVENTS = 512


# --- Protocol interface ---------------------------------------------------------------------------


class H11Protocol(H11Steps, HTTP1Protocol):
    """One HTTP/1.1 connection: feeds h11, starts a ``RequestResponseCycle`` per request
    (``HTTP1Protocol``: the cycle, the close path; ``HTTPProtocol``: the bookkeeping)."""

    __slots__ = ("conn", "pipelined", "body_size")

    def __init__(self, state: ServerState) -> None:
        super().__init__(state)
        config = self.config  # h11 answers 431 to a head still incomplete past this size
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=config.max_request_line
                                   + config.max_header_size)
        self.pipelined = False  # h11 holds bytes of the next request (it said PAUSED)
        self.body_size = 0  # request body bytes received, for max_body_size

    # --8<-- [start:data_received]
    def data_received(self, data: bytes) -> None:
        state = self.conn.their_state
        if state is h11.MUST_CLOSE:
            return  # RFC 9112 §9.6: after "close", a server "MUST NOT process any further
            # requests received on that connection"
        if state is h11.IDLE and self.deadline.kind != "head":
            # The first bytes of a request. RFC 9112 §2.2: "a server that is expecting to
            # receive and parse a request-line SHOULD ignore at least one empty line (CRLF)
            # received prior to the request-line" (h11 would refuse it).
            while data[:2] == b"\r\n":
                data = data[2:]
            if not data:
                return
        self.conn.receive_data(data)
        self.handle_events()
    # --8<-- [end:data_received]

    # Reading requests

    # --8<-- [start:handle_events]
    def handle_events(self) -> None:
        """Pull events out of h11 until it needs more bytes or we must wait for the app."""
        conn = self.conn
        if self.transport.is_closing():
            return
        for _ in range(MAX_EVENTS):
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                self.send_error(protocol_error_status(exc, conn, self.config, self.cycle is None))
                return
            kind = type(event)
            if kind is h11.Data:
                status = take_body(self, self.cycle, event.data)  # type: ignore[union-attr]
                if status == 413:
                    self.send_error(413)
                    return
                if status:  # enough for the app: stop reading until its receive() takes it
                    self.flow.pause_reading()
                    self.deadline.clear()
                    return
            elif kind is h11.Request:
                if not self.on_request(event):  # type: ignore[arg-type]
                    return
            elif kind is h11.EndOfMessage:
                trailers = event.headers  # type: ignore[union-attr]
                if trailers and (status := fields_status(trailers.raw_items(), self.config)):
                    self.send_error(status)  # RFC 9112 §7.1.2: a trailer section, as a head
                    return
                self.deadline.clear()
                cycle = self.cycle
                if cycle is not None and not cycle.response_complete:
                    cycle.more_body = False
                    cycle.wake()
                    if conn.their_state is h11.MUST_CLOSE:
                        return  # the last request: whatever follows is never read (§9.6)
                    # The app has the whole request. What next_event would say now is known
                    # without asking it (11k instructions a request): PAUSED when h11 holds
                    # bytes of the next request, else NEED_DATA.
                    if conn.trailing_data[0]:
                        self.pipelined = True
                        self.flow.pause_reading()
                    else:
                        self.flow.resume_reading()
                    return
                elif conn.our_state is h11.DONE:  # we answered before the body ended
                    # h11 says PAUSED if the next request came behind the body: serve it now
                    self.pipelined = conn.next_event() is h11.PAUSED
                    self.start_next_cycle()
                    return
            elif event is h11.NEED_DATA:
                cycle = self.cycle
                if cycle is not None and cycle.more_body:  # h11 is in SEND_BODY
                    self.deadline.set("body", self.config.timeout_body)
                elif cycle is None and self.deadline.kind != "head":  # a head has begun
                    self.deadline.set("head", self.config.timeout_headers)
                self.flow.resume_reading()
                return
            elif event is h11.PAUSED:
                # The client sent its next request before we answered this one. RFC 9112
                # §9.3.2: answer pipelined requests in order; h11 keeps the bytes, and we stop
                # reading more until start_next_cycle.
                self.pipelined = True
                self.flow.pause_reading()
                return
            else:  # ConnectionClosed
                return
        # MAX_EVENTS pulled: let the other connections run, then go on from h11's buffer.
        self.flow.pause_reading()
        self.loop.call_soon(self.handle_events)
    # --8<-- [end:handle_events]

    def on_request(self, event: h11.Request) -> bool:
        """Check the request, build the ASGI scope and start the app's Task; False when we
        answered instead (then the connection closes)."""
        self.deadline.clear()
        self.body_size = 0
        checked = request_scope(self, event)
        if isinstance(checked, int):
            self.send_error(checked)
            return False
        scope, upgrade = checked
        # h11 parses a request asking Upgrade and then stops (PAUSED, its client state
        # MIGHT_SWITCH_PROTOCOL): what came after the head is still in its buffer.
        if upgrade and self.handle_upgrade(scope, self.conn.trailing_data[0]):
            return False
        # h11's attribute, not its property they_are_waiting_for_100_continue (the same on a
        # server, after a test that our peer is the client): 0.6k instructions a request
        expect_100 = self.conn.client_is_waiting_for_100_continue
        framer = H11Framer(self.conn, scope["method"] == "HEAD")
        self.cycle = cycle = RequestResponseCycle(self, scope, framer, expect_100)
        cycle.start_task(self.app)
        return True

    def handle_upgrade(self, scope: Scope, data: bytes) -> bool:
        """A request asking ``Upgrade``: a WebSocket handshake takes the connection, on
        wsproto unless ``--ws`` says otherwise (``websocket_protocol.upgrade``), ``data`` (the
        bytes after the head) going with it; True when it did. Any other Upgrade is answered
        as HTTP/1.1 (h11 then drops the proposal: RFC 9110 §7.8 lets a server ignore it)."""
        # Imported at the first handshake: imported with this module, the WebSocket modules
        # cost every plain request ~1.2k instructions (callgrind, POST /user: 506.0k, 504.8k).
        from toyservers import websocket_protocol
        return websocket_protocol.upgrade(self, scope, data, auto="wsproto")

    # Between requests

    # --8<-- [start:start_next_cycle]
    def start_next_cycle(self) -> None:
        """Both sides are DONE: reset h11 for the next request.

        When h11 already holds the next request (pipelined), serve it now; reading stays
        paused until h11 has used what it holds, so its buffer never grows past one read.
        Otherwise the connection is idle, and the keep-alive deadline runs.
        """
        self.conn.start_next_cycle()
        self.cycle = None
        if self.pipelined:
            self.pipelined = False
            self.deadline.set("head", self.config.timeout_headers)
            self.handle_events()
        else:
            self.deadline.set("idle", self.config.timeout_keep_alive)
            self.flow.resume_reading()
    # --8<-- [end:start_next_cycle]

    # --- ASGI interface ---------------------------------------------------------------------------
    # The shared RequestResponseCycle's hooks (toyservers.http1_cycle); its framer is h11's
    # (H11Framer), so h11 frames every response.

    # Close, start the next cycle, or read and drop the rest of an unread body (h11_checks).
    on_response_complete = H11Steps.next_step

    def end_connection(self) -> None:
        self.lingering_close()

    def drain_body(self) -> None:
        self.handle_events()

    def resume_reading(self) -> None:
        if self.flow.read_paused:
            # handle_events stopped (HIGH_WATER_LIMIT or MAX_EVENTS): pull on at the loop's
            # next turn, so an app reading in a loop cannot keep the loop to itself.
            self.loop.call_soon(self.handle_events)

    def unread_body(self) -> int | None:
        assert self.cycle is not None
        return h11_checks.unread_body(self.cycle.scope, self.body_size)


# --- Serving --------------------------------------------------------------------------------------


async def serve(app: ASGIApp, config: Config, **options: Any) -> None:
    """Serve ``app`` until ``shutdown`` is set (or SIGINT/SIGTERM). The options (``sock``,
    ``ready``, ``shutdown``, ``stop_accepting``) and the errors are ``serve_protocol``'s."""
    await serve_protocol(H11Protocol, app, config, name="toy-h11", **options)


def run(app: ASGIApp, config: Config) -> None:
    """Block serving ``app`` on the configured event loop (``toyserve --server toy-h11``)."""
    run_server(serve, app, config)
