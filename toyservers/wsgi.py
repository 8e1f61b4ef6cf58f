"""The WSGI glue a WSGI server shares: the environ, start_response's checks, FileWrapper.

A WSGI server reads requests and writes responses its own way (toy-wsgi with sockets and
threads; a WSGI-under-ASGI adapter would with an event loop); what PEP 3333 asks of every
server is written here once, without any I/O, as ``toyservers.asgi`` does for ASGI:

- ``build_environ``: the environ of one parsed request: the CGI variables, the ``wsgi.*``
  keys, and the header fields as ``HTTP_*`` keys;
- ``path_info``: the percent-decoded path as a "native string", less ``SCRIPT_NAME``;
- ``check_response``: what an app gives ``start_response`` (status, headers, ``exc_info``),
  checked and encoded for ``http1.ResponseFramer`` (which checks the rest, as for ASGI apps),
  and ``start``, which hands it to the framer;
- ``input_stream``: ``wsgi.input`` on a function giving the body piece by piece;
- ``ClientError``: what ``wsgi.input`` and ``write()`` raise when the body cannot be read or
  the client is gone, and ``client_error``, which turns what the server met into one;
- ``FileWrapper``: ``wsgi.file_wrapper``, and ``close_result``: the result's ``close()``.

Spec: PEP 3333 (environ variables, input and error streams, unicode issues, the
start_response() callable, optional platform-specific file handling, other HTTP features:
hop-by-hop headers).

Compare with: gunicorn/http/wsgi.py (``create``, ``Response.process_headers``,
``FileWrapper``), wsgiref/util.py (``FileWrapper``), wsgiref/handlers.py (``BaseHandler``).
"""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any
from urllib.parse import unquote_to_bytes

from toyservers import http1
from toyservers._types import Environ, ExcInfo, Headers
from toyservers.proxy import ProxyHeaders, apply_to_environ
from toyservers.state import ServerState

logger = logging.getLogger("toyservers.error")

# PEP 3333, "Other HTTP Features": "applications ... must not generate any 'hop-by-hop'
# headers" (RFC 2616 §13.5.1's list): they describe this connection, which is the server's.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                        "te", "trailers", "transfer-encoding", "upgrade"})


