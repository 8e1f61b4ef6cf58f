"""One HTTP/2 stream of toy-h2 as an ASGI ``websocket``: RFC 8441's extended CONNECT.

toy-h2 says ``SETTINGS_ENABLE_CONNECT_PROTOCOL = 1`` in its SETTINGS (unless ``--ws none``), so
a client may open a WebSocket on a stream of the connection it has: a CONNECT request with
``:protocol websocket``, ``:scheme``, ``:path`` and ``:authority``, and
``sec-websocket-version: 13``. The connection (``h2_server.H2Protocol``) hands such a request to
``open_stream``: it checks the handshake (``check_connect``; RFC 8441 §5: no
Sec-WebSocket-Key, no Sec-WebSocket-Accept, no Upgrade) and makes the stream a
``WebSocketStream``, which runs the app with the ``websocket`` scope (``http_version`` "2").

Above the stream nothing is new: the ASGI side is the shared ``asgi_websocket.WebSocketCycle``
and the frames are RFC 6455's, read and written by the project's own ``websocket.Connection``,
as on HTTP/1.1. What this module adds is the stream under them:

- the app's ``websocket.accept`` is a 200 HEADERS (``StreamEngine``: its subprotocol and
  permessage-deflate fields, no 101); a refusal (403, 500, 503) and the denial response
  (``websocket.http.response.*``) are HTTP/2 responses on the stream (``StreamCycle``);
- the frames ride in the stream's DATA both ways, within HTTP/2 flow control: what does not
  fit the client's windows waits (``pending``) for its WINDOW_UPDATE, and ``send()`` waits
  while any does; the credit of received DATA goes back once the engine has read it and
  fewer than ``ws_max_queue`` messages wait for the app, so a slow app shuts the client's
  window (RFC 9113 §6.9);
- RFC 8441 §5 maps TCP's ends onto the stream: END_STREAM is a FIN, RST_STREAM a reset. Our
  close frame carries END_STREAM; the stream is done once the client's close frame (or its
  END_STREAM) came, or after ``CLOSE_TIMEOUT`` seconds (then RST_STREAM CANCEL). A client's
  RST_STREAM is a lost connection: the app sees 1006. Graceful shutdown closes with 1001
  (1012 in a worker retired by a reload) before the connection's GOAWAY;
- keepalive as over HTTP/1.1 (``--ws-ping-interval``, ``--ws-ping-timeout``, 20 s each;
  None or 0: off): from the 200 on, a WebSocket ping on the stream every interval; no pong
  within the timeout closes that WebSocket with 1011 (the app's receive() says so), our close
  frame ending the stream. So a client that vanished (no FIN: a half-open TCP connection)
  is noticed, and once its last stream is done the connection's idle deadline ends it. These
  deadlines (and ``CLOSE_TIMEOUT``'s) run on one timer per connection, not one per stream
  (``h2_websocket_timers.StreamTimers``). WebSocket pings, not HTTP/2's PING (RFC 9113
  §6.7), for three reasons: a PING is hop by hop (a proxy in front answers it, and it is no
  activity on the stream for that proxy's idle timeout) where a ping crosses the tunnel to
  the client's WebSocket; a PING is not flow-controlled, so it would
  keep alive a WebSocket whose client reads nothing of its stream, where a ping waits in the
  stream's window as the messages do (as one behind a full TCP buffer does over HTTP/1.1);
  and each WebSocket gets its own verdict, the one an app gets over HTTP/1.1, not every
  stream of the connection at once. The cost: a 15-byte DATA frame per WebSocket per
  interval, and the client's pong.

Deliberately left out: HTTP/2's PING as the keepalive (above), ``--ws wsproto`` over HTTP/2
(the project's engine serves every stream), a ``:scheme`` that disagrees with the connection
(the scope's scheme is the connection's), and protocols other than ``websocket`` on extended
CONNECT (501).

Spec: RFC 8441 §3 (the setting), §4 (``:protocol``), §5 (the WebSocket handshake over HTTP/2,
END_STREAM and RST_STREAM); RFC 6455 §4.4 (the version, 426), §5 (frames), §5.5.2-§5.5.3
(ping, pong), §7 (closing); RFC 7692 (permessage-deflate); RFC 9113 §5.1 (stream states),
§6.7 (PING), §6.9 (flow control); ASGI WebSocket spec 2.4 and its WebSocket Denial Response
extension.

Compare with: hypercorn/protocol/ws_stream.py (``WSStream``, its HTTP/2 branch) and
hypercorn/protocol/h2.py (``_create_stream``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable

import h2.exceptions
from h2.errors import ErrorCodes

from toyservers import http1, http2, websocket
from toyservers._types import Headers, Message, Scope
from toyservers.access_log import log_request
from toyservers.asgi import ClientDisconnected, at_concurrency_limit
from toyservers.asgi_websocket import (
    CLOSE_TIMEOUT,
    CLOSED,
    CONNECTED,
    CONNECTING,
    RESPONDING,
    WebSocketCycle,
    log_handshake,
    websocket_scope,
)
from toyservers.flow_control import FlowControl
from toyservers.h2_stream import StreamOwner
from toyservers.websocket_deflate import negotiate
from toyservers.websocket_handshake import Handshake, HandshakeError, elements

logger = logging.getLogger("toyservers.error")

VERSION = [(b"sec-websocket-version", b"13")]  # RFC 6455 §4.4: the version we speak


# --8<-- [start:check_connect]
def check_connect(protocol: bytes | None, ended: bool, headers: Headers) -> Handshake:
    """The opening handshake in an extended CONNECT (``protocol``: its ``:protocol``;
    ``ended``: its HEADERS ended the stream): the subprotocols and extensions offered, and no
    key (RFC 8441 §5: ``:protocol`` supersedes Sec-WebSocket-Key and -Accept). Raises
    HandshakeError: 501 for a protocol other than websocket (RFC 8441 names no
    status: no tunnel to it here, as for a plain CONNECT), 400 for a stream ended at once (no
    tunnel) or no Sec-WebSocket-Version or two, 426 for another version than 13 (§4.4)."""
    if protocol != b"websocket":
        raise HandshakeError(501, f":protocol {protocol!r}")
    if ended:
        raise HandshakeError(400, "an extended CONNECT that ends its stream")
    fields: dict[bytes, list[bytes]] = {}
    for name, value in headers:
        fields.setdefault(name, []).append(value)
    versions = fields.get(b"sec-websocket-version")
    if versions != [b"13"]:
        raise HandshakeError(426 if versions and len(versions) == 1 else 400,
                             f"Sec-WebSocket-Version {versions}")
    return Handshake(b"", elements(fields, b"sec-websocket-protocol"), [
        e.encode() for e in elements(fields, b"sec-websocket-extensions")])
# --8<-- [end:check_connect]


def open_stream(owner: StreamOwner, sid: int, scope: Scope,
                fields: Iterable[tuple[bytes, bytes]], ended: bool) -> None:
    """Make stream ``sid`` a ``WebSocketStream`` running the app, for the extended CONNECT
    whose ``http`` scope is ``scope`` and whose decoded fields are ``fields``; or answer the
    status ``check_connect`` (or ``--limit-concurrency``: 503) gives instead."""
    config = owner.config
    try:
        handshake = check_connect(dict(fields).get(b":protocol"), ended, scope["headers"])
        if at_concurrency_limit(owner.state):
            raise HandshakeError(503, "at the concurrency limit")
    except HandshakeError as exc:
        logger.debug("%d to %s: %s", exc.status, owner.client, exc.reason)
        if owner.access_log:
            log_request(owner.client, "CONNECT", scope["raw_path"], scope["query_string"], "2",
                        exc.status)
        extra = VERSION if exc.status == 426 else []
        with contextlib.suppress(h2.exceptions.ProtocolError):  # the stream is gone already
            http2.send_error(owner.conn, sid, exc.status, [*owner.state.default_headers, *extra])
        return
    engine = StreamEngine(handshake, config.ws_max_size, config.ws_per_message_deflate)
    owner.streams[sid] = stream = WebSocketStream(
        owner, sid, websocket_scope(scope, handshake.subprotocols), engine)
    if owner.deadline.kind == "idle":  # the connection is no longer idle (see on_timeout)
        owner.deadline.clear()
    stream.cycle.start_task(owner.app)


# --8<-- [start:accept]
class StreamEngine(websocket.Connection):
    """The project's RFC 6455 engine on a stream: its answer to the handshake is the fields of
    a 200 HEADERS (``head``: the subprotocol, permessage-deflate if agreed, the app's fields),
    not the bytes of a 101 (RFC 8441 §5), so ``accept`` returns none."""

    head: Headers = []

    def accept(self, subprotocol: str | None, headers: Headers) -> bytes:
        if self.offer_deflate:
            self.deflate = negotiate(self.handshake.extensions)
        self.head = [(b":status", b"200")]
        if subprotocol is not None:
            self.head.append((b"sec-websocket-protocol", subprotocol.encode()))
        if self.deflate is not None:
            self.head.append((b"sec-websocket-extensions", self.deflate.response()))
        self.head += headers
        return b""
# --8<-- [end:accept]


class StreamCycle(WebSocketCycle):
    """The shared ASGI side, its HTTP answers framed as HTTP/2 responses on the stream: a
    refusal (``refuse``) and the denial response (``websocket.http.response.start`` and
    ``.body``, by ``http2.Response``) instead of HTTP/1.1 bytes."""

    __slots__ = ("response",)
    protocol: WebSocketStream

    async def send(self, message: Message) -> None:
        """The base's, but a denial response goes out as HEADERS and DATA (``respond``)."""
        if not message["type"].startswith("websocket.http.response.") or \
                self.state is CONNECTED or self.state is CLOSED:
            return await super().send(message)
        flow = self.protocol.flow
        if flow.write_paused and not self.disconnected:
            await flow.drain()
        if self.disconnected:
            raise ClientDisconnected("the client has disconnected")
        self.respond(message)

    def respond(self, message: Message) -> None:
        """One message of the denial response; RuntimeError for one out of order."""
        kind, stream = message["type"], self.protocol
        if kind == "websocket.http.response.start" and self.state is CONNECTING:
            self.response = http2.Response("GET")  # ResponseError for a bad field
            self.response.start(message, stream.state.default_headers)
            self.state = RESPONDING
            log_handshake(stream, self.scope, self.response.status)
        elif kind == "websocket.http.response.body" and self.state is RESPONDING:
            head, body, end = self.response.body(message)
            if head is not None:
                stream.conn.send_headers(stream.stream_id, head)
            stream.write(body)
            if end:
                stream.end_stream()
                self.end_http()
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} in state {self.state!r}")

    def refuse(self, status: int) -> None:
        """Answer the handshake with ``status`` (403, 500, 503) instead of a 200; once a denial
        response's HEADERS are out, reset the stream (INTERNAL_ERROR: RFC 9113 §8.1)."""
        stream = self.protocol
        if self.state is RESPONDING and self.response.head is None:
            self.state = CLOSED
            return stream.reset(ErrorCodes.INTERNAL_ERROR)
        body = http1.reason(status) or b"Error"
        if not stream.gone:
            stream.conn.send_headers(stream.stream_id, http2.error_head(
                status, stream.state.default_headers, len(body)))
            stream.write(body)
        stream.end_stream()
        log_handshake(stream, self.scope, status)
        self.end_http()


