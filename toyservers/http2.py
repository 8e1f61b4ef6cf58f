"""The HTTP/2 rules toy-h2 keeps beside h2: request pseudo-header fields, the h2c upgrade, the
abuse budgets. Nothing here touches a socket or the event loop, so each is tested alone.

h2 (the sans-IO library) frames, parses HPACK, keeps the stream state machines and checks the
pseudo-header fields' grammar; what it leaves to a server is written here once:

- ``request_target``: a request's pseudo-header fields turned into what the ASGI scope needs
  (RFC 9113 §8.3.1), and the requests we answer instead of the app (CONNECT, a bad ``:path``,
  too many fields);
- ``h2c_settings``: may an HTTP/1.1 request be upgraded to h2c (RFC 7540 §3.2)?
- ``FloodBudget``: what a client may make us do per interval without an app's help, resets and
  control frames, past which the connection ends with ENHANCE_YOUR_CALM (RFC 9113 §7);
- ``goaway``: a GOAWAY frame framed outside h2's state machine (graceful shutdown).

Spec: RFC 9113 §3.4 (preface), §6.8 (GOAWAY), §7 (error codes), §8.3 (pseudo-header fields),
§10.5 (denial of service); RFC 7540 §3.2 (h2c upgrade, removed from RFC 9113 but still what
``curl --http2`` sends).

Compare with: hypercorn/protocol/h2.py (its ``_create_stream`` and ``_handle_events``),
nghttp2's ``nghttp2_session`` flood counters.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable

from h2.errors import ErrorCodes
from hyperframe.frame import GoAwayFrame

from toyservers import http1
from toyservers._types import Headers, Scope

PREFACE = http1.H2_PREFACE_BYTES  # RFC 9113 §3.4, the client's first 24 bytes
SWITCHING = b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n"
#: Fields of an HTTP/1.1 upgrade request that mean nothing on HTTP/2 (RFC 9113 §8.2.2).
CONNECTION_SPECIFIC = frozenset({b"connection", b"upgrade", b"http2-settings", b"keep-alive",
                                 b"proxy-connection", b"transfer-encoding"})
MAX_CONCURRENT_STREAMS = 100  # streams open at once per connection (RFC 9113 §5.1.2)
FLOOD_INTERVAL = 10.0  # seconds over which a FloodBudget counts
MAX_RESETS = 200  # streams a client may reset per interval (rapid reset, CVE-2023-44487)
MAX_CONTROL_FRAMES = 1000  # PING, SETTINGS, PRIORITY, empty DATA per interval (CVE-2019-95xx)


def request_target(fields: Iterable[tuple[bytes, bytes]], max_headers: int
                   ) -> tuple[int, str, bytes, bytes, Headers]:
    """``(status, method, raw_path, query_string, headers)`` of a request's decoded fields.

    The pseudo-header fields (``:method``, ``:scheme``, ``:path``, ``:authority``) are taken
    out; h2 checked them (RFC 9113 §8.3.1: the first three once each, none unknown or after a
    regular field), and joined the cookie fields (§8.2.3). ``:authority`` is added to
    ``headers`` as ``host`` when there is none, since apps read ``host`` (§8.3.1: the two
    "MUST NOT" differ). ``status`` is 0, or the answer to give instead of running the app: 501
    for CONNECT (no proxy here), 400 for a ``:path`` of no request-target form (RFC 9112
    §3.2), 431 past ``max_headers`` fields (RFC 6585 §5).
    """
    pseudo, headers = {}, []
    for name, value in fields:
        if name[:1] == b":":
            pseudo[name] = value
        else:
            headers.append((name, value))
    method = pseudo.get(b":method", b"").decode("ascii", "replace")
    authority = pseudo.get(b":authority")
    if authority is not None and not any(name == b"host" for name, _ in headers):
        headers.insert(0, (b"host", authority))
    if method == "CONNECT":
        return 501, method, b"", b"", headers
    try:
        raw_path, query = http1.split_target(method, pseudo.get(b":path", b""))
    except http1.BadTarget:
        return 400, method, b"", b"", headers
    return (431 if len(headers) > max_headers else 0), method, raw_path, query, headers


def h2c_settings(scope: Scope) -> bytes | None:
    """The decoded ``HTTP2-Settings`` of an ``Upgrade: h2c`` request (a SETTINGS frame's
    payload), or None when it may not be upgraded: RFC 7540 §3.2 wants ``h2c`` first in
    Upgrade, one HTTP2-Settings of whole 6-byte settings, both named in Connection; our own
    rule: no request body (it would have to be read as HTTP/1.1 first)."""
    fields: dict[bytes, list[bytes]] = {}
    for name, value in scope["headers"]:
        fields.setdefault(name, []).append(value)
    connection = http1.list_elements(b",".join(fields.get(b"connection", [])))
    settings = fields.get(b"http2-settings", [])
    if (http1.list_elements(b",".join(fields.get(b"upgrade", [])))[:1] != [b"h2c"]
            or len(settings) != 1 or not {b"upgrade", b"http2-settings"} <= set(connection)
            or b"transfer-encoding" in fields or fields.get(b"content-length", [b"0"]) != [b"0"]):
        return None
    try:  # base64url, its padding left out (RFC 7540 §3.2.1)
        decoded = base64.b64decode(settings[0] + b"=" * (-len(settings[0]) % 4), b"-_",
                                   validate=True)
    except (binascii.Error, ValueError):
        return None
    return None if len(decoded) % 6 else decoded


class FloodBudget:
    """What one client may make us do without an app's help, per ``FLOOD_INTERVAL`` seconds.

    ``spend(resets, control)`` counts streams the client reset (rapid reset: each one started
    an app for nothing) and control frames we must answer or process (PING, SETTINGS,
    PRIORITY, empty DATA: the 2019 floods); it returns None while within ``MAX_RESETS`` and
    ``MAX_CONTROL_FRAMES``, else the name of the attack. ``clock`` gives seconds (the event
    loop's ``time``). Compare with nghttp2's per-session flood counters and Go's
    ``http2.Server`` rapid-reset fix (CVE-2023-44487), which bound the same things.
    """

    __slots__ = ("clock", "start", "resets", "control")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.start, self.resets, self.control = clock(), 0, 0

    def spend(self, resets: int = 0, control: int = 0) -> str | None:
        now = self.clock()
        if now - self.start >= FLOOD_INTERVAL:
            self.start, self.resets, self.control = now, 0, 0
        self.resets += resets
        self.control += control
        if self.resets > MAX_RESETS:
            return "rapid reset"
        return "control frame flood" if self.control > MAX_CONTROL_FRAMES else None


def goaway(last_stream_id: int, error_code: ErrorCodes = ErrorCodes.NO_ERROR) -> bytes:
    """A GOAWAY frame (RFC 9113 §6.8) as bytes. h2's ``close_connection`` also frames one,
    but then refuses to send anything more, so a graceful shutdown, whose streams in flight
    must finish, frames its own."""
    frame = GoAwayFrame(0)
    frame.last_stream_id, frame.error_code = last_stream_id, error_code
    return frame.serialize()
