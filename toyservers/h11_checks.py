"""What the two h11 servers add to h11: the request checks it leaves out, the ASGI framing.

h11 is one connection's rule book: it parses, refuses what its grammar refuses and frames what
it is given, whatever moves the bytes. toy-h11 (``asyncio.Protocol`` callbacks) and toy-anyio
(anyio byte streams, on asyncio or trio) feed the same ``h11.Connection``, so what they add
to it is written here once, with no I/O in it:

- ``fields_status`` and ``request_status``: what h11 lets through of our request contract
  (field counts and sizes, control bytes in values, the version, the limits, Host,
  Transfer-Encoding beside Content-Length), as statuses to refuse with;
- ``protocol_error_status``: h11's own refusal as a status (414 for a request line too long);
- ``request_scope``: an ``h11.Request`` checked and turned into the ASGI ``http`` scope (and
  whether it asks an Upgrade), or the
  status to answer instead (with CONNECT and ``limit_concurrency``);
- ``take_body``: an ``h11.Data`` counted against ``max_body_size`` and handed to the cycle;
- ``H11Steps`` and ``unread_body``: what the shared cycle asks of an h11 connection;
- ``H11Framer``: the app's response as h11 events and bytes, behind the interface of
  ``http1.ResponseFramer``, so both servers answer through the one HTTP/1 cycle
  (``toyservers.http1_cycle``) and only write the bytes (at once, or awaiting their stream).

Spec: RFC 9112 §2-§3, §5-§7, §9.3; RFC 9110 §5.5, §6.4.1, §10.1.1, §15; RFC 6585 §5 (431).
ASGI 3.0 HTTP ``http.response.start`` and ``http.response.body``
(https://asgi.readthedocs.io/en/latest/specs/www.html).

Compare with: uvicorn/protocols/http/h11_impl.py (``handle_events``, ``RequestResponseCycle.send``).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from typing import Any, Protocol

import h11

from toyservers import asgi, http1
from toyservers._types import Headers, Scope
from toyservers.asgi import at_concurrency_limit, http_scope, log_access
from toyservers.asgi_extensions import te_lists_trailers
from toyservers.config import Config
from toyservers.http1 import HIGH_WATER_LIMIT

END_OF_MESSAGE = h11.EndOfMessage()


# --- request checks -------------------------------------------------------------------------------


def fields_status(fields: Headers, config: Config) -> int:
    """431 for a field section over ``max_headers`` lines or ``max_header_size`` bytes (RFC
    6585 §5), 400 for a control byte h11 let by in a value (RFC 9110 §5.5), else 0."""
    count = len(fields)
    if count > config.max_headers:
        return 431
    # Names and values end to end: each line adds ": " and CRLF, and a control byte found is in
    # a value (h11 checked that every name is a token).
    joined = b"".join(chain.from_iterable(fields))
    if len(joined) + 4 * count > config.max_header_size:
        return 431
    return 400 if http1.bad_field_value(joined) else 0


def request_status(event: h11.Request, headers: Headers, config: Config,
                   fields: dict[bytes, bytes] | None = None) -> int:
    """0 when the request h11 parsed may go to the app, else the status to refuse it with.

    h11 has checked the request line and field syntax, one Host at most (and one in HTTP/1.1),
    Content-Length digits and a lone ``Transfer-Encoding: chunked``; this checks what it lets
    through. ``fields``: ``dict(headers)``, when the caller has made it.
    """
    if event.http_version[:1] != b"1":
        return 505  # RFC 9110 §15.6.6: the major version is not supported
    if len(event.method) + len(event.target) + 10 > config.max_request_line:
        return 414  # RFC 9110 §15.5.15
    if status := fields_status(headers, config):
        return status
    if fields is None:  # h11 allows one Host, Content-Length and Transfer-Encoding each
        fields = dict(headers)
    length = fields.get(b"content-length")
    if b"transfer-encoding" in fields:  # h11 passes only "chunked"; 501 for any other coding
        version = "1.0" if event.http_version == b"1.0" else "1.1"
        if status := http1.transfer_coding_status(b"chunked", version, length is not None):
            return status
    elif length is not None:  # a chunked request's Host is checked too (RFC 9112 §3.2)
        if int(length) > http1.MAX_CONTENT_LENGTH:
            return 400  # RFC 9112 §6.3 rule 5: an overflowing length is invalid
        if config.max_body_size is not None and int(length) > config.max_body_size:
            return 413  # RFC 9110 §15.5.14
    host = fields.get(b"host")  # RFC 9112 §3.2 (http1.host_status): h11 counted them
    return 400 if host is not None and http1.HOST_VALUE.fullmatch(host) is None else 0


def protocol_error_status(exc: h11.RemoteProtocolError, conn: h11.Connection, config: Config,
                          in_head: bool) -> int:
    """h11's status hint, but 414 when its 431 is for a request line that has not ended
    (``in_head``: no request of this cycle was parsed yet)."""
    status: int = exc.error_status_hint
    limit = config.max_request_line + 2
    if status == 431 and in_head and b"\n" not in conn.trailing_data[0][:limit]:
        status = 414  # RFC 9110 §15.5.15 (h11 sees only an incomplete head too large)
    return status


class H11ServerProtocol(asgi.ServerProtocol, Protocol):
    """What ``request_scope`` and ``take_body`` need of a connection, besides the ASGI side's."""

    conn: h11.Connection
    access_log: bool
    body_size: int  # request body bytes received so far in this cycle


