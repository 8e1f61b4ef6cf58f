"""A body from a file (``toyservers.file_response``: the pathsend and zerocopysend extensions)
on the three asyncio HTTP/1.1 toys, end to end over loopback, both ways a server sends it:
``os.sendfile`` on a plain socket, on ``asyncio``'s own loop and on ``uvloop``, and ``read``
(the 64 KiB read loop of TLS, anyio and HTTP/2, forced here by ``can_sendfile`` answering
False). tests/test_sendfile.py holds what is the sendfile way's own (backpressure, a peer
that leaves mid-file). The same rows on every ASGI server, toy-anyio and toy-h2 included,
are tests/conformance/test_file_responses.py.
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from tests.conformance.h2client import H2Client
from tests.support.protocol_harness import PROTOCOLS
from tests.support.running import HOST, serving
from toyservers import file_response

NET_TIMEOUT = 5.0  # seconds, for every HTTP call
#: Bytes of the file: more than two pieces of the read loop, not a multiple of one.
SIZE = 2 * file_response.READ_SIZE + 12_345
DATA = bytes(range(256)) * (SIZE // 256) + bytes(SIZE % 256)
SMALL = 1000  # bytes of the file a Content-Length test serves: one piece either way


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("files")
    (folder / "big.bin").write_bytes(DATA)
    (folder / "small.bin").write_bytes(DATA[:SMALL])
    return {"big": folder / "big.bin", "small": folder / "small.bin"}


def make_app(files: dict[str, Path], seen: list[Any]) -> Any:
    """Routes: ``/cl`` and ``/chunked`` (pathsend of the big file, with and without its
    Content-Length), ``/length?N`` (pathsend of the small file with Content-Length N),
    ``/zerocopy`` (three zerocopysend messages, see the test), ``/relative`` and ``/folder``
    (pathsend of a relative path, of a folder: the error's name is the body)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path, query = scope["path"], scope["query_string"].decode()
        seen.append(scope)
        head: list[tuple[bytes, bytes]] = []
        if path == "/cl":
            head = [(b"content-length", b"%d" % SIZE)]
        elif path == "/length":
            head = [(b"content-length", query.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        if path in ("/cl", "/chunked"):
            await send({"type": "http.response.pathsend", "path": str(files["big"])})
        elif path == "/length":
            await send({"type": "http.response.pathsend", "path": str(files["small"])})
        elif path in ("/relative", "/folder"):
            where = "big.bin" if path == "/relative" else str(files["big"].parent)
            try:
                await send({"type": "http.response.pathsend", "path": where})
            except (ValueError, OSError) as exc:
                await send({"type": "http.response.body", "body": type(exc).__name__.encode()})
        elif path == "/zerocopy":
            with files["big"].open("rb") as file:
                file.seek(5)
                await send({"type": "http.response.zerocopysend", "file": file, "offset": 10,
                            "count": 7, "more_body": True})  # the position stays at 5
                await send({"type": "http.response.zerocopysend", "file": file.fileno(),
                            "count": 3, "more_body": True})  # from 5, the position moves
                seen.append(file.tell())
                await send({"type": "http.response.zerocopysend", "file": file,
                            "offset": SIZE - 4, "more_body": True})  # to the end: 4 bytes
                await send({"type": "http.response.body", "body": b"|"})

    return app


#: How a file goes out: os.sendfile on either loop, or the read loop (on asyncio's loop).
WAYS = ("asyncio", "uvloop", "read")


@pytest.fixture(params=[(toy, way) for toy in PROTOCOLS for way in WAYS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def server(request: pytest.FixtureRequest, files: dict[str, Path],
           monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, list[Any]]]:
    toy, way = request.param
    if way == "read":
        monkeypatch.setattr(file_response, "can_sendfile", lambda transport: False)
    seen: list[Any] = []
    with serving(toy, make_app(files, seen), loop="uvloop" if way == "uvloop" else "asyncio"
                 ) as port:
        yield port, seen


def test_pathsend_with_its_content_length_on_one_connection(
        server: tuple[int, list[Any]]) -> None:
    port, seen = server
    with httpx.Client(base_url=f"http://{HOST}:{port}", timeout=NET_TIMEOUT) as client:
        for _ in range(2):
            response = client.get("/cl")
            assert response.status_code == 200 and response.content == DATA
            assert response.headers["content-length"] == str(SIZE)
    assert seen[0]["client"] == seen[1]["client"]  # kept alive: one connection for both
    assert "http.response.pathsend" in seen[0]["extensions"]
    assert "http.response.zerocopysend" in seen[0]["extensions"]


def test_pathsend_without_a_content_length_is_chunked(server: tuple[int, list[Any]]) -> None:
    port, _ = server
    response = httpx.get(f"http://{HOST}:{port}/chunked", timeout=NET_TIMEOUT)
    assert response.status_code == 200 and response.content == DATA
    assert response.headers["transfer-encoding"] == "chunked"


def test_head_gets_the_head_only(server: tuple[int, list[Any]]) -> None:
    port, _ = server
    with socket.create_connection((HOST, port), timeout=NET_TIMEOUT) as sock:
        sock.sendall(b"HEAD /cl HTTP/1.1\r\nHost: x\r\n\r\nGET /length?1000 HTTP/1.1\r\n"
                     b"Host: x\r\nConnection: close\r\n\r\n")
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, rest = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"content-length: %d" % SIZE in head.lower()
    assert rest.startswith(b"HTTP/1.1 200")  # no body byte between the two responses
    assert rest.endswith(DATA[:SMALL])


def test_zerocopysend_keeps_the_offset_count_and_position_rules(
        server: tuple[int, list[Any]]) -> None:
    port, seen = server
    response = httpx.get(f"http://{HOST}:{port}/zerocopy", timeout=NET_TIMEOUT)
    assert response.status_code == 200
    assert response.content == DATA[10:17] + DATA[5:8] + DATA[-4:] + b"|"
    assert seen[-1] == 8  # moved past the 3 bytes sent without an offset, not by the others


@pytest.mark.parametrize("length", [SMALL - 1, SMALL + 1])
def test_a_file_that_breaks_its_content_length_gets_500(
        server: tuple[int, list[Any]], length: int) -> None:
    port, _ = server
    response = httpx.get(f"http://{HOST}:{port}/length?{length}", timeout=NET_TIMEOUT)
    assert response.status_code == 500  # refused before a byte of the 200 was written


@pytest.mark.parametrize(("path", "error"), [("/relative", b"ValueError"),
                                            ("/folder", b"IsADirectoryError")])
def test_a_path_that_is_no_file_raises_in_the_app(server: tuple[int, list[Any]], path: str,
                                                  error: bytes) -> None:
    port, _ = server
    response = httpx.get(f"http://{HOST}:{port}{path}", timeout=NET_TIMEOUT)
    assert (response.status_code, response.content) == (200, error)


def test_a_file_body_leaves_the_file_position_of_an_fd_as_the_rules_say(
        files: dict[str, Path]) -> None:
    """``FileBody.done``: offset given, the position stays; none given, it moves past."""
    fd = os.open(files["big"], os.O_RDONLY)
    try:
        os.lseek(fd, 3, os.SEEK_SET)
        body = file_response.open_body({"type": "http.response.zerocopysend", "file": fd,
                                        "offset": 100, "count": 10 ** 9})
        assert (body.offset, body.count) == (100, SIZE - 100)  # past the end: what is there
        body.done(body.count)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 3
        body = file_response.open_body({"type": "http.response.zerocopysend", "file": fd,
                                        "count": 10})
        body.done(body.count)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 13
    finally:
        os.close(fd)


@pytest.mark.parametrize("toy", list(PROTOCOLS))
def test_over_tls_the_file_goes_by_the_read_loop(toy: str, files: dict[str, Path],
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Under TLS ``can_sendfile`` says no (the kernel cannot encrypt): the read loop sends it."""
    ca = trustme.CA()
    issued = ca.issue_cert(HOST)
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    issued.private_key_and_cert_chain_pem.write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    context = ssl.create_default_context()
    ca.configure_trust(context)
    decided: list[bool] = []
    real = file_response.can_sendfile
    monkeypatch.setattr(file_response, "can_sendfile",
                        lambda transport: decided.append(real(transport)) or decided[-1])
    seen: list[Any] = []
    with serving(toy, make_app(files, seen), ssl_certfile=str(cert),
                 ssl_keyfile=str(key)) as port:
        response = httpx.get(f"https://{HOST}:{port}/cl", verify=context, timeout=NET_TIMEOUT)
    assert response.status_code == 200 and response.content == DATA
    assert decided == [False]
    assert {"tls", "http.response.pathsend"} <= set(seen[0]["extensions"])


@pytest.mark.parametrize("path", ["/cl", "/zerocopy"])
def test_over_http2_the_file_waits_for_the_clients_windows(
        path: str, files: dict[str, Path]) -> None:
    """toy-h2 sends a file larger than the initial 65,535-byte window by the read loop, each
    piece a body message within the windows (it waits for the client's WINDOW_UPDATEs)."""
    seen: list[Any] = []
    with serving("toy-h2", make_app(files, seen)) as port, H2Client(port) as client:
        stream = client.response(client.request("GET", path))
    expected = DATA if path == "/cl" else DATA[10:17] + DATA[5:8] + DATA[-4:] + b"|"
    assert stream.status == 200 and bytes(stream.data) == expected
    assert SIZE > 65_535  # the default window (RFC 9113 §6.9.2): the send had to wait
