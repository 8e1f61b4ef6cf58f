"""toy-wsgi: a PEP 3333 (WSGI) server on plain sockets, ``selectors`` and threads, no asyncio.

I/O model, with gunicorn's two thread models (``config.worker_class``):

- ``"sync"``: the thread that calls ``serve()`` accepts one connection, reads one request, runs
  the app, writes the response and closes (``Connection: close``), then accepts the next. Like
  gunicorn's sync worker it never keeps a connection alive: with one thread, an idle keep-alive
  client would hold the only worker and every other client would wait.
- ``"gthread"``: a pool of ``config.threads`` threads runs the app; the main thread accepts and
  watches the idle connections with a ``selectors`` selector. A connection goes to the pool once
  it is readable, and comes back after a response that keeps it alive, so an idle keep-alive
  connection holds no thread; the main thread closes it after ``timeout_keep_alive`` seconds.
  A pipelined request already buffered is answered by the same thread, in order.

Requests are read with the project's own sans-IO parser (``toyservers.http1_parser``) and
answered with the shared HTTP/1.1 rules (``toyservers.http1``: target forms, error responses,
``ResponseFramer``), the very code toy-raw runs on asyncio: one parser for the project, already
hardened and tested, so this module holds only what is WSGI's and what blocking I/O needs. Each
blocking read carries a deadline (``timeout_keep_alive`` before a request's first byte,
``timeout_headers`` from it to the blank line, ``timeout_body`` per pause in the body); a slow
head or body gets 408. Unlike the ASGI servers, ``serve()`` is a plain blocking function: run it
in a thread, and stop it with the ``shutdown`` ``threading.Event``.

Deliberately left out: TLS, pre-forked worker processes (``workers``), ``limit_concurrency``,
request trailers reaching the app (checked, dropped), the app's own reason phrase being checked
beyond field-value rules, ``sendfile`` for a file without a Content-Length (it is iterated), a
slow client dribbling its head holding a gthread thread for up to ``timeout_headers`` (as in
gunicorn), and stopping an app that outlives the graceful-shutdown timeout (Python cannot kill a
thread; its socket is shut so its I/O fails).

Spec: PEP 3333 (environ variables, input and error streams, ``start_response()``, buffering
and streaming, the ``write()`` callable, optional platform-specific file handling, HTTP 1.1
expect/continue, other HTTP features: hop-by-hop headers); RFC 9112 §2-§7 (message parsing,
body length, chunked coding) and §9 (connection management); RFC 9110 §10.1.1 (Expect).

Compare with: gunicorn/workers/sync.py (``accept``, ``handle``), gunicorn/workers/gthread.py
(``PollableMethodQueue``, ``murder_keepalived``, ``handle``), gunicorn/http/wsgi.py
(``create``, ``Response``, ``FileWrapper``), and wsgiref/handlers.py (``BaseHandler``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import logging
import queue
import selectors
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import IO, Any
from urllib.parse import unquote_to_bytes

from toyservers import asgi, http1
from toyservers._server import ServerState
from toyservers._types import Environ, ExcInfo, Headers, WSGIApp
from toyservers.config import Config
from toyservers.http1_parser import (
    BadRequest,
    ChunkedDecoder,
    body_framing,
    check_partial_head,
    parse_request_head,
)

logger = logging.getLogger("toyservers.error")

# ---------------------------------------------------------------------------------- constants

READ_SIZE = 64 * 1024  # bytes asked of one recv()
SEND_TIMEOUT = 30.0  # a client that takes none of our bytes for this long is gone (gunicorn: 30)
LINGER_SECONDS = 2.0  # after an answer that closes, how long we drain the client's leftovers
TICK = 0.25  # the main loop looks at the shutdown Event, which has no fd, this often
# PEP 3333, "Other HTTP Features": "applications ... must not generate any 'hop-by-hop' headers"
# (RFC 2616 §13.5.1's list): they describe this connection, which is the server's.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                        "te", "trailers", "transfer-encoding", "upgrade"})


class ClientError(OSError):
    """Raised by ``wsgi.input`` when the body cannot be read: ``status`` is the answer (400,
    408, 413, 431), or 0 when the client is gone and nothing can be answered."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


# ------------------------------------------------------------------------------- wire helpers


