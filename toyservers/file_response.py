"""A response body from a file: the ASGI ``http.response.pathsend`` and
``http.response.zerocopysend`` extensions, the same in every toy ASGI server.

The app sends ``http.response.start``, then, instead of ``http.response.body`` messages, either
``{"type": "http.response.pathsend", "path": str}`` (the server opens the file, sends all of
it, closes it: the whole body) or ``{"type": "http.response.zerocopysend", "file": fd or file
object, "offset": int | None, "count": int | None, "more_body": bool}`` (bytes of a file the
app opened and closes; it may be one of several body messages). A server hands either to
``open_body``, which gives a ``FileBody``, and sends its bytes one of two ways:

- ``sendfile(2)``: the kernel copies the file's pages into the socket, the bytes never enter
  the process. asyncio's ``loop.sendfile`` does it (``os.sendfile``) on a plain socket
  transport; ``http1_cycle`` uses it on plain HTTP/1.1, with the head and the chunk lines
  written around it. uvloop has no ``loop.sendfile`` (it raises NotImplementedError), nor has
  a TLS transport a socket the kernel can write to: the bytes must be encrypted in the process.
- ``send_by_reading``: a read loop, ``READ_SIZE`` bytes at a time (``os.pread``), each piece an
  ordinary ``http.response.body`` message through the server's own ``send``, so the framing,
  Content-Length checks, backpressure (``FlowControl.drain``) and the HTTP/2 flow-control
  window apply as to any body. Used under TLS, on uvloop, on anyio (its streams have no
  sendfile) and on HTTP/2 (DATA frames are framed in the process).

Both extensions are announced on every connection (``asgi_extensions.offered``, in the scope
template: nothing per request): zerocopysend's message behaves "the same as ordinary
http.response.body" except for the zero copy, so where no zero copy is possible the read loop
still honours it, and an app that asked for it gets its body.

Rules kept (the spec's, or ours where it says nothing):

- A path that cannot be opened (missing, a folder, no permission, not absolute): ``send()``
  raises the OSError (or ValueError) before a byte of the response is written, so the app can
  catch it and answer, or let it go and the server answers 500.
- ``offset`` given: the bytes from there, the file position untouched (as ``os.pread`` and
  ``sendfile(2)`` with an offset). ``offset`` missing: the bytes from the file's position,
  which then moves past them (as ``read()``), so several messages without offsets send the
  file in order. ``count`` missing: to the end of the file; past the end: what is there.
- A Content-Length in the head must match the bytes sent: on HTTP/1.1 ``check_length``
  refuses a file of another size before the head leaves (``send()`` raises, the app's failure
  gets a 500); on HTTP/2 the framing checks each piece, so a mismatch found after the head
  resets the stream. A file that shrinks while it is sent aborts the response (the connection
  closed, RFC 9112 §6.3); under a chunked response the body just ends sooner.
- HEAD: the head only, the file is not read (RFC 9110 §9.3.2).

Spec: ASGI extensions (asgiref docs/extensions.rst: "Path Send", "Zero Copy Send"); RFC 9112
§6.3 (message body length), §7.1 (chunked); sendfile(2), pread(2).

Compare with: granian's ASGI pathsend (Rust: the file is streamed by the server); uvicorn and
hypercorn offer neither extension.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

import h11

from toyservers import http1
from toyservers._types import Message
from toyservers.asgi_extensions import PATHSEND, ZEROCOPYSEND

#: Bytes read per piece by ``send_by_reading``: asyncio's high-water mark (64 KiB), so one piece
#: fills the write buffer once and ``drain`` waits for the client before the next is read.
READ_SIZE = 64 * 1024
KINDS = frozenset({PATHSEND, ZEROCOPYSEND})

Send = Callable[[Message], Awaitable[None]]


class FileBody:
    """The file part of one message: ``count`` bytes of descriptor ``fd`` from ``offset``.

    ``more_body`` as in ``http.response.body``; ``owned``: we opened it (pathsend) and close
    it; ``advance``: move the app's file position past the bytes sent (no ``offset`` given).
    ``len()`` is ``count``: h11 frames a ``Data`` event from its length alone, so a FileBody
    passes through ``send_with_data_passthrough`` in place of the bytes (h11's sendfile hook).
    """

    __slots__ = ("file", "fd", "offset", "count", "more_body", "owned", "advance", "position")

    def __init__(self, file: Any, offset: int | None, count: int | None, more_body: bool,
                 owned: bool) -> None:
        self.file, self.more_body, self.owned = file, more_body, owned
        self.fd = file if isinstance(file, int) else file.fileno()
        # a Python file object's position counts what its buffer holds: ask it, not the fd
        self.position = os.lseek(self.fd, 0, os.SEEK_CUR) if isinstance(file, int) else (
            file.tell())
        self.advance = offset is None
        self.offset = self.position if offset is None else offset
        left = max(os.fstat(self.fd).st_size - self.offset, 0)
        self.count = left if count is None else min(count, left)

    def __len__(self) -> int:
        return self.count

    def done(self, sent: int) -> None:
        """After ``sent`` bytes went: set the file position as the rules say, close ours."""
        if self.owned:
            self.file.close()
        else:  # (loop.sendfile seeks the fd past what it sent, whatever the offset)
            position = self.offset + sent if self.advance else self.position
            if isinstance(self.file, int):
                os.lseek(self.fd, position, os.SEEK_SET)
            else:
                self.file.seek(position)


def open_body(message: Message) -> FileBody:
    """The ``FileBody`` of a pathsend or zerocopysend ``message``. Raises OSError
    (FileNotFoundError, IsADirectoryError, PermissionError...) when the path cannot be
    opened, ValueError for a relative path or a bad offset or count, TypeError for a path
    that is not a str."""
    if message["type"] == PATHSEND:
        path = message["path"]
        if not isinstance(path, str):
            raise TypeError(f"pathsend path must be a str, not {type(path).__name__}")
        if not os.path.isabs(path):  # the spec: "the absolute file path"
            raise ValueError(f"pathsend path must be absolute: {path!r}")
        file = open(path, "rb", buffering=0)  # noqa: SIM115 (closed by FileBody.done)
        try:
            return FileBody(file, 0, None, False, owned=True)
        except BaseException:
            file.close()
            raise
    offset, count = message.get("offset"), message.get("count")
    if (offset is not None and offset < 0) or (count is not None and count < 0):
        raise ValueError(f"zerocopysend offset and count must be >= 0: {offset}, {count}")
    return FileBody(message["file"], offset, count, message.get("more_body", False), False)


async def send_file(send: Send, message: Message, head_only: bool, framer: Any = None) -> None:
    """A pathsend or zerocopysend ``message`` by the read loop (``send_by_reading``): what
    toy-anyio (with its ``framer``: ``check_length``) and toy-h2 do. Raises what ``open_body``,
    ``check_length`` and ``send`` raise."""
    body = open_body(message)
    sent = 0
    try:
        if framer is not None:
            check_length(framer, body)
        sent = await send_by_reading(send, body, head_only)
    finally:
        body.done(sent)


# --8<-- [start:send_by_reading]
async def send_by_reading(send: Send, body: FileBody, head_only: bool) -> int:
    """Send ``body`` as ``http.response.body`` messages of at most ``READ_SIZE`` bytes through
    the server's ``send`` (which frames them and waits while the client, or its HTTP/2
    window, is full); the head alone when ``head_only``. Returns the file bytes sent."""
    offset, left = body.offset, 0 if head_only else body.count
    while left:
        piece = os.pread(body.fd, min(READ_SIZE, left), offset)
        if not piece:
            break  # the file shrank: its end is the body's end
        offset, left = offset + len(piece), left - len(piece)
        await send({"type": "http.response.body", "body": piece,
                    "more_body": bool(left) or body.more_body})
    if left or offset == body.offset:  # nothing sent, or cut short: end the body
        await send({"type": "http.response.body", "body": b"", "more_body": body.more_body})
    return offset - body.offset
# --8<-- [end:send_by_reading]


def check_length(framer: Any, body: FileBody) -> None:
    """Raise http1.ResponseError when ``body`` breaks the Content-Length still owed (more
    than it, or less when it is the last body message), checked before the head leaves so a
    500 can still go (RFC 9112 §6.3). ``framer`` as in ``file_pieces``; once h11 has written
    the head, h11 itself refuses."""
    if isinstance(framer, http1.ResponseFramer):
        owed = framer.remaining
    else:
        owed = framer.fields.content_length if framer.fields is not None else None
    if owed is not None and not framer.no_body and (
            body.count > owed or (body.count < owed and not body.more_body)):
        raise http1.ResponseError(f"{body.count} bytes of file for a Content-Length that "
                                  f"owes {owed}")


def can_sendfile(transport: object) -> bool:
    """True where ``loop.sendfile`` can use ``os.sendfile``: a plain (not TLS) socket transport
    of asyncio's own loop (uvloop's loop has no ``sendfile``)."""
    return (isinstance(transport, asyncio.Transport)
            and isinstance(asyncio.get_running_loop(), asyncio.BaseEventLoop)
            and transport.get_extra_info("sslcontext") is None)


def file_pieces(framer: Any, body: FileBody) -> list[bytes | FileBody]:
    """The body framing around ``body``'s bytes, for a framer (``http1.ResponseFramer``, or
    ``h11_checks.H11Framer``: not imported, it imports ``asgi``) whose head has gone: ``[body]``
    with a Content-Length (counted off), ``[size line, body, CRLF]`` when chunked (RFC 9112
    §7.1). Raises http1.ResponseError (h11.LocalProtocolError through h11) when ``body``
    runs past the Content-Length."""
    if not isinstance(framer, http1.ResponseFramer):  # h11 counts and frames: the FileBody
        data = h11.Data(data=body)  # type: ignore[arg-type]  # h11 takes len() of it only
        return list(framer.conn.send_with_data_passthrough(data) or ())
    if framer.remaining is not None:
        if len(body) > framer.remaining:
            raise http1.ResponseError("file longer than the response's Content-Length")
        framer.remaining -= len(body)
    if framer.chunked and body.count:
        return [b"%x\r\n" % body.count, body, b"\r\n"]
    return [body] if body.count else []
