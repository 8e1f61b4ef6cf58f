"""toy-wsgi (toyservers/wsgi_server.py): PEP 3333 end to end, both worker models.

The server runs in a thread on 127.0.0.1 port 0 (``serve`` is blocking; a ``threading.Event``
stops it); requests go through httpx or raw byte scripts, whose answers are read with a small
response reader. Nothing waits by sleeping: tests wait on sockets and events, with bounds.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import logging
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from apps.flask_user import app as flask_app
from apps.wsgi_user import app as wsgi_user_app
from bench.process import ServerProcess, free_port
from toyservers import wsgi, wsgi_server
from toyservers.cli import app_interface
from toyservers.config import Config
from toyservers.http1 import ResponseError
from toyservers.registry import SERVERS
from toyservers.wsgi_server import serve

App = Callable[[dict[str, Any], Any], Iterable[bytes]]
USER = b'{"id": 1, "name": "user", "email": "user@email.com"}'
WAIT = 5.0  # the bound on every wait


@contextlib.contextmanager
def running(app: App, **settings: Any) -> Iterator[tuple[int, threading.Event]]:
    """Serve ``app`` in a thread; yield ``(port, shutdown)``; stop and join it after."""
    config = Config(**{"access_log": False, **settings})
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    ready, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=serve, args=(app, config), daemon=True,
                              kwargs={"sock": sock, "ready": lambda _: ready.set(),
                                      "shutdown": stop})
    thread.start()
    try:
        assert ready.wait(WAIT)
        yield sock.getsockname()[1], stop
    finally:
        stop.set()
        thread.join(WAIT)
        sock.close()
    assert not thread.is_alive()


@pytest.fixture(params=["sync", "gthread"])
def model(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    return sock


class Reader:
    """Reads HTTP/1.1 responses off a socket, one at a time (pipelining keeps its buffer)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""

    def more(self) -> bool:
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            assert self.more(), f"EOF before {marker!r}: {self.buffer!r}"
        data, _, self.buffer = self.buffer.partition(marker)
        return data

    def take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            assert self.more(), "EOF in a body"
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def response(self, head_request: bool = False) -> tuple[int, dict[str, str], bytes]:
        lines = self.until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        if head_request or status in (100, 204, 304):
            return status, headers, b""
        if "content-length" in headers:
            return status, headers, self.take(int(headers["content-length"]))
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while size := int(self.until(b"\r\n"), 16):
                body += self.take(size)
                self.until(b"\r\n")
            self.until(b"\r\n")
            return status, headers, body
        while self.more():
            pass
        body, self.buffer = self.buffer, b""
        return status, headers, body

    def closed(self) -> bool:
        """True when the server closes (EOF) before ``WAIT`` seconds, with nothing more said."""
        return not self.more() and not self.buffer


def exchange(port: int, data: bytes, head_request: bool = False, check_close: bool = True
             ) -> tuple[int, dict[str, str], bytes, bool]:
    """Send raw bytes; read one response; say whether the server closed after it (unless
    ``check_close`` is False: a kept-alive connection would make that wait)."""
    with connect(port) as sock:
        sock.sendall(data)
        reader = Reader(sock)
        status, headers, body = reader.response(head_request)
        return status, headers, body, check_close and reader.closed()


# --- apps -------------------------------------------------------------------------------------


def environ_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    shown = {k: v for k, v in environ.items() if isinstance(v, str | bool | tuple)}
    shown["has_input"] = hasattr(environ["wsgi.input"], "read")
    shown["has_errors"] = hasattr(environ["wsgi.errors"], "write")
    shown["has_file_wrapper"] = callable(environ["wsgi.file_wrapper"])
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps(shown).encode()]


def input_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    stream = environ["wsgi.input"]
    parts = [stream.read(3), stream.readline(), stream.readline(2), stream.readlines(1),
             list(stream), stream.read(), stream.read(5), stream.readline()]
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps(repr(parts)).encode()]


