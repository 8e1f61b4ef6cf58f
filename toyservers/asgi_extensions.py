"""The ASGI HTTP extensions the toy servers offer, and the rules their messages keep.

A server offers an extension by naming it in ``scope["extensions"]``; an app that finds it
there may send the messages it adds. What every toy server decides the same way is here,
sans I/O (the framers write the bytes: ``http1.ResponseFramer`` by hand, ``h11_checks.
H11Framer`` through h11, ``h2_stream`` through h2):

- ``offered``: which extensions a request's scope names: ``tls`` over TLS; pathsend and
  zerocopysend always (``toyservers.file_response`` sends them); on HTTP/1.1 and HTTP/2
  ``http.response.early_hint``; ``http.response.trailers`` on HTTP/2, and on HTTP/1.1 when
  the request's ``TE`` lists ``trailers`` (``accepts_trailers``);
- ``check_trailers``: the fields of ``http.response.trailers``, checked as header fields are,
  without those a trailer section may not carry (``NOT_TRAILERS``);
- ``check_links`` and ``early_hints``: ``http.response.early_hint``'s links and the 103
  (Early Hints) interim response that carries them on HTTP/1.1. asgiref's text says "after
  the Response Start message", but a 103 must come before the final response (RFC 8297 §2):
  hypercorn and uvicorn take early hints before ``http.response.start`` only, and so do we.

``http.response.debug`` is not offered: the extension "is not meant to be used in production
... and ASGI servers should not implement it" (asgiref, docs/extensions.rst).

Spec: asgiref docs/extensions.rst ("HTTP Trailers", "Early Hints", "Path Send", "Zero Copy
Send"); RFC 9110 §6.5 (trailer
fields), §10.1.4 (TE), §15.2 (1xx, never to HTTP/1.0); RFC 9112 §7.1.2 (the chunked
trailer section); RFC 7230 §4.1.2 (the fields a trailer must not carry, by name); RFC 8297
(103 Early Hints); RFC 8288 (Link).

Compare with: hypercorn/protocol/http_stream.py (``TRAILERS_VERSIONS``,
``EARLY_HINTS_VERSIONS``: HTTP/2 and HTTP/3 only there), uvicorn/protocols/http/
zttp_h2_impl.py (``send``: early hints and trailers on its HTTP/2).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from toyservers import http1
from toyservers._types import Headers

EARLY_HINT, TRAILERS = "http.response.early_hint", "http.response.trailers"
PATHSEND, ZEROCOPYSEND = "http.response.pathsend", "http.response.zerocopysend"

# RFC 9110 §6.5.1: "Many fields cannot be processed outside the header section because their
# evaluation is necessary prior to receiving the content, such as those that describe message
# framing, routing, authentication, request modifiers, response controls, or content format."
# By name, after RFC 7230 §4.1.2's list: framing; routing; request modifiers (RFC 9110 §10.1,
# §13.1); authentication (§11, RFC 6265; Authentication-Info may trail: §11.6.3); response
# controls (§10.2, RFC 9111 §5); content format (§8.3-§8.4, §14.4); and the hop-by-hop fields
# (§7.6.1), which are the server's.
NOT_TRAILERS = frozenset({
    b"content-length", b"transfer-encoding", b"host",
    b"cache-control", b"expect", b"max-forwards", b"pragma", b"range", b"te", b"if-match",
    b"if-none-match", b"if-modified-since", b"if-unmodified-since", b"if-range",
    b"authorization", b"proxy-authorization", b"www-authenticate", b"proxy-authenticate",
    b"cookie", b"set-cookie",
    b"age", b"date", b"expires", b"location", b"retry-after", b"vary", b"warning",
    b"content-encoding", b"content-type", b"content-range", b"trailer",
    b"connection", b"keep-alive", b"proxy-connection", b"upgrade",
})


def accepts_trailers(te: bytes) -> bool:
    """Does a request's TE value (its lines joined with ``,``) list ``trailers``? RFC 9110
    §10.1.4: "The presence of the keyword "trailers" indicates that the sender will not
    discard trailer fields." """
    return b"trailers" in http1.list_elements(te)


def te_lists_trailers(headers: Headers) -> bool:
    """``accepts_trailers`` over a request's fields (lowercased names, as in the scope)."""
    return any(name == b"te" and accepts_trailers(value) for name, value in headers)


def offered(tls: dict[str, Any] | None, http_version: str, trailers: bool) -> dict[str, Any]:
    """A request's ``scope["extensions"]``: pathsend and zerocopysend on every version (where
    no zero copy is possible the server reads the file: ``file_response``); ``tls`` (the
    connection's, or None off TLS); on HTTP/1.1 and HTTP/2 early hints (a 1xx: RFC 9110
    §15.2, "A server MUST NOT send a 1xx response to an HTTP/1.0 client"); trailers on HTTP/2,
    and on HTTP/1.1 when ``trailers`` (the request's TE lists them: asgiref, "The ASGI server
    will only send the trailing headers in case the client has sent the TE: trailers
    header"). HTTP/1.0 has no chunked coding, so no trailer section (RFC 9112 §7.1.2)."""
    extensions: dict[str, Any] = {PATHSEND: {}, ZEROCOPYSEND: {}}
    if tls is not None:
        extensions["tls"] = tls
    if http_version != "1.0":
        extensions[EARLY_HINT] = {}
        if trailers or http_version == "2":
            extensions[TRAILERS] = {}
    return extensions


def check_trailers(headers: Iterable[tuple[bytes, bytes]]) -> list[bytes]:
    """The fields of an ``http.response.trailers`` message, framed as ``name: value\\r\\n``
    pieces (four a field, names lowercased). A name must be a token and a value free of
    control bytes (RFC 9110 §5.5-§5.6.2, as for the head: ``http1.check_response``), and no
    field of ``NOT_TRAILERS`` may come (RFC 9110 §6.5.1). Raises http1.ResponseError."""
    lines: list[bytes] = []
    try:
        for name, value in headers:
            if type(name) is not bytes or type(value) is not bytes:
                raise TypeError("not bytes")
            name = name.lower()
            if not http1.is_token(name) or http1.bad_field_value(value):
                raise http1.ResponseError(f"invalid trailer field {name!r}")
            if name in NOT_TRAILERS:
                raise http1.ResponseError(f"{name!r} may not be a trailer field "
                                          "(RFC 9110 §6.5.1)")
            lines += (name, b": ", value, b"\r\n")
    except (TypeError, ValueError) as exc:  # not pairs of byte strings
        raise http1.ResponseError(f"trailers must be pairs of byte strings: {exc}") from None
    return lines


def check_links(links: Iterable[bytes]) -> list[bytes]:
    """``http.response.early_hint``'s ``links``: Link field values (RFC 8288), each bytes
    without control bytes (RFC 9110 §5.5). Raises http1.ResponseError."""
    try:
        checked = list(links)
    except TypeError:
        raise http1.ResponseError("early hint links must be an iterable of bytes") from None
    for link in checked:
        if type(link) is not bytes or http1.bad_field_value(link):
            raise http1.ResponseError(f"invalid early hint link {link!r}")
    return checked


def early_hints(links: list[bytes]) -> bytes:
    """The 103 (Early Hints) interim response on HTTP/1.1, one Link field a link (RFC 8297
    §2), for checked ``links``."""
    return http1.STATUS_LINES[103] + b"".join(b"link: %s\r\n" % link for link in links) + b"\r\n"
