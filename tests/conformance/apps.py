"""The ASGI app every server in the conformance suite serves: one route per behaviour probed.

Plain ASGI 3.0 (no framework), so whatever the suite sees is the server's doing. Its waits use
anyio (events, sleeps, a timeout), so it runs on asyncio servers and on trio (toy-anyio-trio).
Routes take their parameters from the query string. Some routes coordinate with the test
through small in-process tables keyed by ``key=``: ``/hold`` and ``/expect`` wait until
``/release`` is called with the same key, ``/produce`` publishes how many bytes ``send()``
accepted at ``/progress``, and ``/wait-disconnect``, ``/send-after-disconnect``, ``/slow`` and
the WebSocket route ``/ws/record`` record what happened at ``/status``. WebSocket routes are
listed in :func:`websocket`.
Each server runs one process, so these tables are shared by all of its connections.

Lifespan: on ``lifespan.startup`` the app stores ``{"lifespan": "started"}`` in the lifespan
``state`` and appends ``startup`` to the file named by ``CONFORMANCE_LIFESPAN_FILE``; on
``lifespan.shutdown`` it appends ``shutdown``.

Spec: ASGI HTTP and WebSocket spec 2.4, Lifespan spec 2.0, ASGI extensions (trailers,
early hints, pathsend, zerocopysend, tls, websocket.http.response).
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

import anyio

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

LIFESPAN_FILE_ENV = "CONFORMANCE_LIFESPAN_FILE"
CHUNK = 64 * 1024
HELLO = b"hello world"
CHUNKED_PARTS = (b"first;", b"second;", b"third")
# served by /pathsend and /zerocopysend: this very file
SELF_PATH = os.path.abspath(__file__)

DENIED_HEADER = (b"x-denied-by", b"the conformance app")
DENIED_BODY = b"no WebSocket for you"

RELEASES: dict[str, anyio.Event] = {}
PROGRESS: dict[str, int] = {}
STATUS: dict[str, str] = {}
HOLD_TIMEOUT = 30.0  # seconds a held request waits for /release before giving up


def _release_event(key: str) -> anyio.Event:
    event = RELEASES.get(key)
    if event is None:
        event = RELEASES[key] = anyio.Event()
    return event


def _params(scope: Scope) -> dict[str, str]:
    query = parse_qs(scope["query_string"].decode("latin-1"))
    return {name: values[0] for name, values in query.items()}


async def _read_body(receive: Receive) -> tuple[int, int, bool]:
    """Drain the request body: (bytes received, http.request messages, disconnected)."""
    size = messages = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return size, messages, True
        messages += 1
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            return size, messages, False


async def _respond(send: Send, body: bytes, status: int = 200,
                   headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """A complete response with Content-Length."""
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"text/plain"),
            (b"content-length", str(len(body)).encode()),
            *(headers or []),
        ],
    })
    await send({"type": "http.response.body", "body": body})


async def _json(send: Send, value: object) -> None:
    await _respond(send, json.dumps(value).encode(), headers=[(b"x-kind", b"json")])


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _describe_scope(scope: Scope) -> dict[str, object]:
    """The scope as JSON: bytes become latin-1 strings, tuples become lists."""
    return {
        "type": scope["type"],
        "asgi": scope.get("asgi"),
        "http_version": scope.get("http_version"),
        "method": scope.get("method"),
        "scheme": scope.get("scheme"),
        "path": scope.get("path"),
        "raw_path": _text(scope["raw_path"]) if scope.get("raw_path") is not None else None,
        "query_string": _text(scope.get("query_string", b"")),
        "root_path": scope.get("root_path"),
        "headers": [[_text(k), _text(v)] for k, v in scope.get("headers", [])],
        "client": list(scope["client"]) if scope.get("client") else None,
        "server": list(scope["server"]) if scope.get("server") else None,
        "extensions": sorted((scope.get("extensions") or {}).keys()),
        "tls": _describe_tls((scope.get("extensions") or {}).get("tls")),
        "has_state": "state" in scope,
    }


def _describe_tls(tls: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON-safe part of the ``tls`` extension (ASGI TLS extension): its keys, the TLS
    version and cipher suite numbers, and the server certificate (PEM)."""
    if tls is None:
        return None
    return {"keys": sorted(tls), "tls_version": tls.get("tls_version"),
            "cipher_suite": tls.get("cipher_suite"), "server_cert": tls.get("server_cert")}