def request_scope(connection: H11ServerProtocol, event: h11.Request) -> tuple[Scope, bool] | int:
    """The ASGI scope of the request h11 parsed and whether it has an ``Upgrade`` field (RFC
    9110 §7.8), or the status to refuse it with (then close):
    ``request_status``'s, 400 for a request-target of no known form (RFC 9112 §3.2), 501 for
    CONNECT (deliberately left out), 503 past ``limit_concurrency`` (logged like a response)."""
    state = connection.state
    # h11 keeps each field as (name as sent, name lowercased, value): its lowercased names, not
    # raw_items() lowered again: 2.3k of toy-h11's 505k instructions a request (callgrind).
    headers = [(name, value) for _, name, value in event.headers._full_items]
    fields = dict(headers)
    if status := request_status(event, headers, state.config, fields):
        return status
    method = event.method.decode("ascii")
    try:
        raw_path, query_string = http1.split_target(method, event.target)
    except http1.BadTarget:
        return 400
    if method == "CONNECT":
        return 501
    version = "1.0" if event.http_version == b"1.0" else "1.1"
    # A TE field at all, before its lines are read: a loop over every field cost 4.5k
    # instructions a request on toy-h11 (callgrind: 508.1k -> 503.6k)
    trailers = b"te" in fields and te_lists_trailers(headers)
    scope = http_scope(connection, method, version, raw_path, query_string, headers, trailers,
                       fields)
    if at_concurrency_limit(state):
        if connection.access_log:  # logged like any response, as uvicorn and toy-httptools do
            log_access(connection.client, scope, 503)
        return 503
    # Upgrade from the dict made for the checks: a loop over the fields in on_request cost
    # toy-h11 2.8k instructions a request more (callgrind, POST /user: 502.8k -> 499.9k)
    return scope, b"upgrade" in fields


def take_body(connection: H11ServerProtocol, cycle: asgi.RequestResponseCycle | None,
              data: bytes) -> int:
    """Count request body ``data`` and hand it to ``cycle``, waking its ``receive()``.

    Returns 413 past ``max_body_size`` (RFC 9110 §15.5.14: a chunked body; a Content-Length
    is refused before), 1 once ``HIGH_WATER_LIMIT`` bytes wait for the app (stop reading until
    its ``receive()`` takes them), else 0. Body for a cycle already answered is dropped (RFC
    9112 §9.3: read to its end, then the connection may persist).
    """
    connection.body_size += len(data)
    max_body = connection.state.config.max_body_size
    if max_body is not None and connection.body_size > max_body:
        return 413
    if cycle is None or cycle.response_complete:
        return 0
    cycle.body += data  # b"" + data is data itself; the rest is bounded by the pause
    cycle.wake()
    return 1 if len(cycle.body) >= HIGH_WATER_LIMIT else 0


