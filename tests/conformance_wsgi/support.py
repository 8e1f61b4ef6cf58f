"""The WSGI conformance suite's table of what each server does not offer: the ASGI suite's shape.

``FEATURES`` names every feature the suite checks, in matrix order; each test carries one of
them with ``@pytest.mark.feature(name)``. ``UNSUPPORTED`` maps a server to the features it
does not offer, each with what it does instead; ``conftest.py`` turns each such pair into
``xfail(strict=True)``, so a declared gap that starts to pass is reported as well as a
regression. ``VIOLATIONS`` lists a reference server's breaches of a rule it must keep (a MUST
of PEP 3333 or RFC 9110/9112), by test; those are strict xfails too, and show as ``fail`` in
the matrix. Our own servers are never excused in ``VIOLATIONS``; a toy-wsgi bug found by the
suite is declared in ``TOY_BUGS`` (strict xfail, the reason says what is wrong) until the
server's owner fixes it.

The raw HTTP/1.1 client is the ASGI suite's (``tests/conformance/support.py``).
"""

from __future__ import annotations

from tests.conformance.support import (  # noqa: F401 (re-exported for the tests)
    HOST,
    IO_TIMEOUT,
    Connection,
    Response,
    get,
    request,
)

FEATURES: list[str] = [
    "environ-keys",
    "path-info",
    "query-string",
    "content-headers",
    "http-headers",
    "wsgi-flags",
    "input-read",
    "input-to-end",
    "input-bounded",
    "chunked-request",
    "errors-stream",
    "write-callable",
    "lazy-headers",
    "exc-info",
    "exc-info-after-headers",
    "close-called",
    "file-wrapper",
    "hop-by-hop-refused",
    "content-length",
    "short-body-closes",
    "header-injection-refused",
    "date-header",
    "chunked-response",
    "http10",
    "head",
    "keep-alive",
    "idle-timeout",
    "pipelining",
    "connection-close",
    "expect-100-continue",
    "no-100-to-http10",
    "malformed-400",
    "te-and-cl-closes",
    "app-exception-500",
    "no-response-500",
    "large-download",
    "proxy-headers",
    "forwarded",
    "proxy-protocol",
    "uds",
    "fd",
    "socket-activation",
]

#: Servers whose app runs in several threads of one process at once (``wsgi.multithread``
#: must then be true; a single-threaded server may say true, which is only conservative).
THREADED = {"toy-wsgi-gthread", "gunicorn-gthread", "waitress"}

_SYNC_WORKER = {
    "keep-alive": "the sync worker answers one request per connection (Connection: close), so"
                  " an idle keep-alive client cannot hold its only thread",
    "pipelining": "the sync worker answers one request per connection and closes",
}
_EAGER_100 = "sends 100 Continue as soon as the headers arrive, before the app reads"
_GUNICORN_EXC_INFO = ("a second start_response with exc_info replaces the status but keeps the"
                      " first call's headers, adding the new ones")

#: Behind a proxy (the rows of test_proxies.py), checked in each server's code. An option that
#: does not exist is left out of the registry's entry (toyservers/registry.py).
_GUNICORN_PROXY = {
    "proxy-headers": "believes X-Forwarded-Proto from --forwarded-allow-ips "
                     "(secure_scheme_headers) but never X-Forwarded-For: REMOTE_ADDR stays the "
                     "proxy's (gunicorn/http/wsgi.py)",
    "forwarded": "no RFC 7239 Forwarded, and REMOTE_ADDR never comes from a header",
}
_NO_LISTEN_FDS = "does not read LISTEN_FDS"