async def lifespan(scope: Scope, receive: Receive, send: Send) -> None:
    """Record startup and shutdown in the file named by CONFORMANCE_LIFESPAN_FILE."""
    path = os.environ.get(LIFESPAN_FILE_ENV)
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if "state" in scope:
                scope["state"]["lifespan"] = "started"
            if path:
                with open(path, "a") as handle:
                    handle.write("startup\n")
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if path:
                with open(path, "a") as handle:
                    handle.write("shutdown\n")
            await send({"type": "lifespan.shutdown.complete"})
            return


async def websocket(scope: Scope, receive: Receive, send: Send) -> None:
    """The WebSocket routes, by path; any other path echoes (:func:`_ws_echo`).

    - ``/ws/scope``: accept, send the scope as JSON text (plus ``subprotocols``), then echo.
    - ``/ws/subprotocol``: accept with the *last* subprotocol the client offered (so the test
      sees the app's choice, not the client's first), send the offered list as JSON, echo.
    - ``/ws/reject``: ``websocket.close`` before accepting (the server must answer 403).
    - ``/ws/deny``: the denial response extension (``websocket.http.response``): a 401 with
      a header and a body of the app's; ``websocket.close`` when it is not offered.
    - ``/ws/close?code=&reason=``: accept, then close with that code and reason.
    - ``/ws/raise``: accept, then raise (the server closes with 1011).
    - ``/ws/record?key=``: accept, wait for ``websocket.disconnect``, store its code and
      reason as JSON at ``/status?key=``.
    """
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    path, params = scope["path"], _params(scope)
    extensions = scope.get("extensions") or {}
    if path == "/ws/reject":
        await send({"type": "websocket.close"})
    elif path == "/ws/deny" and "websocket.http.response" in extensions:
        await send({"type": "websocket.http.response.start", "status": 401,
                    "headers": [(b"content-type", b"text/plain"), DENIED_HEADER]})
        await send({"type": "websocket.http.response.body", "body": DENIED_BODY})
    elif path == "/ws/deny":
        await send({"type": "websocket.close"})
    elif path == "/ws/subprotocol":
        offered = list(scope.get("subprotocols") or [])
        await send({"type": "websocket.accept", "subprotocol": offered[-1] if offered else None})
        await send({"type": "websocket.send", "text": json.dumps(offered)})
        await _ws_echo(receive, send)
    elif path == "/ws/scope":
        await send({"type": "websocket.accept"})
        described = {**_describe_scope(scope), "subprotocols": scope.get("subprotocols")}
        await send({"type": "websocket.send", "text": json.dumps(described)})
        await _ws_echo(receive, send)
    elif path == "/ws/close":
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": int(params.get("code", "1000")),
                    "reason": params.get("reason", "")})
    elif path == "/ws/raise":
        await send({"type": "websocket.accept"})
        raise RuntimeError("the conformance app raises after websocket.accept")
    elif path == "/ws/record":
        await send({"type": "websocket.accept"})
        while (message := await receive())["type"] != "websocket.disconnect":
            pass
        STATUS[params.get("key", "")] = json.dumps(
            {"code": message.get("code"), "reason": message.get("reason")})
    else:
        await send({"type": "websocket.accept"})
        await _ws_echo(receive, send)