class H11Steps:
    """What follows a complete response on an h11 connection, the same for both h11 servers
    (a mixin: ``next_step`` is toy-h11's ``on_response_complete`` and toy-anyio's
    ``after_response``): ``end_connection()`` when the framer or h11 says the connection ends
    (RFC 9112 §9.6), ``start_next_cycle()`` when both sides are DONE, else ``drain_body()``:
    the request body is still coming, to be read and dropped (at most ``HIGH_WATER_LIMIT``
    bytes: see ``http1_cycle.unread_body_closes``). Each server does them by its own means. (A
    function taking the three as callbacks cost 2.9k instructions a request on toy-h11.)"""

    __slots__ = ()
    conn: h11.Connection
    cycle: Any

    def next_step(self) -> None:
        conn = self.conn
        if conn.our_state is h11.MUST_CLOSE or not self.cycle.framer.keep_alive:
            self.end_connection()
        elif conn.their_state is h11.DONE:
            self.start_next_cycle()
        else:
            self.drain_body()

    def end_connection(self) -> None:
        raise NotImplementedError

    def start_next_cycle(self) -> None:
        raise NotImplementedError

    def drain_body(self) -> None:
        raise NotImplementedError


def unread_body(scope: Scope, body_size: int) -> int | None:
    """The declared request body bytes not received yet (``body_size`` came), None when
    chunked: h11 checked there is one Content-Length at most."""
    length = dict(scope["headers"]).get(b"content-length")
    return None if length is None else int(length) - body_size


# --- the response, framed by h11 ------------------------------------------------------------------


