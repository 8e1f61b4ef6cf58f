"""The one HTTP/1.1 request cycle and close path of the asyncio toy servers.

toy-raw (parsed by hand), toy-httptools (llhttp) and toy-h11 (h11) differ in how they parse
and move bytes; how an app's response reaches the wire, and how a connection ends on an
error, is written here once:

- ``RequestResponseCycle``: one request and its response, over a *framer* that turns the
  app's messages into bytes (``http1.ResponseFramer`` by hand, or ``h11_checks.H11Framer``
  through h11). ``send()`` checks the messages' order, logs the access line, decides on the
  body the client has not sent yet (RFC 9112 §9.3), waits while the client reads slowly
  (``FlowControl.drain``), writes, and ends the response. toy-anyio runs the same ``send()``
  into an outbox and awaits the write itself. The ASGI extensions, each off the hot path in
  a method of its own: early hints go out as 103 responses before the response
  (``asgi_extensions``); a response whose start promised trailers ends with its
  ``http.response.trailers`` (a chunked trailer section where the client said ``TE:
  trailers``); a file body (pathsend, zerocopysend: ``toyservers.file_response``) goes by
  ``os.sendfile`` between the head and the chunk lines on a plain socket, on uvloop and on
  asyncio's loop alike, else (under TLS, and before trailers) by the read loop.
- ``HTTP1Protocol``: the base of the three servers' protocol classes, with the one error
  answer, ``send_error(status)`` (HEAD-aware, then one lingering close: RFC 9112 §9.6), the
  deadlines' answers (408 for a slow head or body: RFC 9110 §15.5.9), and ``shutdown()``
  (``GracefulShutdown``, toy-anyio's too: ``close_idle()`` a connection with no response in
  flight, closed now or, under ``idle_close_on_response``, after its next response or at
  its idle deadline). A
  server implements ``on_response_complete()`` (the response is out: close, or read the next
  request), ``resume_reading()`` (the app wants more body), ``unread_body()`` (the declared
  request body still to come) and, where it keeps parser state, ``stop_reading()``.

Spec: ASGI HTTP spec 2.4 (https://asgi.readthedocs.io/en/latest/specs/www.html): the
response events, "send() on a closed connection" raising an ``OSError`` subclass; RFC 9112
§9.3 (persistence), §9.6 (tear-down), §7.1.2 (trailer section); RFC 9110 §10.1.1 (Expect),
§15.5.9 (408); asgiref docs/extensions.rst (HTTP Trailers, Early Hints), RFC 8297 (103).

Compare with: uvicorn/protocols/http/httptools_impl.py and h11_impl.py (``RequestResponseCycle
.send``, ``send_400_response``, ``on_response_complete``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from toyservers import access_log, asgi, asgi_extensions, file_response, http1
from toyservers._types import Headers, Message, Scope
from toyservers.asgi import ClientDisconnected, log_access
from toyservers.config import Config
from toyservers.http1 import HIGH_WATER_LIMIT
from toyservers.protocol import HTTPProtocol
from toyservers.state import ServerState


class Framer(Protocol):
    """What the cycle needs of a response framer (``http1.ResponseFramer``,
    ``h11_checks.H11Framer``): check and hold the head, then bytes for each body message."""

    keep_alive: bool  # False once this response must end the connection
    head_sent: bool  # the head left with the first body message
    head_request: bool  # the request was HEAD: no content (RFC 9110 §9.3.2)
    no_body: bool  # HEAD, 204 or 304: the response has no content (RFC 9110 §6.4.1)
    status: int
    remaining: int | None  # Content-Length bytes still owed, when the framer counts them

    def start(self, status: object, headers: Iterable[tuple[bytes, bytes]],
              default_headers: Headers, framed_defaults: bytes | None = None) -> None: ...

    def body(self, body: bytes, more_body: bool) -> list[bytes]: ...

    @property
    def short(self) -> bool: ...

    @property
    def http10(self) -> bool: ...  # the client speaks HTTP/1.0: no 1xx to it (RFC 9110 §15.2)

    def continue_bytes(self) -> bytes: ...

    def expect_trailers(self) -> None: ...

    def end(self, lines: list[bytes]) -> list[bytes]: ...


def unread_body_closes(expect_100: bool, rest: int | None) -> bool:
    """Must a response framed before the request body has all come end the connection?

    RFC 9112 §9.3: a connection persists only when every message on it is read to its end, so
    the server reads the rest and drops it, when the rest is known and small: ``rest`` is the
    declared bytes still to come (None for a chunked body: its size is unknown). True, and so
    ``Connection: close``, when ``rest`` is None or over ``HIGH_WATER_LIMIT``, or when the
    client still waits for a 100 (Continue) never sent (RFC 9110 §10.1.1: it may never send).
    """
    return expect_100 or rest is None or rest > HIGH_WATER_LIMIT


class ErrorAnswerer(asgi.ServerProtocol, Protocol):
    """What ``error_answer`` needs of a connection, besides the ASGI side's."""

    access_log: bool


