"""wsproto as a WebSocket engine for ``asgi_websocket``: the same methods and events as
``toyservers.websocket.Connection``, so the shared glue runs over either (``--ws wsproto``).

wsproto (python-hyper) is sans-IO like our module: its ``WSConnection`` takes the handshake
request (``initiate_upgrade_connection``: the request already parsed, as uvicorn's httptools
and h11 servers hand it over), writes the 101 for ``AcceptConnection``, and then turns bytes
into events. What differs is adapted here:

- wsproto gives a message in pieces as its frames come (``TextMessage``, ``BytesMessage``,
  ``message_finished`` on the last); we join them. It has no size limit: ``SizeLimit`` sees
  each frame header and refuses a message announcing more than ``max_size`` bytes (1009);
- a frame wsproto cannot parse comes out as a ``CloseConnection`` event with the code, its
  state still open; a real close frame moves its state on. The first is our ProtocolError;
- permessage-deflate inflates each piece whole in wsproto, so a small deflate bomb would grow
  without bound: ``BoundedDeflate`` stops it past ``max_size`` (1009);
- a close code no frame may carry raises ValueError (wsproto sends 1000 instead);
- a flood of empty fragments is refused as ours refuses it (``websocket.MAX_EMPTY_FRAGMENTS``);
- a message sent after the client's close frame raises ClientDisconnected: wsproto sends none
  then (ours sends it: the app answers what it read before the close).

Deliberately left out: wsproto's client side, and its handshake checks beyond
``websocket_handshake.check_handshake``'s (ours run first, on every engine).

Spec: RFC 6455; RFC 7692 (wsproto's ``PerMessageDeflate``, its defaults as uvicorn's
``wsproto_impl`` uses it).

Compare with: uvicorn/protocols/websockets/wsproto_impl.py (``WebsocketBuffer``,
``handle_events``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import wsproto
from wsproto import ConnectionType, events
from wsproto.connection import ConnectionState
from wsproto.extensions import Extension, PerMessageDeflate
from wsproto.frame_protocol import CloseReason, Opcode, RsvBits
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from toyservers import websocket
from toyservers._types import Headers
from toyservers.asgi import ClientDisconnected
from toyservers.websocket_handshake import HandshakeError

_REMOTE_CLOSE = (ConnectionState.REMOTE_CLOSING, ConnectionState.CLOSED)


class SizeLimit(Extension):
    """Not an extension but the one hook wsproto has on each frame header (every enabled
    extension sees it): a message whose frames announce more than ``max_size`` bytes is
    refused there (1009), before its payload comes. Never offered, so never negotiated."""

    name = "x-toyservers-size-limit"

    def __init__(self, max_size: int) -> None:
        self.max_size, self.size = max_size, 0

    def enabled(self) -> bool:
        return True

    def offer(self) -> bool:  # a client's method: a server never offers
        return False

    def frame_inbound_header(self, proto: object, opcode: Opcode, rsv: RsvBits,
                             payload_length: int) -> CloseReason | RsvBits:
        if opcode is Opcode.TEXT or opcode is Opcode.BINARY:
            self.size = 0
        if not opcode.iscontrol():
            self.size += payload_length
            if self.size > self.max_size:
                return CloseReason.MESSAGE_TOO_BIG
        return RsvBits(False, False, False)


class BoundedDeflate(PerMessageDeflate):
    """wsproto's permessage-deflate, inflating no message past ``max_size`` bytes."""

    def __init__(self, max_size: int) -> None:
        super().__init__()
        self.max_size, self.inflated = max_size, 0

    def frame_inbound_payload_data(self, proto: object, data: bytes) -> bytes | CloseReason:
        if not self._inbound_compressed or not self._inbound_is_compressible:
            return data
        assert self._decompressor is not None
        room = self.max_size - self.inflated
        try:
            out = self._decompressor.decompress(bytes(data), room + 1)
        except Exception:  # zlib.error
            return CloseReason.INVALID_FRAME_PAYLOAD_DATA
        self.inflated += len(out)
        return CloseReason.MESSAGE_TOO_BIG if len(out) > room else out

    def frame_inbound_complete(self, proto: object, fin: bool) -> bytes | CloseReason | None:
        result = super().frame_inbound_complete(proto, fin)  # type: ignore[arg-type]
        if fin:
            self.inflated = 0
        return result


