"""The ASGI extensions trailers and early hints: the shared rules, each HTTP/1.1 toy's protocol
on a mock transport (toy-raw, toy-h11, toy-httptools: the ``connect`` fixture), toy-anyio
(both backends) and toy-h2 over loopback, and curl; with a file body (pathsend) before the
trailers on every toy.

The refused cases: a trailer field RFC 9110 §6.5.1 keeps out of trailers, trailers to a
client that did not say ``TE: trailers`` (checked, then dropped), an early hint after
``http.response.start`` and an early hint to an HTTP/1.0 client (not sent).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h11
import pytest

from tests.conformance.h2client import H2Client
from tests.support.protocol_harness import App, Harness
from tests.support.running import HOST, serving
from toyservers import asgi_extensions
from toyservers.asgi_extensions import NOT_TRAILERS, check_links, check_trailers, offered
from toyservers.http1 import ResponseError

Connect = Callable[..., Harness]
GET = b"GET / HTTP/1.1\r\nHost: x\r\n"
GET_TE = GET + b"TE: trailers\r\nConnection: TE\r\n\r\n"
LINK = b"</style.css>; rel=preload; as=style"
TRAILER = (b"x-checksum", b"abc")
NET_TIMEOUT = 5.0


def trailing(trailers: list[list[tuple[bytes, bytes]]], *, length: int | None = None,
             status: int = 200, errors: list[BaseException] | None = None) -> App:
    """An app that promises trailers: ``hello`` (with a Content-Length of ``length``), then
    one ``http.response.trailers`` message per entry of ``trailers``; what ``send`` raises goes
    to ``errors`` (then the app returns)."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = [] if length is None else [(b"content-length", b"%d" % length)]
        try:
            await send({"type": "http.response.start", "status": status, "trailers": True,
                        "headers": [(b"trailer", TRAILER[0]), *headers]})
            await send({"type": "http.response.body", "body": b"hel", "more_body": True})
            await send({"type": "http.response.body", "body": b"lo"})
            for at, fields in enumerate(trailers):
                await send({"type": "http.response.trailers", "headers": fields,
                            "more_trailers": at < len(trailers) - 1})
        except Exception as exc:
            if errors is None:
                raise
            errors.append(exc)
    return app