def path_info(raw_path: bytes, script_name: str) -> str:
    """PEP 3333 ``PATH_INFO``: the path percent-decoded, as a latin-1 "native string" (bytes
    0-255 as code points 0-255), without the ``SCRIPT_NAME`` prefix when the client sent it."""
    path = unquote_to_bytes(raw_path).decode("latin-1")
    if script_name and (path == script_name or path.startswith(script_name + "/")):
        path = path[len(script_name):]  # gunicorn too strips a SCRIPT_NAME the proxy kept
    return path


class FileWrapper:
    """PEP 3333 ``wsgi.file_wrapper``: iterates ``filelike`` in blocks; the server sends it with
    ``socket.sendfile`` when it has a ``fileno()`` and the app gave a Content-Length."""

    def __init__(self, filelike: IO[bytes], blksize: int = 8192) -> None:
        self.filelike, self.blksize = filelike, blksize

    def __iter__(self) -> Iterator[bytes]:
        while block := self.filelike.read(self.blksize):
            yield block

    def close(self) -> None:
        close = getattr(self.filelike, "close", None)
        if close is not None:
            close()


# -------------------------------------------------------------------------------- connection


class Connection:
    """One client connection: reads requests with the shared parser, answers each with a
    ``RequestResponseCycle``. Blocking socket; every read has a deadline."""

    def __init__(self, server: WSGIServer, sock: socket.socket, client: tuple[str, int]) -> None:
        self.server, self.config, self.sock, self.client = server, server.config, sock, client
        self.buffer = bytearray()  # bytes read and not yet parsed
        self.idle_deadline = 0.0  # gthread: when the main thread closes this idle connection
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def recv(self, deadline: float) -> bool:
        """Read more into ``buffer`` before ``deadline`` (TimeoutError); False at EOF."""
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            raise TimeoutError
        self.sock.settimeout(timeout)
        data = self.sock.recv(READ_SIZE)
        self.buffer += data
        return bool(data)

    def sendall(self, data: bytes) -> None:
        self.sock.settimeout(SEND_TIMEOUT)
        self.sock.sendall(data)

    def read_head(self) -> bytes | None:
        """The next request head, or None when the client closes or stays idle."""
        buffer, config = self.buffer, self.config
        deadline = time.monotonic() + config.timeout_keep_alive  # until the first byte
        started = False
        while True:
            # RFC 9112 §2.2: "a server ... SHOULD ignore at least one empty line (CRLF)
            # received prior to the request-line".
            while buffer.startswith(b"\r\n"):
                del buffer[:2]
            end = buffer.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(buffer[:end])
                del buffer[: end + 4]
                return head
            if buffer:
                check_partial_head(buffer, config.max_request_line, config.max_header_size,
                                   config.max_headers)
                if not started:  # the head deadline runs from the first byte
                    started, deadline = True, time.monotonic() + config.timeout_headers
            try:
                if not self.recv(deadline):
                    return None
            except TimeoutError:
                if started:  # RFC 9110 §15.5.9: 408 Request Timeout
                    raise BadRequest(408, "timed out reading the request head") from None
                return None

    def handle(self) -> bool:
        """Read and answer one request; True when the connection may carry another."""
        config = self.config
        try:
            head = self.read_head()
            if head is None:  # the client closed, or sent nothing in time: close quietly
                self.close()
                return False
            method, target, version, headers = parse_request_head(
                head, config.max_request_line, config.max_header_size, config.max_headers)
            content_length, chunked, keep_alive, expect_100 = body_framing(version, headers)
            raw_path, query = http1.split_target(method, target)
            if config.max_body_size is not None and (content_length or 0) > config.max_body_size:
                raise BadRequest(413, "request body too large")
        except BadRequest as exc:
            self.send_error(exc.status, exc.reason)
            return False
        except http1.BadTarget as exc:
            self.send_error(400, str(exc))
            return False
        decoder = ChunkedDecoder(max_trailer_size=config.max_header_size,
                                 max_trailers=config.max_headers) if chunked else None
        keep_alive = keep_alive and self.server.threaded and not self.server.stopping.is_set()
        cycle = RequestResponseCycle(self, method, version, keep_alive)
        cycle.body = RequestBody(cycle, content_length or 0, decoder, expect_100)
        environ = cycle.build_environ(raw_path, query, headers)
        return cycle.run_wsgi(environ)

    def send_error(self, status: int, reason: str, head: bool = False) -> None:
        logger.debug("%d to %s: %s", status, self.client, reason)
        try:
            self.sendall(http1.error_response(status, self.server.state.default_headers_bytes,
                                              head=head))
        except OSError:
            pass
        self.close(linger=True)

    def close(self, linger: bool = False) -> None:
        """Close; with ``linger``, half-close first and drop what the client still sends for
        LINGER_SECONDS, lest its late bytes get a reset that destroys our last response before
        it is read (RFC 9112 §9.6: servers close in stages)."""
        try:
            if linger:
                self.sock.shutdown(socket.SHUT_WR)
                deadline = time.monotonic() + LINGER_SECONDS
                self.buffer.clear()
                while self.recv(deadline):
                    self.buffer.clear()
        except OSError:  # TimeoutError too
            pass
        self.sock.close()


