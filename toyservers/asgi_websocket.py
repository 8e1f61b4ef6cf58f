"""The ASGI ``websocket`` glue every toy server shares: the scope, the events, the rules for an
app's mistakes, over any WebSocket engine.

What is the same in every server is written here once, beside ``asgi.py``'s HTTP cycle:

- ``opening``: the way in from HTTP/1.1 (asyncio's ``websocket_protocol.upgrade``, anyio's
  ``websocket_anyio.upgrade``): is the request an opening handshake
  (``websocket_handshake.check_handshake``), and a valid one? Its engine for ``--ws``
  (``make_engine``), or the HTTP answer refusing it (400, 426), logged;
- ``websocket_scope``: the ``websocket`` connection scope, made from the ``http`` scope of the
  handshake request (``asgi.http_scope``): ``scheme`` ws or wss, ``subprotocols``, and the
  ``websocket.http.response`` extension (the denial response);
- ``Engine``: what the glue needs of a WebSocket implementation: the 101, bytes in, events
  out (``toyservers.websocket``'s ``Message``, ``Ping``, ``Pong``, ``Close``), bytes for what we
  send. ``websocket.Connection`` (the project's own RFC 6455) is one; ``websocket_wsproto
  .WsprotoConnection`` (wsproto's) the other; ``--ws`` picks;
- ``WebSocketCycle``: one connection's ASGI side, as ``RequestResponseCycle`` is one
  request's: the events the app receives (``websocket.connect``, ``.receive``,
  ``.disconnect``, at most ``ws_max_queue`` waiting), ``send()`` (``websocket.accept``,
  ``.send``, ``.close``, ``websocket.http.response.start``/``.body``), ``run_asgi``, and the
  graceful ``shutdown`` (close 1001, or 1012 for a reload; 503 to a handshake not answered).

The spec's rules for an app's mistakes, kept by ``send`` and ``run_asgi``: ``websocket.close``
before ``websocket.accept`` is a 403 and no handshake; an app that returns or raises before
accepting (or before its denial response has begun) gets a 500; once accepted, an app that
raises is closed with 1011 (one that returns, with 1000); a ``send()`` once the client is gone
raises ``ClientDisconnected``, an ``OSError`` as HTTP's; a message out of order, RuntimeError.
The connection's rules, kept by each transport: our close frame waits ``CLOSE_TIMEOUT`` for
the client's, and past ``MAX_PINGS`` pings and pongs a ``PING_INTERVAL`` a client floods (1008).
Backpressure both ways: ``send()`` waits while the write buffer is over its high-water mark
(``FlowControl.drain``), and the connection stops reading while ``ws_max_queue`` messages wait
for the app (``reading_paused``; ``receive()`` resumes it).

The connection under it (``WSConnection``: write, drain, the hooks) is
``websocket_protocol.WSProtocol`` on asyncio, ``websocket_anyio.AnyioWSProtocol`` on anyio,
or one HTTP/2 stream of toy-h2 (``h2_websocket.WebSocketStream``, RFC 8441).

Spec: ASGI 3.0, WebSocket connection scope and events, spec version 2.4, and the WebSocket
Denial Response extension (https://asgi.readthedocs.io/en/latest/specs/www.html); RFC 6455
§4.2.2 (the 101, subprotocols), §7.4 (close codes).

Compare with: uvicorn/protocols/websockets/wsproto_impl.py and websockets_sansio_impl.py
(``handle_connect``, ``send``, ``receive``, ``run_asgi``); hypercorn/protocol/ws_stream.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

from toyservers import http1, websocket
from toyservers._types import ASGIApp, Headers, Message, Scope
from toyservers.access_log import log_request
from toyservers.asgi import ClientDisconnected
from toyservers.websocket_handshake import Handshake, HandshakeError, check_handshake

if TYPE_CHECKING:
    from toyservers.config import Config
    from toyservers.state import ServerState

logger = logging.getLogger("toyservers.error")

# The ASGI side's states: waiting for the app's answer to the handshake; a denial response
# under way; accepted; closed (our close frame is out, or the HTTP answer is).
CONNECTING, RESPONDING, CONNECTED, CLOSED = "connecting", "responding", "connected", "closed"
DISCONNECT_HTTP = 1006  # what the app's receive() says after an HTTP answer (uvicorn's code)
CLOSE_TIMEOUT = 10.0  # seconds our close frame waits for the client's (uvicorn's)
PING_INTERVAL, MAX_PINGS = 10.0, 1000  # pings and pongs a client may send per interval


class HTTPConnection(Protocol):
    """What ``opening`` needs of the HTTP/1.1 connection a handshake came on
    (``http1_cycle.HTTP1Protocol``, toy-anyio's ``anyio_serving.StreamProtocol``)."""

    config: Config
    state: ServerState
    client: tuple[str, int] | None
    access_log: bool


def opening(protocol: HTTPConnection, scope: Scope, auto: str
            ) -> tuple[Engine, Scope] | bytes | None:
    """What the request whose ``http`` scope is ``scope`` opens, when it is an opening handshake
    and ``--ws`` is not ``none`` (``auto``: what ``--ws auto`` means on this server): the engine
    and the ``websocket`` scope; or, for a bad handshake, the HTTP response refusing it (400,
    426: RFC 6455 §4.2.1, §4.4), logged, to write before a lingering close. None: the request
    asks no ``Upgrade: websocket`` (or ``--ws`` is ``none``): answer it as HTTP."""
    config = protocol.config
    if config.ws == "none":
        return None
    try:
        handshake = check_handshake(scope["method"], scope["headers"])
        if handshake is None:
            return None
        engine = make_engine(auto if config.ws == "auto" else config.ws, handshake, scope,
                             config)
    except HandshakeError as exc:
        logger.debug("%d to %s: %s", exc.status, protocol.client, exc.reason)
        if protocol.access_log:
            log_request(protocol.client, scope["method"], scope["raw_path"],
                        scope["query_string"], scope["http_version"], exc.status)
        return http1.error_response(exc.status,
                                    protocol.state.default_headers_bytes + exc.fields)
    return engine, websocket_scope(scope, handshake.subprotocols)


def make_engine(name: str, handshake: Handshake, scope: Scope, config: Config
                ) -> Engine:
    """The engine ``name`` (``toyservers`` or ``wsproto``) for a checked handshake. wsproto is
    imported only when asked for. Raises HandshakeError (wsproto refusing it)."""
    if name == "wsproto":
        from toyservers.websocket_wsproto import WsprotoConnection
        return WsprotoConnection(scope["headers"], scope["raw_path"], config.ws_max_size,
                                 config.ws_per_message_deflate)
    return websocket.Connection(handshake, config.ws_max_size, config.ws_per_message_deflate)


def websocket_scope(scope: Scope, subprotocols: list[str]) -> Scope:
    """The ``websocket`` scope of the handshake request whose ``http`` scope is ``scope``
    (ASGI WebSocket spec: ``method`` goes, ``scheme`` is ws or wss, ``subprotocols`` are the
    offered ones in order, and the denial response is offered as an extension; of the HTTP
    scope's extensions only ``tls`` applies)."""
    ws_scope = dict(scope, type="websocket", subprotocols=subprotocols,
                    scheme="wss" if scope["scheme"] == "https" else "ws")
    del ws_scope["method"]
    extensions = scope.get("extensions", {})  # of those only tls applies to a WebSocket: the rest
    # (pathsend, zerocopysend, early hints, trailers) are HTTP response messages
    ws_scope["extensions"] = {"websocket.http.response": {}, **(
        {"tls": extensions["tls"]} if "tls" in extensions else {})}
    return ws_scope


def log_handshake(protocol: WSConnection, scope: Scope, status: int) -> None:
    """The access line of the handshake request, with the status it got (101 when accepted;
    over HTTP/2 the request is an extended CONNECT, accepted with 200: RFC 8441 §5)."""
    if protocol.access_log:
        version = scope["http_version"]
        if version == "2":
            method, status = "CONNECT", 200 if status == 101 else status
        else:
            method = "GET"
        log_request(protocol.client, method, scope["raw_path"], scope["query_string"], version,
                    status)


def accept_fields(headers: Any, default_headers: Headers) -> Headers:
    """The app's ``websocket.accept`` headers, checked as a response's (``check_response``;
    http1.ResponseError), without Content-Length or Sec-WebSocket-* (the server's)."""
    fields = http1.check_response(200, headers, default_headers)
    names = fields.lines[::4]
    if fields.content_length is not None or any(n.startswith(b"sec-websocket-") for n in names):
        raise http1.ResponseError("Content-Length and Sec-WebSocket-* are the server's")
    return list(zip(names, fields.lines[2::4], strict=True))


class Engine(Protocol):
    """A WebSocket implementation after the handshake (``websocket.Connection``'s methods)."""

    close_sent: bool

    def accept(self, subprotocol: str | None, headers: Headers) -> bytes: ...
    def receive_data(self, data: bytes) -> None: ...
    def next_event(self) -> websocket.Event | None: ...
    def send_message(self, data: str | bytes) -> bytes: ...
    def send_ping(self, payload: bytes) -> bytes: ...
    def send_pong(self, payload: bytes) -> bytes: ...
    def send_close(self, code: int | None, reason: str = "") -> bytes: ...


class WriteFlow(Protocol):
    """The write side of ``flow_control.FlowControl`` (toy-anyio: ``websocket_anyio.Sender``)."""

    @property
    def write_paused(self) -> bool: ...
    async def drain(self) -> None: ...


class WSConnection(Protocol):
    """What the cycle needs of the connection under it (``websocket_protocol.WSProtocol``,
    ``websocket_anyio.AnyioWSProtocol``, ``h2_websocket.WebSocketStream``)."""

    state: ServerState
    client: tuple[str, int] | None
    access_log: bool

    @property
    def flow(self) -> WriteFlow: ...  # what send() waits on

    def write(self, data: bytes) -> None: ...
    def on_accept(self) -> None: ...
    def on_close_sent(self) -> None: ...
    def on_response_complete(self) -> None: ...
    def resume_reading(self) -> None: ...


class WebSocketCycle:
    """One WebSocket connection's ASGI side (see the module docstring).

    The connection hands in what the client does: ``put(data)`` a message, ``disconnect(code,
    reason)`` its close frame or its loss; it stops reading while ``max_queue`` messages wait
    in ``queue``, setting ``reading_paused`` (not once closing: ``put`` then keeps none). A
    graceful stop is ``shutdown(code)``. ``close(code, reason)`` sends our close frame (the
    app's, the app's end, a shutdown); ``refuse(status)``, an HTTP error instead of a 101."""

    __slots__ = ("protocol", "scope", "engine", "max_queue", "state", "queue", "waiter",
                 "disconnected", "last", "reading_paused", "framer", "task", "loop")
    loop: asyncio.AbstractEventLoop  # the app's Task's (start_task): wait()'s futures are on it

    def __init__(self, protocol: WSConnection, scope: Scope, engine: Engine,
                 max_queue: int) -> None:
        self.protocol, self.scope, self.engine = protocol, scope, engine
        self.max_queue = max_queue
        self.state = CONNECTING
        self.queue: deque[Message] = deque([{"type": "websocket.connect"}])
        self.waiter: asyncio.Future[None] | None = None  # receive() waiting for an event
        self.disconnected = False  # the client is gone (or closed): send() raises
        self.last: Message | None = None  # the websocket.disconnect the app was given
        self.reading_paused = False  # the connection stopped reading: the queue was full
        self.framer: http1.ResponseFramer | None = None  # the denial response's
        self.task: object = None  # the app's, in state.tasks while it runs (asyncio: its Task)

    # --- from the connection ---

    def put(self, data: str | bytes) -> None:
        """A message from the client; dropped once the app has closed (it waits for none)."""
        if self.state is CONNECTED:
            key = "text" if isinstance(data, str) else "bytes"
            self.queue.append({"type": "websocket.receive", key: data})
            self.wake()

    def disconnect(self, code: int, reason: str = "") -> None:
        """The client closed (``code`` from its close frame) or is gone (1006); the app's
        receive() says ``websocket.disconnect`` (once: not again after the app's own close)."""
        if not self.disconnected:
            self.disconnected = True
            if self.state is not CLOSED:
                self.queue.append({"type": "websocket.disconnect", "code": code,
                                   "reason": reason})
            self.wake()

    def shutdown(self, code: int) -> None:
        """Graceful shutdown: an open WebSocket closes with ``code`` (``ws_shutdown_code``: 1001;
        1012 in a worker retired by a reload), waiting for the client's close frame; a handshake
        not answered yet gets 503 (RFC 9110 §15.6.4). A denial response under way finishes."""
        if self.state is CONNECTED:
            self.close(code, "server shutting down")
        elif self.state is CONNECTING:
            self.refuse(503)

    def wait(self) -> Awaitable[None]:
        """What receive() awaits until ``wake()``: a Future (a coroutine would be one more object
        per message) on ``loop`` (``get_running_loop()`` makes a getpid() call on CPython 3.11).
        Another I/O model overrides both, and ``start_task`` (toy-anyio: an anyio Event)."""
        self.waiter = waiter = self.loop.create_future()
        return waiter

    def wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # --- the ASGI interface ---

    # --8<-- [start:receive_send]
    async def receive(self) -> Message:
        """The next event: ``websocket.connect`` first, then ``websocket.receive`` messages,
        then ``websocket.disconnect`` (again on every later call: the app never hangs)."""
        while not self.queue:
            if self.last is not None:
                return self.last
            await self.wait()
        message = self.queue.popleft()
        if message["type"] == "websocket.disconnect":
            self.last = message
        if self.reading_paused:  # room again: the connection reads on
            self.reading_paused = False
            self.protocol.resume_reading()
        return message

    async def send(self, message: Message) -> None:
        """Act on one of the app's messages (see the module docstring for the rules).

        Raises ClientDisconnected once the client is gone, RuntimeError for a message out of
        order or a subprotocol the client did not offer, http1.ResponseError for a header or
        status ``check_response`` refuses, TypeError or ValueError for bad message fields."""
        protocol = self.protocol
        if protocol.flow.write_paused and not self.disconnected:
            await protocol.flow.drain()
        if self.disconnected:
            raise ClientDisconnected("the client has disconnected")
        kind, state = message["type"], self.state
        if state is CONNECTED and kind == "websocket.send":
            text, data = message.get("text"), message.get("bytes")
            if text is None:  # "Exactly one of bytes or text must be non-None"
                text = data
            elif data is not None:
                text = None
            if not isinstance(text, (str, bytes)):
                raise TypeError("websocket.send takes one of 'text' (str) or 'bytes' (bytes)")
            protocol.write(self.engine.send_message(text))
        elif state is CONNECTED and kind == "websocket.close":
            self.close(message.get("code", websocket.NORMAL), message.get("reason") or "")
        elif state is CONNECTING and kind == "websocket.accept":
            self.accept(message.get("subprotocol"), message.get("headers", ()))
        elif state is CONNECTING and kind == "websocket.close":
            self.refuse(403)  # ASGI: "the server must close the connection with a HTTP 403"
        elif state is CONNECTING and kind == "websocket.http.response.start":
            self.framer = framer = http1.ResponseFramer(False, False, keep_alive=False)
            framer.start(message["status"], message.get("headers", ()),
                         protocol.state.default_headers, protocol.state.default_headers_bytes)
            self.state = RESPONDING
            log_handshake(protocol, self.scope, framer.status)
        elif state is RESPONDING and kind == "websocket.http.response.body":
            assert self.framer is not None
            more_body = message.get("more_body", False)
            protocol.write(b"".join(self.framer.body(message.get("body", b""), more_body)))
            if not more_body:
                self.end_http()
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} in state {state!r}")
    # --8<-- [end:receive_send]

    def accept(self, subprotocol: str | None, headers: Any) -> None:
        """The 101 (RFC 6455 §4.2.2): the subprotocol must be one the client offered, the
        headers pass ``check_response`` (the handshake's own fields are the server's)."""
        if subprotocol is not None and subprotocol not in self.scope["subprotocols"]:
            raise RuntimeError(f"subprotocol {subprotocol!r} was not offered by the client")
        fields = accept_fields(headers, self.protocol.state.default_headers)
        self.protocol.write(self.engine.accept(subprotocol, fields))
        self.state = CONNECTED
        log_handshake(self.protocol, self.scope, 101)
        self.protocol.on_accept()

    def close(self, code: int, reason: str = "") -> None:
        """Send our close frame (ValueError for a code no frame may carry: RFC 6455 §7.4); the
        app's receive() says ``websocket.disconnect`` with it; the client's answer is awaited
        (``on_close_sent``)."""
        self.protocol.write(self.engine.send_close(code, reason))
        self.state = CLOSED
        if not self.disconnected:
            self.queue.append({"type": "websocket.disconnect", "code": code, "reason": reason})
            self.wake()
        self.protocol.on_close_sent()

    def refuse(self, status: int) -> None:
        """Answer the handshake with ``status`` (403, 500, 503) instead of a 101, and close."""
        self.protocol.write(http1.error_response(status,
                                                 self.protocol.state.default_headers_bytes))
        log_handshake(self.protocol, self.scope, status)
        self.end_http()

    def end_http(self) -> None:
        """An HTTP answer to the handshake is out: the app's receive() says disconnect."""
        self.disconnect(DISCONNECT_HTTP)
        self.state = CLOSED
        self.protocol.on_response_complete()

    # --8<-- [start:run_asgi]
    async def run_asgi(self, app: ASGIApp) -> None:
        """Run the app; nothing it raises leaves this Task. What it left undone is finished
        here: an unanswered handshake gets a 500 (a denial response cut short: a close), an
        accepted WebSocket a close frame, 1011 after an exception, else 1000."""
        failed = False
        try:
            result = await app(self.scope, self.receive, self.send)  # type: ignore[func-returns-value]
        except ClientDisconnected:
            logger.debug("client %s went away from its WebSocket", self.protocol.client)
        except BaseException as exc:  # SystemExit too: one app must not stop the server
            logger.error("Exception in ASGI application", exc_info=exc)
            failed = True
        else:
            if result is not None:
                logger.error("ASGI callable should return None, but returned %r", result)
        finally:
            self.protocol.state.tasks.discard(self.task)
        if self.disconnected:
            return
        if self.state is CONNECTING or self.state is RESPONDING:
            if not failed:
                logger.error("ASGI callable returned without answering the WebSocket handshake")
            if self.framer is not None and self.framer.head_sent:
                self.state = CLOSED
                self.protocol.on_response_complete()  # no valid answer is left: close
            else:
                self.refuse(500)
        elif self.state is CONNECTED:
            self.close(websocket.INTERNAL_ERROR if failed else websocket.NORMAL)
    # --8<-- [end:run_asgi]

    def start_task(self, app: ASGIApp) -> None:
        """Run the app in its own Task, kept in ``state.tasks`` (see asgi.RequestResponseCycle)."""
        self.loop = loop = asyncio.get_running_loop()
        self.task = task = loop.create_task(self.run_asgi(app))
        if not task.done():
            self.protocol.state.tasks.add(task)
