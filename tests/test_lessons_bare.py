"""Lesson 5's ``bare`` baseline (``lessons/code/05-speed/bare_httptools.py``) runs and does the
little it promises: the echo, keep-alive, a Task per request, Content-Length or chunked
framing, and ``Connection: close``. It is started the way the registry starts it for
``bench layers``: ``python bare_httptools.py module:attr --host H --port P``.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from apps.user import SAMPLE_BODY, endpoint
from bench.harness import check_echo
from bench.process import ServerProcess, free_port
from tests.support.stream_app import PIECES
from tests.test_lessons import CODE, ROOT, TIMEOUT, read_response, read_to_close, split
from toyservers.registry import SERVERS

BARE = CODE / "05-speed" / "bare_httptools.py"


@contextmanager
def bare(app: str = "apps.asgi_user:app") -> Iterator[ServerProcess]:
    """The step file serving ``app`` on a free port, started from the repository's root."""
    port = free_port()
    argv = [sys.executable, str(BARE), app, "--host", "127.0.0.1", "--port", str(port)]
    with ServerProcess(argv, port=port, cwd=ROOT) as server:
        yield server


def post(body: bytes, *, close: bool = False) -> bytes:
    return (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n%s\r\n%s"
            % (len(body), b"Connection: close\r\n" if close else b"", body))


def test_bare_answers_the_layers_request_on_a_kept_alive_connection() -> None:
    with bare() as server, socket.create_connection((server.host, server.port),
                                                    timeout=TIMEOUT) as sock:
        for _ in range(3):
            sock.sendall(post(SAMPLE_BODY))
            status, headers, body = split(read_response(sock))
            assert (status, body) == (200, endpoint(SAMPLE_BODY))
            assert headers["content-type"] == "application/json"
            assert "connection" not in headers and "transfer-encoding" not in headers
        sock.sendall(b"GET /missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        status, headers, body = split(read_to_close(sock))  # the server closes after it
    assert (status, headers["connection"]) == (404, "close")
    assert body == b'{"error": "not found"}'


def test_bare_closes_an_http10_connection_after_the_answer() -> None:
    with bare() as server, socket.create_connection((server.host, server.port),
                                                    timeout=TIMEOUT) as sock:
        sock.sendall(post(SAMPLE_BODY).replace(b"HTTP/1.1", b"HTTP/1.0"))
        status, headers, body = split(read_to_close(sock))
    assert (status, headers["connection"], body) == (200, "close", endpoint(SAMPLE_BODY))


def test_bare_runs_each_request_in_an_asyncio_task() -> None:
    with bare("tests.support.echo_app:task_app") as server:
        answer = httpx.post(server.url, content=b"hi", timeout=TIMEOUT)
    assert (answer.status_code, answer.text) == (200, "task=True")


def test_bare_frames_an_answer_without_content_length_as_chunks() -> None:
    with bare("tests.support.stream_app:app") as server:
        with socket.create_connection((server.host, server.port), timeout=TIMEOUT) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            status, headers, body = split(read_to_close(sock))
        streamed = httpx.get(server.url, timeout=TIMEOUT)
    assert (status, headers["transfer-encoding"]) == (200, "chunked")
    assert body == b"7\r\nhello, \r\n8\r\nchunked \r\n5\r\nworld\r\n0\r\n\r\n"
    assert streamed.content == b"".join(PIECES)


def test_the_registry_starts_bare_for_bench_layers() -> None:
    port = free_port()
    argv = SERVERS["bare"].command("apps.asgi_user:app", "127.0.0.1", port)
    assert argv[:2] == [sys.executable, str(BARE)]
    with ServerProcess(argv, port=port, cwd=ROOT):
        assert check_echo("127.0.0.1", port) is None