class WsprotoConnection:
    """One server-side WebSocket on wsproto (the ``asgi_websocket.Engine`` methods).

    ``headers`` and ``target``: the handshake request's, already checked
    (``websocket_handshake.check_handshake``); ``max_size``: the largest message, bytes;
    ``deflate``: offer permessage-deflate. Raises HandshakeError when wsproto refuses them.
    """

    def __init__(self, headers: Headers, target: bytes, max_size: int = websocket.MAX_SIZE,
                 deflate: bool = True) -> None:
        self.conn = wsproto.WSConnection(ConnectionType.SERVER)
        try:
            self.conn.initiate_upgrade_connection(headers, target)
            next(self.conn.events())  # the Request event: the handshake, which we checked
        except (RemoteProtocolError, StopIteration) as exc:
            raise HandshakeError(400, f"wsproto: {exc}") from None
        self.extensions: list[Extension] = [SizeLimit(max_size)]
        if deflate:
            self.extensions.append(BoundedDeflate(max_size))
        self.early = b""  # bytes that came before the 101 (wsproto takes none before)
        self.pending: Iterator[events.Event] | None = None  # wsproto's events generator
        self.parts: list[Any] = []
        self.empty = 0  # the message's empty fragments (websocket.MAX_EMPTY_FRAGMENTS)
        self.close_sent = False

    def accept(self, subprotocol: str | None, headers: Headers) -> bytes:
        data = self.conn.send(events.AcceptConnection(
            subprotocol=subprotocol, extensions=self.extensions, extra_headers=headers))
        self.receive_data(self.early)
        return data

    def receive_data(self, data: bytes) -> None:
        if self.conn.state is ConnectionState.CONNECTING:
            self.early += data
        elif self.conn.state in (ConnectionState.OPEN, ConnectionState.LOCAL_CLOSING):
            self.conn.receive_data(data)

    def next_event(self) -> websocket.Event | None:
        """The next event, one wsproto event at a time (its generator parses as it is
        pulled, so bytes not yet wanted stay unparsed, as in ours)."""
        while True:
            if self.pending is None:
                self.pending = self.conn.events()
            event = next(self.pending, None)
            if event is None:
                self.pending = None
                return None
            if isinstance(event, events.Message):
                message = self._piece(event)
                if message is not None:
                    return message
            elif isinstance(event, events.Ping):
                return websocket.Ping(bytes(event.payload))
            elif isinstance(event, events.Pong):
                return websocket.Pong(bytes(event.payload))
            elif isinstance(event, events.CloseConnection):
                if self.conn.state not in _REMOTE_CLOSE:  # a parse failure, not a frame
                    raise websocket.ProtocolError(event.code, event.reason or "")
                return websocket.Close(event.code, event.reason or "")

    def _piece(self, event: events.Message) -> websocket.Message | None:  # type: ignore[type-arg]
        data = event.data
        self.parts.append(data)
        if not event.message_finished:
            if not data and event.frame_finished:  # an empty fragment, not the last one
                self.empty += 1
                if self.empty > websocket.MAX_EMPTY_FRAGMENTS:
                    raise websocket.ProtocolError(websocket.POLICY, "a flood of empty fragments")
            return None
        parts, self.parts, self.empty = self.parts, [], 0
        return websocket.Message("".join(parts) if isinstance(data, str) else b"".join(parts))

    def send_message(self, data: str | bytes) -> bytes:
        """ClientDisconnected once the client's close frame came: wsproto sends no message
        after it (RFC 6455 §5.5.1 would let us finish one), as in uvicorn's wsproto_impl."""
        try:
            return self.conn.send(events.Message(data=data))  # type: ignore[type-var]
        except LocalProtocolError:
            raise ClientDisconnected("the client has closed the WebSocket") from None

    def send_ping(self, payload: bytes = b"") -> bytes:
        return self.conn.send(events.Ping(payload=payload))

    def send_pong(self, payload: bytes = b"") -> bytes:
        return self.conn.send(events.Pong(payload=payload))

    def send_close(self, code: int | None = websocket.NORMAL, reason: str = "") -> bytes:
        if code is not None and not websocket.valid_close_code(code):
            raise ValueError(f"close code {code} may not be sent (RFC 6455 §7.4)")
        self.close_sent = True
        try:
            return self.conn.send(events.CloseConnection(code=code or CloseReason.NO_STATUS_RCVD,
                                                         reason=reason or None))
        except LocalProtocolError:  # wsproto closed already (after a parse failure)
            return b""