async def _ws_echo(receive: Receive, send: Send) -> None:
    """Echo every text and binary message, in its own kind, until the client closes."""
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": message["text"]})
        else:
            await send({"type": "websocket.send", "bytes": message.get("bytes") or b""})


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """Dispatch on ``scope["path"]``; see the module docstring for the routes."""
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    if scope["type"] == "websocket":
        await websocket(scope, receive, send)
        return
    path: str = scope["path"]
    params = _params(scope)
    key = params.get("key", "")
    extensions = scope.get("extensions") or {}

    if path.startswith("/scope"):
        await _read_body(receive)
        await _json(send, _describe_scope(scope))
    elif path == "/length":
        await _read_body(receive)
        await _respond(send, HELLO)
    elif path == "/chunked":
        await _read_body(receive)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        for part in CHUNKED_PARTS[:-1]:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": CHUNKED_PARTS[-1]})
    elif path == "/echo":
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        await _respond(send, bytes(body))
    elif path == "/connection-close":
        await _read_body(receive)
        await _respond(send, HELLO, headers=[(b"connection", b"close")])
    elif path == "/delay":
        await _read_body(receive)
        await anyio.sleep(int(params.get("ms", "0")) / 1000)
        await _respond(send, params.get("id", "").encode())
    elif path == "/upload":
        size, messages, _ = await _read_body(receive)
        await _json(send, {"size": size, "messages": messages})
    elif path == "/download":
        await _read_body(receive)
        await _stream(send, int(params["size"]), key)
    elif path == "/produce":
        await _read_body(receive)
        await _stream(send, int(params["size"]), key)
    elif path == "/first-piece":
        first = await receive()  # record that a first piece arrived before the body ended
        STATUS[key] = "got-first"
        size, messages, _ = await _read_body(receive)
        await _json(send, {"size": size + len(first.get("body", b"")), "messages": messages + 1})
    elif path == "/progress":
        await _json(send, {"sent": PROGRESS.get(key, 0)})
    elif path == "/hold" or path == "/expect":
        try:
            with anyio.fail_after(HOLD_TIMEOUT):
                await _release_event(key).wait()
        except TimeoutError:
            await _respond(send, b"never released", status=504)
            return
        if path == "/expect":
            body = bytearray()
            while True:
                message = await receive()
                body += message.get("body", b"")
                if message["type"] == "http.disconnect" or not message.get("more_body", False):
                    break
            await _respond(send, bytes(body))
        else:
            size, messages, _ = await _read_body(receive)
            await _json(send, {"size": size, "messages": messages})
    elif path == "/release":
        _release_event(key).set()
        await _respond(send, b"released")
    elif path == "/no-read":
        await _respond(send, b"answered without reading")
    elif path == "/wait-disconnect":
        STATUS[key] = "waiting"
        _, _, disconnected = await _read_body(receive)
        while not disconnected:
            message = await receive()
            disconnected = message["type"] == "http.disconnect"
        STATUS[key] = "disconnected"
    elif path == "/send-after-disconnect":
        await _read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        STATUS[key] = "streaming"
        while (await receive())["type"] != "http.disconnect":
            pass
        STATUS[key] = await _send_after_disconnect(send)
    elif path == "/slow":
        STATUS[key] = "started"
        await _read_body(receive)
        await anyio.sleep(int(params.get("ms", "1000")) / 1000)
        await _respond(send, b"slow done")
        STATUS[key] = "finished"
    elif path == "/status":
        await _json(send, {"status": STATUS.get(key, "")})
    elif path == "/state":
        await _json(send, dict(scope.get("state") or {}))
    elif path == "/raise":
        raise RuntimeError("the conformance app raises before http.response.start")
    elif path == "/raise-after-start":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise RuntimeError("the conformance app raises after http.response.start")
    elif path == "/noresponse":
        return
    elif path in EXTENSION_ROUTES:
        await EXTENSION_ROUTES[path](scope, receive, send)
    elif path in FILE_ROUTES:
        await _read_body(receive)
        await file_responses(path, extensions, send)
    else:
        await _read_body(receive)
        await _respond(send, b"not found", status=404)


async def _send_after_disconnect(send: Send, tries: int = 3) -> str:
    """What ``send()`` does once the client is gone: ``"raised OSError"`` (ASGI HTTP spec 2.4:
    "the server should raise a server-specific subclass of OSError"), ``"raised NAME"`` for
    another exception, or ``"returned"`` when ``tries`` sends all return as if delivered."""
    try:
        for _ in range(tries):
            await send({"type": "http.response.body", "body": b"more", "more_body": True})
    except OSError:
        return "raised OSError"
    except Exception as exc:
        return f"raised {type(exc).__name__}"
    return "returned"


async def _stream(send: Send, size: int, key: str) -> None:
    """Send ``size`` bytes in CHUNK pieces with a Content-Length, counting into PROGRESS[key]."""
    PROGRESS[key] = 0
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(size).encode())]})
    piece = b"x" * CHUNK
    left = size
    while left > 0:
        part = piece if left >= CHUNK else piece[:left]
        left -= len(part)
        await send({"type": "http.response.body", "body": part, "more_body": left > 0})
        PROGRESS[key] += len(part)


# --- the HTTP extensions: trailers and early hints ----------------------------------------------
# asgiref docs/extensions.rst. Each route answers 501 when the scope does not name its
# extension, so a server that does not offer it shows as such, not as a hang.