def echo_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [environ["PATH_INFO"].encode("latin-1"), b" ", body]


# --- environ ------------------------------------------------------------------------------------


def test_every_required_environ_key(model: str) -> None:
    with running(environ_app, worker_class=model, threads=2, root_path="/mount/") as (port, _):
        response = httpx.post(
            f"http://127.0.0.1:{port}/mount/a%20b%C3%A9/c%2Fd?x=1&y=%20", content=b"hello",
            headers=[("Content-Type", "text/plain"), ("X-Rep", "a"), ("X-Rep", "b"),
                     ("X_Under", "spoof"), ("Accept", "*/*")])
    env = response.json()
    assert response.status_code == 200
    assert env["REQUEST_METHOD"] == "POST"
    assert env["SCRIPT_NAME"] == "/mount"  # root_path, no trailing slash (PEP 3333)
    assert env["PATH_INFO"] == "/a b\u00c3\u00a9/c/d"  # decoded bytes as latin-1
    assert env["QUERY_STRING"] == "x=1&y=%20"  # as received
    assert env["RAW_URI"] == "/mount/a%20b%C3%A9/c%2Fd?x=1&y=%20"  # gunicorn's: the target
    assert (env["CONTENT_TYPE"], env["CONTENT_LENGTH"]) == ("text/plain", "5")
    assert (env["SERVER_NAME"], env["SERVER_PORT"]) == ("127.0.0.1", str(port))
    assert env["SERVER_PROTOCOL"] == "HTTP/1.1"
    assert env["HTTP_X_REP"] == "a, b" and env["HTTP_ACCEPT"] == "*/*"
    assert "HTTP_X_UNDER" not in env and "HTTP_CONTENT_TYPE" not in env
    assert env["REMOTE_ADDR"] == "127.0.0.1" and int(env["REMOTE_PORT"]) > 0
    assert env["wsgi.version"] == [1, 0] and env["wsgi.url_scheme"] == "http"
    assert env["wsgi.multithread"] is (model == "gthread")
    assert env["wsgi.multiprocess"] is False and env["wsgi.run_once"] is False
    assert env["wsgi.input_terminated"] is True
    assert env["has_input"] and env["has_errors"] and env["has_file_wrapper"]


def test_http10_request_and_absolute_form() -> None:
    with running(environ_app) as (port, _):
        _, _, body, closed = exchange(port, b"GET http://h/p?q HTTP/1.0\r\n\r\n")
    env = json.loads(body)
    assert (env["SERVER_PROTOCOL"], env["PATH_INFO"], env["QUERY_STRING"]) == \
        ("HTTP/1.0", "/p", "q")
    assert "CONTENT_LENGTH" not in env and closed


# --- wsgi.input -----------------------------------------------------------------------------------

BODY = b"abcdef\nline2\nline3\nrest"
EXPECTED = repr([b"abc", b"def\n", b"li", [b"ne2\n"], [b"line3\n", b"rest"], b"", b"", b""])


@pytest.mark.parametrize("chunked", [False, True])
def test_input_methods_with_content_length_and_chunked(model: str, chunked: bool) -> None:
    if chunked:
        framing = b"Transfer-Encoding: chunked\r\n\r\n"
        body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (BODY[:5], BODY[5:9], BODY[9:]))
        body += b"0\r\nTrailer-Field: x\r\n\r\n"
    else:
        framing, body = b"Content-Length: %d\r\n\r\n" % len(BODY), BODY
    request = b"POST / HTTP/1.1\r\nHost: h\r\n" + framing + body
    with running(input_app, worker_class=model) as (port, _):
        status, _, answer, _ = exchange(port, request, check_close=False)
    assert status == 200 and json.loads(answer) == EXPECTED


def test_input_never_reads_past_the_body_and_pipelining_keeps_order() -> None:
    one = b"POST /one HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
    two = b"POST /two HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n"
    three = b"GET /three HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
    with running(echo_app, worker_class="gthread") as (port, _), connect(port) as sock:
        sock.sendall(one + two + three)
        reader = Reader(sock)
        assert [reader.response()[2] for _ in range(3)] == [b"/one abc", b"/two xy", b"/three "]
        assert reader.closed()


