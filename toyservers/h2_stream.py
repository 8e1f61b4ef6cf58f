"""One HTTP/2 stream of toy-h2 as an ASGI ``http`` request: its ``RequestResponseCycle``.

toy-h2's connection (``toyservers.h2_server.H2Protocol``) turns h2's events into streams; each
stream is one request with its own cycle, here, and its app in its own Task. ``receive`` is the
shared one (``toyservers.asgi``), and gives the stream's flow-control credit back (WINDOW_UPDATE)
as the app takes the body, so a slow app holds the client back; ``send`` frames the app's
messages through h2 (the rules, sans-IO, in ``toyservers.http2``) and sends DATA no faster than
the client's windows allow, waiting for its WINDOW_UPDATE, at most ``timeout_body`` seconds.
A stream ends on its own (RST_STREAM), the connection going on: RFC 9113 §5.4.2.

Spec: RFC 9113 §5.1 (stream states), §5.2 and §6.9 (flow control), §8.1 (HTTP message
framing), §8.1.1 (malformed messages); ASGI HTTP spec 2.4 and its HTTP Trailers, Early Hints
(RFC 8297), Path Send and Zero Copy Send extensions.

Compare with: hypercorn/protocol/http_stream.py (``HTTPStream``) beside hypercorn/protocol/h2.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

import h2.connection
import h2.exceptions
from h2.errors import ErrorCodes

from toyservers import asgi, file_response, http2
from toyservers._types import Headers, Message, Scope
from toyservers.asgi import ClientDisconnected, log_access
from toyservers.h2_websocket_timers import StreamTimers


class Stream(Protocol):
    """What the connection asks of each of its streams: a request's ``RequestResponseCycle``
    (here) or a WebSocket's (``h2_websocket.WebSocketStream``). ``on_data``: DATA for it, True
    when the stream gives the credit back itself (else the connection does, at once)."""

    more_body: bool  # the client may still send body that an app waits for (timeout_body)

    def on_data(self, data: bytes, length: int) -> bool: ...
    def on_end(self) -> None: ...
    def wake_sender(self) -> None: ...
    def disconnect(self) -> None: ...
    def shutdown(self) -> None: ...


class StreamOwner(asgi.ServerProtocol, Protocol):
    """What a stream's cycle needs of its connection (``h2_server.H2Protocol``)."""

    conn: h2.connection.H2Connection
    streams: dict[int, Stream]
    budget: http2.FloodBudget
    access_log: bool
    app: Any
    config: Any
    deadline: Any
    flow: Any
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    @property
    def ws_timers(self) -> StreamTimers: ...  # its WebSocket streams' (made at the first)

    def flush(self) -> None: ...

    def on_response_complete(self) -> None: ...


class RequestResponseCycle(asgi.RequestResponseCycle):
    """One stream: ``send`` frames through h2 within the peer's windows; ``receive`` (the
    base's) gives the stream's credit back as the app takes the body."""

    protocol: StreamOwner

    def __init__(self, protocol: StreamOwner, scope: Scope, stream_id: int,
                 expect_100: bool) -> None:
        super().__init__(protocol, scope, expect_100)
        self.conn, self.stream_id = protocol.conn, stream_id
        self.credit = 0  # bytes of body received, not yet granted back (WINDOW_UPDATE)
        self.body_size = 0
        self.content_length: int | None = None  # the request's, DATA is checked against
        self.response = http2.Response(scope["method"])
        self.window: asyncio.Future[None] | None = None  # send() waiting for credit

    @classmethod
    def open(cls, protocol: StreamOwner, sid: int, scope: Scope, more_body: bool,
             run: bool = True) -> RequestResponseCycle:
        """Register stream ``sid``'s cycle and start its app if ``run``."""
        expect = more_body and http2.expects_continue(scope["headers"])
        protocol.streams[sid] = cycle = cls(protocol, scope, sid, expect)
        cycle.more_body = more_body
        if more_body or protocol.deadline.kind == "idle":  # no longer idle; see on_timeout
            protocol.deadline.set("body", protocol.config.timeout_body)
        if run:
            cycle.start_task(protocol.app)
        return cycle

    def on_data(self, data: bytes, length: int) -> bool:
        """Body for the app (``length``: its flow-controlled size); the credit goes back as the
        app takes it. False when nobody will read it: the connection gives it back."""
        if self.response_complete or self.disconnected:
            return False
        self.body_size += len(data)
        limit = self.protocol.config.max_body_size
        if self.content_length is not None and self.body_size > self.content_length:
            self.malformed()  # more than it declared
        elif limit is not None and self.body_size > limit:
            self.send_error(413)  # RFC 9110 §15.5.14
        else:
            self.body += data
            self.credit += length
            # the body deadline moves on with each DATA frame
            self.protocol.deadline.set("body", self.protocol.config.timeout_body)
            self.wake()
            return True
        return False

    def shutdown(self) -> None:
        """Graceful shutdown: a request in flight finishes (the connection's GOAWAY says so)."""

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
        """``http.response.early_hint`` (a 103 before the start), ``.start``, ``.body``,
        ``.trailers``, ``.pathsend`` and ``.zerocopysend`` (``toyservers.file_response``: a
        read loop). Raises ClientDisconnected once the stream is gone, http1.ResponseError for
        fields ``check_response`` refuses, and RuntimeError for a message out of order."""
        protocol = self.protocol
        if protocol.flow.write_paused and not self.disconnected:
            await protocol.flow.drain()
        if self.disconnected:
            raise ClientDisconnected
        kind = message["type"]
        if not self.response_started:
            if kind == "http.response.early_hint":  # its own HEADERS frame
                self.conn.send_headers(self.stream_id, self.response.early_hint(message))
                return protocol.flush()
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
                self.finish()
        elif kind in file_response.KINDS:  # read in pieces, framed within the windows as any body
            await file_response.send_file(self.send, message, self.response.no_content)
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
                return self.finish()
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
            self.finish()
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
        self.finish()

    def finish(self) -> None:
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
            protocol.on_response_complete()

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
        self.finish()
        self.disconnect()  # the app, if running, sees http.disconnect
