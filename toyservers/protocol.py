"""The base of every asyncio toy server's protocol class: what a connection is, besides parsing.

- ``HTTPProtocol``: connection bookkeeping (the addresses, scheme and ``tls`` extension,
  ``TCP_NODELAY``, the entry in ``ServerState.connections``), ``FlowControl`` for both
  directions, the ``Deadline`` that closes a connection which never sends a byte, the one
  ``lingering_close`` (RFC 9112 §9.6: close in stages, so a peer still sending gets our last
  bytes, not a reset), and ``switch_protocol``, the one way a connection's bytes pass to
  another protocol object (h2c, HTTP/2 prior knowledge; uvicorn's ``transport.set_protocol``).
- ``hold`` and ``next_turn``: a connection parses at most a turn's worth of bytes per turn of
  the event loop, so one flooding client cannot keep the others waiting.
- ``Deadline``: one timer per connection for whichever deadline runs (``"idle"``, ``"head"``,
  ``"body"``).

Spec: RFC 9112 §9.5 (idle connections), §9.6 (tear-down); asyncio's ``Protocol`` and
``Transport`` (``set_protocol``, ``write_eof``).

Compare with: uvicorn/protocols/http/httptools_impl.py (``connection_made``,
``connection_lost``, ``timeout_keep_alive_handler``), uvicorn/protocols/utils.py
(``get_remote_addr``, ``get_local_addr``).
"""

from __future__ import annotations

import asyncio
import math
import socket
from collections.abc import Callable
from typing import Any

from toyservers.asgi import scope_template
from toyservers.flow_control import FlowControl
from toyservers.listeners import address
from toyservers.state import ServerState
from toyservers.tls import tls_extension


class Deadline:
    """One timer per connection for whichever deadline is running.

    ``set(kind, seconds)`` starts the deadline ``kind`` (for example ``"idle"``, ``"head"``,
    ``"body"``), replacing the one before; ``clear()`` stops it; when one expires,
    ``on_timeout(kind)`` is called. Both are cheap on the hot path: the loop's timer is
    re-armed only when the new deadline is earlier than the armed one, and a timer that
    fires early (the deadline moved later, or was cleared) re-arms itself for what is left.
    A keep-alive connection serving thousands of requests a second so arms about one timer
    per ``timeout_keep_alive`` instead of one per request (``call_later`` costs ~2 µs in
    uvloop; uvicorn arms and cancels one per request). ``close()`` cancels for good.
    """

    __slots__ = ("loop", "on_timeout", "kind", "when", "handle", "armed")

    def __init__(self, loop: asyncio.AbstractEventLoop, on_timeout: Callable[[str], None]
                 ) -> None:
        self.loop, self.on_timeout = loop, on_timeout
        self.kind: str | None = None  # the deadline running, if any
        self.when = 0.0  # when it expires, loop time in seconds
        self.handle: asyncio.TimerHandle | None = None
        self.armed = math.inf  # when the armed timer fires (inf: none is armed)

    def set(self, kind: str, seconds: float) -> None:
        """Start deadline ``kind``, ``seconds`` from now."""
        when = self.loop.time() + seconds
        self.kind, self.when = kind, when
        if when < self.armed:
            if self.handle is not None:
                self.handle.cancel()
            self.handle, self.armed = self.loop.call_at(when, self._fire), when

    def clear(self) -> None:
        """Stop the running deadline (its timer, if armed, finds nothing to do)."""
        self.kind = None

    def close(self) -> None:
        """Stop for good: the connection is gone."""
        self.kind = None
        if self.handle is not None:
            self.handle.cancel()
            self.handle, self.armed = None, math.inf

    def _fire(self) -> None:
        self.handle, self.armed = None, math.inf
        kind = self.kind
        if kind is None:
            return
        if self.loop.time() < self.when:
            self.handle, self.armed = self.loop.call_at(self.when, self._fire), self.when
            return
        self.kind = None
        self.on_timeout(kind)


LINGER = 2.0  # seconds a connection closed in stages reads (and drops) before closing