# ----------------------------------------------------------------------------- WSGI interface


class RequestBody(io.RawIOBase):
    """The request body as a raw stream: Content-Length counted or chunked decoded, never read
    past its end. ``wsgi.input`` is an ``io.BufferedReader`` on it, which gives PEP 3333's
    ``read(size)``, ``read()``, ``readline(size)``, ``readlines(hint)`` and iteration. The
    first read sends ``100 Continue`` when the client waits for it (PEP 3333, "HTTP 1.1
    Expect/Continue": when "the application first attempts to read from the input stream").
    ClientError when the body cannot be read."""

    def __init__(self, cycle: RequestResponseCycle, content_length: int,
                 decoder: ChunkedDecoder | None, expect_100: bool) -> None:
        self.cycle, self.conn = cycle, cycle.conn
        self.remaining = content_length  # Content-Length bytes not yet taken from the socket
        self.decoder, self.expect_100 = decoder, expect_100
        self.pending = b""  # decoded bytes readinto() could not take yet
        self.received = 0  # chunked body bytes decoded (for max_body_size)
        self.done = decoder is None and not content_length  # the body is all read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.pending or self._read()
        size = min(len(buffer), len(data))
        buffer[:size], self.pending = data[:size], data[size:]
        return size

    def _read(self) -> bytes:
        """The next body bytes, b"" once the body has ended."""
        conn, config = self.conn, self.conn.config
        if self.expect_100:
            self.expect_100 = False
            if not self.cycle.framer.head_sent:  # RFC 9110 §15.2: 1xx precede the final one
                conn.sendall(http1.CONTINUE_100)
        try:
            while not self.done:
                if self.decoder is None:
                    data = bytes(conn.buffer[: self.remaining])
                    del conn.buffer[: len(data)]
                    self.remaining -= len(data)
                    self.done = not self.remaining
                else:
                    data = self.decoder.feed(conn.buffer)
                    self.received += len(data)
                    self.done = self.decoder.done
                    if config.max_body_size is not None and self.received > config.max_body_size:
                        raise BadRequest(413, "request body too large")
                if data:
                    return data
                if not self.done and not conn.recv(time.monotonic() + config.timeout_body):
                    raise ClientError(0, "the client closed during the request body")
            return b""
        except BadRequest as exc:
            raise self._fail(ClientError(exc.status, exc.reason)) from None
        except TimeoutError:
            raise self._fail(ClientError(408, "timed out reading the request body")) from None
        except OSError as exc:  # ClientError too
            raise self._fail(exc if isinstance(exc, ClientError) else ClientError(0, str(exc))
                             ) from None

    def _fail(self, exc: ClientError) -> ClientError:
        self.done = True
        self.cycle.error = exc  # the server answers its status if the app answers nothing
        self.cycle.framer.keep_alive = False  # where the next request starts is unknown
        return exc

    def drain(self) -> bool:
        """Read and drop what the app left of the body (as gunicorn does before the next
        request); False when it cannot be read, and the connection must close."""
        try:
            while self._read():
                pass
        except ClientError:
            return False
        return True


