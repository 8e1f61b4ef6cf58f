"""The conformance suite's one table of what each server does not offer, and its wire helpers.

``FEATURES`` names every feature the suite checks, in matrix order; each test carries one of
them with ``@pytest.mark.feature(name)``. ``UNSUPPORTED`` maps a server to the features it does
not offer, each with the reason; ``conftest.py`` turns every such (server, feature) pair into
``xfail(strict=True)``, so a declared gap that starts to pass is reported as well as a
regression. A reference server that breaks a rule it must keep (a MUST of RFC 9110/9112 or the
ASGI spec) is not "unsupported": it is listed in ``VIOLATIONS`` with the rule, its test is also
``xfail(strict=True)`` so the suite stays green while the reference stays as it is, and the
matrix shows ``fail`` with that reason. Our own servers are never listed there: a toy server
that breaks a rule fails the suite.

The helpers talk raw HTTP/1.1 over a socket with a timeout on every call (RFC 9112 message
framing: Content-Length, chunked, or close-delimited bodies).
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field

from toyservers.registry import SERVERS

HOST = "127.0.0.1"
IO_TIMEOUT = 5.0  # seconds any single socket operation may block

FEATURES: list[str] = [
    "keep-alive",
    "pipelining",
    "http10",
    "connection-close",
    "chunked-request",
    "chunked-response",
    "content-length",
    "head",
    "expect-100-continue",
    "large-upload",
    "large-download",
    "read-backpressure",
    "write-flow-control",
    "disconnect",
    "send-after-disconnect",
    "app-exception-500",
    "no-response-500",
    "lifespan",
    "scope",
    "date-header",
    "idle-timeout",
    "headers-too-large-431",
    "too-many-headers-431",
    "malformed-400",
    "slow-headers",
    "graceful-shutdown",
    "websocket",
    "ws-subprotocol",
    "ws-denial-response",
    "ws-close-codes",
    "ws-app-error",
    "ws-ping-pong",
    "ws-fragmentation",
    "ws-max-size",
    "ws-deflate",
    "ws-shutdown",
    "ws-h2",
    "autobahn",
    "h2c-prior-knowledge",
    "h2-alpn",
    "h2c-upgrade",
    "h2-scope",
    "h2-multiplexing",
    "h2-read-flow-control",
    "h2-write-flow-control",
    "h2-reset",
    "h2-app-error",
    "h2-goaway",
    "https",
    "proxy-headers",
    "forwarded",
    "proxy-protocol",
    "uds",
    "fd",
    "socket-activation",
    "ext-trailers",
    "ext-trailers-h2",
    "ext-early-hints",
    "ext-early-hints-h2",
    "ext-pathsend",
    "ext-pathsend-h2",
    "ext-pathsend-error",
    "ext-zerocopysend",
    "ext-zerocopysend-h2",
    "ext-tls",
]

#: The features whose tests need no particular app: any HTTP/1.1 server that answers ``GET``
#: with 200 and a ``Date`` can be checked on them. The others read what the suite's ASGI app
#: (``apps.py``) answers; against a server of your own (``--own-server``) only these run.
WIRE_FEATURES: frozenset[str] = frozenset({
    "date-header", "idle-timeout", "headers-too-large-431", "too-many-headers-431",
    "malformed-400", "slow-headers",
})

_TOY_HTTP1_ONLY = {
    "websocket": "HTTP/1.1 request/response only: no Upgrade handling",
    "h2c-prior-knowledge": "HTTP/1.1 only",
}

_NO_FILE_EXTENSIONS = "not offered (neither name is in its installed code)"
_NO_EXTENSIONS = {
    "ext-trailers": "not offered over HTTP/1.1",
    "ext-early-hints": "not offered over HTTP/1.1",
    "ext-pathsend": _NO_FILE_EXTENSIONS,
    "ext-pathsend-h2": _NO_FILE_EXTENSIONS,
    "ext-pathsend-error": _NO_FILE_EXTENSIONS,
    "ext-zerocopysend": _NO_FILE_EXTENSIONS,
    "ext-zerocopysend-h2": _NO_FILE_EXTENSIONS,
    "ext-tls": "not offered",
}
# Read from the installed code. uvicorn 0.54.0 offers trailers and early hints only on its
# HTTP/2 (protocols/http/zttp_h2_impl.py, with the zttp package), not with --http httptools
# or h11; daphne 4.2.3 offers none of them; granian 2.8.7's Rust core knows pathsend alone.
_UVICORN_EXTENSIONS = {
    "ext-trailers": "not offered over HTTP/1.1 (uvicorn 0.54.0: on its zttp HTTP/2 only)",
    "ext-early-hints": "not offered over HTTP/1.1 (uvicorn 0.54.0: on its zttp HTTP/2 only)",
}
_SEND_RETURNS = {
    "send-after-disconnect": "send() after the client left returns as if delivered (ASGI HTTP"
                             " spec 2.4: it should raise an OSError subclass)",
}
_UVICORN = {
    **_NO_EXTENSIONS,
    **_UVICORN_EXTENSIONS,
    **_SEND_RETURNS,
    "slow-headers": "no deadline for the header block: every byte received restarts the wait",
}

_UVICORN_WS = {
    "ws-app-error": "an app error after websocket.accept drops the connection without a Close"
                    " frame (the client sees 1006, not 1011)",
    "ws-shutdown": "closes open WebSockets with 1012 (Service Restart), not 1001 (Going Away)",
}
_UVICORN = {**_UVICORN, **_UVICORN_WS}
#: What the reference servers do not offer behind a proxy, each checked in their code: an option
#: that does not exist leaves the registry's section out (toyservers/registry.py), and the row
#: fails for want of it; one that exists but falls short is said here.
_NO_PROXY_PROTOCOL = "no PROXY protocol option"
_NO_LISTEN_FDS = "does not read LISTEN_FDS (systemd's socket is passed with its fd option)"
_UVICORN_PROXY = {
    "forwarded": "X-Forwarded-For and -Proto only, not RFC 7239 Forwarded "
                 "(uvicorn/middleware/proxy_headers.py)",
    "proxy-protocol": _NO_PROXY_PROTOCOL,
    "socket-activation": _NO_LISTEN_FDS + ": --fd 3",
}
_UVICORN = {**_UVICORN, **_UVICORN_PROXY}
_UVICORN_HTTPTOOLS = {
    **_UVICORN,
    "h2c-prior-knowledge": "HTTP/1.1 only with --http httptools",
    "headers-too-large-431": "no limit on the header block with httptools",
    "too-many-headers-431": "no limit on the number of header fields with httptools",
}

UNSUPPORTED: dict[str, dict[str, str]] = {
    "toy-raw": {k: v for k, v in _TOY_HTTP1_ONLY.items() if k != "websocket"},
    "toy-h11": {k: v for k, v in _TOY_HTTP1_ONLY.items() if k != "websocket"},
    "toy-httptools": {k: v for k, v in _TOY_HTTP1_ONLY.items() if k != "websocket"},
    "toy-h2": {},  # HTTP/1.1 by toy-httptools' protocol; HTTP/2 by h2 on the same port
    "toy-anyio": {k: v for k, v in _TOY_HTTP1_ONLY.items() if k != "websocket"},
    "toy-anyio-trio": {k: v for k, v in _TOY_HTTP1_ONLY.items() if k != "websocket"},
    "uvicorn": dict(_UVICORN_HTTPTOOLS),
    "uvicorn-wsproto": dict(_UVICORN_HTTPTOOLS),
    "uvicorn-h11": {
        **_UVICORN,
        "h2c-prior-knowledge": "HTTP/1.1 only with --http h11",
        "headers-too-large-431": "h11's incomplete-event limit answers 400, not 431",
        "too-many-headers-431": "h11's incomplete-event limit answers 400, not 431",
    },
    "hypercorn": {
        **_NO_EXTENSIONS,
        **_SEND_RETURNS,
        "ext-trailers": "offered over HTTP/2 and HTTP/3 only (hypercorn 0.18.0: "
                        "TRAILERS_VERSIONS in protocol/http_stream.py)",
        "ext-early-hints": "offered over HTTP/2 and HTTP/3 only (hypercorn 0.18.0: "
                           "EARLY_HINTS_VERSIONS in protocol/http_stream.py)",
        "expect-100-continue": "sends 100 Continue as soon as the headers arrive",
        "too-many-headers-431": "no limit on the number of header fields",
        "h2-write-flow-control": "send() does not wait for the client's HTTP/2 window: the "
                                 "response is buffered in memory",
        "h2-app-error": "an app failing after http.response.start gets the whole HTTP/2 "
                        "connection closed (every stream on it cut), not an RST_STREAM",
        "ws-shutdown": "closes open WebSockets with 1011 (internal error), not 1001 (Going "
                       "Away)",
        "proxy-headers": "no option: ProxyFixMiddleware wraps the app in code "
                         "(hypercorn/middleware/proxy_fix.py)",
        "forwarded": "no option: ProxyFixMiddleware (mode 'modern') wraps the app in code",
        "proxy-protocol": _NO_PROXY_PROTOCOL,
        "socket-activation": _NO_LISTEN_FDS + ": --bind fd://3",
    },
    "daphne": {
        **_NO_EXTENSIONS,
        **_SEND_RETURNS,
        "ext-trailers": "not offered (daphne 4.2.3 offers no HTTP extension)",
        "ext-early-hints": "not offered (daphne 4.2.3 offers no HTTP extension)",
        "h2c-prior-knowledge": "HTTP/2 only over TLS (ALPN), not h2c prior knowledge",
        "expect-100-continue": "Twisted sends 100 Continue as soon as the headers arrive",
        "large-upload": "Twisted buffers the whole request body before the app runs",
        "large-download": "no write flow control: the response is buffered in memory",
        "read-backpressure": "Twisted buffers the whole request body before the app runs",
        "write-flow-control": "send() never waits for the client",
        "headers-too-large-431": "Twisted drops an oversized header block without a 431",
        "too-many-headers-431": "Twisted answers 400, not 431, to too many header fields",
        "lifespan": "no ASGI lifespan protocol",
        "graceful-shutdown": "SIGTERM stops the Twisted reactor without finishing requests",
        "idle-timeout": "no idle timeout for keep-alive connections by default",
        "slow-headers": "no deadline for the header block by default",
        "ws-denial-response": "the websocket.http.response extension is not offered: a "
                              "refused handshake is always a 403",
        "ws-max-size": "a message over its 1 MiB limit drops the TCP connection without a "
                       "Close frame (Autobahn's failByDrop)",
        "ws-deflate": "permessage-deflate is not negotiated",
        "ws-shutdown": "SIGTERM stops the Twisted reactor: open WebSockets are dropped without"
                       " a Close frame",
        "proxy-headers": "--proxy-headers believes X-Forwarded-For from any peer: it takes no "
                         "list of trusted proxies (daphne/cli.py)",
        "forwarded": "X-Forwarded-For, -Port and -Proto only (daphne/utils.py, "
                     "parse_x_forwarded_for)",
        "proxy-protocol": "Twisted's haproxy: endpoint believes a PROXY header from any peer: "
                          "it takes no list of trusted proxies",
        "socket-activation": _NO_LISTEN_FDS + ": --fd 3",
    },
    "granian": {
        **{name: why for name, why in _NO_EXTENSIONS.items()
           if not name.startswith("ext-pathsend")},
        **_SEND_RETURNS,
        "ext-trailers": "http.response.trailers not offered (granian 2.8.7)",
        "ext-early-hints": "http.response.early_hint not offered (granian 2.8.7)",
        "ext-zerocopysend": "not offered: http.response.pathsend is, in its installed code",
        "ext-zerocopysend-h2": "not offered: http.response.pathsend is, in its installed code",
        "ext-pathsend-error": "a path that cannot be opened is answered 404 Not found by the "
                              "server itself: send() returns, so the app never knows",
        "idle-timeout": "no idle timeout for keep-alive connections by default",
        "slow-headers": "hyper's header read timeout (30 s by default) is beyond the bound",
        "h2c-upgrade": "ignores Upgrade: h2c and answers over HTTP/1.1 (RFC 7540 §3.2 allows "
                       "it; RFC 9113 deprecates the Upgrade)",
        "ext-trailers-h2": "http.response.trailers not offered (granian 2.8.7)",
        "ext-early-hints-h2": "http.response.early_hint not offered (granian 2.8.7)",
        "ws-app-error": "an app error after websocket.accept gets a Close frame without a "
                        "status code (the client sees 1005, not 1011)",
        "ws-max-size": "a message over the limit gets a Close frame without a status code, "
                       "not 1009",
        "ws-deflate": "permessage-deflate is not negotiated",
        "ws-h2": "no WebSocket over HTTP/2: its SETTINGS do not enable extended CONNECT "
                 "(RFC 8441 §3)",
        "ws-shutdown": "SIGTERM drops open WebSockets without a Close frame",
        "proxy-headers": "no option: granian.utils.proxies.wrap_asgi_with_proxy_headers "
                         "wraps the app in code",
        "forwarded": "no option, and the app wrapper reads X-Forwarded-For and -Proto only",
        "proxy-protocol": _NO_PROXY_PROTOCOL,
        "fd": "no option to serve an inherited descriptor (--host/--port or --uds)",
        "socket-activation": "does not read LISTEN_FDS",
    },
}

#: uvicorn's default WebSocket (``--ws auto``: the websockets library's sans-I/O protocol).
_AUTOBAHN_7_1_5 = ("Autobahn case 7.1.5 FAILED: a Close frame between two fragments of a "
                   "message is answered with 1002 (protocol error) instead of a normal close "
                   "(RFC 6455 §5.4: control frames MAY be injected in the middle of a "
                   "fragmented message)")
_UVICORN_HTTPTOOLS_VIOLATIONS = {
    "test_malformed_request_gets_400_and_close[no-host]":
        "answers 200 to an HTTP/1.1 request without Host (RFC 9112 §3.2: MUST respond 400)",
    "test_malformed_request_gets_400_and_close[two-hosts]":
        "answers 200 to a request with two Host fields (RFC 9112 §3.2: MUST respond 400)",
    "test_http10_gets_no_chunked_encoding":
        "sends Transfer-Encoding: chunked to an HTTP/1.0 client (RFC 9112 §6.1: MUST NOT)",
    "test_no_100_continue_to_http10":
        "sends 100 Continue to an HTTP/1.0 client (RFC 9110 §10.1.1: MUST NOT)",
}

VIOLATIONS: dict[str, dict[str, str]] = {
    # server -> "test_name" or "test_name[case]" -> the rule it breaks, with its source
    "uvicorn": {**_UVICORN_HTTPTOOLS_VIOLATIONS, "test_autobahn_fuzzingclient": _AUTOBAHN_7_1_5},
    "uvicorn-wsproto": dict(_UVICORN_HTTPTOOLS_VIOLATIONS),
    "uvicorn-h11": {
        "test_autobahn_fuzzingclient": _AUTOBAHN_7_1_5,
        "test_content_length_with_transfer_encoding_closes":
            "serves a request with both Transfer-Encoding and Content-Length and keeps the"
            " connection open (RFC 9112 §6.3: MUST close after responding)",
    },
    "hypercorn": {
        "test_client_close_code_reaches_the_app":
            "websocket.disconnect carries 1006 instead of the client's close code (ASGI"
            " WebSocket spec, Disconnect: code is the WebSocket close code received)",
        "test_content_length_with_transfer_encoding_closes":
            "serves a request with both Transfer-Encoding and Content-Length and keeps the"
            " connection open (RFC 9112 §6.3: MUST close after responding)",
    },
    "daphne": {
        "test_malformed_request_gets_400_and_close[no-host]":
            "answers 200 to an HTTP/1.1 request without Host (RFC 9112 §3.2: MUST respond 400)",
        "test_malformed_request_gets_400_and_close[two-hosts]":
            "answers 200 to a request with two Host fields (RFC 9112 §3.2: MUST respond 400)",
        "test_date_header_is_a_current_imf_fixdate":
            "sends no Date header (RFC 9110 §6.6.1: an origin server with a clock MUST)",
        "test_app_connection_close_is_honoured":
            "forwards the app's Connection: close but keeps the connection open"
            " (RFC 9112 §9.6: MUST close after sending it)",
        "test_app_returning_without_response_gives_500":
            "an app that returns without responding leaves the client waiting (ASGI HTTP spec:"
            " the server should answer 500)",
        "test_exception_after_start_closes_the_connection":
            "an app that raises after http.response.start leaves a cut response open"
            " (ASGI HTTP spec: the server must close the connection)",
        "test_autobahn_fuzzingclient":
            "Autobahn cases 1.1.1, 1.2.1, 6.1.1 and 6.1.2 FAILED: an empty message is never"
            " sent (websocket.send with text '' or bytes b'' is dropped; ASGI WebSocket spec,"
            " Send: exactly one of bytes or text must be non-None, and '' is not None)",
    },
    "granian": {
        "test_malformed_request_gets_400_and_close[no-host]":
            "answers 200 to an HTTP/1.1 request without Host (RFC 9112 §3.2: MUST respond 400)",
        "test_malformed_request_gets_400_and_close[two-hosts]":
            "answers 200 to a request with two Host fields (RFC 9112 §3.2: MUST respond 400)",
        "test_client_and_server_addresses":
            "scope['client'] carries the port as a str (ASGI HTTP scope: [host, port] with an"
            " int port)",
    },
}


def violation_reason(server: str, test_name: str, case: str) -> str | None:
    """The rule a reference ``server`` breaks in ``test_name`` (for parameter ``case``), or None.

    ``case`` is the test's parameter id without the server, e.g. ``"no-host"`` or ``""``.
    """
    table = VIOLATIONS.get(server, {})
    return table.get(f"{test_name}[{case}]") or table.get(test_name)


#: The HTTP/2 features and the registry protocol each needs: ``h2`` (TLS with ALPN) or
#: ``h2c`` (clear text: prior knowledge, or the HTTP/1.1 Upgrade). A server whose registry
#: entry does not list that protocol is declared unsupported without a line of its own here.
H2_FEATURES: dict[str, str] = {
    "h2c-prior-knowledge": "h2c",
    "h2-alpn": "h2",
    "h2c-upgrade": "h2c",
    "h2-scope": "h2c",
    "h2-multiplexing": "h2c",
    "h2-read-flow-control": "h2c",
    "h2-write-flow-control": "h2c",
    "ext-trailers-h2": "h2c",
    "ext-early-hints-h2": "h2c",
    "h2-reset": "h2c",
    "h2-app-error": "h2c",
    "h2-goaway": "h2c",
    "ext-pathsend-h2": "h2c",
    "ext-zerocopysend-h2": "h2c",
    "ws-h2": "h2c",
}


#: The WebSocket features beyond the handshake (the ``websocket`` row, declared by hand
#: above): a server whose registry entry does not list ``websocket`` is declared unsupported
#: for all of them without a line of its own, so they turn into expected passes the day its
#: entry gains the protocol (and its ``websocket`` line goes). ``ws-h2`` needs ``h2c`` too.
WS_FEATURES = frozenset({"ws-subprotocol", "ws-denial-response", "ws-close-codes",
                         "ws-app-error", "ws-ping-pong", "ws-fragmentation", "ws-max-size",
                         "ws-deflate", "ws-shutdown", "ws-h2", "autobahn"})


def unsupported_reason(server: str, feature: str) -> str | None:
    """Why ``server`` does not offer ``feature``, or None when it claims to: its line in
    ``UNSUPPORTED``, else the registry's protocols without the one the feature needs: the
    HTTP/2 ones (``H2_FEATURES``), then ``websocket`` (``WS_FEATURES``)."""
    reason = UNSUPPORTED.get(server, {}).get(feature)
    if reason is not None or server not in SERVERS:
        return reason
    protocols = SERVERS[server].protocols
    speaks = f"speaks {', '.join(sorted(protocols))} (registry)"
    needs = H2_FEATURES.get(feature)
    if needs is not None and needs not in protocols:
        mode = "in clear text (h2c)" if needs == "h2c" else "over TLS (ALPN h2)"
        return f"no HTTP/2 {mode}: {speaks}"
    if feature in WS_FEATURES and "websocket" not in protocols:
        return f"no WebSocket: {speaks}"
    return None


# --- raw HTTP/1.1 over a socket ---------------------------------------------------------------


def connect(port: int, *, timeout: float = IO_TIMEOUT, rcvbuf: int | None = None
            ) -> socket.socket:
    """A TCP connection to 127.0.0.1:port; ``rcvbuf`` (bytes) shrinks the receive window."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(timeout)
    sock.connect((HOST, port))
    return sock