UNSUPPORTED: dict[str, dict[str, str]] = {
    "toy-wsgi": dict(_SYNC_WORKER),
    "gunicorn": {**_SYNC_WORKER, "expect-100-continue": _EAGER_100,
                 "exc-info": _GUNICORN_EXC_INFO, **_GUNICORN_PROXY},
    "gunicorn-gthread": {
        **_GUNICORN_PROXY,
        "expect-100-continue": _EAGER_100,
        "exc-info": _GUNICORN_EXC_INFO,
        "short-body-closes": "after a body shorter than the app's Content-Length it keeps the"
                             " connection and answers the next request there, which the"
                             " client reads as the rest of the body",
    },
    "waitress": {
        "expect-100-continue": _EAGER_100 + " (and reads the whole body before the app runs)",
        "idle-timeout": "closes an idle connection after channel_timeout, 120 s by default",
        "large-download": "takes the whole response from the app, buffered (in a temporary"
                          " file past outbuf_overflow) up to outbuf_high_watermark (16 MB by"
                          " default), before the app's thread waits for the client",
        "forwarded": "trusts Forwarded or X-Forwarded-*, not both (waitress/adjustments.py "
                     "refuses the two in --trusted-proxy-headers): the registry trusts "
                     "X-Forwarded-*",
        "proxy-protocol": "no PROXY protocol option",
        "fd": "no option: an inherited socket is passed from Python only (serve(sockets=))",
        "socket-activation": _NO_LISTEN_FDS,
    },
    "wsgiref": {
        "input-to-end": "wsgi.input is the socket's file: read() without a size, readlines()"
                        " and iteration wait for the client to close",
        "chunked-request": "no chunked decoding: the app gets the chunked bytes as they came,"
                           " with no CONTENT_LENGTH and no wsgi.input_terminated",
        "chunked-response": "an HTTP/1.0 server: a body without Content-Length is"
                            " close-delimited",
        "keep-alive": "an HTTP/1.0 server: one request per connection",
        "pipelining": "an HTTP/1.0 server: one request per connection",
        "expect-100-continue": "an HTTP/1.0 server: no 100 Continue",
        "header-injection-refused": "writes the app's header values as they are: a CRLF in"
                                    " one adds a field (PEP 3333 puts the duty on the app)",
        "malformed-400": "http.server's parsing: a field line without a colon is accepted, and"
                         " a request line of four words gets no response at all",
        "proxy-headers": "wsgiref.simple_server reads no forwarding headers",
        "forwarded": "wsgiref.simple_server reads no forwarding headers",
        "proxy-protocol": "no PROXY protocol support",
        "uds": "wsgiref.simple_server binds a TCP host and port only",
        "fd": "wsgiref.simple_server binds a TCP host and port only",
        "socket-activation": _NO_LISTEN_FDS,
    },
}

_HEAD_BODY = ("sends the app's body in the response to HEAD (RFC 9110 §9.3.2: the server MUST"
              " NOT send content)")
VIOLATIONS: dict[str, dict[str, str]] = {
    # server -> "test_name" or "test_name[case]" -> the rule it breaks, with its source
    "gunicorn": {
        "test_app_returning_without_start_response_gives_500":
            "answers an app that returns without calling start_response with the status line"
            " 'HTTP/1.1 None' (RFC 9112 §4: the status code is three digits)",
    },
    "waitress": {
        "test_head_has_the_headers_and_no_body": _HEAD_BODY,
        "test_head_of_a_streamed_response_has_no_body": _HEAD_BODY,
        "test_content_length_with_transfer_encoding_closes":
            "serves a request with both Transfer-Encoding and Content-Length and keeps the"
            " connection open (RFC 9112 §6.3: MUST close after responding)",
    },
    "wsgiref": {
        "test_head_has_the_headers_and_no_body": _HEAD_BODY,
        "test_head_of_a_streamed_response_has_no_body": _HEAD_BODY,
        "test_malformed_request_gets_400_and_close[content-length]":
            "hands an invalid Content-Length to the app (RFC 9112 §6.3: the server MUST respond"
            " 400 and close)",
    },
}

#: toy-wsgi bugs the suite found (toyservers/wsgi_server.py is not this suite's to edit):
#: server -> "test_name" or "test_name[case]" -> what is wrong. Strict xfails, shown as fail.
TOY_BUGS: dict[str, dict[str, str]] = {
}


def _lookup(table: dict[str, dict[str, str]], server: str, test_name: str, case: str
            ) -> str | None:
    entries = table.get(server, {})
    return entries.get(f"{test_name}[{case}]") or entries.get(test_name)


def violation_reason(server: str, test_name: str, case: str) -> str | None:
    """The rule ``server`` breaks in ``test_name`` (for parameter ``case``), or None."""
    return _lookup(VIOLATIONS, server, test_name, case) or _lookup(TOY_BUGS, server,
                                                                    test_name, case)


def unsupported_reason(server: str, feature: str) -> str | None:
    """Why ``server`` does not offer ``feature``, or None when it claims to."""
    return UNSUPPORTED.get(server, {}).get(feature)