TRAILER = (b"x-checksum", b"conformance")
EARLY_LINKS = (b"</style.css>; rel=preload; as=style", b"</app.js>; rel=preload; as=script")
EARLY_LINK = EARLY_LINKS[0]


async def _not_offered(scope: Scope, receive: Receive, send: Send, name: str) -> bool:
    """Answer 501 (and True) when ``scope`` does not offer extension ``name``."""
    if name in (scope.get("extensions") or {}):
        return False
    await _read_body(receive)
    await _respond(send, f"{name} not offered".encode(), status=501)
    return True


async def _trailers(scope: Scope, receive: Receive, send: Send) -> None:
    """``/trailers``: HELLO in two body messages, then TRAILER (announced in ``Trailer``)."""
    if await _not_offered(scope, receive, send, "http.response.trailers"):
        return
    await _read_body(receive)
    await send({"type": "http.response.start", "status": 200, "trailers": True,
                "headers": [(b"trailer", TRAILER[0])]})
    await send({"type": "http.response.body", "body": HELLO[:5], "more_body": True})
    await send({"type": "http.response.body", "body": HELLO[5:]})
    await send({"type": "http.response.trailers", "headers": [TRAILER]})


async def _early_hints(scope: Scope, receive: Receive, send: Send) -> None:
    """``/early-hints``: two early hints (the first with both EARLY_LINKS, the second with
    the first link again), then HELLO."""
    if await _not_offered(scope, receive, send, "http.response.early_hint"):
        return
    await _read_body(receive)
    await send({"type": "http.response.early_hint", "links": list(EARLY_LINKS)})
    await send({"type": "http.response.early_hint", "links": [EARLY_LINK]})
    await _respond(send, HELLO)


EXTENSION_ROUTES: dict[str, Callable[[Scope, Receive, Send], Awaitable[None]]] = {
    "/trailers": _trailers,
    "/early-hints": _early_hints,
}


# --- file responses: the pathsend and zerocopysend extensions ----------------------------------

#: The routes of ``file_responses``.
FILE_ROUTES = frozenset({"/pathsend", "/zerocopysend", "/pathsend-missing"})
#: A path no file is at (the ``/pathsend-missing`` route sends it).
MISSING_PATH = os.path.join(os.path.dirname(SELF_PATH), "no-such-file.txt")
#: The bytes the ``/zerocopysend`` route sends first with an offset (the position untouched).
ZEROCOPY_HEAD = 100


async def file_responses(path: str, extensions: dict[str, Any], send: Send) -> None:
    """The body from a file (ASGI extensions "Path Send" and "Zero Copy Send"), or 501 where
    the extension is not in ``scope["extensions"]``:

    - ``/pathsend``: this very file, with its Content-Length, by ``http.response.pathsend``;
    - ``/zerocopysend``: this file by two ``http.response.zerocopysend`` messages, with the
      file's position at ``ZEROCOPY_HEAD``: the first with ``offset`` 0 and ``count``
      ``ZEROCOPY_HEAD`` (the position must not move), the second with neither (from the
      position to the end): the whole file, in order, when the server keeps both rules;
    - ``/pathsend-missing``: pathsend of ``MISSING_PATH``; the OSError ``send()`` raises is
      caught and answered as the body ``pathsend raised <its class name>``.
    """
    name = "http.response.zerocopysend" if path == "/zerocopysend" else "http.response.pathsend"
    if name not in extensions:
        await _respond(send, f"{name} not offered".encode(), status=501)
        return
    size = os.path.getsize(SELF_PATH)
    if path == "/pathsend-missing":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            await send({"type": "http.response.pathsend", "path": MISSING_PATH})
        except OSError as exc:
            await send({"type": "http.response.body",
                        "body": f"pathsend raised {type(exc).__name__}".encode()})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(size).encode())]})
    if path == "/pathsend":
        await send({"type": "http.response.pathsend", "path": SELF_PATH})
        return
    with open(SELF_PATH, "rb") as handle:
        handle.seek(ZEROCOPY_HEAD)
        await send({"type": "http.response.zerocopysend", "file": handle, "offset": 0,
                    "count": ZEROCOPY_HEAD, "more_body": True})
        await send({"type": "http.response.zerocopysend", "file": handle})