def test_unread_body_is_drained_before_the_next_request() -> None:
    def lazy(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [environ["PATH_INFO"].encode()]

    requests = b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello" \
        b"GET /b HTTP/1.1\r\nHost: h\r\n\r\n"
    with running(lazy, worker_class="gthread") as (port, _), connect(port) as sock:
        sock.sendall(requests)
        reader = Reader(sock)
        assert [reader.response()[2] for _ in range(2)] == [b"/a", b"/b"]


def test_100_continue_is_sent_only_when_the_app_reads(model: str) -> None:
    head = b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
    with running(echo_app, worker_class=model) as (port, _), connect(port) as sock:
        sock.sendall(head)
        reader = Reader(sock)
        assert reader.response()[0] == 100
        sock.sendall(b"body")
        assert reader.response()[2] == b"/ body"

    def no_read(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("417 Expectation Failed", [])
        return [b"no"]

    with running(no_read, worker_class="gthread") as (port, _):
        status, headers, body, closed = exchange(port, head)
    assert (status, body, headers["connection"], closed) == (417, b"no", "close", True)


# --- start_response, write, close ---------------------------------------------------------------


def test_write_callable_and_status_phrase(model: str) -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        write = start_response("299 Fine Thanks", [("X-A", "1")])
        write(b"")
        write(b"one,")
        return [b"two"]

    with running(app, worker_class=model) as (port, _):
        with connect(port) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.1 299 Fine Thanks\r\n")
        response = httpx.get(f"http://127.0.0.1:{port}/")
    assert (response.text, response.headers["x-a"]) == ("one,two", "1")
    assert response.headers["transfer-encoding"] == "chunked"


def test_exc_info_replaces_the_response_before_the_head_is_out(model: str) -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("X-Half", "1")])
        try:
            raise ValueError("late failure")
        except ValueError:
            start_response("500 Oops", [("Content-Type", "text/plain")], sys.exc_info())
        return [b"replaced"]

    with running(app, worker_class=model) as (port, _):
        response = httpx.get(f"http://127.0.0.1:{port}/")
    assert (response.status_code, response.text) == (500, "replaced")
    assert "x-half" not in response.headers


