"""toy-raw: an HTTP/1.1 ASGI server on a plain asyncio.Protocol, with HTTP parsed by hand.

I/O model: one ``asyncio.Protocol`` per TCP connection. ``data_received`` appends the bytes to a
buffer; once it holds a whole request head, the project's own parser
(``toyservers.http1_parser``: plain functions on bytes, no I/O) checks and splits it, and a
``RequestResponseCycle`` runs the app as a Task. Body bytes (counted by Content-Length or
decoded by ``ChunkedDecoder``) reach the app through the shared ``receive()``
(``toyservers.asgi``); ``send()`` frames the
response with ``http1.ResponseFramer``. One request at a time: a pipelined request waits in the
buffer until the response in flight is complete. What this module adds to the parser is the
I/O: when to parse, when to pause reading, which deadline runs, how to close.

Deliberately left out: the upgrade to WebSocket or h2c, request trailers reaching the app (they
are checked and dropped: ASGI has no event for them), response trailers, decoding any transfer
coding but chunked (others get 501), the CONNECT tunnel, and proxy headers (X-Forwarded-*), and
answering a client that half-closed its side (its FIN counts as a disconnect, as in uvicorn).

Spec: RFC 9112 §2.2 (message parsing), §3 (request line), §5 (field lines), §6 (message body
length), §7.1 (chunked coding), §9 (connection management); RFC 9110 §5.5 and §5.6.2 (field
values, tokens), §10.1.1 (Expect), §15.2 (1xx); ASGI 3.0 HTTP connection scope and events,
spec version 2.4 (https://asgi.readthedocs.io/en/latest/specs/www.html).

Compare with: uvicorn/protocols/http/httptools_impl.py (the same skeleton; there, llhttp does the
parsing this module does by hand).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from toyservers import access_log, asgi, http1
from toyservers._server import HTTPProtocol, run_server, serve_protocol
from toyservers._types import ASGIApp, Message, Scope
from toyservers.config import Config
from toyservers.flow_control import HIGH_WATER_LIMIT
from toyservers.http1_parser import (
    BadRequest,
    ChunkedDecoder,
    body_framing,
    parse_request_head,
    take_head,
)
from toyservers.state import ServerState

logger = logging.getLogger("toyservers.error")

# --8<-- [start:constants]
# ---------------------------------------------------------------------------------- constants

LINGER_SECONDS = 2.0  # after an answer that closes, how long we drain the client's leftovers
# Deadline kinds: one timer per connection, its meaning depends on what we are waiting for.
IDLE, HEAD, BODY, LINGER = "idle", "head", "body", "linger"
# Connection phases: reading a head; reading a body; body read, response in flight; closed.
READ_HEAD, READ_BODY, WAIT_RESPONSE, CLOSED = "head", "body", "wait", "closed"
# --8<-- [end:constants]


# -------------------------------------------------------------------------- Protocol interface
# Counts such as "132.4k -> 129.7k" beside a speed trick: instructions per POST/JSON request of
# `bench layers` on a keep-alive connection with uvloop, under valgrind --tool=callgrind.


class RawHTTPProtocol(HTTPProtocol):
    """One HTTP/1.1 connection: parses requests by hand and runs one RequestResponseCycle each
    (``HTTPProtocol`` does the connection's bookkeeping, flow control and deadline)."""

    __slots__ = ("access_log", "buffer", "phase", "cycle", "body_remaining", "body_received",
                 "decoder", "eof")

    def __init__(self, state: ServerState) -> None:
        super().__init__(state)
        self.access_log = access_log.enabled(self.config)
        self.buffer = bytearray()
        self.phase = READ_HEAD
        self.cycle: RequestResponseCycle | None = None
        self.body_remaining = 0  # Content-Length bytes still to read
        self.body_received = 0  # chunked body bytes read so far (for max_body_size)
        self.decoder: ChunkedDecoder | None = None
        self.eof = False

    # --8<-- [start:data_received]
    def data_received(self, data: bytes) -> None:
        if self.phase is CLOSED:  # lingering close: read and drop until the client closes
            return
        self.buffer += data  # the keep-alive deadline ends: _read_head starts the head's or clears
        self._parse_buffer()
        if self.phase is WAIT_RESPONSE and len(self.buffer) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()  # pipelined requests wait while a response is in flight
    # --8<-- [end:data_received]

    def _parse_buffer(self) -> None:  # read a head or a body, as the phase says
        try:
            if self.phase is READ_HEAD:
                self._read_head()
            elif self.phase is READ_BODY:
                self._read_body()
        except BadRequest as exc:
            self.send_error(exc.status, exc.reason)
        except http1.BadTarget as exc:
            self.send_error(400, str(exc))

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.phase = CLOSED
        if self.cycle is not None:
            self.cycle.disconnect()

    def eof_received(self) -> None:
        # A FIN cannot tell "done sending" from "gone", and apps wait on http.disconnect to stop
        # work for a client that left: like uvicorn we take it as gone (asyncio then closes).
        self.eof = True

    def shutdown(self) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete or self.phase is CLOSED:
            self.phase = CLOSED
            self.transport.close()
        else:
            cycle.framer.keep_alive = False  # says "Connection: close" if the head is not out

    # --8<-- [start:read_head]
    def _read_head(self) -> None:
        config = self.config
        head = take_head(self.buffer, config.max_request_line, config.max_header_size,
                         config.max_headers)
        if head is None:
            if self.deadline.kind is not HEAD:  # the deadline runs from the first byte
                self.deadline.set(HEAD, config.timeout_headers)
            return
        # The idle or head deadline ends. One clear a request, not three (and the cheaper checks
        # in on_response_complete and _next_request): 132.4k -> 129.7k
        if self.deadline.kind is not None:
            self.deadline.clear()
        method, target, version, headers = parse_request_head(
            head, config.max_request_line, config.max_header_size, config.max_headers)
        content_length, chunked, keep_alive, expect_100 = body_framing(version, headers)
        # Origin-form, split as split_target's first case does (a test compares): 129.1k -> 128.4k
        if target[:1] == b"/" and method != "CONNECT" and b"#" not in target:
            raw_path, _, query = target.partition(b"?")
        else:
            raw_path, query = http1.split_target(method, target)
            if method == "CONNECT":  # RFC 9110 §9.3.6: a tunnel is a proxy's job, not ours
                raise BadRequest(501, "CONNECT is not implemented")
        if config.max_body_size is not None and (content_length or 0) > config.max_body_size:
            raise BadRequest(413, "request body too large")
        scope = asgi.http_scope(self, method, version, raw_path, query, headers)
        # at_concurrency_limit only when there is a limit: 129.7k -> 129.1k
        if config.limit_concurrency is not None and asgi.at_concurrency_limit(self.state):
            if self.access_log:
                asgi.log_access(self.client, scope, 503)
            self.send_error(503, "at the concurrency limit")
            return
        has_body = chunked or bool(content_length)
        self.cycle = cycle = RequestResponseCycle(self, scope, keep_alive, expect_100 and has_body)
        cycle.start_task(self.app)
        if has_body:
            self.phase = READ_BODY
            self.decoder = ChunkedDecoder(max_trailer_size=config.max_header_size,
                                          max_trailers=config.max_headers) if chunked else None
            self.body_remaining, self.body_received = content_length or 0, 0
            self._read_body()
        else:
            self.phase = WAIT_RESPONSE
            cycle.more_body = False
    # --8<-- [end:read_head]

    # --8<-- [start:read_body]
    def _read_body(self) -> None:
        buffer = self.buffer
        cycle = self.cycle
        assert cycle is not None
        if self.decoder is None:  # Content-Length: take what is there, up to what is left
            remaining = self.body_remaining
            if len(buffer) <= remaining:  # all body: no slice (with wake guards 128.4k -> 126.7k)
                data = bytes(buffer)
                buffer.clear()
            else:
                data = bytes(buffer[:remaining])
                del buffer[:remaining]
            self.body_remaining = remaining = remaining - len(data)
            done = not remaining
        else:  # chunked: decode no further than HIGH_WATER_LIMIT bytes waiting for the app
            data = self.decoder.feed(buffer, HIGH_WATER_LIMIT - len(cycle.body))
            self.body_received += len(data)
            limit = self.config.max_body_size
            if limit is not None and self.body_received > limit:
                raise BadRequest(413, "request body too large")
            done = self.decoder.done
        if data and not cycle.response_complete:  # after the response, the rest is discarded
            cycle.body = cycle.body + data if cycle.body else data
        if done:
            if self.deadline.kind is not None:  # the body deadline, unless it all came at once
                self.deadline.clear()
            self.phase = WAIT_RESPONSE
            cycle.more_body = False
            if cycle.waiter is not None:  # a receive() waits
                cycle.wake()
            if cycle.response_complete:
                self._next_request()
            return
        if data:
            cycle.wake()
        if len(cycle.body) >= HIGH_WATER_LIMIT:  # the app is behind; the client is not slow
            self.flow.pause_reading()
            self.deadline.clear()
        else:
            self.deadline.set(BODY, self.config.timeout_body)
    # --8<-- [end:read_body]

    def resume_reading(self) -> None:
        """The app wants more body: decode the chunks held back, then read the socket again."""
        if self.phase is READ_BODY and self.decoder is not None and self.buffer:
            self._parse_buffer()
            if self.cycle is not None and len(self.cycle.body) >= HIGH_WATER_LIMIT:
                return
        if self.flow.resume_reading() and self.phase is READ_BODY:
            self.deadline.set(BODY, self.config.timeout_body)

    def on_response_complete(self, cycle: RequestResponseCycle) -> None:
        """Called by the cycle once its last body byte is written."""
        if self.phase is CLOSED:
            return
        framer = cycle.framer
        short = framer.short
        if short:
            logger.error("response body shorter than its Content-Length; closing")
        if not framer.keep_alive or short or self.eof:
            self.close()
        elif self.phase is WAIT_RESPONSE:
            self._next_request()
        else:  # still reading a body the app did not want: keep reading, and drop it
            cycle.body = b""
            self.resume_reading()

    def _next_request(self) -> None:
        self.cycle = self.decoder = None
        self.phase = READ_HEAD
        if self.flow.read_paused:  # pipelined requests filled the buffer
            self.flow.resume_reading()
        if self.buffer:
            self._parse_buffer()  # a pipelined request is already here
        else:
            self.deadline.set(IDLE, self.config.timeout_keep_alive)

    def send_error(self, status: int, reason: str = "") -> None:
        logger.debug("%d to %s: %s", status, self.client, reason)
        cycle = self.cycle
        if self.phase is CLOSED:
            return
        if cycle is None or not cycle.framer.head_sent:
            head = cycle is not None and cycle.scope["method"] == "HEAD"
            self.transport.write(http1.error_response(status, self.state.default_headers_bytes,
                                                      head=head))
        self.close()

    def close(self) -> None:
        """Stop reading requests and close: with TCP, half-close and drop what the client still
        sends for LINGER_SECONDS, lest its late bytes get a reset that destroys our last
        response before it is read (RFC 9112 §9.6: servers close in stages)."""
        self.phase = CLOSED
        self.buffer.clear()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnect()
        if self.transport.can_write_eof() and not self.eof:
            self.transport.write_eof()
            self.flow.resume_reading()
            self.deadline.set(LINGER, LINGER_SECONDS)
        else:
            self.deadline.clear()
            self.transport.close()

    def on_timeout(self, kind: str) -> None:
        if kind is HEAD or kind is BODY:  # RFC 9110 §15.5.9: 408 Request Timeout
            self.send_error(408, f"timed out reading the request {kind}")
        else:  # idle keep-alive or lingering close: close without a word
            self.phase = CLOSED
            super().on_timeout(kind)


# ------------------------------------------------------------------------------ ASGI interface


class RequestResponseCycle(asgi.RequestResponseCycle):
    """One request and its response: ``send()`` and the two hooks of ``receive()`` (the base
    class holds the body, ``receive()`` and ``run_asgi``, and answers the app's failures)."""

    __slots__ = ("transport", "flow", "framer")
    protocol: RawHTTPProtocol

    def __init__(self, protocol: RawHTTPProtocol, scope: Scope, keep_alive: bool,
                 expect_100: bool) -> None:
        super().__init__(protocol, scope, expect_100)
        self.transport, self.flow = protocol.transport, protocol.flow
        self.framer = http1.ResponseFramer(scope["method"] == "HEAD",
                                           scope["http_version"] == "1.0", keep_alive)

    def write_continue(self) -> None:
        if not self.framer.head_sent:  # never to HTTP/1.0: see body_framing
            self.transport.write(http1.CONTINUE_100)

    def resume_reading(self) -> None:
        self.protocol.resume_reading()  # may decode held-back chunks into self.body

    # --8<-- [start:send]
    async def send(self, message: Message) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            raise asgi.ClientDisconnected("the client has disconnected")
        kind = message["type"]
        framer = self.framer
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', got {kind!r}")
            # Checked now, before any byte is out (ResponseError); it leaves with the first body.
            state = self.protocol.state
            framer.start(message["status"], message.get("headers", ()),
                         state.default_headers, state.default_headers_bytes)
            self.response_started = True
            if self.protocol.access_log:
                asgi.log_access(self.protocol.client, self.scope, framer.status)
            return
        if kind != "http.response.body" or self.response_complete:
            raise RuntimeError(f"unexpected ASGI message {kind!r} after the response started")
        more_body = message.get("more_body", False)
        protocol = self.protocol
        if not framer.head_sent and protocol.phase is READ_BODY and http1.unread_body_closes(
                self.expect_100, None if protocol.decoder else protocol.body_remaining):
            framer.keep_alive = False  # RFC 9112 §9.3: the rest is too much, or may never come
        data = framer.body(message.get("body", b""), more_body)
        if data:
            self.transport.write(data)
        if not more_body:
            self.response_complete = True
            if self.waiter is not None:  # a receive() waits for the disconnect
                self.wake()
            self.protocol.on_response_complete(self)
    # --8<-- [end:send]


# ------------------------------------------------------------------------------------- serve


async def serve(app: ASGIApp, config: Config, *, sock: socket.socket | None = None,
                ready: Callable[[tuple[str, int]], object] | None = None,
                shutdown: asyncio.Event | None = None) -> None:
    """Serve ``app`` until ``shutdown`` is set (or SIGINT/SIGTERM); see ``serve_protocol``."""
    await serve_protocol(RawHTTPProtocol, app, config, sock=sock, ready=ready,
                         shutdown=shutdown, name="toy-raw")


# --------------------------------------------------------------------------------------- run


def run(app: ASGIApp, config: Config) -> None:
    """Block serving ``app`` on the configured event loop (uvloop when available)."""
    run_server(serve, app, config)