class WebSocketStream:
    """One WebSocket on stream ``stream_id`` of ``owner``: what ``WebSocketCycle`` needs of its
    connection (``write``, ``flow`` and the hooks), and what ``owner`` asks of its streams
    (``h2_stream.Stream``: ``on_data``, ``on_end``, ``wake_sender``, ``disconnect``...)."""

    __slots__ = ("owner", "stream_id", "conn", "engine", "state", "client", "access_log",
                 "window", "cycle", "pending", "credit", "ending", "ended", "remote_done",
                 "gone", "timers")
    more_body = False  # no request body: timeout_body does not apply

    def __init__(self, owner: StreamOwner, stream_id: int, scope: Scope,
                 engine: StreamEngine) -> None:
        self.owner, self.stream_id, self.conn, self.engine = owner, stream_id, owner.conn, engine
        self.state, self.client, self.access_log = owner.state, owner.client, owner.access_log
        self.window = FlowControl(owner.transport)  # its write side: paused while pending
        self.cycle = StreamCycle(self, scope, engine, owner.config.ws_max_queue)
        self.pending = b""  # framed for the client, waiting for its window (WINDOW_UPDATE)
        self.credit = 0  # bytes of DATA received, not yet granted back
        self.ending = False  # END_STREAM goes out after what is pending
        self.ended = False  # our END_STREAM is out
        self.remote_done = False  # the client's close frame, END_STREAM or failure came
        self.gone = False  # reset, or the connection is lost: nothing more is sent
        self.timers = owner.ws_timers  # the connection's: keepalive pings, CLOSE_TIMEOUT

    @property
    def flow(self) -> FlowControl:
        """What ``send()`` waits on: frames waiting for credit, else the connection's buffer."""
        return self.window if self.window.write_paused else self.owner.flow

    # --- the client's side ---

    def on_data(self, data: bytes, length: int) -> bool:
        """Frames from the client (``length``: the DATA's flow-controlled size); kept, and its
        credit held, while the app has not accepted. False once nothing more is read."""
        state = self.cycle.state
        if self.gone or self.engine.closed or state is RESPONDING or \
                state is CLOSED and not self.engine.close_sent:  # an HTTP answer went out
            return False
        self.engine.receive_data(data)
        self.credit += length
        if state is not CONNECTING:
            self.read_events()
        return True

    def read_events(self) -> None:
        """Act on the engine's events until it needs more bytes (then the credit goes back),
        or ``ws_max_queue`` messages wait for the app (then it is held: ``receive()`` makes
        room and calls ``resume_reading``)."""
        engine, cycle = self.engine, self.cycle
        try:
            while len(cycle.queue) < cycle.max_queue or cycle.state is not CONNECTED:
                event = engine.next_event()
                if event is None:
                    return self.give_credit()
                if isinstance(event, websocket.Message):
                    cycle.put(event.data)
                elif isinstance(event, websocket.Close):  # the app's answers to the
                    self.owner.loop.call_soon(self.on_close, event)  # messages before it go
                    return  # first (see WSProtocol.after_app)
                else:
                    try:  # a ping or pong counts as HTTP/2's PING does (FloodBudget)
                        self.owner.budget.spend(0, 1)
                    except http2.FrameRefused:
                        raise websocket.ProtocolError(websocket.POLICY, "ping flood") from None
                    if isinstance(event, websocket.Ping) and not engine.close_sent:
                        self.write(engine.send_pong(event.payload))  # RFC 6455 §5.5.3
                    elif isinstance(event, websocket.Pong):  # maybe our keepalive ping's
                        self.timers.pong(self, event.payload)
            cycle.reading_paused = True
        except websocket.ProtocolError as exc:
            logger.debug("closing the WebSocket of %s with %d: %s", self.client, exc.code,
                         exc.reason)
            self.owner.loop.call_soon(self.on_close, websocket.Close(exc.code, exc.reason), True)

    def give_credit(self) -> None:
        """Grant the client the credit of the DATA the engine has read (RFC 9113 §6.9)."""
        if self.credit and not self.gone:  # (h2 ignores it for a stream closed meanwhile)
            self.conn.acknowledge_received_data(self.credit, self.stream_id)
            self.owner.flush()
        self.credit = 0

    def on_close(self, event: websocket.Close, failed: bool = False) -> None:
        """The client's close frame, answered with its code (RFC 6455 §5.5.1), or (``failed``)
        what it did wrong, as a close with its code (§7.1.7, "Fail the WebSocket Connection"):
        our close frame unless ours went first, END_STREAM, and the app is told."""
        code, reason = event
        if not self.engine.close_sent:
            answer = None if code == websocket.NO_STATUS else code
            self.write(self.engine.send_close(answer, reason if failed else ""))
        self.cycle.disconnect(code, reason)
        self.remote_done = True
        self.end_stream()

    def on_end(self) -> None:
        """The client ended its side (END_STREAM, RFC 8441 §5: a FIN). After its close frame
        that is the orderly end; without one the WebSocket is lost (1006), and we end too."""
        if self.engine.closed or self.remote_done:
            return
        self.remote_done = True
        self.cycle.disconnect(websocket.ABNORMAL)
        if self.cycle.state is CONNECTING or self.cycle.state is RESPONDING:
            return self.reset(ErrorCodes.CANCEL)  # before the 200: no tunnel was made
        self.end_stream()

    # --- our side ---

    # --8<-- [start:write]
    def write(self, data: bytes) -> None:
        """Frames for the client (or a denial's body): DATA within its windows, the rest kept
        in ``pending`` until its WINDOW_UPDATE (``wake_sender``). Our close frame is the last:
        its DATA carries END_STREAM."""
        if not self.gone and not self.ending:
            self.pending += data
            if self.engine.close_sent:
                self.end_stream()
            else:
                self.send_pending()

    def end_stream(self) -> None:
        """END_STREAM after what is pending; RST_STREAM CANCEL if the stream is not done
        ``CLOSE_TIMEOUT`` seconds later (a client that never answers or never reads)."""
        if not self.ending and not self.gone:
            self.timers.set(self, "close", CLOSE_TIMEOUT)  # (replaces a keepalive deadline)
        self.ending = True
        self.send_pending()
    # --8<-- [end:write]

    def send_pending(self) -> None:
        """Frame what is pending as the windows allow, END_STREAM on its last once ``ending``."""
        if not self.gone and not self.ended:
            rest, frames = http2.send_data(self.conn, self.stream_id,
                                           memoryview(self.pending), self.ending)
            self.owner.budget.earn(2 * frames)  # the WINDOW_UPDATEs a reader owes for them
            self.pending = bytes(rest)
            self.ended = self.ending and not rest
            if rest:
                self.window.pause_writing()
            elif self.window.write_paused:
                self.window.resume_writing()
            self.owner.flush()
        if self.ended and self.remote_done:
            self.finish()

    wake_sender = send_pending  # credit came (WINDOW_UPDATE, SETTINGS): send what waits

    # --- the hooks of the ASGI side (WebSocketCycle) ---

    def on_accept(self) -> None:
        """The app accepted: the 200 (RFC 8441 §5), the keepalive, the frames that waited."""
        self.conn.send_headers(self.stream_id, self.engine.head)
        self.owner.flush()
        self.timers.start(self)
        self.read_events()

    def on_close_sent(self) -> None:
        """Our close frame is out (with END_STREAM: ``write``): read on, for the client's."""
        self.cycle.reading_paused = False
        self.read_events()

    def on_response_complete(self) -> None:
        """An HTTP answer to the handshake is out: nothing more is wanted from the client."""
        self.remote_done = True
        self.send_pending()

    resume_reading = read_events  # the app took a message (a full queue had room): read on

    # --- the connection's calls ---

    def shutdown(self) -> None:
        """Graceful shutdown: 1001 (1012 for a reload) for an open WebSocket, 503 for a
        handshake the app has not answered (``WebSocketCycle.shutdown``; the 503 by
        ``StreamCycle.refuse``, an HTTP/2 response)."""
        self.cycle.shutdown(self.owner.config.ws_shutdown_code)

    def reset(self, code: ErrorCodes) -> None:
        """End the stream with RST_STREAM ``code`` (RFC 8441 §5: a TCP reset)."""
        if not self.gone:
            with contextlib.suppress(h2.exceptions.ProtocolError):  # the stream is gone
                self.conn.reset_stream(self.stream_id, code)
            self.owner.flush()
        self.disconnect()
        self.finish()

    def disconnect(self) -> None:
        """The stream or connection is gone: the app sees 1006; a waiting send() raises."""
        self.gone = True
        self.cycle.disconnect(websocket.ABNORMAL)
        self.window.resume_writing()
        self.timers.clear(self)

    def finish(self) -> None:
        """The stream is done both ways: the connection forgets it."""
        self.timers.clear(self)
        self.give_credit()
        owner = self.owner
        if owner.streams.get(self.stream_id) is self:
            del owner.streams[self.stream_id]
            owner.on_response_complete()