class RequestResponseCycle:
    """One request and its response: the environ, ``start_response``, ``write`` and the
    iteration of the app's result, framed by ``http1.ResponseFramer``."""

    def __init__(self, conn: Connection, method: str, version: str, keep_alive: bool) -> None:
        self.conn, self.method, self.version = conn, method, version
        self.framer = http1.ResponseFramer(method == "HEAD", version == "1.0", keep_alive)
        self.body: RequestBody = None  # type: ignore[assignment]  # set by Connection.handle
        self.started = False  # start_response was called
        self.error: ClientError | None = None  # why wsgi.input failed, if it did
        self.disconnected = False  # a write failed: the client is gone
        self.log_line: dict[str, Any] = {}

    def build_environ(self, raw_path: bytes, query: bytes, headers: Headers) -> Environ:
        server, conn = self.conn.server, self.conn
        script_name = server.config.root_path.rstrip("/")
        environ: Environ = {
            "REQUEST_METHOD": self.method,
            "SCRIPT_NAME": script_name,
            "PATH_INFO": path_info(raw_path, script_name),
            "QUERY_STRING": query.decode("latin-1"),
            "SERVER_NAME": server.address[0],
            "SERVER_PORT": str(server.address[1]),
            "SERVER_PROTOCOL": "HTTP/" + self.version,
            "REMOTE_ADDR": conn.client[0],
            "REMOTE_PORT": str(conn.client[1]),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BufferedReader(self.body),
            "wsgi.input_terminated": True,  # the input ends at the body's end, chunked too
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": server.threaded,
            "wsgi.multiprocess": False,  # one process: no pre-forked workers
            "wsgi.run_once": False,
            "wsgi.file_wrapper": FileWrapper,
        }
        for name, value in headers:
            if name == b"content-type":
                key = "CONTENT_TYPE"
            elif name == b"content-length":
                key = "CONTENT_LENGTH"
            elif b"_" in name:  # X_User would pass for X-User: dropped, as gunicorn does
                continue
            else:
                key = "HTTP_" + name.decode("latin-1").upper().replace("-", "_")
            text = value.decode("latin-1")
            # RFC 9110 §5.3: repeated field lines are one list, joined with ", "
            environ[key] = environ[key] + ", " + text if key in environ else text
        if server.access_log:
            self.log_line = {"method": self.method, "raw_path": raw_path,
                             "query_string": query, "http_version": self.version}
        return environ

    def start_response(self, status: str, headers: list[tuple[str, str]],
                       exc_info: ExcInfo | None = None) -> Callable[[bytes], None]:
        if exc_info is not None:
            try:  # PEP 3333: "if ... headers have already been sent, start_response must
                if self.framer.head_sent:  # raise an error, and should re-raise ... exc_info"
                    raise exc_info[1].with_traceback(exc_info[2])
            finally:
                exc_info = None  # PEP 3333: avoid a circular reference through the traceback
        elif self.started:
            raise http1.ResponseError("start_response called twice without exc_info")
        if type(status) is not str or len(status) < 4 or not status[:3].isdigit() \
                or status[3] != " " or http1.bad_field_value(status.encode("latin-1")):
            raise http1.ResponseError(f"invalid status {status!r}: '200 OK' is the shape")
        if type(headers) is not list:
            raise http1.ResponseError("response headers must be a list of (name, value)")
        fields = []
        for name, value in headers:
            if type(name) is not str or type(value) is not str:
                raise http1.ResponseError(f"header {name!r}: names and values are str")
            if name.lower() in HOP_BY_HOP:
                raise http1.ResponseError(f"hop-by-hop header {name!r} is the server's")
            fields.append((name.encode("latin-1"), value.encode("latin-1")))
        state = self.conn.server.state
        self.framer.start(int(status[:3]), fields, state.default_headers,
                          state.default_headers_bytes)
        self.framer.parts[0] = b"HTTP/1.1 %s\r\n" % status.encode("latin-1")  # its own phrase
        self.started = True
        return self.write

    def write(self, data: bytes) -> None:
        """PEP 3333's ``write()`` callable, for apps that push their body."""
        if not self.started:
            raise http1.ResponseError("write() before start_response()")
        if data:  # PEP 3333: no head "until the first non-empty bytestring"
            self.send(data, True)

    def send(self, data: bytes, more_body: bool) -> None:
        framer = self.framer
        if not framer.head_sent:
            if self.body.expect_100 and not self.body.done:
                framer.keep_alive = False  # the client may never send the body it offered
            if self.conn.server.stopping.is_set():
                framer.keep_alive = False
            if self.log_line:
                asgi.log_access(self.conn.client, self.log_line, framer.status)
        out = framer.body(data, more_body)
        if out:
            try:
                self.conn.sendall(out)
            except OSError as exc:  # reset, broken pipe, or SEND_TIMEOUT without progress
                self.disconnected = True
                raise ClientError(0, f"the client went away: {exc}") from None

    def send_file(self, wrapper: FileWrapper) -> bool:
        """Send a file wrapper with ``socket.sendfile`` (PEP 3333, "Optional Platform-Specific
        File Handling"); False when the iteration must do it."""
        framer = self.framer
        try:
            wrapper.filelike.fileno()
        except (AttributeError, OSError, ValueError):
            return False
        if framer.remaining is None or framer.no_body or framer.head_sent:
            return False
        self.send(b"", True)  # the head alone: the app's Content-Length frames the body
        try:
            self.conn.sock.settimeout(SEND_TIMEOUT)
            framer.remaining -= self.conn.sock.sendfile(wrapper.filelike, count=framer.remaining)
        except OSError as exc:
            self.disconnected = True
            raise ClientError(0, f"the client went away: {exc}") from None
        return True

    def run_wsgi(self, environ: Environ) -> bool:
        """Run the app and send its response; True when the connection may carry another.
        Whatever the app raises stays here: 500 when no byte of the response is out, else
        close; the result's ``close()`` is always called (PEP 3333)."""
        conn, app = self.conn, self.conn.server.app
        result: Iterable[bytes] | None = None
        try:
            result = app(environ, self.start_response)
            if isinstance(result, FileWrapper) and self.started and self.send_file(result):
                pass
            elif isinstance(result, (list, tuple)) and len(result) == 1 and self.started:
                self.send(result[0], False)  # the whole body: a Content-Length frames it
                return self.finish()
            else:
                for data in result:
                    if data:
                        if not self.started:
                            raise http1.ResponseError("body before start_response()")
                        self.send(data, True)
            if not self.started:
                raise http1.ResponseError("the app returned without calling start_response")
            self.send(b"", False)
            return self.finish()
        except BaseException as exc:  # SystemExit too: one app must not stop the server
            if self.disconnected or exc is self.error:
                logger.debug("client %s: %s", conn.client, exc)
            else:
                logger.error("Exception in WSGI application", exc_info=exc)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                try:
                    close()
                except BaseException as exc:
                    logger.error("Exception in the WSGI result's close()", exc_info=exc)
        status = self.error.status if self.error is not None else 500
        if self.framer.head_sent or self.disconnected or not status:
            conn.close()
        else:
            conn.send_error(status, "the app failed", head=self.method == "HEAD")
        return False

    def finish(self) -> bool:
        """After the last byte: may the connection carry another request?"""
        framer = self.framer
        if framer.short:
            logger.error("response body shorter than its Content-Length; closing")
        if framer.keep_alive and not framer.short and self.body.drain():
            return True
        self.conn.close(linger=bool(self.conn.buffer) or not self.body.done)
        return False


