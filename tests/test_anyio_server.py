"""toy-anyio (toyservers/anyio_server.py): what is its own, on both anyio backends.

The conformance suite and the hostile corpus run against ``toy-anyio`` and ``toy-anyio-trio``
as server processes. Here the server runs in a thread of the test process, inside
``anyio.run(..., backend=...)``, once on asyncio and once on trio: an app written with anyio
runs unchanged on both, and the cancel-scope deadlines, pipelining, the task group that
waits for the app and the graceful shutdown behave the same on both.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import pytest
import sniffio
from click.testing import CliRunner

from bench.process import ServerProcess, free_port
from toyservers import anyio_server
from toyservers.cli import main as toyserve
from toyservers.config import Config
from toyservers.registry import get

HOST = "127.0.0.1"
TIMEOUT = 10.0  # seconds any wait here may take before the test fails
BACKENDS = ["asyncio", "trio"]


@contextlib.contextmanager
def serving(backend: str, app: Any, **settings: Any) -> Iterator[int]:
    """Run toy-anyio's ``serve()`` on ``backend`` in a thread; yield its port, then stop it
    (an ``anyio.Event`` set from this thread) and join the thread."""
    settings = {"access_log": False, "lifespan": "off", "timeout_graceful_shutdown": 2.0,
                **settings}
    sock = socket.socket()
    sock.bind((HOST, 0))
    port: int = sock.getsockname()[1]
    config = Config(host=HOST, port=port, **settings)
    ready = threading.Event()
    handles: dict[str, Any] = {}
    errors: list[BaseException] = []

    async def main() -> None:
        handles["token"], handles["stop"] = anyio.lowlevel.current_token(), anyio.Event()
        await anyio_server.serve(app, config, sock=sock, ready=lambda _: ready.set(),
                                 shutdown=handles["stop"])

    def thread_main() -> None:
        try:
            anyio.run(main, backend=backend)
        except BaseException as exc:  # handed to the test below
            errors.append(exc)
            ready.set()

    thread = threading.Thread(target=thread_main, daemon=True)
    thread.start()
    assert ready.wait(TIMEOUT) and not errors, f"did not start: {errors}"
    try:
        yield port
    finally:
        anyio.from_thread.run_sync(handles["stop"].set, token=handles["token"])
        thread.join(TIMEOUT)
        assert not thread.is_alive() and not errors, f"did not stop cleanly: {errors}"


def connect(port: int) -> socket.socket:
    sock = socket.create_connection((HOST, port), timeout=TIMEOUT)
    return sock


def read_until_close(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def read_responses(sock: socket.socket, count: int) -> list[bytes]:
    """``count`` responses with a Content-Length body, read off one connection."""
    data, bodies = b"", []
    while len(bodies) < count:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if sep:
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")))
            if len(rest) >= length:
                bodies.append(head.split(b"\r\n")[0] + b" " + rest[:length])
                data = rest[length:]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(bodies)} responses"
        data += chunk
    return bodies


async def respond(send: Any, body: bytes, status: int = 200) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


# --- an app written with anyio ------------------------------------------------------------------


async def anyio_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Structured concurrency inside the app: a task group of two sleepers, a cancel scope
    whose timeout cuts a long sleep short, and ``fail_after`` raising TimeoutError."""
    finished: list[str] = []

    async def sleeper(name: str, seconds: float) -> None:
        await anyio.sleep(seconds)
        finished.append(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper, "slow", 0.05)
        tg.start_soon(sleeper, "fast", 0.01)
    with anyio.move_on_after(0.05) as scope_timeout:
        await anyio.sleep(30)
    try:
        with anyio.fail_after(0.01):
            await anyio.sleep(30)
        failed = False
    except TimeoutError:
        failed = True
    body = {"backend": sniffio.current_async_library(), "finished": finished,
            "cut_short": scope_timeout.cancelled_caught, "fail_after": failed}
    await respond(send, json.dumps(body).encode())


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_anyio_app_runs_unchanged_on_both_backends(backend: str) -> None:
    with serving(backend, anyio_app) as port, connect(port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        (response,) = read_responses(sock, 1)
    assert response.startswith(b"HTTP/1.1 200 OK ")
    assert json.loads(response.split(b" ", 3)[3]) == {
        "backend": backend, "finished": ["fast", "slow"], "cut_short": True,
        "fail_after": True}


# --- deadlines: one cancel scope around the reading ------------------------------------------


async def path_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    while (await receive()).get("more_body"):  # the whole body first
        pass
    if scope["path"] == "/slow":
        await anyio.sleep(0.1)  # the second request is answered first if order is lost
    await respond(send, scope["path"].encode())


@pytest.mark.parametrize("backend", BACKENDS)
def test_deadlines_idle_close_and_408_for_a_slow_head_and_body(backend: str) -> None:
    settings = {"timeout_keep_alive": 0.3, "timeout_headers": 0.3, "timeout_body": 0.3}
    with serving(backend, path_app, **settings) as port:
        started = time.monotonic()
        with connect(port) as sock:  # idle: closed without a byte (RFC 9112 §9.5)
            assert read_until_close(sock) == b""
        assert time.monotonic() - started < 0.3 + 2.0
        with connect(port) as sock:  # a head that never ends: 408
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            assert read_until_close(sock).startswith(b"HTTP/1.1 408 ")
        with connect(port) as sock:  # a body that stops coming: 408
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
            assert read_until_close(sock).startswith(b"HTTP/1.1 408 ")


async def sleepy_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await anyio.sleep(float(scope["query_string"] or 0))  # GET /?SECONDS
    await respond(send, b"slept")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_deadline_that_has_moved_on_does_not_end_the_connection(backend: str) -> None:
    """The reading scope's deadline is moved only when it must come sooner: the idle
    deadline armed after the first response passes while the second request's app runs,
    and the reading goes on (in a new scope) instead of ending the connection."""
    settings = {"timeout_keep_alive": 0.2, "timeout_headers": 0.2, "timeout_body": 0.2}
    with serving(backend, sleepy_app, **settings) as port, connect(port) as sock:
        for seconds in (b"0", b"0.5", b"0"):
            sock.sendall(b"GET /?%s HTTP/1.1\r\nHost: x\r\n\r\n" % seconds)
            (response,) = read_responses(sock, 1)
            assert response.startswith(b"HTTP/1.1 200 ") and response.endswith(b"slept")
        started = time.monotonic()
        assert read_until_close(sock) == b""  # then idle: closed
        assert time.monotonic() - started < 0.2 + 2.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stalled_body_gets_408_when_the_body_deadline_is_the_longer(backend: str) -> None:
    """The body deadline counts silence from the last body bytes, whatever the others are.
    With a longer body deadline than the keep-alive one (the defaults: 30 s and 5 s), the
    reading scope armed for the idle deadline when the connection opened expires first, while
    the body is pending; the reading resumes in a new scope, and resuming must not start the
    body's silence again (it did, at each expiry, and the 408 never came)."""
    settings = {"timeout_keep_alive": 1.0, "timeout_headers": 1.0, "timeout_body": 1.5}
    with serving(backend, path_app, **settings) as port, connect(port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        assert read_until_close(sock).startswith(b"HTTP/1.1 408 ")


@pytest.mark.parametrize("backend", BACKENDS)
def test_pipelined_requests_are_answered_in_order(backend: str) -> None:
    with serving(backend, path_app) as port, connect(port) as sock:
        sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /fast HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /last HTTP/1.1\r\nHost: x\r\n\r\n")
        responses = read_responses(sock, 3)
    assert [r.rsplit(b" ", 1)[1] for r in responses] == [b"/slow", b"/fast", b"/last"]


# --- the app task: one per connection, a new one when needed ---------------------------------

request_value: contextvars.ContextVar[str] = contextvars.ContextVar("request_value")
tasks_seen: list[object] = []  # held, so that no task's id is reused by a later one


def current_task() -> int:
    """The number of the task running this, in the order tasks were first seen."""
    if sniffio.current_async_library() == "trio":
        import trio
        task: object = trio.lowlevel.current_task()
    else:
        import asyncio
        task = asyncio.current_task()
    if not any(seen is task for seen in tasks_seen):
        tasks_seen.append(task)
    return next(n for n, seen in enumerate(tasks_seen) if seen is task)


async def task_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers which task runs it and what ``request_value`` holds; ``/set`` sets it first,
    ``/linger`` goes on working after its response."""
    if scope["path"] == "/set":
        request_value.set("set by an earlier request")
    body = {"task": current_task(), "value": request_value.get("unset")}
    await respond(send, json.dumps(body).encode())
    if scope["path"] == "/linger":
        await anyio.sleep(0.5)


def ask(sock: socket.socket, path: str) -> dict[str, Any]:
    sock.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
    (response,) = read_responses(sock, 1)
    answer: dict[str, Any] = json.loads(response.split(b" ", 3)[3])
    return answer


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_task_runs_a_connections_apps_but_never_shares_a_context(backend: str) -> None:
    with serving(backend, task_app) as port, connect(port) as sock:
        first, second = ask(sock, "/"), ask(sock, "/set")
        assert second["task"] == first["task"]  # the app task waited for the next request
        third = ask(sock, "/")  # the app set a context variable: a new task, a clean context
        assert third["task"] != second["task"] and third["value"] == "unset"
        started = time.monotonic()
        lingering, after = ask(sock, "/linger"), ask(sock, "/")
        assert after["task"] != lingering["task"]  # not kept waiting for the first app's end
        assert time.monotonic() - started < 0.5


# --- shutdown: the listener's scope, then the connections' task group ---------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_graceful_shutdown_finishes_the_response_in_flight(backend: str) -> None:
    started = threading.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        started.set()
        await anyio.sleep(0.3)
        await respond(send, b"finished")

    with serving(backend, app) as port:
        sock = connect(port)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert started.wait(TIMEOUT)
    # serving() has returned: the server stopped only after the app answered
    with sock:
        response = read_until_close(sock)
    assert response.startswith(b"HTTP/1.1 200 OK") and response.endswith(b"finished")
    assert b"connection: close" in response.lower()


@pytest.mark.parametrize("backend", BACKENDS)
def test_past_the_graceful_timeout_the_app_is_cancelled(backend: str) -> None:
    started, cancelled = threading.Event(), threading.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        started.set()
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise

    begin = time.monotonic()
    with serving(backend, app, timeout_graceful_shutdown=0.2) as port, connect(port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert started.wait(TIMEOUT)
    assert cancelled.is_set() and time.monotonic() - begin < TIMEOUT


def test_idle_close_on_response_answers_an_idle_connection_after_sigterm() -> None:
    """``toyserve --idle-close-on-response``: after SIGTERM, a request on an idle keep-alive
    connection is answered with Connection: close (the asyncio servers: test_protocols)."""
    port = free_port(HOST)
    argv = [*get("toy-anyio").command("apps.cluster_app:app", HOST, port),
            "--idle-close-on-response"]
    get_root = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    with ServerProcess(argv, host=HOST, port=port) as server, connect(port) as sock:
        sock.sendall(get_root)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:  # until the listener is closed: SIGTERM is seen
            try:
                socket.create_connection((HOST, port), timeout=1).close()
            except OSError:
                break
        sock.sendall(get_root)
        answer = b""
        while chunk := sock.recv(65536):  # to the close that follows the answer
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200") and b"connection: close" in answer.lower()
        assert server.proc.wait(TIMEOUT) == 0


# --- the command line ---------------------------------------------------------------------------


def test_trio_runs_one_process_and_says_so() -> None:
    assert not get("toy-anyio-trio").multiprocess and get("toy-anyio").multiprocess
    result = CliRunner().invoke(toyserve, ["apps.asgi_user:app", "--server", "toy-anyio-trio",
                                           "--workers", "2"])
    assert result.exit_code == 2
    assert "toy-anyio-trio runs one process only" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_read_on_demand_reaches_anyio_transport(loop: str) -> None:
    """``anyio_serving.read_on_demand`` reads two private attributes of anyio's asyncio
    ``SocketStream`` (there is no public way to bound its read-ahead). If an anyio release
    renames them, the workaround would quietly do nothing and uvloop's 8 MB read-ahead come
    back: this test fails first. On asyncio (plain and uvloop) it must take hold, and the stream
    must still read what the peer sends."""
    from toyservers import anyio_serving

    async def check() -> tuple[bool, bytes]:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener, await anyio.connect_tcp("127.0.0.1", port) as client:
            server = await listener.listeners[0].accept()  # type: ignore[attr-defined]
            async with server:
                took = anyio_serving.read_on_demand(server)
                await client.send(b"hello")
                with anyio.fail_after(5):
                    data = await server.receive()
        return took, data

    options = {"use_uvloop": True} if loop == "uvloop" else {}
    assert anyio.run(check, backend="asyncio", backend_options=options) == (True, b"hello")


def test_read_on_demand_leaves_trio_alone() -> None:
    """trio reads only when asked: nothing to bound, and nothing reached into."""
    from toyservers import anyio_serving

    async def check() -> bool:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener, await anyio.connect_tcp("127.0.0.1", port):
            server = await listener.listeners[0].accept()  # type: ignore[attr-defined]
            async with server:
                return anyio_serving.read_on_demand(server)

    assert anyio.run(check, backend="trio") is False