def error_answer(connection: ErrorAnswerer, cycle: RequestResponseCycle | None,
                 status: int) -> bytes:
    """The whole error response for ``status`` (``http1.error_response``: HEAD-aware, RFC 9110
    §9.3.2, with ``Connection: close``), logged like any response; b"" once a byte of
    ``cycle``'s response is out: no valid answer is left, only closing. toy-anyio writes it
    in its own I/O model; ``HTTP1Protocol.send_error`` here."""
    if cycle is not None and cycle.framer.head_sent:
        return b""
    if cycle is not None and connection.access_log and not cycle.response_started:
        log_access(connection.client, cycle.scope, status)
    head = cycle is not None and cycle.framer.head_request
    return http1.error_response(status, connection.state.default_headers_bytes, head=head)


class Stoppable(Protocol):
    """What ``GracefulShutdown`` needs of the connection it is mixed into."""

    cycle: RequestResponseCycle | None  # the request whose response goes out, or None
    config: Config
    closing: bool  # the next response is the last: it says Connection: close

    def close(self) -> None: ...
    def close_idle(self) -> None: ...


# --- Protocol interface ---------------------------------------------------------------------------


class GracefulShutdown:
    """``protocol.shutdown()`` of an HTTP/1.1 connection, the same on asyncio
    (``HTTP1Protocol``) and on anyio (``anyio_serving.StreamProtocol``): this mixin decides
    when to close, each base closes by its own means (``close()``: no answer, just close)."""

    __slots__ = ()

    def shutdown(self: Stoppable) -> None:
        """Close now if no response is in flight (``close_idle``), else after it: a head not
        sent yet says ``Connection: close`` (RFC 9112 §9.6)."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.close_idle()
        else:
            cycle.framer.keep_alive = False

    # --8<-- [start:close_idle]
    def close_idle(self: Stoppable) -> None:
        """Graceful shutdown of a connection with no response in flight: close it now, as
        uvicorn does; or, under ``idle_close_on_response``, leave it open until its next
        response, which says ``Connection: close`` (``closing``), or until its idle deadline.

        Closing at once races a client that reuses the connection at that moment: a request
        sent as the server closes meets a closed connection, and a proxy (nginx) does not
        retry a POST that was sent (RFC 9110 §9.2.2: only idempotent requests may be
        retried). A proxy whose own idle timeout is the shorter one (nginx's upstream
        ``keepalive_timeout``) closes the connection first; the server never does under it.
        """
        if self.config.idle_close_on_response:
            self.closing = True
        else:
            self.close()
    # --8<-- [end:close_idle]


class HTTP1Protocol(GracefulShutdown, HTTPProtocol):
    """The base of an HTTP/1.1 protocol class: ``cycle`` (the request whose response goes
    out, or None) and the one close path. See the module docstring for what a subclass adds."""

    __slots__ = ("cycle", "access_log", "closing")

    def __init__(self, state: ServerState) -> None:
        super().__init__(state)
        self.cycle: RequestResponseCycle | None = None
        self.access_log = access_log.enabled(state.config)
        self.closing = False  # shutting down: the next response is the last (close_idle)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.cycle is not None:
            self.cycle.disconnect()  # receive() says http.disconnect, send() raises
        self.stop_reading()

    # --8<-- [start:send_error]
    def send_error(self, status: int) -> None:
        """Answer ``status`` with ``Connection: close`` and close in stages
        (``lingering_close``); when part of a response is on the wire already, no valid answer
        is left: just close. The app still running sees ``http.disconnect``."""
        self.stop_reading()
        cycle = self.cycle
        if cycle is not None:
            cycle.disconnect()
        if self.transport.is_closing():
            return
        if answer := error_answer(self, cycle, status):
            self.transport.write(answer)
            self.lingering_close()  # a client still sending reads the answer, not a reset
        else:
            self.transport.close()
    # --8<-- [end:send_error]

    def stop_reading(self) -> None:
        """Parse no further request: the connection is ending, or lost (a subclass with
        parser state drops it here)."""

    def on_timeout(self, kind: str) -> None:
        """``idle``: close silently (RFC 9112 §9.5). A head or body that came too slowly gets
        408 (RFC 9110 §15.5.9), then the connection closes."""
        if kind == "idle":
            super().on_timeout(kind)
        else:
            self.send_error(408)

    def close(self) -> None:
        """Close now, no answer (``close_idle``)."""
        self.transport.close()

    def on_response_complete(self) -> None:
        """The last body byte of ``cycle``'s response is written: close, or go on to the next
        request (after reading and dropping what is left of an unread body)."""
        raise NotImplementedError

    def resume_reading(self) -> None:
        """The app's ``receive()`` wants more body than has come: let the client send it."""
        raise NotImplementedError

    def unread_body(self) -> int | None:
        """Request body bytes declared (Content-Length) and not received yet; None when the
        body is chunked (its size is unknown)."""
        raise NotImplementedError