# --------------------------------------------------------------------------------------- serve


class WSGIServer:
    """What the connections of one server share, and its accept loop (sync or gthread)."""

    def __init__(self, app: WSGIApp, config: Config, listener: socket.socket,
                 shutdown: threading.Event) -> None:
        self.app, self.config, self.listener, self.stopping = app, config, listener, shutdown
        # ServerState is typed for ASGI apps; here it keeps the Date and Server headers.
        self.state = ServerState(app, config, {})  # type: ignore[arg-type]
        self.address: tuple[str, int] = listener.getsockname()[:2]
        self.threaded = config.worker_class == "gthread"
        self.access_log = config.access_log and asgi.access_logger.isEnabledFor(logging.INFO)
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = socket.socketpair()  # a worker wakes the main thread
        self.returned: queue.SimpleQueue[Connection] = queue.SimpleQueue()
        self.busy: dict[concurrent.futures.Future[None], Connection] = {}  # in the pool
        self.last_tick = time.monotonic()

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last_tick >= 1.0:  # RFC 9110 §6.6.1: Date, to the second
            self.last_tick = now
            self.state.refresh_default_headers()

    def accept(self) -> Connection | None:
        try:
            sock, address = self.listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return None
        return Connection(self, sock, (str(address[0]), int(address[1])))

    def serve_sync(self) -> None:
        """gunicorn's sync worker: one connection, one request at a time, in this thread."""
        self.selector.register(self.listener, selectors.EVENT_READ)
        while not self.stopping.is_set():
            if self.selector.select(TICK) and (conn := self.accept()) is not None:
                self.tick()
                try:
                    while conn.handle():
                        pass
                except BaseException as exc:
                    logger.error("Exception in the connection", exc_info=exc)
                    conn.close()

    def serve_gthread(self) -> None:
        """gunicorn's gthread worker: the main thread accepts and watches idle connections;
        the pool runs one request at a time per connection."""
        config, selector = self.config, self.selector
        selector.register(self.listener, selectors.EVENT_READ)
        selector.register(self.wake_r, selectors.EVENT_READ)
        idle: set[Connection] = set()
        pool = concurrent.futures.ThreadPoolExecutor(config.threads, "toy-wsgi")
        while not self.stopping.is_set():
            now = time.monotonic()
            timeout = min([TICK, *(c.idle_deadline - now for c in idle)])
            for key, _ in selector.select(max(timeout, 0)):
                if key.fileobj is self.listener:
                    conn = self.accept()
                    if conn is not None:
                        self.watch(conn, idle)
                elif key.fileobj is self.wake_r:
                    self.wake_r.recv(4096)
                    while not self.returned.empty():
                        self.watch(self.returned.get(), idle)
                else:  # readable: a request (or a close) is coming; a thread takes it
                    conn = key.data
                    selector.unregister(conn.sock)
                    idle.discard(conn)
                    future = pool.submit(self.work, conn)
                    self.busy[future] = conn
                    future.add_done_callback(self.busy.pop)
            now = time.monotonic()
            for conn in [c for c in idle if c.idle_deadline <= now]:
                idle.discard(conn)  # the keep-alive timeout: close without a word
                selector.unregister(conn.sock)
                conn.close()
            self.tick()
        # Graceful shutdown: stop accepting, close idle connections, let requests in flight
        # finish (their responses say Connection: close), then shut the sockets of the rest.
        self.listener.close()
        for conn in idle:
            conn.close()
        busy = dict(self.busy)
        _, pending = concurrent.futures.wait(busy, timeout=config.timeout_graceful_shutdown)
        if pending:
            logger.warning("graceful shutdown timed out; closing %d connections", len(pending))
            for future in pending:
                with contextlib.suppress(OSError):
                    busy[future].sock.shutdown(socket.SHUT_RDWR)
        pool.shutdown(wait=False, cancel_futures=True)
        while not self.returned.empty():
            self.returned.get().close()

    def watch(self, conn: Connection, idle: set[Connection]) -> None:
        if self.stopping.is_set():
            conn.close()
            return
        conn.idle_deadline = time.monotonic() + self.config.timeout_keep_alive
        self.selector.register(conn.sock, selectors.EVENT_READ, conn)
        idle.add(conn)

    def work(self, conn: Connection) -> None:
        """In a pool thread: answer the requests this connection has, then hand it back."""
        try:
            while conn.handle():
                if self.stopping.is_set():
                    conn.close()
                    return
                if not conn.buffer:  # nothing pipelined: back to the main thread's watch
                    self.returned.put(conn)
                    self.wake_w.send(b"\0")
                    return
        except BaseException as exc:
            logger.error("Exception in the connection", exc_info=exc)
            conn.close()

    def close(self) -> None:
        self.selector.close()
        self.listener.close()
        self.wake_r.close()
        self.wake_w.close()