def hinting(messages: list[dict[str, Any]], errors: list[BaseException] | None = None) -> App:
    """An app that sends ``messages`` (early hints, a start, ...), then ``hello``; what
    ``send`` raises goes to ``errors`` (then the app returns)."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            for message in messages:
                await send(message)
            if not any(m["type"] == "http.response.start" for m in messages):
                await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"hello"})
        except Exception as exc:
            if errors is None:
                raise
            errors.append(exc)
    return app


# --- the shared rules (toyservers/asgi_extensions.py) ---------------------------------------------


def test_offered_by_version_and_te() -> None:
    tls = {"tls_version": 0x0304}
    files = {"http.response.pathsend": {}, "http.response.zerocopysend": {}}  # everywhere
    assert offered(None, "1.1", False) == {**files, "http.response.early_hint": {}}
    assert offered(None, "1.1", True) == {**files, "http.response.early_hint": {},
                                          "http.response.trailers": {}}
    assert offered(tls, "1.0", True) == {**files, "tls": tls}  # no 1xx, no chunked in 1.0
    assert offered(None, "2", False) == {**files, "http.response.early_hint": {},
                                         "http.response.trailers": {}}


@pytest.mark.parametrize(("te", "accepts"), [
    (b"trailers", True), (b"gzip, Trailers", True), (b"gzip;q=0.5", False), (b"", False)])
def test_accepts_trailers(te: bytes, accepts: bool) -> None:
    assert asgi_extensions.accepts_trailers(te) is accepts


def test_trailer_fields_are_checked_as_header_fields() -> None:
    assert check_trailers([(b"X-Checksum", b"abc"), (b"server-timing", b"db;dur=53")]) == [
        b"x-checksum", b": ", b"abc", b"\r\n", b"server-timing", b": ", b"db;dur=53", b"\r\n"]
    for bad in ([(b"bad name", b"x")], [(b"x", b"a\r\nb")], [("x", "y")], [(b"x",)]):
        with pytest.raises(ResponseError):
            check_trailers(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(NOT_TRAILERS))
def test_fields_a_trailer_may_not_carry_are_refused(name: bytes) -> None:
    with pytest.raises(ResponseError, match="RFC 9110 §6.5.1"):
        check_trailers([(name.title(), b"1")])


def test_links_are_checked() -> None:
    assert check_links(iter([LINK])) == [LINK]
    for bad in ([b"a\nb"], ["text"], 5):
        with pytest.raises(ResponseError):
            check_links(bad)  # type: ignore[arg-type]
    assert asgi_extensions.early_hints([LINK, b"</a.js>"]) == (
        b"HTTP/1.1 103 Early Hints\r\nlink: " + LINK + b"\r\nlink: </a.js>\r\n\r\n")


# --- trailers over HTTP/1.1, on each toy's protocol ----------------------------------------------


def test_trailer_section_after_the_last_chunk(connect: Connect) -> None:
    h = connect(trailing([[], [TRAILER]]))  # more_trailers: two messages, one section
    out = h.feed(GET_TE)
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding: chunked" in head.lower()
    assert b"trailer: x-checksum" in head.lower()
    assert body == b"3\r\nhel\r\n2\r\nlo\r\n0\r\nx-checksum: abc\r\n\r\n"
    assert not h.closed and h.feed(GET_TE).endswith(b"0\r\nx-checksum: abc\r\n\r\n")


def test_app_content_length_gives_way_to_chunked_trailers(connect: Connect) -> None:
    # RFC 9112 §6.1: never Content-Length beside Transfer-Encoding; the trailers need chunked
    head, _, body = connect(trailing([[TRAILER]], length=5)).feed(GET_TE).partition(b"\r\n\r\n")
    assert b"content-length" not in head.lower() and b"chunked" in head.lower()
    assert body.endswith(b"lo\r\n0\r\nx-checksum: abc\r\n\r\n")


def test_trailers_without_te_are_dropped(connect: Connect) -> None:
    scopes: list[dict[str, Any]] = []
    app = trailing([[TRAILER]], length=5)

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)
        await app(scope, receive, send)
    h = connect(recording)
    out = h.feed(GET + b"\r\n")
    assert "http.response.trailers" not in scopes[0]["extensions"]
    assert out.endswith(b"\r\n\r\nhello") and b"content-length: 5" in out.lower()
    assert not h.closed and h.feed(GET + b"\r\n").endswith(b"hello")  # and the next one


def test_no_content_no_trailers(connect: Connect) -> None:
    head = connect(trailing([[TRAILER]])).feed(GET_TE.replace(b"GET", b"HEAD"))
    assert head.endswith(b"\r\n\r\n") and b"x-checksum: abc" not in head
    no_content = connect(trailing([[TRAILER]], status=204)).feed(GET_TE)
    assert no_content.endswith(b"\r\n\r\n") and b"0\r\n" not in no_content


@pytest.mark.parametrize("field", [(b"content-length", b"5"), (b"Transfer-Encoding", b"gzip"),
                                   (b"host", b"x"), (b"content-type", b"text/plain"),
                                   (b"x-bad", b"a\nb")])
def test_refused_trailer_field_reaches_the_app_and_cuts_the_response(
        connect: Connect, field: tuple[bytes, bytes]) -> None:
    errors: list[BaseException] = []
    h = connect(trailing([[field]], errors=errors))
    out = h.feed(GET_TE)
    assert [type(e) for e in errors] == [ResponseError]
    assert not out.endswith(b"0\r\n\r\n") and b"\r\n0\r\n" not in out  # no last chunk: cut
    assert h.closed


def test_trailers_out_of_order_are_refused(connect: Connect) -> None:
    errors: list[BaseException] = []

    async def early(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "trailers": True})
        try:
            await send({"type": "http.response.trailers", "headers": []})
        except RuntimeError as exc:
            errors.append(exc)
        await send({"type": "http.response.body", "body": b"x"})
        try:
            await send({"type": "http.response.body", "body": b"more"})
        except RuntimeError as exc:
            errors.append(exc)
        await send({"type": "http.response.trailers", "headers": []})
        try:
            await send({"type": "http.response.trailers", "headers": []})
        except RuntimeError as exc:
            errors.append(exc)
    out = connect(early).feed(GET_TE)
    assert [str(e).split("'")[1] for e in errors] == ["http.response.trailers",
                                                       "http.response.body",
                                                       "http.response.trailers"]
    assert out.endswith(b"1\r\nx\r\n0\r\n\r\n")


# --- early hints over HTTP/1.1 --------------------------------------------------------------------


def test_early_hints_precede_the_response(connect: Connect) -> None:
    hint = {"type": "http.response.early_hint", "links": [LINK, b"</a.js>"]}
    out = connect(hinting([hint, hint])).feed(GET + b"\r\n")
    one = b"HTTP/1.1 103 Early Hints\r\nlink: " + LINK + b"\r\nlink: </a.js>\r\n\r\n"
    assert out.startswith(one + one + b"HTTP/1.1 200 OK\r\n") and out.endswith(b"hello")


def test_no_early_hint_to_http10(connect: Connect) -> None:
    scopes: list[dict[str, Any]] = []
    app = hinting([{"type": "http.response.early_hint", "links": [LINK]}])

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)
        await app(scope, receive, send)
    out = connect(recording).feed(b"GET / HTTP/1.0\r\n\r\n")
    assert "http.response.early_hint" not in scopes[0]["extensions"]
    assert out.startswith(b"HTTP/1.1 200 OK\r\n") and b"103" not in out


def test_early_hint_after_start_is_refused(connect: Connect) -> None:
    errors: list[BaseException] = []
    start = {"type": "http.response.start", "status": 200, "headers": []}
    out = connect(hinting([start, {"type": "http.response.early_hint", "links": [LINK]}],
                          errors)).feed(GET + b"\r\n")
    assert [type(e) for e in errors] == [RuntimeError] and b"103" not in out


def test_bad_link_gets_a_500(connect: Connect) -> None:
    errors: list[BaseException] = []
    out = connect(hinting([{"type": "http.response.early_hint", "links": [b"a\r\nb"]}],
                          errors)).feed(GET + b"\r\n")
    assert [type(e) for e in errors] == [ResponseError]
    assert out.startswith(b"HTTP/1.1 500 ")


def test_early_hint_keeps_100_continue(connect: Connect) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.early_hint", "links": [LINK]})
        body = (await receive())["body"]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
    h = connect(app)
    out = h.feed(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                 b"Expect: 100-continue\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 103 ") and out.endswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert h.feed(b"hi").endswith(b"\r\n\r\nhi")


# --- toy-anyio (asyncio, trio) and toy-h2 over loopback -------------------------------------------


def raw_exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection((HOST, port), timeout=NET_TIMEOUT) as conn:
        conn.sendall(data)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


async def both(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An early hint, then ``hello`` with a trailer when the scope offers trailers."""
    await send({"type": "http.response.early_hint", "links": [LINK]})
    trailers = "http.response.trailers" in scope["extensions"]
    await send({"type": "http.response.start", "status": 200, "trailers": trailers})
    await send({"type": "http.response.body", "body": b"hello"})
    if trailers:
        await send({"type": "http.response.trailers", "headers": [TRAILER]})