# --- ASGI interface -------------------------------------------------------------------------------


class RequestResponseCycle(asgi.RequestResponseCycle):
    """One request and its response on an HTTP/1.1 connection (``asgi.RequestResponseCycle``
    holds the request body, ``receive()``, ``run_asgi`` and the failure policy); the ASGI
    extensions' messages go to methods of their own. ``section`` and ``body_complete`` are set
    by ``promise_trailers`` and read only after it (one store in ``__init__``, not three)."""

    __slots__ = ("framer", "trailers", "section", "body_complete")
    protocol: HTTP1Protocol

    def __init__(self, protocol: HTTP1Protocol, scope: Scope, framer: Framer,
                 expect_100: bool) -> None:
        # the base's __init__ named, not super(): 0.6k instructions a request less (callgrind)
        asgi.RequestResponseCycle.__init__(self, protocol, scope, expect_100)
        if protocol.closing:  # shutdown began (close_idle): this response is the last
            framer.keep_alive = False
        self.framer = framer
        self.trailers: list[bytes] | None = None  # the trailer lines, once trailers are promised

    def write_continue(self) -> None:
        if data := self.framer.continue_bytes():
            self.protocol.transport.write(data)

    def resume_reading(self) -> None:
        self.protocol.resume_reading()

    def send_error(self, status: int) -> None:
        self.protocol.send_error(status)

    # --8<-- [start:send]
    async def send(self, message: Message) -> None:
        """Frame ``message`` (``framer``: the head leaves with the first body, so a small
        response is one write) and write it, once the client has read what was written before
        (backpressure). Sets ``response_started`` and ``response_complete``.

        Raises ClientDisconnected once the client is gone, http1.ResponseError for what
        ``check_response`` refuses or a body that breaks its Content-Length, and RuntimeError
        for a message out of order. (One method, not a framing helper it calls: the call cost
        1.0k of 126.1k instructions a request on toy-httptools, callgrind.) The extensions'
        messages go to methods of their own, off this path."""
        protocol = self.protocol
        if protocol.flow.write_paused and not self.disconnected:
            await protocol.flow.drain()
        if self.disconnected:
            raise ClientDisconnected("the client has disconnected")
        kind = message["type"]
        framer = self.framer
        if not self.response_started:
            if kind != "http.response.start":
                if kind == "http.response.early_hint":
                    return self.send_early_hint(message)
                raise RuntimeError(f"expected 'http.response.start', got {kind!r}")
            # Checked before anything is marked or written: a mistake here still gets a 500.
            state = protocol.state
            framer.start(message["status"], message.get("headers", ()),
                         state.default_headers, state.default_headers_bytes)
            if "trailers" in message and message["trailers"]:
                self.promise_trailers()
            self.response_started = True
            if protocol.access_log:
                log_access(protocol.client, self.scope, framer.status)
            return
        if kind != "http.response.body" or self.response_complete:
            if not self.response_complete:  # the extensions, off the common path
                if kind in file_response.KINDS:
                    return await self.send_file(message)
                if kind == "http.response.trailers" and self.trailers is not None:
                    return self.send_trailers(message)
            raise RuntimeError(f"unexpected ASGI message {kind!r} after the response started")
        more_body = message.get("more_body", False)
        if self.more_body and not framer.head_sent and unread_body_closes(
                self.expect_100, protocol.unread_body()):
            framer.keep_alive = False  # RFC 9112 §9.3: the rest is too much, or may never come
        if self.trailers is not None:  # the response ends with its trailers
            return self.send_body_before_trailers(message.get("body", b""), more_body)
        pieces = framer.body(message.get("body", b""), more_body)
        if not more_body:
            # RFC 9112 §6.3: the client would wait for bytes never sent (the property is
            # called only when bytes are owed)
            if framer.remaining and framer.short:
                raise http1.ResponseError("response body shorter than its Content-Length")
            self.response_complete = True
            if self.waiter is not None:  # a receive() waits for the disconnect
                self.wake()
        protocol.transport.writelines(pieces)  # one writev; empty pieces are skipped
        if not more_body:
            protocol.on_response_complete()
    # --8<-- [end:send]

    def send_early_hint(self, message: Message) -> None:
        """``http.response.early_hint`` (any number, before ``http.response.start``:
        ``asgi_extensions``): a 103 (Early Hints) interim response, one Link field a link (RFC
        8297 §2), written as bytes by every framer (h11 would take a 1xx for the answer to
        ``Expect: 100-continue`` and never send the 100). Nothing goes to an HTTP/1.0 client,
        which is not offered the extension (RFC 9110 §15.2). Raises http1.ResponseError."""
        links = asgi_extensions.check_links(message.get("links", ()))
        if not self.framer.http10:
            self.protocol.transport.write(asgi_extensions.early_hints(links))

    def promise_trailers(self) -> None:
        """``trailers: True`` in ``http.response.start``: the response ends with its
        ``http.response.trailers``. Where the extension was offered (the client said ``TE:
        trailers``: ``asgi_extensions.offered``) and the response has content, they make its
        trailer section (``framer.expect_trailers``); elsewhere they are checked and dropped,
        as hypercorn and uvicorn do. No content (HEAD, 204, 304), no trailers: RFC 9110 §6.4.1."""
        self.trailers, self.body_complete = [], False
        self.section = asgi_extensions.TRAILERS in (self.scope.get("extensions") or ()) and not (
            self.framer.no_body)
        if self.section:
            self.framer.expect_trailers()

    def send_body_before_trailers(self, body: bytes, more_body: bool) -> None:
        """An ``http.response.body`` of a response that ends with trailers: framed as if more
        came when a trailer section will end the message (``end`` frames it), else as usual."""
        if self.body_complete:
            raise RuntimeError("unexpected 'http.response.body' after the last one")
        framer = self.framer
        pieces = framer.body(body, more_body or self.section)
        if not more_body and framer.remaining and framer.short:
            raise http1.ResponseError("response body shorter than its Content-Length")
        self.body_complete = not more_body
        self.protocol.transport.writelines(pieces)

    def send_trailers(self, message: Message) -> None:
        """``http.response.trailers`` after the last body: its fields gathered
        (``asgi_extensions.check_trailers``: http1.ResponseError for a field a trailer may not
        carry: run_asgi then closes the connection, the response cut short) until one says no
        ``more_trailers``; then the trailer section, and the response is complete."""
        if not self.body_complete:
            raise RuntimeError("'http.response.trailers' before the last 'http.response.body'")
        assert self.trailers is not None  # promised
        self.trailers += asgi_extensions.check_trailers(message.get("headers", ()))
        if message.get("more_trailers", False):
            return
        self.response_complete = True
        self.wake()
        self.protocol.transport.writelines(self.framer.end(self.trailers) if self.section else [])
        self.protocol.on_response_complete()

    async def send_file(self, message: Message) -> None:
        """``http.response.pathsend`` or ``.zerocopysend`` (``toyservers.file_response``):
        ``sendfile(2)`` where ``file_response.can_sendfile`` says the transport allows it, else
        the read loop through ``send``. Raises what ``file_response.open_body`` and
        ``check_length`` raise (before a byte is written) and what ``send`` raises."""
        body = file_response.open_body(message)
        sent = 0
        try:
            file_response.check_length(self.framer, body)
            # a response ending with trailers: the read loop, its pieces framed as any body
            if self.trailers is None and not self.framer.no_body and file_response.can_sendfile(
                    self.protocol.transport):
                sent = await self.sendfile(body)
            else:
                sent = await file_response.send_by_reading(self.send, body, self.framer.no_body)
        finally:
            body.done(sent)

    # --8<-- [start:sendfile]
    async def sendfile(self, body: file_response.FileBody) -> int:
        """Write the head (if not out yet) and the framing, and let the kernel copy the file
        into the socket between them (``file_response.sendfile``: ``os.sendfile`` once the
        transport's buffer is empty). All bytes are framed before one is written, so a
        Content-Length the file breaks is refused while a 500 can still go. Returns the bytes
        sent. Raises ClientDisconnected, http1.ResponseError."""
        protocol, framer = self.protocol, self.framer
        if self.more_body and not framer.head_sent and unread_body_closes(
                self.expect_100, protocol.unread_body()):
            framer.keep_alive = False  # RFC 9112 §9.3, as in send()
        pieces: list[bytes | file_response.FileBody] = list(framer.body(b"", True))
        pieces += file_response.file_pieces(framer, body)
        if not body.more_body:
            pieces += framer.body(b"", False)
        at = pieces.index(body) if body in pieces else len(pieces)
        transport = protocol.transport
        transport.writelines(pieces[:at])  # type: ignore[arg-type]
        sent = 0
        if at < len(pieces):
            try:
                sent = await file_response.sendfile(transport, protocol.flow, body)
            except ConnectionError as exc:  # a reset, or the connection closed meanwhile
                self.disconnect()
                transport.close()
                raise ClientDisconnected("the client has disconnected") from exc
            if sent < body.count:  # the file shrank: the framing promised more
                transport.close()
                raise http1.ResponseError(f"file ended {body.count - sent} bytes early")
        if not body.more_body:
            self.response_complete = True
            if self.waiter is not None:
                self.wake()
        transport.writelines(pieces[at + 1:])  # type: ignore[arg-type]
        if not body.more_body:
            protocol.on_response_complete()
        return sent
    # --8<-- [end:sendfile]