def test_exc_info_after_the_head_is_out_reraises_and_closes() -> None:
    seen: list[str] = []

    def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [])
        yield b"partial"
        try:
            raise ValueError("mid-body")
        except ValueError:
            try:
                start_response("500 Oops", [], sys.exc_info())
            except ValueError as exc:
                seen.append(str(exc))
                raise

    with running(app, worker_class="gthread") as (port, _), connect(port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        reader = Reader(sock)
        while reader.more():
            pass
    assert seen == ["mid-body"]
    assert reader.buffer.startswith(b"HTTP/1.1 200 OK") and b"partial" in reader.buffer
    assert not reader.buffer.endswith(b"0\r\n\r\n")  # cut off: no last chunk


@pytest.mark.parametrize("bad", [
    [("Connection", "close")], [("Keep-Alive", "5")], [("Transfer-Encoding", "chunked")],
    [("Upgrade", "h2c")], [("X-Bad", "a\r\nInjected: 1")], [("X-Bytes", b"v")],
])
def test_hop_by_hop_and_bad_headers_are_refused_with_500(bad: list[Any]) -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", bad)
        return [b"never"]

    with running(app) as (port, _):
        status, headers, body, closed = exchange(port, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
    assert status == 500 and b"never" not in body and closed


def test_start_response_twice_without_exc_info_is_an_error() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        start_response("201 Created", [])
        return [b"x"]

    with running(app) as (port, _):
        assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 500


class Result:
    """An app result that records its close()."""

    def __init__(self, chunks: Iterable[bytes], fail: bool = False) -> None:
        self.chunks, self.fail = chunks, fail
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.fail:
            raise RuntimeError("failing mid-iteration")

    def close(self) -> None:
        self.closed.set()


def test_close_is_called_on_success_error_and_disconnect(model: str) -> None:
    results: list[Result] = []
    gone = threading.Event()

    def app(environ: dict[str, Any], start_response: Any) -> Result:
        start_response("200 OK", [])
        path = environ["PATH_INFO"]
        if path == "/gone":
            def forever() -> Iterator[bytes]:
                yield b"first"
                gone.wait(WAIT)  # the client has closed: the writes that follow fail
                while True:
                    yield b"x" * 65536
            results.append(Result(forever()))
        else:
            results.append(Result([b"ok"], fail=path == "/fail"))
        return results[-1]

    with running(app, worker_class=model) as (port, _):
        assert httpx.get(f"http://127.0.0.1:{port}/ok").text == "ok"
        assert results[0].closed.wait(WAIT)
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/fail")
        assert results[1].closed.wait(WAIT)
        with connect(port) as sock:
            sock.sendall(b"GET /gone HTTP/1.1\r\nHost: h\r\n\r\n")
            sock.recv(10)
        gone.set()
        assert results[2].closed.wait(WAIT)
        assert httpx.get(f"http://127.0.0.1:{port}/ok").text == "ok"  # still serving


def test_app_raising_gives_500_and_the_server_keeps_serving(model: str) -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if environ["PATH_INFO"] == "/boom":
            raise RuntimeError("boom")
        if environ["PATH_INFO"] == "/exit":
            raise SystemExit(1)
        start_response("200 OK", [])
        return [b"fine"]

    with running(app, worker_class=model) as (port, _), httpx.Client() as client:
        base = f"http://127.0.0.1:{port}"
        boom = client.get(base + "/boom")
        assert (boom.status_code, boom.headers["connection"]) == (500, "close")
        assert client.get(base + "/exit").status_code == 500
        assert client.get(base + "/").text == "fine"


def test_file_wrapper_uses_sendfile_when_it_can(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"0123456789" * 1000)
    reads: list[int | None] = []

    class Tracked(io.FileIO):
        def read(self, size: int | None = -1) -> bytes:
            reads.append(size)
            return super().read(size)

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        headers = [] if environ["PATH_INFO"] == "/nolength" else [("Content-Length", "10000")]
        start_response("200 OK", headers)
        filelike: Any = io.BytesIO(path.read_bytes()) if environ["PATH_INFO"] == "/bytesio" \
            else Tracked(path)
        wrapped: Iterable[bytes] = environ["wsgi.file_wrapper"](filelike, 4096)
        return wrapped

    with running(app, worker_class="gthread") as (port, _), httpx.Client() as client:
        base = f"http://127.0.0.1:{port}"
        assert client.get(base + "/").content == path.read_bytes()
        assert reads == []  # socket.sendfile: the file was never read() by Python
        assert client.get(base + "/bytesio").content == path.read_bytes()  # no fileno
        assert client.get(base + "/nolength").content == path.read_bytes()
        assert reads and reads[0] == 4096  # iterated in blocks: chunked


# --- framing --------------------------------------------------------------------------------------


def test_framing_content_length_chunked_close_delimited_and_head(model: str) -> None:
    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ["PATH_INFO"]
        start_response("200 OK", [("Content-Length", "5")] if path == "/given" else [])
        if path in ("/given", "/one"):
            return [b"hello"]
        return iter([b"hel", b"", b"lo"])

    get = b"%s %s HTTP/1.%d\r\nHost: h\r\n\r\n"
    with running(app, worker_class=model) as (port, _):
        for method, path, minor, framing in [
            (b"GET", b"/given", 1, "content-length"), (b"GET", b"/one", 1, "content-length"),
            (b"GET", b"/stream", 1, "transfer-encoding"), (b"GET", b"/stream", 0, "close"),
            (b"HEAD", b"/given", 1, "content-length"), (b"HEAD", b"/stream", 1, "none"),
        ]:
            head = method == b"HEAD"
            status, headers, body, _ = exchange(port, get % (method, path, minor), head, False)
            assert status == 200
            assert body == (b"" if head else b"hello")
            if framing == "content-length":
                assert headers["content-length"] == "5"
            elif framing == "transfer-encoding":
                assert headers["transfer-encoding"] == "chunked"
            elif framing == "close":
                assert "content-length" not in headers and headers["connection"] == "close"
        with connect(port) as sock:  # HEAD: really no body bytes on the wire
            sock.sendall(get % (b"HEAD", b"/given", 1) + get % (b"GET", b"/one", 1))
            reader = Reader(sock)
            reader.response(head_request=True)
            if model == "gthread":
                assert reader.response()[2] == b"hello"


def test_sync_closes_after_each_response_and_gthread_keeps_alive(model: str) -> None:
    with running(echo_app, worker_class=model, timeout_keep_alive=30) as (port, _), \
            connect(port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        reader = Reader(sock)
        status, headers, _ = reader.response()
        assert status == 200
        assert (headers.get("connection") == "close") is (model == "sync")
        if model == "sync":
            assert reader.closed()
        else:  # nothing comes, and the connection stays open (checked for 0.2 s)
            sock.settimeout(0.2)
            with pytest.raises(TimeoutError):
                reader.more()


# --- refused requests ---------------------------------------------------------------------------


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
    (b"GET /\x01 HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET nope HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: h\r\n\r\n", 414),
    (b"GET / HTTP/1.1\r\nHost: h\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", 431),
    (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2000\r\n\r\n", 413),
    (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
    (b"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505),
    (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + b"400\r\n"
     + b"a" * 1024 + b"\r\n" + b"400\r\n" + b"a" * 1024 + b"\r\n0\r\n\r\n", 413),
])
def test_malformed_requests_get_their_4xx_and_close(request_bytes: bytes, status: int) -> None:
    with running(echo_app, worker_class="gthread", max_body_size=1024) as (port, _):
        answer, headers, _, closed = exchange(port, request_bytes)
        assert (answer, headers["connection"], closed) == (status, "close", True)
        assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 200  # still serving


def test_deadlines_head_body_and_idle_keep_alive(model: str) -> None:
    timeouts = {"timeout_headers": 0.5, "timeout_body": 0.5, "timeout_keep_alive": 0.5}
    with running(echo_app, worker_class=model, **timeouts) as (port, _):
        for partial in (b"GET / HTTP/1.1\r\nHo",
                        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 9\r\n\r\nab"):
            with connect(port) as sock:
                sock.sendall(partial)
                reader = Reader(sock)
                status, headers, _ = reader.response()
                assert (status, headers["connection"]) == (408, "close") and reader.closed()
        with connect(port) as sock:  # never a byte: closed without a word
            assert Reader(sock).closed()
        if model == "gthread":
            with connect(port) as sock:  # idle after a response: closed by the main thread
                sock.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
                reader = Reader(sock)
                assert reader.response()[0] == 200 and reader.closed()


class Records(logging.Handler):
    """Keeps what ``toyservers.error`` logs, so a test can wait for a record, not sleep."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.added = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self.added:
            self.records.append(record)
            self.added.notify_all()

    def first(self) -> logging.LogRecord:
        with self.added:
            assert self.added.wait_for(lambda: self.records, WAIT), "nothing was logged"
            return self.records[0]


def test_a_reset_during_the_head_is_the_client_leaving(model: str) -> None:
    """A reset while the head comes in is the client leaving: one debug line, then the
    server closes, as for a reset during the body (not "Exception in the connection")."""
    records, error_log = Records(), logging.getLogger("toyservers.error")
    with running(echo_app, worker_class=model) as (port, _):
        level = error_log.level
        error_log.addHandler(records)
        error_log.setLevel(logging.DEBUG)
        try:
            with connect(port) as sock:
                client_port = sock.getsockname()[1]
                sock.sendall(b"GET / HTTP/1.1\r\nHo")
                # SO_LINGER with a zero timeout: close() sends a RST, not a FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            record = records.first()
        finally:
            error_log.removeHandler(records)
            error_log.setLevel(level)
        assert (record.levelno, record.exc_info) == (logging.DEBUG, None), record.getMessage()
        assert str(client_port) in record.getMessage()
        assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 200  # still serving


def test_an_idle_keep_alive_connection_holds_no_thread() -> None:
    with running(echo_app, worker_class="gthread", threads=1) as (port, _), \
            httpx.Client() as first, httpx.Client() as second:
        url = f"http://127.0.0.1:{port}/"
        assert first.get(url).status_code == 200  # its connection stays open, idle
        assert second.get(url, timeout=2).status_code == 200
        assert first.get(url).status_code == 200  # the same connection, kept alive


def test_a_wake_up_looks_at_the_oldest_idle_connection_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """gthread keeps its idle keep-alive connections in deadline order (gunicorn's gthread
    keeps its keep-alive queue by time), so each wake-up's expiry pass looks at the oldest
    only: the work per wake-up does not grow with the number of idle connections. Counted,
    not timed: ``idle_checked`` (idle connections the expiry pass looked at) against
    ``wakeups`` (returns from select)."""
    servers: list[wsgi_server.WSGIServer] = []

    class Recorded(wsgi_server.WSGIServer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            servers.append(self)

    monkeypatch.setattr(wsgi_server, "WSGIServer", Recorded)
    request = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"
    with running(echo_app, worker_class="gthread", threads=2, timeout_keep_alive=60) \
            as (port, _), contextlib.ExitStack() as stack:
        for _ in range(200):  # each answered once, then idle: watched by the main thread
            sock = stack.enter_context(connect(port))
            sock.sendall(request)
            assert Reader(sock).response()[0] == 200
        server = servers[0]
        checked, wakeups = server.idle_checked, server.wakeups
        with connect(port) as sock:
            reader = Reader(sock)
            for _ in range(50):
                sock.sendall(request)
                assert reader.response()[0] == 200
        looked, woke = server.idle_checked - checked, server.wakeups - wakeups
        assert len(server.idle) >= 200 and woke >= 50  # each request: one wake-up at least
        assert looked <= woke, f"{looked} idle connections looked at in {woke} wake-ups"


# --- the module reads like the other servers (CONVENTIONS.md) -------------------------------------


def glossary_problems(source: str) -> list[str]:
    """What in a toy-wsgi source breaks CONVENTIONS.md's glossary: the socket a thread serves
    is ``sock`` with its peer ``client``, never ``conn`` (h11's state machine's name); the
    per-connection object is a ``...Protocol``, not a ``Connection``; the request is a
    ``RequestResponseCycle`` with ``run_wsgi``; an error is ``send_error(status)`` then one
    ``lingering_close()``; a graceful stop of one connection is ``shutdown()``."""
    tree = ast.parse(source)
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    methods = {name: {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
               for name, node in classes.items()}
    problems = [f"class {name}" for name in classes if name == "Connection"]
    problems += [f"the name conn, line {node.lineno}" for node in ast.walk(tree)
                 if (isinstance(node, ast.Name) and node.id == "conn")
                 or (isinstance(node, ast.Attribute) and node.attr == "conn")
                 or (isinstance(node, ast.arg) and node.arg == "conn")]
    protocols = [name for name in classes if name.endswith("Protocol")]
    if len(protocols) != 1:
        return [*problems, f"one ...Protocol class, not {protocols}"]
    protocol = methods[protocols[0]]
    for name in ("send_error", "lingering_close", "shutdown"):
        if name not in protocol:
            problems.append(f"{protocols[0]}.{name}")
    if "send_error" in protocol and [a.arg for a in protocol["send_error"].args.args[:2]] \
            != ["self", "status"]:
        problems.append("send_error(status)")
    if "run_wsgi" not in methods.get("RequestResponseCycle", {}):
        problems.append("RequestResponseCycle.run_wsgi")
    return problems


def test_toy_wsgi_speaks_the_glossary() -> None:
    source = Path(wsgi_server.__file__).read_text()
    assert glossary_problems(source) == []


# --- shutdown, apps, CLI --------------------------------------------------------------------------


def test_graceful_shutdown_finishes_the_request_in_flight(model: str) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        entered.set()
        release.wait(WAIT)
        start_response("200 OK", [])
        return [b"finished"]

    with running(slow, worker_class=model) as (port, stop), connect(port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        assert entered.wait(WAIT)
        stop.set()
        release.set()
        reader = Reader(sock)
        status, headers, body = reader.response()
        assert (status, body, headers["connection"]) == (200, b"finished", "close")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_idle_close_on_response_answers_an_idle_connection_once_more() -> None:
    """gthread under ``idle_close_on_response``: after the stop, a request on an idle
    keep-alive connection is answered with Connection: close; an unused one closes at its
    keep-alive timeout, not at the DRAIN's end."""
    get = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"
    with running(echo_app, worker_class="gthread", idle_close_on_response=True,
                 timeout_keep_alive=2.0) as (port, stop), \
            connect(port) as reused, connect(port) as unused:
        for sock in (reused, unused):
            sock.sendall(get)
            assert Reader(sock).response()[0] == 200
        answered = time.monotonic()
        stop.set()
        deadline = answered + WAIT
        while time.monotonic() < deadline:  # until the listener is closed: the stop is seen
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                break
        reused.sendall(get)
        status, headers, _ = Reader(reused).response()
        assert (status, headers["connection"]) == (200, "close")
        assert unused.recv(1) == b""
        assert time.monotonic() - answered > 1.9  # its keep-alive timeout, not DRAIN


def test_graceful_shutdown_gives_up_after_its_timeout() -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        entered.set()
        release.wait(WAIT)
        start_response("200 OK", [])
        return [b"too late"]

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    stop, ready = threading.Event(), threading.Event()
    config = Config(worker_class="gthread", timeout_graceful_shutdown=0.3, access_log=False)
    thread = threading.Thread(target=serve, args=(stuck, config), kwargs={
        "sock": sock, "shutdown": stop, "ready": lambda _: ready.set()})
    thread.start()
    try:
        assert ready.wait(WAIT)
        with connect(sock.getsockname()[1]) as client:
            client.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
            assert entered.wait(WAIT)
            stop.set()
            thread.join(WAIT)
            assert not thread.is_alive()  # serve() returned while the app still runs
            assert client.recv(100) == b""  # its socket was shut: the client sees the end
    finally:
        release.set()
        stop.set()
        thread.join(WAIT)
        sock.close()


@pytest.mark.parametrize("app", [wsgi_user_app, flask_app], ids=["wsgi", "flask"])
def test_the_user_apps_answer(model: str, app: App) -> None:
    with running(app, worker_class=model) as (port, _):
        response = httpx.post(f"http://127.0.0.1:{port}/", content=USER)
    assert response.status_code == 200
    assert response.json() == json.loads(USER)


def test_started_through_the_registry_and_the_cli() -> None:
    port = free_port()
    argv = SERVERS["toy-wsgi"].command("apps.flask_user:app", "127.0.0.1", port)
    with ServerProcess([*argv, "--worker-class", "gthread", "--threads", "2"], port=port) as srv:
        assert httpx.post(srv.url, content=USER, timeout=WAIT).json() == json.loads(USER)
    assert SERVERS["toy-wsgi"].interface == "wsgi"


@pytest.mark.parametrize(("args", "message"), [
    (["apps.asgi_user:app", "--server", "toy-wsgi"],
     "apps.asgi_user:app is an ASGI app; toy-wsgi serves WSGI apps"),
    (["apps.asgi_user:app", "--interface", "wsgi"],
     "apps.asgi_user:app is an ASGI app; toy-wsgi serves WSGI apps"),
    (["apps.wsgi_user:app", "--server", "toy-h11"],
     "apps.wsgi_user:app is a WSGI app; toy-h11 serves ASGI apps"),
    (["apps.wsgi_user:app", "--server", "toy-wsgi", "--interface", "asgi3"],
     "toy-wsgi serves WSGI apps, not --interface asgi3"),
])
def test_cli_refuses_the_other_interface_in_one_line(args: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, "-m", "toyservers", *args, "--port", "0"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr == f"Error: {message}\n"


def test_the_cli_tells_asgi_from_wsgi_apps_and_lets_the_unknown_run() -> None:
    from apps.asgi_user import app as asgi_app
    from apps.starlette_user import app as starlette_app

    class ASGI2:  # an ASGI 2 app class: neither sign, so not refused
        def __init__(self, scope: dict[str, Any]) -> None:
            self.scope = scope

    assert [app_interface(a) for a in (asgi_app, starlette_app)] == ["asgi", "asgi"]
    assert [app_interface(a) for a in (wsgi_user_app, flask_app)] == ["wsgi", "wsgi"]
    assert app_interface(ASGI2) is None and app_interface(print) is None


def test_access_log_line_and_an_unknown_worker_class(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="toyservers.access"):
        with running(echo_app, access_log=True) as (port, _):
            httpx.get(f"http://127.0.0.1:{port}/p%0d?q=1")
    assert '- "GET /p%0d?q=1 HTTP/1.1" 200' in caplog.text  # the raw target: no forged line
    with pytest.raises(ValueError, match="worker_class is 'sync' or 'gthread'"):
        serve(echo_app, Config(worker_class="eventlet"))  # type: ignore[arg-type]


# --- the WSGI glue (toyservers/wsgi.py), without sockets -----------------------------------------


def test_path_info_decodes_as_latin1_and_drops_the_script_name() -> None:
    assert wsgi.path_info(b"/a%20b%C3%A9", "") == "/a b\u00c3\u00a9"
    assert wsgi.path_info(b"/mount/x", "/mount") == "/x"
    assert wsgi.path_info(b"/mount", "/mount") == ""
    assert wsgi.path_info(b"/mountain", "/mount") == "/mountain"  # not a path prefix


@pytest.mark.parametrize(("status", "headers"), [
    ("200", []), ("20 OK", []), ("200OK", []), (b"200 OK", []), ("200 O\nK", []),
    ("200 OK", [("Connection", "close")]), ("200 OK", [("X-A", b"1")]),
])
def test_check_response_refuses_what_pep_3333_forbids(status: Any, headers: Any) -> None:
    with pytest.raises(ResponseError):
        wsgi.check_response(status, headers, started=False, head_sent=False)


def test_check_response_and_the_exc_info_rules() -> None:
    assert wsgi.check_response("299 Custom Phrase", [("X-A", "caf\u00e9")], started=False,
                               head_sent=False) == \
        (299, [(b"X-A", b"caf\xe9")], b"HTTP/1.1 299 Custom Phrase\r\n")
    with pytest.raises(ResponseError, match="twice"):
        wsgi.check_response("200 OK", [], started=True, head_sent=False)
    try:
        raise KeyError("from the app")
    except KeyError:
        exc_info: Any = sys.exc_info()
    assert wsgi.check_response("500 Oops", [], exc_info, started=True, head_sent=False)[0] == 500
    with pytest.raises(KeyError, match="from the app"):
        wsgi.check_response("500 Oops", [], exc_info, started=True, head_sent=True)


def test_input_stream_reads_pieces_as_pep_3333_asks() -> None:
    pieces = [b"ab", b"c\nde", b"f\n", b"g", b""]
    stream = wsgi.input_stream(lambda: pieces.pop(0) if pieces else b"")
    assert stream.read(1) == b"a"
    assert stream.readline() == b"bc\n"
    assert list(stream) == [b"def\n", b"g"]
    assert stream.read() == b""
