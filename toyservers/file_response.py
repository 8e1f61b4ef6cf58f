"""A response body from a file: the ASGI ``http.response.pathsend`` and
``http.response.zerocopysend`` extensions, the same in every toy ASGI server.

The app sends ``http.response.start``, then, instead of ``http.response.body`` messages, either
``{"type": "http.response.pathsend", "path": str}`` (the server opens the file, sends all of
it, closes it: the whole body) or ``{"type": "http.response.zerocopysend", "file": fd or file
object, "offset": int | None, "count": int | None, "more_body": bool}`` (bytes of a file the
app opened and closes; it may be one of several body messages). A server hands either to
``open_body``, which gives a ``FileBody``, and sends its bytes one of two ways:

- ``sendfile``: ``os.sendfile`` (sendfile(2)), the kernel copies the file's pages into the
  socket and the bytes never enter the process. ``http1_cycle`` uses it on every plain
  HTTP/1.1 socket, on uvloop and on asyncio's own loop alike, with the head and the chunk
  lines written around it. It does what asyncio's ``loop.sendfile`` does (CPython's
  ``selector_events._sendfile_native``: wait for the transport's buffer to empty, then
  ``os.sendfile`` until the count is sent, waiting for the socket to drain in between), on a
  loop that has none: uvloop's raises NotImplementedError. A TLS transport has no socket the
  kernel can write the file to: the bytes must be encrypted in the process.
- ``send_by_reading``: a read loop, ``READ_SIZE`` bytes at a time (``os.pread``), each piece an
  ordinary ``http.response.body`` message through the server's own ``send``, so the framing,
  Content-Length checks, backpressure (``FlowControl.drain``) and the HTTP/2 flow-control
  window apply as to any body. Used under TLS, on anyio (its streams have no sendfile), on
  HTTP/2 (DATA frames are framed in the process) and before trailers.

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
§6.3 (message body length), §7.1 (chunked); sendfile(2), pread(2), dup(2).

Compare with: CPython's asyncio/selector_events.py (``_sendfile_native``, ``_sock_sendfile_native``:
what ``sendfile`` does, for asyncio's loop only); granian's ASGI pathsend (Rust: the file is
streamed by the server); uvicorn and hypercorn offer neither extension.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import Awaitable, Callable
from typing import Any

import h11

from toyservers import http1
from toyservers._types import Message
from toyservers.asgi_extensions import PATHSEND, ZEROCOPYSEND
from toyservers.flow_control import FlowControl

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

    __slots__ = ("file", "fd", "offset", "count", "more_body", "owned", "advance")

    def __init__(self, file: Any, offset: int | None, count: int | None, more_body: bool,
                 owned: bool) -> None:
        self.file, self.more_body, self.owned = file, more_body, owned
        self.fd = file if isinstance(file, int) else file.fileno()
        self.advance = offset is None
        if offset is None:  # a file object's position counts what its buffer holds: ask it
            offset = os.lseek(self.fd, 0, os.SEEK_CUR) if isinstance(file, int) else file.tell()
        self.offset = offset
        info = os.fstat(self.fd)
        if stat.S_ISDIR(info.st_mode):  # (os.open opens one: open() would refuse it)
            raise IsADirectoryError(errno.EISDIR, "a folder is no file body")
        left = max(info.st_size - self.offset, 0)
        self.count = left if count is None else min(count, left)

    def __len__(self) -> int:
        return self.count

    def done(self, sent: int) -> None:
        """After ``sent`` bytes went: set the file position as the rules say, close ours."""
        if self.owned:
            os.close(self.fd)
        elif self.advance:  # (os.sendfile and os.pread with an offset leave the position)
            if isinstance(self.file, int):
                os.lseek(self.fd, self.offset + sent, os.SEEK_SET)
            else:
                self.file.seek(self.offset + sent)


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
        fd = os.open(path, os.O_RDONLY)  # a descriptor, no file object: closed by done()
        try:
            return FileBody(fd, 0, None, False, owned=True)
        except BaseException:
            os.close(fd)
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
        owed = framer.content_length  # the app's, until the head is written
    if owed is not None and not framer.no_body and (
            body.count > owed or (body.count < owed and not body.more_body)):
        raise http1.ResponseError(f"{body.count} bytes of file for a Content-Length that "
                                  f"owes {owed}")


def can_sendfile(transport: asyncio.BaseTransport) -> bool:
    """True where ``sendfile`` can send a file: a plain (not TLS) socket transport, asyncio's
    or uvloop's, on a system with ``os.sendfile`` (Linux, the BSDs, macOS; not Windows)."""
    return (transport.get_extra_info("sslcontext") is None
            and transport.get_extra_info("socket") is not None and hasattr(os, "sendfile"))


# --8<-- [start:sendfile]
async def sendfile(transport: asyncio.Transport, flow: FlowControl, body: FileBody) -> int:
    """Send ``body``'s bytes into ``transport``'s socket with ``os.sendfile``: the kernel
    copies the file's pages into the socket, the bytes never enter the process.

    The head and any chunk line the caller wrote must reach the socket first, so a call is
    made only while the transport's buffer is empty. The socket is non-blocking: a call sends
    what the socket buffer has room for, and BlockingIOError says it is full; then ``drain()``
    waits (as a ``send()`` does) until the loop sees room, a writer callback on a duplicate of
    the socket's descriptor (``os.dup``: loops refuse to watch a descriptor their transport
    owns), which is closed at the end, however it ends. Nothing else writes meanwhile: the
    caller writes what follows the file after this returns. Returns the bytes sent, fewer
    when the file shrank. Raises ConnectionError: the peer reset the connection
    (ConnectionResetError, BrokenPipeError) or it closed while we waited."""
    loop = asyncio.get_running_loop()
    sock = transport.get_extra_info("socket").fileno()
    offset, end = body.offset, body.offset + body.count
    watched = -1  # the duplicate the loop watches, once the socket has been full
    try:
        while offset < end:
            if transport.is_closing():  # its descriptor may be another connection's by now
                raise ConnectionAbortedError("the connection closed while the file was sent")
            if not transport.get_write_buffer_size():  # the head and chunk line are out
                try:
                    sent = os.sendfile(sock, body.fd, offset, end - offset)
                except BlockingIOError:  # the socket buffer is full: wait below
                    pass
                else:
                    if not sent:
                        break  # the file ended early (it shrank)
                    offset += sent
                    continue
            if watched < 0:
                watched = os.dup(sock)
                loop.add_writer(watched, flow.resume_writing)
            flow.pause_writing()
            await flow.drain()  # until the socket has room, or connection_lost wakes it
    finally:
        if watched >= 0:
            loop.remove_writer(watched)
            os.close(watched)
            flow.resume_writing()  # a drain() cancelled before the writer fired
    return offset - body.offset
# --8<-- [end:sendfile]


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
