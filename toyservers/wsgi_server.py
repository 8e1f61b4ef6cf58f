"""toy-wsgi: a PEP 3333 (WSGI) server on plain sockets, ``selectors`` and threads, no asyncio.

I/O model: blocking sockets, in gunicorn's two worker models (``config.worker_class``). In
``sync``, the thread in ``serve()`` accepts a connection, answers one request with
``Connection: close`` and closes it (an idle keep-alive client would hold the only thread). In
``gthread``, ``config.threads`` pool threads run the app while the main thread accepts and
watches idle connections with a selector: a readable one goes to the pool, and back after a
response that keeps it alive, so an idle connection holds no thread. Every read has a deadline:
``timeout_keep_alive`` before a request's first byte, ``timeout_headers`` to the end of its
head, ``timeout_body`` per pause in its body (408 for a slow head or body). ``http1_parser``
(sans-IO; toy-raw runs it on asyncio) reads the requests, the rules of ``http1`` answer them,
``toyservers.wsgi`` is the PEP 3333 glue, ``toyservers.blocking_serving`` the signals and the
PROXY header (``--proxy-protocol``), and the names are the asyncio servers'.

Deliberately left out (``toyservers/workers.py`` pre-forks): TLS, WebSocket (a handshake gets
501), ``limit_concurrency``, request trailers reaching the app (checked, dropped), ``sendfile``
without a Content-Length (the file is iterated), slow clients holding a thread (gunicorn's: sync
waits ``timeout_keep_alive`` for a silent client, gthread ``timeout_headers`` for a dribbled
head), and stopping an app past the graceful-shutdown timeout (its thread's socket is shut).

Spec: PEP 3333 (environ variables, input and error streams, the start_response() callable,
buffering and streaming, the write() callable, platform-specific file handling, HTTP 1.1
expect/continue, hop-by-hop headers); RFC 9112 §2-§7, §9; RFC 9110 §10.1.1 (Expect).

Compare with: gunicorn/workers/sync.py, gunicorn/workers/gthread.py (the poller,
``murder_keepalived``), gunicorn/http/wsgi.py (``Response``), wsgiref/handlers.py.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable

from toyservers import access_log, blocking_serving, http1, http1_parser, listeners, wsgi
from toyservers._types import Environ, ExcInfo, Headers, WSGIApp
from toyservers.config import Config
from toyservers.http1_parser import BadRequest, BodyReader
from toyservers.state import ServerState

logger = logging.getLogger("toyservers.error")

# --- Constants ------------------------------------------------------------------------------------

READ_SIZE = 64 * 1024  # bytes asked of one recv()
SEND_TIMEOUT = 30.0  # a client that takes none of our bytes for this long is gone (gunicorn: 30)
LINGER_SECONDS = 2.0  # after an answer that closes, how long we drain the client's leftovers
TICK = 0.25  # how often the main loop looks at the shutdown Event (it has no fd to select on)
DRAIN = 0.2  # seconds a graceful stop still reads idle connections (as worker_process.DRAIN):
# a request sent on one already (wrk sends at once) gets an answer, with Connection: close;
# under idle_close_on_response, until each has had its answer or its keep-alive timeout


# --- Protocol interface ---------------------------------------------------------------------------


class BlockingHTTPProtocol:
    """One client connection: ``sock``, its peer ``client`` and the ``address`` it reached
    (a PROXY header's, under ``--proxy-protocol``); one thread at a time owns it."""

    def __init__(self, server: WSGIServer, sock: socket.socket, client: tuple[str, int]) -> None:
        self.server, self.config, self.sock, self.client = server, server.config, sock, client
        self.address = server.address
        self.proxy_header_due = server.config.proxy_protocol  # read before the first request
        self.buffer = bytearray()  # bytes read and not yet parsed
        self.cycle: RequestResponseCycle | None = None  # the request in flight, if any
        if sock.family != socket.AF_UNIX:  # no Nagle on TCP (a UNIX socket has none)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def recv(self, deadline: float) -> bool:
        """Read more into ``buffer`` before ``deadline`` (else TimeoutError); False at EOF."""
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

    def read_head(self) -> tuple[str, bytes, str, Headers] | None:
        """The next request head, parsed (``http1_parser.parse_request_head``); None when the
        client closes, resets or sends nothing in time. Raises BadRequest (408: a slow head)."""
        config = self.config
        if self.proxy_header_due:  # --proxy-protocol, before the first request
            self.proxy_header_due = False
            header = blocking_serving.proxy_header(self.sock, self.buffer, self.client,
                                                   self.server.state.trusted,
                                                   config.timeout_headers)
            if header is None:  # untrusted, malformed, late or cut: close without a word
                return None
            if header.source is not None:  # as if it had connected from there
                self.client, self.address = header.source, header.destination or self.address
        deadline, started = time.monotonic() + config.timeout_keep_alive, False
        limits = config.max_request_line, config.max_header_size, config.max_headers
        while (head := http1_parser.take_head(self.buffer, *limits)) is None:
            if self.buffer and not started:  # the head deadline runs from the first byte
                started, deadline = True, time.monotonic() + config.timeout_headers
            try:
                if not self.recv(deadline):
                    return None
            except OSError as exc:  # a reset is the client leaving, as during the body
                if not isinstance(exc, TimeoutError):
                    logger.debug("client %s went away: %s", self.client, exc)
                elif started:  # RFC 9110 §15.5.9: 408 Request Timeout
                    raise BadRequest(408, "timed out reading the request head") from None
                return None
        return http1_parser.parse_request_head(head, *limits)

    def handle(self) -> bool:
        """Read and answer one request; True when the connection may carry another."""
        config, server = self.config, self.server
        try:
            request = self.read_head()
            if request is None:  # the client left, or sent nothing in time: close
                self.close()
                return False
            method, target, version, headers = request
            content_length, chunked, keep_alive, expect_100, upgrade, _ = \
                http1_parser.body_framing(version, headers)
            raw_path, query = http1.split_target(method, target)
            if config.max_body_size is not None and (content_length or 0) > config.max_body_size:
                raise BadRequest(413, "request body too large")
            if b"websocket" in http1.list_elements(upgrade):  # PEP 3333 has no WebSocket: RFC
                raise BadRequest(501, "a WebSocket handshake")  # 9110 §15.6.2, Not Implemented
        except (BadRequest, http1.BadTarget) as exc:  # a bad target is a 400
            self.send_error(getattr(exc, "status", 400), str(exc))
            return False
        body = BodyReader(content_length, chunked, config.max_body_size, config.max_header_size,
                          config.max_headers)
        self.cycle = cycle = RequestResponseCycle(self, method, version,
                                                  keep_alive and server.threaded, body, expect_100)
        cycle.log_line = (method, raw_path, query, version) if server.access_log else None
        try:
            return cycle.run_wsgi(wsgi.build_environ(
                method, version, target, raw_path, query, headers, root_path=config.root_path,
                server=self.address, client=self.client, proxy=server.state.proxy,
                body=wsgi.input_stream(cycle.read_body), multithread=server.threaded))
        finally:
            self.cycle = None

    def send_error(self, status: int, reason: str = "") -> None:
        """Answer ``status`` with ``Connection: close``, then one lingering close; only close
        when part of a response is out or the client is gone (status 0): nothing to protect."""
        logger.debug("%d to %s: %s", status, self.client, reason)
        cycle = self.cycle
        if not status or (cycle is not None and cycle.framer.head_sent):
            return self.close()
        with contextlib.suppress(OSError):
            self.sendall(http1.error_response(status, self.server.state.default_headers_bytes,
                                              head=cycle is not None and cycle.method == "HEAD"))
        self.lingering_close()

    def lingering_close(self) -> None:
        """Close in stages (RFC 9112 §9.6): half-close, drop what the client still sends for
        LINGER_SECONDS (its late bytes would get a reset that destroys our last response)."""
        with contextlib.suppress(OSError):  # TimeoutError too
            self.sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + LINGER_SECONDS
            while self.recv(deadline):
                self.buffer.clear()
        self.close()

    def close(self) -> None:
        self.sock.close()

    def shutdown(self) -> None:
        """Graceful stop, by the thread that owns it: close if idle, else after the response."""
        if self.cycle is None:
            self.close()
        else:
            self.cycle.framer.keep_alive = False


# --- WSGI interface -------------------------------------------------------------------------------


class RequestResponseCycle:
    """One request (``wsgi.input`` on ``read_body``) and its response, framed by ``http1``."""

    def __init__(self, protocol: BlockingHTTPProtocol, method: str, version: str,
                 keep_alive: bool, body: BodyReader, expect_100: bool) -> None:
        self.protocol, self.method, self.version = protocol, method, version
        self.framer = http1.ResponseFramer(method == "HEAD", version == "1.0", keep_alive)
        self.body, self.expect_100 = body, expect_100  # the request body, off the socket
        self.body_done = body.done  # the body is all read (or its reading failed)
        self.error: wsgi.ClientError | None = None  # the body failed, or the client left
        self.log_line: tuple[str, bytes, bytes, str] | None = None  # method, target, version

    def read_body(self) -> bytes:
        """The next body bytes (b"" at its end); wsgi.ClientError. ``100 Continue`` goes first if
        asked (PEP 3333: when "the application first attempts to read from the input stream")."""
        protocol, config = self.protocol, self.protocol.config
        if self.expect_100:
            self.expect_100 = False
            if not self.framer.head_sent:  # RFC 9110 §15.2: 1xx precede the final one
                protocol.sendall(http1.CONTINUE_100)
        try:
            while not self.body_done:
                data = self.body.feed(protocol.buffer)
                self.body_done = self.body.done
                if data:
                    return data
                if not (self.body_done or protocol.recv(time.monotonic() + config.timeout_body)):
                    raise wsgi.ClientError(0, "the client closed during the request body")
            return b""
        except (BadRequest, OSError) as exc:  # 400, 413, 431; 408 on TimeoutError; 0: gone
            raise self.fail(exc, reading=True) from None

    def drain_body(self) -> bool:
        """Drop what the app left of the body, as gunicorn does; False if it cannot be read."""
        with contextlib.suppress(wsgi.ClientError):
            while self.read_body():
                pass
        return self.error is None

    def start_response(self, status: str, headers: list[tuple[str, str]],
                       exc_info: ExcInfo | None = None) -> Callable[[bytes], None]:
        wsgi.start(self.framer, self.protocol.server.state, status, headers, exc_info)
        return self.write

    def write(self, data: bytes) -> None:  # PEP 3333's write() callable, and each result item
        if not self.framer.status:
            raise http1.ResponseError("a body before start_response()")
        if data:  # PEP 3333: no head "until the first non-empty bytestring"
            self.send(data, True)

    def send(self, data: bytes, more_body: bool) -> None:
        framer, protocol = self.framer, self.protocol
        if not framer.head_sent:
            # Connection: close when stopping, or when the body offered may never come
            if protocol.server.stopping.is_set() or (self.expect_100 and not self.body_done):
                framer.keep_alive = False
            if self.log_line:
                access_log.log_request(protocol.client, *self.log_line, framer.status)
        if out := b"".join(framer.body(data, more_body)):
            try:
                protocol.sendall(out)
            except OSError as exc:  # reset, broken pipe, or SEND_TIMEOUT without progress
                raise self.fail(exc, reading=False) from None

    # --8<-- [start:send_file]
    def send_file(self, wrapper: wsgi.FileWrapper) -> None:
        """Send a file with ``socket.sendfile`` (PEP 3333, "Optional Platform-Specific File
        Handling"): ``os.sendfile`` when it has a fileno, else its ``read()`` in a loop."""
        length = self.framer.remaining or 0  # the app's Content-Length frames the body
        self.send(b"", True)  # the head alone
        try:
            self.protocol.sock.settimeout(SEND_TIMEOUT)
            self.framer.remaining = length - self.protocol.sock.sendfile(wrapper.filelike,
                                                                         count=length)
        except OSError as exc:
            raise self.fail(exc, reading=False) from None
    # --8<-- [end:send_file]

    def fail(self, exc: Exception, *, reading: bool) -> wsgi.ClientError:
        """The body cannot be read or the client left: no next request on this connection."""
        self.error = error = wsgi.client_error(exc, reading=reading)
        self.body_done, self.framer.keep_alive = True, False
        return error

    # --8<-- [start:run_wsgi]
    def run_wsgi(self, environ: Environ) -> bool:
        """Run the app and send its response; True when the connection may carry another.
        Whatever the app raises stays here: 500 when no byte of the response is out, else close."""
        result: Iterable[bytes] | None = None
        framer = self.framer  # framer.status: 0 until start_response accepted a status
        try:
            result = self.protocol.server.state.app(environ, self.start_response)
            if isinstance(result, (list, tuple)) and len(result) == 1 and framer.status:
                self.send(result[0], False)  # the whole body: a Content-Length frames it
                return self.finish()
            if isinstance(result, wsgi.FileWrapper) and framer.status and framer.remaining \
                    and not framer.no_body:
                self.send_file(result)  # the app gave a Content-Length: no chunks
            else:
                for data in result:
                    self.write(data)
            if not framer.status:
                raise http1.ResponseError("the app returned without calling start_response")
            self.send(b"", False)
            return self.finish()
        except BaseException as exc:  # SystemExit too: one app must not stop the server
            if self.error is None:  # else the client's doing, not the app's: a debug line
                logger.error("Exception in WSGI application", exc_info=exc)
        finally:
            wsgi.close_result(result)  # PEP 3333: whatever happened
        error = self.error  # None: the app failed
        self.protocol.send_error(error.status if error else 500, str(error or "the app failed"))
        return False
    # --8<-- [end:run_wsgi]

    def finish(self) -> bool:
        """After the last byte: may the connection carry another request?"""
        if self.framer.short:
            logger.error("response body shorter than its Content-Length; closing")
        elif self.framer.keep_alive and self.drain_body():
            return True
        if self.protocol.buffer or not self.body_done:  # the client may still be sending
            self.protocol.lingering_close()
        else:
            self.protocol.close()
        return False


# --- Serving --------------------------------------------------------------------------------------


class WSGIServer:
    """What the connections of one server share, and its accept loop (sync or gthread)."""

    def __init__(self, app: WSGIApp, config: Config, listener: socket.socket,
                 shutdown: threading.Event) -> None:
        self.app, self.config, self.listener, self.stopping = app, config, listener, shutdown
        self.state = ServerState(app, config, {})  # here it keeps the Date and Server headers
        self.address = listeners.bound_address(listener)  # a UNIX socket: (path, 0)
        self.threaded = config.worker_class == "gthread"
        self.access_log = access_log.enabled(config)
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = socket.socketpair()  # a pool thread wakes the main thread
        self.returned: queue.SimpleQueue[BlockingHTTPProtocol] = queue.SimpleQueue()  # pool done
        # Idle, watched by the main thread, with the time each closes, oldest first (as gunicorn's
        # keep-alive queue): a wake-up looks at the front only (a scan of all took wrk -c10 from
        # 16k to 5-6k req/s with 3,000 idle); not a dict, whose first key skips deleted ones.
        self.idle: collections.OrderedDict[BlockingHTTPProtocol, float] = collections.OrderedDict()
        self.busy: dict[concurrent.futures.Future[None], BlockingHTTPProtocol] = {}  # in the pool
        self.last_tick = time.monotonic()
        self.wakeups = self.idle_checked = 0  # select() returns; idle connections looked at

    def work(self, protocol: BlockingHTTPProtocol) -> None:
        """Answer the requests on ``protocol`` until none is waiting, then (gthread) hand it back
        to the main thread; nothing it raises leaves here (sync runs it on the main thread)."""
        try:
            while protocol.handle():  # False once stopping: that response said Connection: close
                if not protocol.buffer:  # nothing pipelined: back to the main thread's watch
                    self.returned.put(protocol)  # stopping or not: see DRAIN
                    self.wake_w.send(b"\0")
                    return
        except BaseException as exc:
            logger.error("Exception in the connection", exc_info=exc)
            protocol.close()

    def serve_forever(self) -> None:
        """The main thread: accept, and (gthread) watch the idle connections."""
        selector, config = self.selector, self.config
        selector.register(self.listener, selectors.EVENT_READ)
        selector.register(self.wake_r, selectors.EVENT_READ)
        pool = concurrent.futures.ThreadPoolExecutor(config.threads, "toy-wsgi")
        stop_at = float("inf")  # graceful shutdown: when the DRAIN ends
        drain = config.timeout_keep_alive if config.idle_close_on_response else DRAIN
        while (now := time.monotonic()) < stop_at:
            if self.stopping.is_set() and stop_at == float("inf"):  # stop accepting; see DRAIN
                selector.unregister(self.listener)
                self.listener.close()
                stop_at = now + (drain if self.threaded else 0.0)  # sync keeps none idle
            elif stop_at < float("inf") and not (self.idle or self.busy):
                break  # every connection had its last answer: nothing left to drain
            timeout = min(TICK, stop_at - now, next(iter(self.idle.values()), now + TICK) - now)
            self.wakeups += 1
            for key, _ in selector.select(max(timeout, 0)):
                if key.fileobj is self.listener:
                    with contextlib.suppress(BlockingIOError, ConnectionAbortedError):
                        sock, peer = self.listener.accept()  # a UNIX socket's peer: ''
                        protocol = BlockingHTTPProtocol(self, sock, listeners.peer(peer))
                        if self.threaded:
                            self.watch(protocol)  # gthread: a pool thread takes it once readable
                        else:
                            self.work(protocol)  # sync: answered here (work raises nothing)
                elif key.fileobj is self.wake_r:
                    self.wake_r.recv(4096)
                    while not self.returned.empty():
                        self.watch(self.returned.get())
                else:  # readable: a request (or a close) is coming; a pool thread takes it
                    self.unwatch(protocol := key.data)
                    future = pool.submit(self.work, protocol)
                    self.busy[future] = protocol
                    future.add_done_callback(self.busy.pop)
            now = time.monotonic()
            while self.idle:  # the keep-alive timeout: close without a word, oldest first
                protocol, deadline = next(iter(self.idle.items()))
                self.idle_checked += 1
                if deadline > now:
                    break
                self.unwatch(protocol)
                protocol.close()
            if now - self.last_tick >= 1.0:  # RFC 9110 §6.6.1: Date, to the second
                self.last_tick = now
                self.state.refresh_default_headers()
        # After the DRAIN: close what is still idle, let requests in flight finish, shut the rest.
        for protocol in self.idle:  # the selector closes with the server
            protocol.shutdown()  # idle: closes now
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

    def watch(self, protocol: BlockingHTTPProtocol) -> None:
        self.selector.register(protocol.sock, selectors.EVENT_READ, protocol)
        self.idle[protocol] = time.monotonic() + self.config.timeout_keep_alive  # at the end

    def unwatch(self, protocol: BlockingHTTPProtocol) -> None:
        self.selector.unregister(protocol.sock)
        del self.idle[protocol]


def serve(app: WSGIApp, config: Config, *, sock: socket.socket | None = None,
          ready: Callable[[tuple[str, int]], object] | None = None,
          shutdown: threading.Event | None = None) -> None:
    """Serve ``app`` until ``shutdown`` is set (none given: SIGINT or SIGTERM), on ``sock`` or
    else host:port (OSError if it cannot bind); ``ready`` gets the bound ``(host, port)``."""
    if config.worker_class not in ("sync", "gthread"):
        raise ValueError(f"worker_class is 'sync' or 'gthread', not {config.worker_class!r}")
    if shutdown is None:
        shutdown = blocking_serving.stop_on_signals()
    own, sock = sock is None, sock if sock is not None else listeners.listening_socket(config)
    sock.listen(config.backlog)
    sock.setblocking(False)
    server = WSGIServer(app, config, sock, shutdown)
    logger.info("toy-wsgi (%s) running on %s (Press CTRL+C to quit)", config.worker_class,
                listeners.describe(sock))
    if ready is not None:
        ready(server.address)
    try:
        server.serve_forever()
    finally:
        logger.info("shutting down")
        for closable in (server.selector, sock, server.wake_r, server.wake_w):
            closable.close()
        listeners.release(config.uds if own else None)


def run(app: WSGIApp, config: Config) -> None:
    """Block serving ``app``; status 1 and one line if it cannot bind; a 2nd signal exits now."""
    blocking_serving.run_server(serve, app, config)