def serve(app: WSGIApp, config: Config, *, sock: socket.socket | None = None,
          ready: Callable[[tuple[str, int]], object] | None = None,
          shutdown: threading.Event | None = None) -> None:
    """Serve ``app`` until ``shutdown`` is set (or SIGINT/SIGTERM, from the main thread).

    Unlike the ASGI servers' ``serve()`` this is a plain blocking function, and ``shutdown`` a
    ``threading.Event``: tests run it in a thread. ``sock``: a bound socket to listen on;
    ``ready``: called with the bound ``(host, port)``. Raises OSError when it cannot bind.
    """
    if config.worker_class not in ("sync", "gthread"):
        raise ValueError(f"worker_class is 'sync' or 'gthread', not {config.worker_class!r}")
    if shutdown is None:
        shutdown = threading.Event()
        if threading.current_thread() is threading.main_thread():
            stop = shutdown

            def on_signal(signum: int, frame: FrameType | None) -> None:
                stop.set()

            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, on_signal)
    if sock is None:
        sock = socket.create_server((config.host, config.port), backlog=config.backlog)
    sock.listen(config.backlog)
    sock.setblocking(False)
    server = WSGIServer(app, config, sock, shutdown)
    host, port = server.address
    logger.info("toy-wsgi (%s) running on http://%s:%d (Press CTRL+C to quit)",
                config.worker_class, host, port)
    if ready is not None:
        ready((host, port))
    try:
        server.serve_gthread() if server.threaded else server.serve_sync()
    finally:
        logger.info("shutting down")
        server.close()


# ----------------------------------------------------------------------------------------- run


def run(app: WSGIApp, config: Config) -> None:
    """Block serving ``app``; exit with one line (status 1) when the address cannot be bound."""
    try:
        serve(app, config)
    except OSError as exc:
        logger.error("cannot listen on %s:%d: %s", config.host, config.port, exc.strerror or exc)
        sys.exit(1)
    except KeyboardInterrupt:
        pass
