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

WebSocket: a request asking ``Upgrade: websocket`` goes to ``websocket_protocol.upgrade``, which
hands the connection to a ``WSProtocol`` speaking the project's own RFC 6455
(``toyservers.websocket``).

ASGI extensions, through the shared cycle: ``tls``, early hints (103) and response trailers
(to a client that said ``TE: trailers``: ``toyservers.asgi_extensions``), pathsend and
zerocopysend (``toyservers.file_response``).

Deliberately left out: the upgrade to h2c, request trailers reaching the app (they
are checked and dropped: ASGI has no event for them), decoding any transfer coding but chunked
(others get 501), the CONNECT tunnel, answering a client that half-closed its side (its FIN
counts as a disconnect, as in uvicorn), ``http.response.debug`` (asgiref: "not meant to be
used in production ... ASGI servers should not implement it"), and ``sendfile(2)`` under TLS
and before trailers (a file body is read in 64 KiB pieces there). Proxy headers are
read once for every server, in ``asgi.http_scope`` (``toyservers.proxy``).

Spec: RFC 9112 §2.2 (message parsing), §3 (request line), §5 (field lines), §6 (message body
length), §7.1 (chunked coding), §9 (connection management); RFC 9110 §5.5 and §5.6.2 (field
values, tokens), §10.1.1 (Expect), §15.2 (1xx); ASGI 3.0 HTTP connection scope and events,
spec version 2.4 (https://asgi.readthedocs.io/en/latest/specs/www.html), and asgiref's
extensions (trailers: RFC 9112 §7.1.2; early hints: RFC 8297; Path Send; Zero Copy Send).

Compare with: uvicorn/protocols/http/httptools_impl.py (the same skeleton; there, llhttp does the
parsing this module does by hand).
"""

from __future__ import annotations

import logging
from typing import Any

from toyservers import asgi, http1, websocket_protocol
from toyservers._server import run_server, serve_protocol
from toyservers._types import ASGIApp, Scope
from toyservers.config import Config
from toyservers.http1 import FRAGMENT, HIGH_WATER_LIMIT
from toyservers.http1_cycle import HTTP1Protocol, RequestResponseCycle
from toyservers.http1_parser import (
    BadRequest,
    ChunkedDecoder,
    body_framing,
    parse_request_head,
    split_head,
)
from toyservers.state import ServerState

logger = logging.getLogger("toyservers.error")

# --- Constants ------------------------------------------------------------------------------------

# --8<-- [start:constants]
# Connection phases: reading a head; reading a body; body read, response in flight; closed.
READ_HEAD, READ_BODY, WAIT_RESPONSE, CLOSED = "read head", "read body", "wait", "closed"
# --8<-- [end:constants]


# --- Protocol interface ---------------------------------------------------------------------------
# Counts such as "132.4k -> 129.7k" beside a speed trick: instructions per POST/JSON request of
# `bench layers` on a keep-alive connection with uvloop, under valgrind --tool=callgrind.


class RawHTTPProtocol(HTTP1Protocol):
    """One HTTP/1.1 connection: parses requests by hand and runs one RequestResponseCycle each
    (``HTTP1Protocol``: the cycle and the close path; ``HTTPProtocol``: the bookkeeping, flow
    control and deadline)."""

    __slots__ = ("buffer", "phase", "body_remaining", "body_received", "decoder", "eof")

    def __init__(self, state: ServerState) -> None:
        super().__init__(state)
        self.buffer = b""  # received, not parsed yet: bytes (see data_received)
        self.phase = READ_HEAD
        self.body_remaining = 0  # Content-Length bytes still to read
        self.body_received = 0  # chunked body bytes read so far (for max_body_size)
        self.decoder: ChunkedDecoder | None = None
        self.eof = False

    # --8<-- [start:data_received]
    def data_received(self, data: bytes) -> None:
        if self.phase is CLOSED:  # the connection is ending: no further request is read
            return
        # bytes: b"" + data is data itself, and head and body are slices of it: 109.6k -> 106.3k
        self.buffer += data  # the keep-alive deadline ends: _read_head starts the head's or clears
        self._parse_buffer()
        if len(self.buffer) > HIGH_WATER_LIMIT and self.phase is WAIT_RESPONSE:
            self.flow.pause_reading()  # pipelined requests wait while a response is in flight
    # --8<-- [end:data_received]

    def _parse_buffer(self) -> None:  # read a head or a body, as the phase says
        try:
            if self.phase is READ_HEAD:
                self._read_head()
            elif self.phase is READ_BODY:
                self._read_body()
        except BadRequest as exc:
            logger.debug("%d to %s: %s", exc.status, self.client, exc.reason)
            self.send_error(exc.status)
        except http1.BadTarget as exc:
            logger.debug("400 to %s: %s", self.client, exc)
            self.send_error(400)

    def eof_received(self) -> None:
        # A FIN cannot tell "done sending" from "gone", and apps wait on http.disconnect to stop
        # work for a client that left: like uvicorn we take it as gone (asyncio then closes).
        self.eof = True

    def shutdown(self) -> None:
        if self.phase is CLOSED:
            self.transport.close()
        else:
            super().shutdown()  # a head not sent yet says "Connection: close"

    # --8<-- [start:read_head]
    def _read_head(self) -> None:
        config = self.config
        head, self.buffer = split_head(self.buffer, config.max_request_line,
                                       config.max_header_size, config.max_headers)
        if head is None:  # more is owed (reading may have paused on pipelined requests)
            self.flow.resume_reading()
            if self.deadline.kind != "head":  # the deadline runs from the first byte
                self.deadline.set("head", config.timeout_headers)
            return
        # The idle or head deadline ends. One clear a request, not three (and the cheaper checks
        # in on_response_complete and _next_request): 132.4k -> 129.7k
        if self.deadline.kind is not None:
            self.deadline.clear()
        method, target, version, headers = parse_request_head(
            head, config.max_request_line, config.max_header_size, config.max_headers)
        content_length, chunked, keep_alive, expect_100, upgrade, trailers = body_framing(
            version, headers)
        # Origin-form, split as split_target's first case does (a test compares): 129.1k -> 128.4k
        if target[:1] == b"/" and method != "CONNECT" and FRAGMENT not in target:
            raw_path, _, query = target.partition(b"?")
        else:
            raw_path, query = http1.split_target(method, target)
            if method == "CONNECT":  # RFC 9110 §9.3.6: a tunnel is a proxy's job, not ours
                raise BadRequest(501, "CONNECT is not implemented")
        if config.max_body_size is not None and (content_length or 0) > config.max_body_size:
            raise BadRequest(413, "request body too large")
        scope = asgi.http_scope(self, method, version, raw_path, query, headers, trailers)
        # at_concurrency_limit only when there is a limit: 129.7k -> 129.1k
        if config.limit_concurrency is not None and asgi.at_concurrency_limit(self.state):
            if self.access_log:
                asgi.log_access(self.client, scope, 503)
            self.send_error(503)
            return
        if upgrade and self.handle_upgrade(scope, self.buffer):
            return
        has_body = chunked or bool(content_length)
        framer = http1.ResponseFramer(method == "HEAD", version == "1.0", keep_alive)
        self.cycle = cycle = RequestResponseCycle(self, scope, framer, expect_100 and has_body)
        cycle.start_task(self.app)
        if has_body:
            self.phase = READ_BODY
            if chunked:  # (else decoder is None: _next_request, __init__)
                self.decoder, self.body_received = ChunkedDecoder(
                    max_trailer_size=config.max_header_size, max_trailers=config.max_headers), 0
            else:
                self.body_remaining = content_length or 0
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
            # Not BodyReader (toy-wsgi's): its object and feed() call cost 137.0k -> 140.3k a
            # request. A slice as long as the bytes is the bytes object itself: no copy.
            remaining = self.body_remaining
            data, self.buffer = buffer[:remaining], buffer[remaining:]
            self.body_remaining = remaining = remaining - len(data)
            done = not remaining
        else:  # chunked: decode no further than HIGH_WATER_LIMIT bytes waiting for the app
            pending = bytearray(buffer)  # the decoder consumes a bytearray
            data = self.decoder.feed(pending, HIGH_WATER_LIMIT - len(cycle.body))
            self.buffer = bytes(pending)
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
        else:  # the client owes the rest (reading may have paused on pipelined requests)
            self.flow.resume_reading()
            self.deadline.set("body", self.config.timeout_body)
    # --8<-- [end:read_body]

    def resume_reading(self) -> None:
        """The app wants more body: decode the chunks held back, then read the socket again."""
        if self.phase is READ_BODY and self.decoder is not None and self.buffer:
            self._parse_buffer()
            if self.cycle is not None and len(self.cycle.body) >= HIGH_WATER_LIMIT:
                return
        if self.flow.resume_reading() and self.phase is READ_BODY:
            self.deadline.set("body", self.config.timeout_body)

    def stop_reading(self) -> None:
        self.phase = CLOSED
        self.buffer = b""

    def handle_upgrade(self, scope: Scope, data: bytes) -> bool:
        """A WebSocket handshake takes the connection, ``data`` (the bytes after it) too: True
        (``websocket_protocol.upgrade``: our RFC 6455 module, unless ``--ws``). Else HTTP."""
        return websocket_protocol.upgrade(self, scope, data, auto="toyservers")

    def on_timeout(self, kind: str) -> None:
        if kind == "idle":
            self.phase = CLOSED
        super().on_timeout(kind)  # idle: close silently; a slow head or body: 408

    # --- ASGI interface ---------------------------------------------------------------------------
    # The shared RequestResponseCycle's hooks (toyservers.http1_cycle); its framer is
    # http1.ResponseFramer, the response framed by hand.

    def on_response_complete(self) -> None:
        """Close, read the next request, or read and drop the rest of an unread body."""
        cycle = self.cycle
        if self.phase is CLOSED or cycle is None:
            return
        if not cycle.framer.keep_alive or self.eof:
            self.stop_reading()
            self.lingering_close()
        elif self.phase is WAIT_RESPONSE:
            self._next_request()
        else:  # still reading a body the app did not want: keep reading, and drop it
            cycle.body = b""
            self.resume_reading()

    def unread_body(self) -> int | None:
        return None if self.decoder is not None else self.body_remaining

    def _next_request(self) -> None:
        self.cycle = self.decoder = None
        self.phase = READ_HEAD
        if self.flow.read_paused and len(self.buffer) <= HIGH_WATER_LIMIT:  # (pipelined ones:
            self.flow.resume_reading()  # one read a request served would grow it without end)
        if self.buffer:
            self._parse_buffer()  # a pipelined request is already here
        else:
            self.deadline.set("idle", self.config.timeout_keep_alive)


# --- Serving --------------------------------------------------------------------------------------


async def serve(app: ASGIApp, config: Config, **options: Any) -> None:
    """Serve ``app`` until ``shutdown`` is set (or SIGINT/SIGTERM). The options (``sock``,
    ``ready``, ``shutdown``, ``stop_accepting``) and the errors are ``serve_protocol``'s."""
    await serve_protocol(RawHTTPProtocol, app, config, name="toy-raw", **options)


def run(app: ASGIApp, config: Config) -> None:
    """Block serving ``app`` on the configured event loop (uvloop when available)."""
    run_server(serve, app, config)