class ClientError(OSError):
    """A body that cannot be read (``status``: the answer, 400, 408, 413 or 431), or a client
    gone (``status`` 0: nothing to answer). ``wsgi.input`` and ``write()`` raise it."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def client_error(exc: Exception, *, reading: bool) -> ClientError:
    """``exc``, met reading the request body (``reading``) or sending the response, as the
    ClientError to raise: ``exc`` if it is one; when reading, 408 for a timeout (RFC 9110
    §15.5.9: "did not receive a complete request message within the time that it was prepared
    to wait") or the ``status`` of a refused body (400, 413, 431); else 0, the client is gone."""
    if isinstance(exc, ClientError):
        return exc
    if not reading:  # a send that fails or makes no progress: nobody is taking the answer
        return ClientError(0, f"the client went away: {exc}")
    if isinstance(exc, TimeoutError):
        return ClientError(408, str(exc) or "timed out reading the body")
    return ClientError(getattr(exc, "status", 0), str(exc))


class _RawInput(io.RawIOBase):
    """A raw stream on ``read()``, a function giving the next bytes (b"" at the end)."""

    def __init__(self, read: Callable[[], bytes]) -> None:
        self.read_more, self.pending = read, b""  # pending: bytes readinto() could not take

    def readable(self) -> bool:  # io.BufferedReader asks
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.pending or self.read_more()
        size = min(len(buffer), len(data))
        buffer[:size], self.pending = data[:size], data[size:]
        return size


def input_stream(read: Callable[[], bytes]) -> io.BufferedReader:
    """``wsgi.input`` on ``read()`` (the next body bytes, b"" at the end): an
    ``io.BufferedReader``, which gives PEP 3333's ``read(size)``, ``readline(size)``,
    ``readlines(hint)`` and iteration."""
    return io.BufferedReader(_RawInput(read))


def path_info(raw_path: bytes, script_name: str) -> str:
    """PEP 3333 ``PATH_INFO``: the path percent-decoded, as a latin-1 "native string" (bytes
    0-255 as code points 0-255), less a ``SCRIPT_NAME`` prefix the client sent (as gunicorn)."""
    path = unquote_to_bytes(raw_path).decode("latin-1")
    if script_name and (path == script_name or path.startswith(script_name + "/")):
        path = path[len(script_name):]
    return path


class FileWrapper:
    """PEP 3333 ``wsgi.file_wrapper``: iterates ``filelike`` in blocks; a server may send it
    with ``socket.sendfile`` instead when it has a ``fileno()`` and the app gave a
    Content-Length."""

    def __init__(self, filelike: IO[bytes], blksize: int = 8192) -> None:
        self.filelike, self.blksize = filelike, blksize

    def __iter__(self) -> Iterator[bytes]:
        while block := self.filelike.read(self.blksize):
            yield block

    def close(self) -> None:
        getattr(self.filelike, "close", lambda: None)()


def close_result(result: object) -> None:
    """Call the app's result's ``close()`` if it has one; what it raises is logged, not raised.
    PEP 3333: the server "must call that method upon completion of the current request, whether
    the request was completed normally, or terminated early due to an application error during
    iteration or an early disconnect of the browser"."""
    try:
        getattr(result, "close", lambda: None)()
    except BaseException as exc:  # SystemExit too: one app must not stop the server
        logger.error("Exception in the WSGI result's close()", exc_info=exc)


def build_environ(method: str, http_version: str, target: bytes, raw_path: bytes, query: bytes,
                  headers: Headers, *, root_path: str, server: tuple[str, int],
                  client: tuple[str, int], body: IO[bytes], multithread: bool,
                  proxy: ProxyHeaders | None = None) -> Environ:
    """The environ of one request: ``target`` as received, ``raw_path`` and ``query`` split
    from it (``http1.split_target``), ``headers`` as parsed; ``body`` is ``wsgi.input``;
    ``proxy``: the server's proxy-header rules, if on."""
    script_name = root_path.rstrip("/")  # PEP 3333: SCRIPT_NAME has no trailing slash
    environ: Environ = {
        "REQUEST_METHOD": method, "SCRIPT_NAME": script_name,
        "PATH_INFO": path_info(raw_path, script_name), "QUERY_STRING": query.decode("latin-1"),
        "RAW_URI": target.decode("latin-1"),  # gunicorn's: the target as received
        "SERVER_NAME": server[0], "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": "HTTP/" + http_version,
        "REMOTE_ADDR": client[0], "REMOTE_PORT": str(client[1]),
        "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.input": body,
        "wsgi.input_terminated": True,  # the input ends where the body does, chunked too
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": multithread,
        "wsgi.multiprocess": False,  # one process (toyservers.workers sets it when it forks)
        "wsgi.run_once": False,
        "wsgi.file_wrapper": FileWrapper,
    }
    for name, value in headers:
        if name == b"content-type" or name == b"content-length":
            key = name.decode().upper().replace("-", "_")
        elif b"_" in name:  # X_User would pass for X-User: dropped, as gunicorn does
            continue
        else:
            key = "HTTP_" + name.decode("latin-1").upper().replace("-", "_")
        text = value.decode("latin-1")
        # RFC 9110 §5.3: repeated field lines are one list, joined with ", "
        environ[key] = environ[key] + ", " + text if key in environ else text
    if proxy is not None:  # believed only from a trusted peer (toyservers.proxy)
        forwarded = proxy.resolve(client, headers)
        if forwarded is not None:
            apply_to_environ(environ, headers, forwarded)
    return environ


def check_response(status: Any, headers: Any, exc_info: ExcInfo | None = None, *,
                   started: bool, head_sent: bool) -> tuple[int, Headers, bytes]:
    """What ``start_response`` got, checked: ``(status code, headers as bytes, status line)``.

    ``status`` is a str shaped ``"200 OK"`` (PEP 3333: "a status code and a reason phrase,
    in that order and separated by a single space"), headers "a list of (header_name,
    header_value) tuples" of str, none hop-by-hop. A second call (``started``) needs
    ``exc_info``, which is re-raised once the head is out (``head_sent``). Raises
    ``http1.ResponseError``."""
    if exc_info is not None:
        try:  # PEP 3333: "if ... headers have already been sent, start_response must raise
            if head_sent:  # an error, and should re-raise using the exc_info tuple"
                raise exc_info[1].with_traceback(exc_info[2])
        finally:
            exc_info = None  # PEP 3333: avoid a circular reference through the traceback
    elif started:
        raise http1.ResponseError("start_response called twice without exc_info")
    if type(status) is not str or len(status) < 4 or not status[:3].isdigit() \
            or status[3] != " " or http1.bad_field_value(status.encode("latin-1")):
        raise http1.ResponseError(f"invalid status {status!r}: '200 OK' is the shape")
    fields = []
    for name, value in headers:
        if type(name) is not str or type(value) is not str:
            raise http1.ResponseError(f"header {name!r}: names and values are str")
        if name.lower() in HOP_BY_HOP:
            raise http1.ResponseError(f"hop-by-hop header {name!r} is the server's")
        fields.append((name.encode("latin-1"), value.encode("latin-1")))
    return int(status[:3]), fields, b"HTTP/1.1 %s\r\n" % status.encode("latin-1")


def start(framer: http1.ResponseFramer, state: ServerState, status: Any, headers: Any,
          exc_info: ExcInfo | None = None) -> None:
    """``start_response`` on a server that frames with ``http1.ResponseFramer``: what the app
    gave, checked (``check_response``), held by ``framer`` as the response's head with the
    server's default headers and the app's own reason phrase. Raises ``http1.ResponseError``,
    or re-raises ``exc_info`` once the head is out."""
    code, fields, status_line = check_response(
        status, headers, exc_info, started=bool(framer.status), head_sent=framer.head_sent)
    framer.start(code, fields, state.default_headers, state.default_headers_bytes)
    framer.parts[0] = status_line  # the app's own reason phrase
