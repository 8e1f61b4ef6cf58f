"""toy-h11: a sans-IO HTTP/1.1 ASGI server: h11 parses and frames, this module moves bytes.

I/O model: one ``asyncio.Protocol`` per connection owns an ``h11.Connection``, a state machine
that never touches a socket. ``data_received`` hands the bytes to ``receive_data`` and pulls
events out with ``next_event`` (``Request``, ``Data``, ``EndOfMessage``; ``NEED_DATA`` when it
wants more bytes, ``PAUSED`` when the client is ahead of us); the ASGI side turns the app's
messages into ``Response``/``Data``/``EndOfMessage`` events and ``conn.send`` turns those into
bytes for ``transport.write``. Each request runs the app in its own Task
(``RequestResponseCycle.run_asgi``); when both sides are ``DONE``, ``start_next_cycle`` readies
the connection for the next request. h11 checks the grammar; ``request_status`` adds what h11
lets through, with the shared checks of ``toyservers.http1``. Where h11 decides otherwise than
our contract (obs-fold, bare LF, repeated Content-Length, 501 for any Transfer-Encoding but
``chunked``, chunk extensions), toy-h11 goes with h11: see ``tests/hostile/corpus.py``.

Deliberately left out: WebSocket and other protocol upgrades (served as plain HTTP), CONNECT
(501), HTTP/1.0 keep-alive (h11 always closes HTTP/1.0 connections, which RFC 9112 §9.3
allows), request trailers (h11 parses them; they are checked, then dropped),
``http.response.trailers``, zero-copy file responses, TLS beyond what asyncio's ``ssl=`` gives.

Spec: RFC 9112 §2-§3 (message and request line), §5 (field syntax), §6-§7 (body length,
chunked coding), §9 (persistence, pipelining); RFC 9110 §5.5 (field values), §10.1.1 (Expect),
§15 (status codes). ASGI 3.0 HTTP connection scope, ``http.request``, ``http.disconnect``,
``http.response.start`` and ``http.response.body``
(https://asgi.readthedocs.io/en/latest/specs/www.html); lifespan via ``toyservers.lifespan``.

Compare with: uvicorn/protocols/http/h11_impl.py (and h11's examples/trio-server.py).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from itertools import chain
from operator import itemgetter
from typing import Any

import h11

from toyservers import asgi, http1
from toyservers._server import HTTPProtocol, ServerState, run_server, serve_protocol
from toyservers._types import ASGIApp, Headers, Message, Scope
from toyservers.asgi import ClientDisconnected, at_concurrency_limit, http_scope, log_access
from toyservers.config import Config
from toyservers.flow_control import HIGH_WATER_LIMIT

# --- constants -------------------------------------------------------------------------------

END_OF_MESSAGE = h11.EndOfMessage()
# Events pulled out of h11 in one go before the loop gets a turn: a burst of 1-byte chunks is
# 300k Data events of ~8 µs each, and no other connection may wait for all of them.
MAX_EVENTS = 512


# --- wire helpers ----------------------------------------------------------------------------


def fields_status(fields: Headers, config: Config) -> int:
    """431 for a field section over ``max_headers`` lines or ``max_header_size`` bytes (RFC
    6585 §5), 400 for a control byte h11 let by in a value (RFC 9110 §5.5), else 0."""
    count = len(fields)  # each field line is name ": " value CRLF
    if count > config.max_headers or sum(map(len, chain.from_iterable(fields))) + 4 * count \
            > config.max_header_size:
        return 431
    return 400 if http1.bad_field_value(b" ".join(map(itemgetter(1), fields))) else 0


def request_status(event: h11.Request, headers: Headers, config: Config) -> int:
    """0 when the request h11 parsed may go to the app, else the status to refuse it with.

    h11 has checked the request line and field syntax, one Host in HTTP/1.1, Content-Length
    digits and a lone ``Transfer-Encoding: chunked``; this checks what it lets through.
    """
    if event.http_version[:1] != b"1":
        return 505  # RFC 9110 §15.6.6: the major version is not supported
    if len(event.method) + len(event.target) + 10 > config.max_request_line:
        return 414  # RFC 9110 §15.5.15
    if status := fields_status(headers, config):
        return status
    fields = dict(headers)  # h11 allows one Host, Content-Length and Transfer-Encoding each
    version = "1.0" if event.http_version == b"1.0" else "1.1"
    length = fields.get(b"content-length")
    if b"transfer-encoding" in fields:  # h11 passes only "chunked"; 501 for any other coding
        return http1.transfer_coding_status(b"chunked", version, length is not None)
    if length is not None:
        if int(length) > http1.MAX_CONTENT_LENGTH:
            return 400  # RFC 9112 §6.3 rule 5: an overflowing length is invalid
        if config.max_body_size is not None and int(length) > config.max_body_size:
            return 413  # RFC 9110 §15.5.14
    host = fields.get(b"host")
    return http1.host_status([] if host is None else [host], version)


# --- the protocol class ----------------------------------------------------------------------


class H11Protocol(HTTPProtocol):
    """One HTTP/1.1 connection: feeds h11, starts a ``RequestResponseCycle`` per request."""

    __slots__ = ("conn", "cycle", "pipelined", "body_size", "access_log")

    def __init__(self, state: ServerState) -> None:
        super().__init__(state)
        config = self.config  # h11 answers 431 to a head still incomplete past this size
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=config.max_request_line
                                   + config.max_header_size)
        self.cycle: RequestResponseCycle | None = None
        self.pipelined = False  # h11 holds bytes of the next request (it said PAUSED)
        self.body_size = 0  # request body bytes received, for max_body_size
        self.access_log = config.access_log and asgi.access_logger.isEnabledFor(logging.INFO)

    # Protocol interface

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

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        cycle = self.cycle
        if cycle is not None:
            cycle.disconnect()

    def on_timeout(self, kind: str) -> None:
        """``idle``: close silently (RFC 9112 §9.5). A head or body that came too slowly gets
        408 (RFC 9110 §15.5.9: "the server did not receive a complete request message within
        the time that it was prepared to wait"), then the connection closes."""
        if kind == "idle":
            super().on_timeout(kind)
        else:
            self.send_error(408)

    def send_error(self, status: int) -> None:
        """Answer ``status`` with ``Connection: close`` and close; only close when part of a
        response is on the wire already (h11's side is past ``SEND_RESPONSE``)."""
        cycle = self.cycle
        if cycle is not None:
            cycle.disconnect()
        our_state = self.conn.our_state
        if not self.transport.is_closing() and (
                our_state is h11.IDLE or our_state is h11.SEND_RESPONSE):
            head = cycle is not None and cycle.scope["method"] == "HEAD"
            self.transport.write(http1.error_response(
                status, self.state.default_headers_bytes, head=head))
        self.transport.close()

    def shutdown(self) -> None:
        """Close now if no response is in flight, else after it; a head not sent yet then says
        ``Connection: close`` (RFC 9112 §9.6)."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()
        else:
            cycle.keep_alive = False

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
                self.send_error(self.protocol_error_status(exc))
                return
            kind = type(event)
            if kind is h11.Data:
                data: bytes = event.data  # type: ignore[union-attr]
                self.body_size += len(data)
                max_body = self.config.max_body_size
                if max_body is not None and self.body_size > max_body:
                    self.send_error(413)  # a chunked body; a Content-Length is checked earlier
                    return
                cycle = self.cycle
                if cycle is None or cycle.response_complete:
                    continue  # answered already: drop the rest (RFC 9112 §9.3; unread_body_closes)
                cycle.body += data  # b"" + data is data itself; the rest is bounded by the pause
                cycle.wake()
                if len(cycle.body) >= HIGH_WATER_LIMIT:
                    # Enough for the app: stop reading until its receive() takes it.
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

    def protocol_error_status(self, exc: h11.RemoteProtocolError) -> int:
        """h11's status hint, but 414 when its 431 is for a request line that has not ended."""
        status: int = exc.error_status_hint
        limit = self.config.max_request_line + 2
        if status == 431 and self.cycle is None and b"\n" not in self.conn.trailing_data[0][:limit]:
            status = 414  # RFC 9110 §15.5.15 (h11 sees only an incomplete head too large)
        return status

    def on_request(self, event: h11.Request) -> bool:
        """Check the request, build the ASGI scope and start the app's Task; False when we
        answered instead (then the connection closes)."""
        self.deadline.clear()
        self.body_size = 0
        headers = [(name.lower(), value) for name, value in event.headers.raw_items()]
        status = request_status(event, headers, self.config)
        method = event.method.decode("ascii")
        try:
            raw_path, query_string = http1.split_target(method, event.target)
        except http1.BadTarget:
            status = status or 400  # RFC 9112 §3.2: none of the four request-target forms
        if not status and method == "CONNECT":
            status = 501  # deliberately left out
        if status:
            self.send_error(status)
            return False
        version = "1.0" if event.http_version == b"1.0" else "1.1"
        scope = http_scope(self, method, version, raw_path, query_string, headers)
        if at_concurrency_limit(self.state):
            if self.access_log:  # logged like any response, as uvicorn and toy-httptools do
                log_access(self.client, scope, 503)
            self.send_error(503)
            return False
        self.cycle = cycle = RequestResponseCycle(self, scope)
        cycle.start_task(self.app)
        return True

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

    def on_response_complete(self, keep_alive: bool) -> None:
        """Close, start the next cycle, or read and drop the rest of an unread body."""
        if self.conn.our_state is h11.MUST_CLOSE or not keep_alive:
            self.transport.close()
        elif self.conn.their_state is h11.DONE:
            self.start_next_cycle()
        else:  # at most HIGH_WATER_LIMIT of it: see RequestResponseCycle.unread_body_closes
            self.handle_events()


# --- the per-request cycle -------------------------------------------------------------------


class RequestResponseCycle(asgi.RequestResponseCycle):
    """One request: the app's ``send`` and the hooks of ``receive`` (the base holds the body,
    ``receive`` and ``run_asgi``).

    The response head is framed with the first body message ("the protocol server must not
    start sending the response to the client until it has received at least one Response Body
    event", ASGI HTTP spec), so a small response leaves in one ``transport.write``.
    """

    __slots__ = ("conn", "transport", "flow", "keep_alive", "fields", "status", "no_body")

    def __init__(self, protocol: H11Protocol, scope: Scope) -> None:
        super().__init__(protocol, scope, protocol.conn.they_are_waiting_for_100_continue)
        self.protocol: H11Protocol = protocol
        self.conn, self.transport, self.flow = protocol.conn, protocol.transport, protocol.flow
        self.keep_alive = True  # False: close after this response (graceful shutdown)
        self.fields: http1.ResponseFields | None = None  # the checked head, until written
        self.status = 0
        self.no_body = False  # the response has no content: HEAD, 204, 304 (RFC 9110 §6.4.1)

    # ASGI interface

    def write_continue(self) -> None:
        # h11 clears the flag once our Response is sent, or body came (RFC 9110 §15.2).
        if self.conn.they_are_waiting_for_100_continue:
            self.transport.write(self.conn.send(h11.InformationalResponse(
                status_code=100, headers=[], reason=b"Continue")))

    def resume_reading(self) -> None:
        if self.flow.read_paused:
            # handle_events stopped (HIGH_WATER_LIMIT or MAX_EVENTS): pull on at the loop's
            # next turn, so an app reading in a loop cannot keep the loop to itself.
            self.protocol.loop.call_soon(self.protocol.handle_events)

    # --8<-- [start:send]
    async def send(self, message: Message) -> None:
        """Frame ``http.response.start`` / ``http.response.body`` through h11 and write them.

        Raises ClientDisconnected once the client is gone, http1.ResponseError for what
        ``check_response`` refuses, RuntimeError for a message out of order, and
        h11.LocalProtocolError for more or less body than the app's Content-Length.
        """
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            raise ClientDisconnected("the client has disconnected")
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', got {kind!r}")
            # Checked now, as strictly as the other servers do, so nothing bad is ever framed.
            self.fields = http1.check_response(message["status"], message.get("headers", ()),
                                               self.protocol.state.default_headers)
            self.status = message["status"]
            self.response_started = True
            if self.protocol.access_log:
                log_access(self.protocol.client, self.scope, self.status)
            return
        if kind != "http.response.body" or self.response_complete:
            raise RuntimeError(f"unexpected ASGI message {kind!r} after the response started")
        body = message.get("body", b"")
        if type(body) is not bytes:
            raise http1.ResponseError(f"response body must be bytes, not {type(body).__name__}")
        more_body = message.get("more_body", False)
        conn = self.conn
        parts: list[bytes] = []
        fields = self.fields
        if fields is not None:  # the first body message: the head goes out with it
            parts = self.response_head(fields, body, more_body)
        if body and not self.no_body:
            parts += conn.send_with_data_passthrough(h11.Data(data=body)) or ()
        if not more_body:
            parts += conn.send_with_data_passthrough(END_OF_MESSAGE) or ()
            self.response_complete = True
        if parts:
            self.transport.write(b"".join(parts))  # one write: head and body leave together
        if self.response_complete:
            self.wake()
            self.protocol.on_response_complete(self.keep_alive)
    # --8<-- [end:send]

    def response_head(self, fields: http1.ResponseFields, body: bytes, more_body: bool
                      ) -> list[bytes]:
        """The head, framed by h11: its status line and the framing fields h11 decides on
        (Content-Length, ``Transfer-Encoding: chunked`` or ``Connection: close``), with the
        app's checked fields (and our Date and Server) after the status line."""
        self.fields = None
        status = self.status
        self.no_body = self.scope["method"] == "HEAD" or status == 204 or status == 304
        length = fields.content_length
        if length is None and not more_body and status != 204 and status != 304 and (
                body or not self.no_body):
            length = len(body)  # the whole body is here: say its size instead of chunking
        elif length is not None and not self.no_body and len(body) != length and (
                len(body) > length or not more_body):  # refused before h11 writes a byte
            raise http1.ResponseError(f"{len(body)} body bytes for Content-Length {length}")
        lines = fields.lines  # name, b": ", value, b"\r\n" for each field
        if fields.content_length is not None:  # h11 writes it, from the framing fields
            at = lines[::4].index(b"content-length") * 4
            del lines[at:at + 4]
        framing = [] if length is None else [(b"content-length", b"%d" % length)]
        if fields.close or not self.keep_alive or (self.more_body and self.unread_body_closes()):
            framing.append((b"connection", b"close"))
        parts = self.conn.send_with_data_passthrough(h11.Response(
            status_code=self.status, headers=framing, reason=http1.reason(self.status))) or []
        parts.insert(1, b"".join(lines))
        return parts

    def unread_body_closes(self) -> bool:
        """Must this response, framed before the request body ended, close (RFC 9112 §9.3)?"""
        length = dict(self.scope["headers"]).get(b"content-length")
        rest = None if length is None else int(length) - self.protocol.body_size
        return http1.unread_body_closes(self.expect_100, rest)


# --- serve() and run() -----------------------------------------------------------------------


async def serve(app: ASGIApp, config: Config, *, sock: socket.socket | None = None,
                ready: Any = None, shutdown: asyncio.Event | None = None) -> None:
    """Serve ``app`` with h11 until ``shutdown`` is set (or SIGINT/SIGTERM); the arguments
    and errors are ``toyservers._server.serve_protocol``'s."""
    await serve_protocol(H11Protocol, app, config, sock=sock, ready=ready, shutdown=shutdown,
                         name="toy-h11")


def run(app: ASGIApp, config: Config) -> None:
    """Block serving ``app`` on the configured event loop (``toyserve --server toy-h11``)."""
    run_server(serve, app, config)