@pytest.mark.parametrize("server", ["toy-anyio", "toy-anyio-trio", "toy-h2"])
def test_http1_servers_over_loopback(server: str) -> None:
    with serving(server, both) as port:
        out = raw_exchange(port, GET_TE.replace(b"Connection: TE", b"Connection: close, TE"))
    assert out.startswith(b"HTTP/1.1 103 Early Hints\r\nlink: " + LINK + b"\r\n\r\n")
    assert out.endswith(b"5\r\nhello\r\n0\r\nx-checksum: abc\r\n\r\n")


def test_toy_h2_early_hint_and_refused_trailer() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] == "/bad":
            await send({"type": "http.response.start", "status": 200, "trailers": True})
            await send({"type": "http.response.body", "body": b"x"})
            await send({"type": "http.response.trailers", "headers": [(b"content-length", b"1")]})
        else:
            await both(scope, receive, send)
    with serving("toy-h2", app) as port, H2Client(port) as client:
        ok = client.response(client.request("GET", "/"))
        bad = client.response(client.request("GET", "/bad"))
    assert [[p for p in hint if p[0] != "date"] for hint in ok.informational] == [
        [(":status", "103"), ("link", LINK.decode())]]
    assert ok.status == 200 and bytes(ok.data) == b"hello" and ok.trailers == {
        "x-checksum": "abc"}
    assert bad.reset_code is not None and not bad.trailers  # cut: RST_STREAM, not trailers


