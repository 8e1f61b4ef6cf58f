"""A chat room as a pure ASGI app: one HTML page, and a WebSocket that broadcasts.

``GET /`` answers the page: a message log, a text box and a Send button; its script opens a
WebSocket to ``/ws`` on the same host (``wss://`` when the page came over HTTPS). Each text
message a client sends goes to every client in the room, the sender included, as JSON
``{"from": "<client>", "text": "..."}``. On joining, a client is first told, as
``{"from": "server", "text": "...", "http_version": "2"}``, how its WebSocket reached the
server: the ``websocket`` scope's ``http_version`` is ``"2"`` when the browser opened it as a
stream of its HTTP/2 connection (RFC 8441), ``"1.1"`` for its own HTTP/1.1 connection with
``Upgrade: websocket`` (RFC 6455).

Deliberately left out: names, history, rooms, and a slow client's queue: a broadcast awaits
each member's ``send`` in turn, so one client that reads nothing holds the others back (a
real chat gives each member a bounded queue and drops whoever falls behind).

Spec: ASGI WebSocket spec 2.4 (``websocket.connect``, ``.accept``, ``.receive``, ``.send``,
``.disconnect``); the WHATWG WebSocket API (the page's ``new WebSocket(url)``).

Run it: ``toyserve apps.chat:app --server toy-h2 --port 8000``, then open
http://127.0.0.1:8000/ in two browser windows (WebSocket over HTTP/1.1: browsers speak HTTP/2
over TLS only). With ``--ssl-certfile cert.pem --ssl-keyfile key.pem`` and a certificate the
browser trusts, https://127.0.0.1:8000/ comes over HTTP/2, and Chromium opens the WebSocket on
that same connection (RFC 8441): the first line each page shows says which.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

PAGE = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>chat</title></head>
<body>
<ul id="log"></ul>
<form id="form"><input id="text" autocomplete="off"><button>Send</button></form>
<script>
const log = document.getElementById("log");
const text = document.getElementById("text");
const scheme = location.protocol === "https:" ? "wss://" : "ws://";
const socket = new WebSocket(scheme + location.host + "/ws");
socket.onmessage = (event) => {
  const message = JSON.parse(event.data);
  const item = document.createElement("li");
  item.className = message.from === "server" ? "server" : "chat";
  item.textContent = message.from + ": " + message.text;
  if (message.http_version) item.dataset.httpVersion = message.http_version;
  log.appendChild(item);
};
socket.onopen = () => document.body.dataset.state = "open";
socket.onclose = () => document.body.dataset.state = "closed";
document.getElementById("form").onsubmit = (event) => {
  event.preventDefault();
  socket.send(text.value);
  text.value = "";
};
</script>
</body></html>
"""

ROOM: set[Send] = set()  # the send() of every client in the room


def _client(scope: Scope) -> str:
    host, port = scope.get("client") or ("-", 0)
    return f"{host}:{port}"


async def chat(scope: Scope, receive: Receive, send: Send) -> None:
    """Accept, say how the WebSocket came, then broadcast each text message to the room."""
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    version = scope.get("http_version", "1.1")
    how = "HTTP/2 (RFC 8441)" if version == "2" else f"HTTP/{version} (Upgrade)"
    await send({"type": "websocket.send", "text": json.dumps(
        {"from": "server", "text": f"connected over {how}", "http_version": version})})
    ROOM.add(send)
    try:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("text") is not None:
                line = json.dumps({"from": _client(scope), "text": message["text"]})
                for member in list(ROOM):
                    try:
                        await member({"type": "websocket.send", "text": line})
                    except OSError:  # that member left meanwhile (ASGI: send raises)
                        ROOM.discard(member)
    finally:
        ROOM.discard(send)


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI application: the page on ``GET /``, the room on the WebSocket ``/ws``."""
    if scope["type"] == "websocket" and scope["path"] == "/ws":
        await chat(scope, receive, send)
    elif scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.close", "code": 1008})  # a 403: no room there
    elif scope["type"] == "http":
        found = scope["path"] == "/"
        await send({"type": "http.response.start", "status": 200 if found else 404,
                    "headers": [(b"content-type", b"text/html; charset=utf-8" if found
                                 else b"text/plain; charset=utf-8")]})
        await send({"type": "http.response.body", "body": PAGE if found else b"not found\n"})
    elif scope["type"] == "lifespan":
        while True:
            kind = (await receive())["type"].rsplit(".", 1)[1]  # startup, then shutdown
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