class _Lingering(asyncio.Protocol):
    """The protocol of a half-closed connection: drops what comes; passes the loss on."""

    def __init__(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def data_received(self, data: bytes) -> None:
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        self.protocol.connection_lost(exc)


class HTTPProtocol(asyncio.Protocol):
    """The base of every toy server's protocol class: what a connection is, besides parsing.

    ``connection_made`` registers the connection in ``state.connections``, reads the
    addresses (``client``, ``server``: ``(host, port)`` or None), the ``scheme`` and the ASGI
    ``tls`` extension, turns Nagle's algorithm off (a response head and its body are one
    write; waiting for an ACK before the next small write only adds latency), makes the
    ``FlowControl`` (``flow``), and starts the ``idle`` deadline: a client that connects and
    never sends a byte is closed after ``timeout_keep_alive`` seconds, as uvicorn does.
    ``connection_lost`` undoes the bookkeeping. A subclass extends both (calling ``super()``)
    and implements ``data_received``, ``on_timeout(kind)`` and ``shutdown()``.
    """

    __slots__ = ("state", "config", "app", "loop", "transport", "flow", "deadline", "client",
                 "server", "scheme", "tls", "held", "scope_template")

    def __init__(self, state: ServerState) -> None:
        self.state, self.config, self.app = state, state.config, state.app
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.flow: FlowControl = None  # type: ignore[assignment]
        self.deadline = Deadline(self.loop, self.on_timeout)
        self.client: tuple[str, int] | None = None
        self.server: tuple[str, int] | None = None
        self.scheme = "http"
        self.tls: dict[str, Any] | None = None  # the ASGI tls extension, over TLS
        self.held = b""  # bytes read, waiting for the loop's next turn to be parsed (hold)
        self.scope_template: dict[str, Any] = {}  # asgi.scope_template(self), once connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.flow = FlowControl(self.transport)
        self.state.connections.add(self)
        self.client = address(transport.get_extra_info("peername"))
        self.server = address(transport.get_extra_info("sockname"))
        self.scheme = "https" if transport.get_extra_info("sslcontext") else "http"
        self.tls = tls_extension(transport.get_extra_info("ssl_object"), self.state)
        self.scope_template = scope_template(self)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.deadline.set("idle", self.config.timeout_keep_alive)

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.connections.discard(self)
        self.deadline.close()
        if self.flow is not None:
            self.flow.resume_writing()  # wake a send() waiting to drain: it sees the disconnect

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()

    def lingering_close(self) -> None:
        """Close in stages, as RFC 9112 §9.6 advises against "the TCP reset problem": closing
        a socket whose peer still sends makes the kernel answer RST, which can destroy our
        last bytes (an error response, a GOAWAY) before the peer reads them. So: send FIN
        (``write_eof``), read and drop what still comes until the peer closes or ``LINGER``
        seconds pass, then close; ``connection_lost`` still comes here. Over TLS (asyncio has
        no half-close there) the transport just closes."""
        transport = self.transport
        if not transport.can_write_eof() or transport.is_closing():
            transport.close()
            return
        try:
            transport.write_eof()
        except OSError:  # the peer reset the connection, asyncio has not seen it yet: ENOTCONN
            transport.close()
            return
        transport.set_protocol(_Lingering(self))
        transport.resume_reading()  # a no-op unless reading was paused
        self.loop.call_later(LINGER, transport.close)

    def hold(self, rest: bytes) -> None:
        """Parse ``rest`` at the loop's next turn, reading paused meanwhile (``data_received``
        queues what else comes behind it, in ``held``). One read can be megabytes (uvloop
        reads what the socket has) and a parser given them in one call keeps every other
        connection waiting: toy-h2 under a frame flood held the loop 4 to 15 s."""
        self.held = rest
        self.flow.pause_reading()
        self.loop.call_soon(self.next_turn)

    def next_turn(self) -> None:
        """Hand the bytes held to ``data_received`` (which may hold some again); once none
        is held, read the socket again, unless ``keep_paused`` says another pause holds."""
        data, self.held = self.held, b""
        if data:
            self.data_received(data)
        if not self.held and not self.keep_paused():
            self.flow.resume_reading()

    def keep_paused(self) -> bool:
        """Must reading stay paused once no bytes are held? (A subclass paused it for another
        reason: an app behind on its body, requests waiting their turn, a client not reading.)"""
        return False

    # --8<-- [start:switch_protocol]
    def switch_protocol(self, protocol: asyncio.Protocol, data: bytes = b"") -> None:
        """Hand this connection to ``protocol``, with ``data``, the bytes read but not parsed.

        The one way a connection changes protocol (an h2c upgrade, HTTP/2 by prior knowledge
        or ALPN; uvicorn does the same for WebSocket): this protocol leaves
        ``state.connections`` and stops its deadline and reading pause, the transport delivers
        to ``protocol`` from now on, and ``protocol`` gets ``connection_made`` (registering
        itself) and then ``data``. The caller has stopped its own parsing first.
        """
        self.state.connections.discard(self)
        self.deadline.close()
        if self.flow is not None:  # a pause of ours must not outlive us
            self.flow.resume_reading()
        self.transport.set_protocol(protocol)
        protocol.connection_made(self.transport)
        if data:
            protocol.data_received(data)
    # --8<-- [end:switch_protocol]

    def on_timeout(self, kind: str) -> None:
        """Deadline ``kind`` expired. This base closes on ``idle``; a subclass answers 408 to
        a slow head or body (RFC 9110 §15.5.9) and calls this for the rest."""
        self.transport.close()

    def shutdown(self) -> None:
        """Graceful shutdown: close now if idle, else after the response in flight."""
        raise NotImplementedError