class H11Framer:
    """Frame one response through h11, with ``http1.ResponseFramer``'s interface, so the one
    HTTP/1 cycle (``toyservers.http1_cycle``) serves both h11 servers.

    ``start`` checks the app's fields as strictly as the other servers do
    (``http1.check_response``) and holds them; the first ``body`` frames the head through
    h11 (its status line and the framing fields h11 decides on: Content-Length, chunked or
    ``Connection: close``, our checked fields after the status line) with the first bytes, so
    a small response leaves in one write. h11 itself refuses more or less body than the
    Content-Length (``h11.LocalProtocolError``). With ``expect_trailers()`` h11 chunks the body,
    and ``end(lines)`` gives its ``EndOfMessage`` the trailer fields.
    """

    __slots__ = ("conn", "head_request", "keep_alive", "status", "lines", "content_length",
                 "head_sent", "no_body")

    def __init__(self, conn: h11.Connection, head_request: bool) -> None:
        self.conn, self.head_request = conn, head_request
        self.keep_alive = True  # False: close after this response
        self.status = 0
        self.lines: list[bytes] = []  # the checked fields (name, b": ", value, b"\r\n" each)
        self.content_length: int | None = None  # the app's, until the head is written
        self.head_sent = self.no_body = False

    short = False  # h11 raises LocalProtocolError for a body short of its Content-Length
    remaining: int | None = None  # (h11 counts the Content-Length bytes itself)

    def start(self, status: object, headers: Iterable[tuple[bytes, bytes]],
              default_headers: Headers, framed_defaults: bytes | None = None) -> None:
        """Check and keep the head (``http1.check_response``'s arguments: the server's
        ``Date`` and ``Server`` fields, and the same already framed, added as one piece).
        Raises http1.ResponseError."""
        # http1.check_fields, as http1.ResponseFramer.start: check_response would build a
        # ResponseFields to hold them (toy-h11, callgrind, POST /user: 502.3k -> 499.7k
        # instructions a request without)
        self.content_length, close = http1.check_fields(status, headers, default_headers,
                                                        framed_defaults, self.lines, False)
        assert type(status) is int  # checked above
        self.status = status
        if close:
            self.keep_alive = False
        self.no_body = self.head_request or status == 204 or status == 304  # RFC 9110 §6.4.1

    @property
    def http10(self) -> bool:
        return self.conn.their_http_version == b"1.0"

    def expect_trailers(self) -> None:
        """A trailer section will end the message (``http1.ResponseFramer.expect_trailers``):
        the app's Content-Length goes, so h11 chunks (it refuses "Content-Length and
        trailers"); every body is then framed as if more came."""
        if self.content_length is not None:
            at = self.lines[::4].index(b"content-length") * 4
            del self.lines[at:at + 4]
            self.content_length = None

    def end(self, lines: list[bytes]) -> list[bytes]:
        """h11's last chunk and trailer section of ``lines`` (``name: value\\r\\n`` pieces)."""
        fields = list(zip(lines[::4], lines[2::4], strict=True))
        return self.conn.send_with_data_passthrough(h11.EndOfMessage(headers=fields)) or []

    def continue_bytes(self) -> bytes:
        """``100 Continue`` while the client still waits for it, else b"" (h11 clears the flag
        once our Response is sent, or body came: RFC 9110 §15.2)."""
        if not self.conn.they_are_waiting_for_100_continue:
            return b""
        return self.conn.send(h11.InformationalResponse(
            status_code=100, headers=[], reason=b"Continue"))

    # --8<-- [start:h11_framer]
    def body(self, body: bytes, more_body: bool) -> list[bytes]:
        """The bytes for one ``http.response.body`` message, the head with the first, as
        pieces to write in order (as ``http1.ResponseFramer.body``).
        Raises http1.ResponseError for a body that is not bytes or breaks its Content-Length
        before h11 wrote a byte, h11.LocalProtocolError after."""
        if type(body) is not bytes:
            raise http1.ResponseError(f"response body must be bytes, not {type(body).__name__}")
        conn = self.conn
        parts: list[bytes] = []
        if not self.head_sent:
            parts = self.head(body, more_body)
        if body and not self.no_body:
            parts += conn.send_with_data_passthrough(h11.Data(data=body)) or ()
        if not more_body:
            parts += conn.send_with_data_passthrough(END_OF_MESSAGE) or ()
        return parts  # one writelines: head and body leave together, the body not copied

    def head(self, body: bytes, more_body: bool) -> list[bytes]:
        status = self.status  # start() came first: the cycle sees to it
        length = self.content_length
        if length is None and not more_body and status != 204 and status != 304 and (
                body or not self.no_body):
            length = len(body)  # the whole body is here: say its size instead of chunking
        elif length is not None and not self.no_body and len(body) != length and (
                len(body) > length or not more_body):  # refused before h11 writes a byte
            raise http1.ResponseError(f"{len(body)} body bytes for Content-Length {length}")
        lines = self.lines  # name, b": ", value, b"\r\n" for each field
        if self.content_length is not None:  # h11 writes it, from the framing fields
            at = lines[::4].index(b"content-length") * 4
            del lines[at:at + 4]
        framing = [] if length is None else [(b"content-length", b"%d" % length)]
        if not self.keep_alive:
            framing.append((b"connection", b"close"))
        # _parsed=True is h11's own parser's way past its syntax checks: the framing fields
        # are ours (digits, "close"), the phrase from http1's table: 10k of toy-h11's 519k
        # instructions a request. (h11 still checks what they mean for the framing.)
        parts = self.conn.send_with_data_passthrough(h11.Response(
            status_code=status, headers=framing, reason=http1.reason(status),
            _parsed=True)) or []
        parts.insert(1, b"".join(lines))
        self.content_length, self.head_sent = None, True
        return parts
    # --8<-- [end:h11_framer]
