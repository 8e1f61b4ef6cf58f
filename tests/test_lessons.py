"""The tutorial's code runs and its pages hold together.

- Every step program under ``lessons/code/`` is started as a subprocess on a free port and
  sent real requests (raw sockets for the byte-level lessons, httpx for the rest).
- The byte transcripts the pages show (``lessons/transcripts/``) are captured here from the
  running step servers; the committed file must match the capture except for the ``Date``
  value, so a page cannot show bytes the code no longer sends. Regenerate them with
  ``UPDATE_TRANSCRIPTS=1 pytest tests/test_lessons.py -k transcript``.
- Meta-tests: every ``--8<--`` include on a page resolves (file and named section), and every
  step file is included by some page.
- ``mkdocs build --strict`` runs, so ``make test`` covers the site build.
"""

from __future__ import annotations

import ast
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from bench.process import ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
LESSONS = ROOT / "lessons"
CODE = LESSONS / "code"
TRANSCRIPTS = LESSONS / "transcripts"
TIMEOUT = 10.0  # seconds, for every socket operation and HTTP call


@contextmanager
def step(relpath: str, env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    """Run ``lessons/code/<relpath>`` with a free port as its argument; stop it afterwards."""
    port = free_port()
    argv = [sys.executable, str(CODE / relpath), str(port)]
    with ServerProcess(argv, port=port, cwd=ROOT, env=env) as server:
        yield server


def connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection((server.host, server.port), timeout=TIMEOUT)


def exchange(server: ServerProcess, data: bytes) -> bytes:
    """Send ``data`` on a new connection and read until the server closes it."""
    with connect(server) as sock:
        sock.sendall(data)
        return read_to_close(sock)


def read_to_close(sock: socket.socket) -> bytes:
    """Everything the peer sends until it closes (bounded by the socket's timeout)."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def read_response(sock: socket.socket) -> bytes:
    """Exactly one response framed by Content-Length, leaving the connection open."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-head: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    match = re.search(rb"(?im)^content-length: *(\d+)\r?$", head)
    assert match, f"no Content-Length in {head!r}"
    while len(rest) < int(match.group(1)):
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        rest += chunk
    return head + b"\r\n\r\n" + rest


def split(response: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status code, {lower-cased name: value}, body) of one raw response."""
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split(" ")[1]), headers, body


def wait_for_log(server: ServerProcess, text: str, timeout: float = TIMEOUT) -> str:
    """Poll the server's log until it contains ``text``; return the log tail."""
    deadline = time.monotonic() + timeout
    while text not in (tail := server.log_tail(200)):
        assert time.monotonic() < deadline, f"{text!r} never appeared in the log:\n{tail}"
        time.sleep(0.02)  # polling interval, not synchronisation
    return tail


def slow_state_when_fast_is_done(server: ServerProcess) -> str:
    """Send GET /slow, then GET /fast on a second connection; read /fast to its end and say
    where /slow stands at that moment: ``"complete"`` (its whole response and close are
    already in our socket buffer) or ``"pending"`` (nothing of it has arrived yet).

    It reads the kernel's state, not which reader thread ran first, so it cannot race: a
    blocking server has finished /slow before it even reads /fast, and a non-blocking one
    answers /fast while /slow still sleeps.
    """
    with connect(server) as slow, connect(server) as fast:
        slow.sendall(b"GET /slow HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        fast.sendall(b"GET /fast HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        assert b" 200 " in read_to_close(fast).split(b"\r\n", 1)[0]
        slow.setblocking(False)
        try:
            already = b""
            while chunk := slow.recv(65536):
                already += chunk
        except BlockingIOError:
            assert already == b"", f"/slow had half-arrived: {already!r}"
            slow.settimeout(TIMEOUT)
            assert b" 200 " in read_to_close(slow).split(b"\r\n", 1)[0]
            return "pending"
        assert b" 200 " in already.split(b"\r\n", 1)[0]
        return "complete"


# --- lesson 1: bytes on a socket -----------------------------------------------------------


def echo_round_trip(sock: socket.socket, data: bytes) -> None:
    """Send ``data`` and read until the same bytes came back."""
    sock.sendall(data)
    received = b""
    while len(received) < len(data):
        chunk = sock.recv(65536)
        assert chunk, "the echo server closed early"
        received += chunk
    assert received == data


def second_client_waits_for_the_first(server: ServerProcess) -> None:
    """Client A connects and is echoed once (the server is now inside A's ``recv`` loop) and
    stays connected; client B connects and sends ``b"B"``; A makes a second round trip. Check
    that B has no answer yet, and gets it once A closes.

    No timing: a one-connection-at-a-time server is still in A's loop when A's second round
    trip completes, so it has not even accepted B; nothing can be in B's socket buffer.
    """
    with connect(server) as first, connect(server) as second:
        echo_round_trip(first, b"A1")
        second.sendall(b"B")
        for i in range(2, 12):  # B's bytes were sent before all these (a concurrent server
            echo_round_trip(first, b"A%d" % i)  # would have echoed them by now, mostly)
        second.setblocking(False)
        with pytest.raises(BlockingIOError):
            second.recv(65536)  # nothing for B: the server has not accepted it
        second.settimeout(TIMEOUT)
        first.close()  # A leaves: the server accepts B at last
        assert second.recv(65536) == b"B"


def second_client_is_served_while_the_first_stays(server: ServerProcess) -> None:
    """Client A connects, is echoed once and stays connected; client B is echoed all the
    same (a blocking server would leave B's read to time out)."""
    with connect(server) as first, connect(server) as second:
        echo_round_trip(first, b"A1")
        echo_round_trip(second, b"B")
        echo_round_trip(first, b"A2")


def test_step0a_echoes_and_one_idle_client_holds_the_next() -> None:
    with step("01-bytes/step0a_blocking.py") as server:
        with connect(server) as sock:
            echo_round_trip(sock, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        second_client_waits_for_the_first(server)


def test_step0b_threads_serve_the_next_client_while_one_stays() -> None:
    with step("01-bytes/step0b_threads.py") as server:
        second_client_is_served_while_the_first_stays(server)


def test_step1_event_loop_serves_the_next_client_while_one_stays() -> None:
    with step("01-bytes/step1_echo.py") as server:
        second_client_is_served_while_the_first_stays(server)


def test_step1_echoes_the_bytes_back() -> None:
    with step("01-bytes/step1_echo.py") as server, connect(server) as sock:
        for data in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\x00\xffnot http at all"):
            sock.sendall(data)
            received = b""
            while len(received) < len(data):
                chunk = sock.recv(65536)
                assert chunk, "the echo server closed early"
                received += chunk
            assert received == data


def test_step2_parses_the_request_line() -> None:
    with step("01-bytes/step2_request_line.py") as server:
        status, headers, body = split(exchange(server, b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"))
        assert (status, body) == (200, b"you asked for GET /hello over HTTP/1.1\n")
        assert headers["connection"] == "close"
        assert headers["content-length"] == str(len(body))
        for bad in (b"GET /hello\r\n\r\n", b"get / HTTP/1.1\r\n\r\n", b"GET / HTTP/2.0\r\n\r\n",
                    b"GET  / HTTP/1.1\r\n\r\n", b"GET hello HTTP/1.1\r\n\r\n"):
            assert split(exchange(server, bad))[0] == 400, bad
        answer = httpx.get(f"{server.url}/a/b?c=d", timeout=TIMEOUT)
        assert answer.text == "you asked for GET /a/b?c=d over HTTP/1.1\n"


def test_step3_parses_the_header_fields() -> None:
    with step("01-bytes/step3_headers.py") as server:
        request = b"GET /headers HTTP/1.1\r\nHost: example\r\nX-Custom:  padded \r\n\r\n"
        status, _, body = split(exchange(server, request))
        assert (status, body) == (200, b"host: example\nx-custom: padded\n")
        answer = httpx.get(f"{server.url}/", headers={"User-Agent": "lesson-test"},
                           timeout=TIMEOUT)
        assert answer.text == "hello, lesson-test: you asked for /\n"
        for bad in (b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",  # space before the colon
                    b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n",
                    b"GET / HTTP/1.1\r\nNo-Colon\r\nHost: x\r\n\r\n",
                    b"GET / HTTP/1.1\r\n\r\n",  # HTTP/1.1 without Host
                    b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                    b"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n"):  # §3.2: any request
            assert split(exchange(server, bad))[0] == 400, bad
        assert split(exchange(server, b"GET / HTTP/1.0\r\n\r\n"))[0] == 200
        huge = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10_000 + b"\r\n\r\n"
        assert split(exchange(server, huge))[0] == 431


def test_step4_reads_a_content_length_body() -> None:
    with step("01-bytes/step4_body.py") as server:
        answer = httpx.post(f"{server.url}/echo", json={"id": 1}, timeout=TIMEOUT)
        assert answer.status_code == 200
        assert answer.json() == {"id": 1}
        assert answer.headers["content-type"] == "application/json"
        big = os.urandom(300_000)  # arrives in many TCP segments
        assert httpx.post(f"{server.url}/echo", content=big, timeout=TIMEOUT).content == big
        assert httpx.get(f"{server.url}/echo", timeout=TIMEOUT).status_code == 405
        head = b"POST /echo HTTP/1.1\r\nHost: x\r\n"
        cases = {
            head + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n": 501,
            head + b"Content-Length: abc\r\n\r\n": 400,
            head + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd": 400,
            head + b"Content-Length: 2000000\r\n\r\n": 413,
        }
        for request, expected in cases.items():
            assert split(exchange(server, request))[0] == expected, request


def test_step5_keeps_the_connection_alive_and_answers_pipelined_requests_in_order() -> None:
    with step("01-bytes/step5_keepalive.py") as server:
        with connect(server) as sock:
            for path in ("/one", "/two"):
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                status, headers, body = split(read_response(sock))
                assert (status, body) == (200, f"GET {path}: 0 body bytes\n".encode())
                assert headers["connection"] == "keep-alive"
            # pipelined: three requests in one write, the last one asks to close
            sock.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                         b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"
                         b"GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answers = read_to_close(sock)
        bodies = [part.split(b"\r\n\r\n", 1)[1] for part in answers.split(b"HTTP/1.1 200 OK")[1:]]
        assert bodies == [b"GET /a: 0 body bytes\n", b"hi", b"GET /c: 0 body bytes\n"]
        # HTTP/1.0 closes unless asked otherwise
        status, headers, _ = split(exchange(server, b"GET / HTTP/1.0\r\n\r\n"))
        assert (status, headers["connection"]) == (200, "close")
        with httpx.Client(base_url=server.url, timeout=TIMEOUT) as client:
            assert [client.get(f"/{i}").text for i in range(3)] == [
                f"GET /{i}: 0 body bytes\n" for i in range(3)]


def test_step5_closes_an_idle_connection() -> None:
    with step("01-bytes/step5_keepalive.py", env={"KEEP_ALIVE_SECONDS": "0.3"}) as server:
        with connect(server) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert split(read_response(sock))[0] == 200
            # no more requests: the server must close within the keep-alive time
            assert sock.recv(65536) == b""


# --- lesson 2: WSGI --------------------------------------------------------------------------


def test_wsgi_step1_environ_and_body_iterable() -> None:
    with step("02-wsgi/step1_hello.py") as server:
        answer = httpx.post(f"{server.url}/?name=ada", content=b"12345", timeout=TIMEOUT)
        assert answer.status_code == 200
        assert answer.text.startswith("hello, ada\nthe request body had 5 bytes\n")
        assert "PATH_INFO = '/'" in answer.text
        assert "QUERY_STRING = 'name=ada'" in answer.text
        assert httpx.get(f"{server.url}/count", timeout=TIMEOUT).text == "1\n2\n3\n4\n5\n"


def test_wsgi_step2_routing_and_middleware() -> None:
    with step("02-wsgi/step2_routing.py") as server:
        answer = httpx.get(f"{server.url}/users/7", timeout=TIMEOUT)
        assert (answer.status_code, answer.text) == (200, "user 7\n")
        assert answer.headers["x-served-by"] == "lesson-2"
        wait_for_log(server, "GET /users/7 200 OK 7 B")
        assert httpx.get(f"{server.url}/", timeout=TIMEOUT).text == "home\n"
        wrong_method = httpx.delete(f"{server.url}/", timeout=TIMEOUT)
        assert (wrong_method.status_code, wrong_method.headers["allow"]) == (405, "GET")
        assert httpx.get(f"{server.url}/nope", timeout=TIMEOUT).status_code == 404


def test_wsgi_step3_blocking_server_serves_slow_before_fast() -> None:
    with step("02-wsgi/step3_blocking.py", env={"SLOW_SECONDS": "1"}) as server:
        answer = httpx.get(f"{server.url}/fast?x=1", timeout=TIMEOUT)
        assert (answer.status_code, answer.text) == (200, "fast\n")
        assert answer.headers["connection"] == "close"
        # one connection at a time: /fast, sent while /slow sleeps, completes after it
        assert slow_state_when_fast_is_done(server) == "complete"


def test_wsgi_step3_an_app_error_drops_the_connection_and_the_server_keeps_serving() -> None:
    # PEP 3333's 500 is lesson 7's exercise: here the client gets no answer at all
    with step("02-wsgi/step3_blocking.py") as server:
        for _ in range(2):
            assert exchange(server, b"GET /error HTTP/1.1\r\nHost: x\r\n\r\n") == b""
            assert httpx.get(f"{server.url}/fast", timeout=TIMEOUT).text == "fast\n"
        wait_for_log(server, "dropped a connection: RuntimeError('a bug in the app')")


# --- lesson 3: ASGI --------------------------------------------------------------------------


def test_asgi_step1_scope_receive_send() -> None:
    with step("03-asgi/step1_scope.py") as server:
        answer = httpx.post(f"{server.url}/some/path?x=1", content=b"hello", timeout=TIMEOUT)
        assert answer.status_code == 200
        lines = answer.text.splitlines()
        assert lines[0] == "type=http http_version=1.1"
        assert lines[1] == "method=POST path=/some/path query_string=b'x=1'"
        assert lines[-1] == "body: 5 bytes"
        big = b"x" * 500_000  # several http.request messages with more_body=True
        answer = httpx.post(f"{server.url}/", content=big, timeout=TIMEOUT)
        assert answer.text.splitlines()[-1] == "body: 500000 bytes"


def test_asgi_step2_routing_and_middleware() -> None:
    with step("03-asgi/step2_routing.py") as server:
        answer = httpx.get(f"{server.url}/users/7", timeout=TIMEOUT)
        assert (answer.status_code, answer.text) == (200, "user 7\n")
        assert answer.headers["x-served-by"] == "lesson-3"
        wait_for_log(server, "GET /users/7 200 7 B")
        wrong_method = httpx.post(f"{server.url}/users/7", timeout=TIMEOUT)
        assert (wrong_method.status_code, wrong_method.headers["allow"]) == (405, "GET")
        assert httpx.get(f"{server.url}/nope", timeout=TIMEOUT).status_code == 404


def test_asgi_step3_slow_does_not_hold_fast_back() -> None:
    with step("03-asgi/step3_slow.py", env={"SLOW_SECONDS": "1.5"}) as server:
        assert httpx.get(f"{server.url}/fast", timeout=TIMEOUT).text == "fast\n"
        assert slow_state_when_fast_is_done(server) == "pending"
        assert httpx.get(f"{server.url}/blocking", timeout=TIMEOUT).text == "blocking\n"


def test_asgi_step4_lifespan_state_and_shutdown() -> None:
    with step("03-asgi/step4_lifespan.py") as server:
        wait_for_log(server, "lifespan: startup complete")
        texts = [httpx.get(f"{server.url}/", timeout=TIMEOUT).text for _ in range(3)]
        assert texts == [f"request {i} since startup\n" for i in (1, 2, 3)]
    # leaving the block sent SIGTERM: uvicorn ran the lifespan shutdown before exiting
    assert "lifespan: shutdown after 3 requests" in server.log_tail(50)


# --- transcripts -------------------------------------------------------------------------------


def render(parts: list[tuple[str, bytes]]) -> str:
    """A byte transcript: each direction's bytes, CR and LF shown as ``\\r`` and ``\\n``."""
    out = []
    for who, data in parts:
        arrow = ">>> client sends" if who == "client" else "<<< server sends"
        out.append(f"{arrow} ({len(data)} bytes)")
        for line in data.decode("latin-1").splitlines(keepends=True):
            out.append("    " + line.replace("\r", "\\r").replace("\n", "\\n"))
    return "\n".join(out) + "\n"


def script_keepalive(server: ServerProcess) -> list[tuple[str, bytes]]:
    first = b"GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    second = (b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: 9\r\nConnection: close\r\n\r\n{\"id\": 1}")
    with connect(server) as sock:
        sock.sendall(first)
        answer1 = read_response(sock)
        sock.sendall(second)
        answer2 = read_to_close(sock)
    return [("client", first), ("server", answer1), ("client", second), ("server", answer2)]


def script_get(path: str) -> Callable[[ServerProcess], list[tuple[str, bytes]]]:
    def run(server: ServerProcess) -> list[tuple[str, bytes]]:
        request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
        return [("client", request), ("server", exchange(server, request))]
    return run


def script_post_json(body: bytes) -> Callable[[ServerProcess], list[tuple[str, bytes]]]:
    def run(server: ServerProcess) -> list[tuple[str, bytes]]:
        request = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        return [("client", request), ("server", exchange(server, request))]
    return run


def script_user_then_close(server: ServerProcess) -> list[tuple[str, bytes]]:
    """POST the sample user, then, on the same connection, a GET that asks to close."""
    body = b'{"id": 1, "name": "user", "email": "user@email.com"}'
    first = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    second = b"GET /missing HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    with connect(server) as sock:
        sock.sendall(first)
        answer1 = read_response(sock)
        sock.sendall(second)
        answer2 = read_to_close(sock)
    return [("client", first), ("server", answer1), ("client", second), ("server", answer2)]


TRANSCRIPT_CASES = {
    "01-keepalive.txt": ("01-bytes/step5_keepalive.py", script_keepalive),
    "02-blocking-fast.txt": ("02-wsgi/step3_blocking.py", script_get("/fast")),
    "03-uvicorn-routing.txt": ("03-asgi/step2_routing.py", script_get("/users/7")),
    "04-toy-h11-user.txt": ("04-sans-io/step3_toy_h11.py", script_user_then_close),
    "05-toy-httptools-user.txt": ("05-speed/step3_toy_httptools.py", script_user_then_close),
    "06-asgi-user.txt": ("06-layers/serve_asgi_user.py",
                         script_post_json(b'{"id": 1, "name": "user", "email": "user@email.com"}')),
    "07-toy-wsgi-flask.txt": ("07-wsgi-server/step4_toy_wsgi.py", script_user_then_close),
    "09-anyio-keepalive.txt": ("09-structured-concurrency/step2_anyio.py", script_keepalive),
}


def without_date(text: str) -> str:
    return re.sub(r"(?im)^(\s*date: )[^\\]*", r"\1<date>", text)


@pytest.mark.parametrize("name", sorted(TRANSCRIPT_CASES))
def test_transcript_matches_what_the_step_server_sends(name: str) -> None:
    relpath, script = TRANSCRIPT_CASES[name]
    with step(relpath) as server:
        captured = render(script(server))
    path = TRANSCRIPTS / name
    if os.environ.get("UPDATE_TRANSCRIPTS") == "1":
        path.write_text(captured)
    assert path.exists(), f"{path} is missing: run with UPDATE_TRANSCRIPTS=1"
    assert without_date(path.read_text()) == without_date(captured), (
        f"{path.name} is stale: rerun with UPDATE_TRANSCRIPTS=1 and review the diff")


def test_transcript_date_normalisation_only_touches_the_date() -> None:
    text = "    Date: Sun, 06 Nov 1994 08:49:37 GMT\\r\\n\n    date: x\\r\\n\n    Host: h\\r\\n\n"
    expected = "    Date: <date>\\r\\n\n    date: <date>\\r\\n\n    Host: h\\r\\n\n"
    assert without_date(text) == expected


# --- the pages hold together -----------------------------------------------------------------

INCLUDE = re.compile(r'^\s*--8<-- "([^"]+)"\s*$', re.MULTILINE)


def includes() -> list[tuple[Path, str, str | None]]:
    """(page, included file, section or None) for every snippet include on every page."""
    found = []
    for page in sorted(LESSONS.rglob("*.md")):
        for target in INCLUDE.findall(page.read_text()):
            file, _, section = target.partition(":")
            found.append((page, file, section or None))
    return found


def test_pages_include_something() -> None:
    pages = {page.name for page, _, _ in includes()}
    assert {"01-bytes-on-a-socket.md", "02-wsgi.md", "03-asgi.md"} <= pages


def test_every_include_resolves_to_a_file_and_a_named_section() -> None:
    problems = []
    for page, file, section in includes():
        path = ROOT / file
        if not path.is_file():
            problems.append(f"{page.name}: {file} does not exist")
            continue
        if section is not None:
            text = path.read_text()
            for marker in (f"--8<-- [start:{section}]", f"--8<-- [end:{section}]"):
                if marker not in text:
                    problems.append(f"{page.name}: {file} has no '{marker}'")
    assert not problems, "\n".join(problems)


def test_every_step_file_and_exercise_is_included_by_a_page() -> None:
    included = {(ROOT / file).resolve() for _, file, _ in includes()}
    files = [*CODE.rglob("*.py"), *(LESSONS / "exercises").glob("*/starter.py")]
    assert files, "no step files found"
    orphans = [str(p.relative_to(ROOT)) for p in files if p.resolve() not in included]
    assert not orphans, f"step files no page includes: {orphans}"


def test_section_markers_come_in_pairs() -> None:
    problems = []
    for path in [*CODE.rglob("*.py"), *(LESSONS / "exercises").rglob("*.py")]:
        text = path.read_text()
        starts = re.findall(r"--8<-- \[start:(\w+)\]", text)
        ends = re.findall(r"--8<-- \[end:(\w+)\]", text)
        if sorted(starts) != sorted(ends) or len(set(starts)) != len(starts):
            problems.append(f"{path.relative_to(ROOT)}: starts {starts}, ends {ends}")
    assert not problems, "\n".join(problems)


def test_every_command_in_a_docstring_runs_from_the_repository_root() -> None:
    """A step's or an exercise's docstring says how to run it as the pages do: the venv's
    interpreter by its path and the file's path from the repository's root, so it runs as
    printed after ``make venv``, from where every other command runs."""
    problems = []
    for path in [*CODE.rglob("*.py"), *(LESSONS / "exercises").rglob("*.py")]:
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        commands = re.findall(r"([\w./-]*python3?) +([\w./-]+\.py)\b", docstring)
        for interpreter, script in commands:
            if interpreter != ".venv/bin/python" or not (ROOT / script).is_file():
                problems.append(f"{path.relative_to(ROOT)}: {interpreter} {script}")
    assert not problems, "\n".join(problems)


#: What a page's commands need beyond ``make venv`` (and wrk, which the index names for every
#: ``bench`` command), found by what the commands say.
NEEDS = {
    "redis-server": r"\bbench servers\b|serve_servers_app\.py",
    "h2load": r"\bbench h2\b|ARGS=\"h2\b",
    "HTTP/2": r"--http2",
    "Linux": r"\bps --ppid\b|\bpgrep -\w*P\b",
    "nginx": r"\bbench cluster\b|lessons/code/14-proxy/",
    "HAProxy": r"\bbench cluster\b",
}


def test_a_page_that_needs_more_than_make_venv_says_so_at_its_top() -> None:
    """A reader learns what to install before the first command that needs it: a page whose
    commands need redis-server, h2load, a curl with HTTP/2, Linux's process tools, nginx or
    HAProxy names them in its "What this page needs" box, above its first section."""
    problems = []
    for page in sorted(LESSONS.glob("*.md")):
        text = page.read_text()
        commands = "\n".join(re.findall(r"^ *```sh\n(.*?)^ *```", text, re.S | re.M))
        needed = [name for name, pattern in NEEDS.items() if re.search(pattern, commands)]
        top = text.split("\n## ", 1)[0]
        box = re.search(r'^!!! info "What this page needs[^"]*"\n((?: {4}.*\n)+)', top, re.M)
        for name in needed:
            if box is None or name not in box.group(1):
                problems.append(f"{page.name}: its commands need {name}; its box does not say")
    assert not problems, "\n".join(problems)
    index = (LESSONS / "index.md").read_text()
    assert "Linux, or Windows with WSL" in index


def test_every_published_figure_names_its_source_by_title() -> None:
    """Each file of published figures cites its source (title, and author or date where they
    are known) and says whether its figures were checked against it; every page that quotes
    one, or speaks of "the paper", "the post" or "the article", names it by its title."""
    titles = {}
    for path in sorted((ROOT / "bench" / "published").glob("*.json")):
        data = json.loads(path.read_text())
        cited = data["citation"]
        assert cited["title"] and f'"{cited["title"]}"' in data["source"], path.name
        assert "author" in cited and "date" in cited, path.name  # None: not known
        assert cited["figures"] in ("checked against the source",
                                    "as quoted in the project's issue 10, unverified"), path.name
        titles[path.stem] = cited["title"]
    titles["layers"] = "How Fast can a python web framework be"  # results/published/layers.md
    problems = []
    for page in sorted(LESSONS.glob("*.md")):
        text = " ".join(page.read_text().split())
        quoted = [name for name in titles if f"bench/published/{name}.json" in text
                  or f"lessons/results/published/{name}.md" in text]
        for name in quoted:
            cited_in = text
            if name == "layers":  # the page includes the file, which cites the post
                cited_in += " " + (LESSONS / "results" / "published" / "layers.md").read_text()
            if titles[name] not in " ".join(cited_in.split()):
                problems.append(f"{page.name} quotes {name} without its title")
        if re.search(r"\bthe (paper|post|article)\b", text, re.I) and not any(
                title in text for title in titles.values()):
            problems.append(f"{page.name} speaks of a publication without naming it")
    assert not problems, "\n".join(problems)


def test_mkdocs_builds_strictly(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f",
         str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    page = (tmp_path / "site" / "01-bytes-on-a-socket" / "index.html").read_text()
    assert "parse_request_line" in page, "the snippet includes did not expand"
    assert "--8&lt;--" not in page and "--8<--" not in page


# --- included reports --------------------------------------------------------------------------


def test_reports_included_inside_a_block_have_no_headings() -> None:
    """A bench report a page includes inside an admonition (``!!! abstract``) holds no
    Markdown heading: one there enters the page's table of contents, and an ``#`` hid every
    section after it from the sidebar (lessons 6, 11 and 12 lost theirs)."""
    included = []
    for page in LESSONS.glob("*.md"):
        for path in re.findall(r'^ +--8<-- "([^":]+\.md)"$', page.read_text(), re.MULTILINE):
            included.append(path)
            headings = re.findall(r"^#+ .*$", (ROOT / path).read_text(), re.MULTILINE)
            assert not headings, f"{page.name} includes {path}, whose headings {headings} " \
                                 "would enter the page's table of contents"
    assert len(included) >= 7, included