# --- real clients ---------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.parametrize("server", ["toy-raw", "toy-h11", "toy-httptools"])
def test_curl_shows_the_trailer_section_and_the_103(server: str) -> None:
    def curl(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["curl", "-sS", "--max-time", "5", *args], capture_output=True,
                              timeout=NET_TIMEOUT * 2, check=True)
    with serving(server, both) as port:
        url = f"http://{HOST}:{port}/"
        raw = curl("--raw", "-H", "TE: trailers", "-H", "Connection: TE", url).stdout
        verbose = curl("-v", url).stderr
    assert raw == b"5\r\nhello\r\n0\r\nx-checksum: abc\r\n\r\n"  # --raw: the chunks as sent
    assert b"< HTTP/1.1 103 Early Hints" in verbose and b"< link: " + LINK in verbose
    assert verbose.index(b"103 Early Hints") < verbose.index(b"< HTTP/1.1 200 OK")


# --- the extensions together: an early hint, a file body, then trailers ---------------------------


def hinted_file_with_trailer(path: str) -> App:
    """An app: an early hint, then the file at ``path`` by ``http.response.pathsend`` in a
    response that promises trailers, then the trailer (sent where offered, else dropped)."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.early_hint", "links": [LINK]})
        await send({"type": "http.response.start", "status": 200, "trailers": True})
        await send({"type": "http.response.pathsend", "path": path})
        await send({"type": "http.response.trailers", "headers": [TRAILER]})
    return app


def h11_exchange(port: int, te: bool) -> list[Any]:
    """One GET (with ``TE: trailers`` if ``te``), then close: the events h11 reads back."""
    client = h11.Connection(h11.CLIENT)
    headers = [("Host", "x"), ("Connection", "close")] + ([("TE", "trailers")] if te else [])
    events: list[Any] = []
    with socket.create_connection((HOST, port), timeout=NET_TIMEOUT) as conn:
        conn.sendall(client.send(h11.Request(method="GET", target="/", headers=headers)) +
                     client.send(h11.EndOfMessage()))
        while not events or type(events[-1]) not in (h11.EndOfMessage, h11.ConnectionClosed):
            event = client.next_event()
            if event is h11.NEED_DATA:
                client.receive_data(conn.recv(65536))
            else:
                events.append(event)
    return events


@pytest.mark.parametrize("server", ["toy-raw", "toy-h11", "toy-httptools", "toy-anyio",
                                    "toy-anyio-trio", "toy-h2"])
@pytest.mark.parametrize("te", [True, False])
def test_file_body_before_trailers_over_http1(server: str, te: bool, tmp_path: Path) -> None:
    # A file body in a response that ends with trailers goes by the read loop (sendfile would
    # end the chunked body itself), its pieces chunked before the trailer section.
    path = tmp_path / "body.bin"
    path.write_bytes(data := os.urandom(150_000))  # three pieces of file_response.READ_SIZE
    with serving(server, hinted_file_with_trailer(str(path))) as port:
        events = h11_exchange(port, te)
    hint, response, *body, end = events
    assert hint.status_code == 103 and (b"link", LINK) in hint.headers
    assert response.status_code == 200
    assert b"".join(bytes(event.data) for event in body) == data
    assert end.headers == ([TRAILER] if te else [])


def test_file_body_before_trailers_over_http2(tmp_path: Path) -> None:
    path = tmp_path / "body.bin"
    path.write_bytes(data := os.urandom(150_000))  # more than the initial HTTP/2 window
    with serving("toy-h2", hinted_file_with_trailer(str(path))) as port, H2Client(port) as client:
        response = client.response(client.request("GET", "/"))
    assert [[p for p in hint if p[0] != "date"] for hint in response.informational] == [
        [(":status", "103"), ("link", LINK.decode())]]
    assert response.status == 200 and bytes(response.data) == data
    assert response.trailers == {"x-checksum": "abc"}