def request(method: str, target: str, *, version: str = "HTTP/1.1",
            headers: list[tuple[str, str]] | None = None, body: bytes = b"",
            host: bool = True) -> bytes:
    """The bytes of one request; Content-Length is added when ``body`` is given."""
    lines = [f"{method} {target} {version}"]
    if host:
        lines.append(f"Host: {HOST}")
    lines += [f"{name}: {value}" for name, value in headers or []]
    if body and not any(name.lower() == "transfer-encoding" for name, _ in headers or []):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass
class Response:
    """One parsed HTTP/1.x response: status, headers (names lowercased, order kept), body."""

    version: str
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes = b""
    chunked: bool = False
    trailers: list[tuple[str, str]] = field(default_factory=list)
    complete: bool = True

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        for key, value in self.headers:
            if key == name.lower():
                return value
        return None

    def json(self) -> object:
        return json.loads(self.body)


class Connection:
    """A raw client connection that reads responses one at a time, keeping leftover bytes.

    Raises ``TimeoutError`` (``socket.timeout``) when the server stays silent longer than the
    socket's timeout.
    """

    def __init__(self, port: int, *, timeout: float = IO_TIMEOUT, rcvbuf: int | None = None
                 ) -> None:
        self.sock = connect(port, timeout=timeout, rcvbuf=rcvbuf)
        self.buffer = b""
        self.eof = False

    @classmethod
    def over(cls, sock: socket.socket) -> Connection:
        """A Connection on a socket already connected (a UNIX socket, another source)."""
        conn = cls.__new__(cls)
        conn.sock, conn.buffer, conn.eof = sock, b"", False
        return conn

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        """Read more bytes into the buffer; False at EOF (or a reset, which ends it too)."""
        if self.eof:
            return False
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self.buffer += data
        return True

    def _line(self) -> bytes | None:
        while b"\r\n" not in self.buffer:
            if not self._fill():
                return None
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line

    def _exactly(self, size: int) -> tuple[bytes, bool]:
        while len(self.buffer) < size:
            if not self._fill():
                data, self.buffer = self.buffer, b""
                return data, False
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data, True

    def read_exactly(self, size: int) -> bytes:
        """The next ``size`` bytes; EOFError when the server closes the connection first."""
        data, complete = self._exactly(size)
        if not complete:
            raise EOFError(f"the server closed the connection ({len(data)}/{size} bytes)")
        return data

    def read_head(self) -> Response | None:
        """The next status line and header block, or None when the server closed first."""
        line = self._line()
        if line is None:
            return None
        version, status, reason = (line.decode("latin-1").split(" ", 2) + [""])[:3]
        headers: list[tuple[str, str]] = []
        while True:
            field_line = self._line()
            if field_line is None:
                return Response(version, int(status), reason, headers, complete=False)
            if not field_line:
                break
            name, _, value = field_line.decode("latin-1").partition(":")
            headers.append((name.strip().lower(), value.strip()))
        return Response(version, int(status), reason, headers)

    def read_response(self, *, head: bool = False, informational: bool = False
                      ) -> Response | None:
        """The next response with its body framed per RFC 9112 §6.3, or None at EOF.

        ``head``: the request was HEAD, so no body follows (RFC 9110 §9.3.2).
        ``informational``: return 1xx responses instead of skipping them.
        """
        while True:
            response = self.read_head()
            if response is None or not response.complete:
                return response
            if 100 <= response.status < 200:
                if informational:
                    return response
                continue
            break
        if head or response.status in (204, 304):
            return response
        encoding = (response.header("transfer-encoding") or "").lower()
        length = response.header("content-length")
        if encoding.endswith("chunked"):
            response.chunked = True
            self._read_chunked(response)
        elif length is not None:
            response.body, response.complete = self._exactly(int(length))
        else:
            while self._fill():
                pass
            response.body, self.buffer = self.buffer, b""
        return response

    def _read_chunked(self, response: Response) -> None:
        body = bytearray()
        while True:
            line = self._line()
            if line is None:
                response.complete = False
                break
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:
                    trailer = self._line()
                    if trailer is None:
                        response.complete = False
                        break
                    if not trailer:
                        break
                    name, _, value = trailer.decode("latin-1").partition(":")
                    response.trailers.append((name.strip().lower(), value.strip()))
                break
            data, ok = self._exactly(size + 2)
            body += data[:size]
            if not ok:
                response.complete = False
                break
        response.body = bytes(body)

    def closed_within(self, seconds: float) -> bool:
        """True when the server closes the connection within ``seconds`` (bytes it sends first
        are kept in ``buffer``)."""
        deadline = time.monotonic() + seconds
        while not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                self._fill()
            except TimeoutError:
                return False
            finally:
                self.sock.settimeout(IO_TIMEOUT)
        return True


def get(port: int, target: str, *, headers: list[tuple[str, str]] | None = None) -> Response:
    """One GET on a fresh connection; AssertionError when no complete response arrives."""
    with Connection(port) as conn:
        conn.send(request("GET", target, headers=headers))
        response = conn.read_response()
    assert response is not None and response.complete, f"no complete response to GET {target}"
    return response


def poll(port: int, target: str, predicate: object, *, timeout: float = 10.0) -> object:
    """GET ``target`` until ``predicate(json)`` is true; returns the last JSON value.

    Polls every 20 ms up to ``timeout`` seconds (a deadline, not a sleep to synchronise on).
    """
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while True:
        value = get(port, target).json()
        if predicate(value) or time.monotonic() >= deadline:
            return value
        time.sleep(0.02)
