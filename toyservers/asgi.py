"""The ASGI glue every toy HTTP server shares: the scope, the request body, running the app,
the access log.

A server module writes its own ``send`` (where its framing meets the app) and the two hooks of
``receive`` that touch its parser; what is the same in every server is written here once:

- ``http_scope``: the ``http`` connection scope, built the same way from the parsed request,
  on a copy of the connection's ``scope_template`` (what its requests' scopes share), with
  the extensions the request is offered (``asgi_extensions.offered``);
- ``RequestResponseCycle``: the base of each server's cycle. It holds the request body the
  protocol hands in (``body``, ``more_body``, ``wake()``) and the one ``receive()``: 100
  Continue when the app first asks for a body that has not come, ``http.request`` messages,
  then ``http.disconnect`` once the response is done or the client is gone. Its ``run_asgi`` is
  the one policy for an app that fails: whatever it raises (``Exception``, ``CancelledError``,
  ``SystemExit``, ``KeyboardInterrupt``) is logged and stays in its Task, never reaching the
  event loop; if the response has not finished, the protocol's ``send_error(500)`` answers
  500 when nothing of the response is on the wire yet, else closes the connection;
- ``ClientDisconnected``: what ``send()`` raises once the client is gone;
- ``log_access``: uvicorn's access-log line, written from the raw target so that a
  percent-encoded CR, LF or ESC cannot forge a line or colour a terminal;
- ``at_concurrency_limit``: ``limit_concurrency`` (uvicorn's): past it a request gets 503.

Spec: ASGI 3.0, HTTP connection scope and events, spec version 2.4
(https://asgi.readthedocs.io/en/latest/specs/www.html): "If send() is called on a closed
connection the server should raise a server-specific subclass of OSError"; RFC 9110 §10.1.1
(Expect: 100-continue).

Compare with: uvicorn/protocols/http/httptools_impl.py (``RequestResponseCycle.run_asgi`` and
``receive``, whose ``body``, ``more_body`` and ``message_event`` are our ``body``,
``more_body`` and ``waiter``),
uvicorn/protocols/utils.py (``get_path_with_query_string``), uvicorn/logging.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote

from toyservers._types import ASGIApp, Headers, Message, Scope
from toyservers.access_log import log_request
from toyservers.asgi_extensions import offered
from toyservers.proxy import NAMES, apply_to_scope

if TYPE_CHECKING:
    from toyservers.state import ServerState

logger = logging.getLogger("toyservers.error")

ASGI_VERSION = {"version": "3.0", "spec_version": "2.4"}
TASK_NAME = "toyservers.run_asgi"  # the name of every request's Task


class ClientDisconnected(OSError):
    """Raised by ``send()`` once the client is gone (ASGI HTTP spec 2.4 lets a server raise a
    server-specific ``OSError`` subclass there), so an app streaming to nobody stops."""


def scope_template(conn: ServerProtocol) -> dict[str, Any]:
    """What the ``http`` scopes of every request on ``conn`` share, built once per connection:
    ``http_scope`` copies it and sets the rest. The keys the request sets are here already
    (as None), in the spec's order: a copy of a dict is cheap, and setting a key it holds is
    cheaper than adding one. A scope built key by key cost 1.3k instructions a request more
    on toy-httptools (callgrind: 99.6k -> 98.3k with this). Its ``extensions`` are those of an
    HTTP/1.1 request without ``TE: trailers`` (``asgi_extensions.offered``), one dict shared by
    the connection's requests, as ``asgi`` is by all; ``http_scope`` builds another for the rest.
    """
    return {
        "type": "http",
        "asgi": ASGI_VERSION,
        "http_version": None,
        "server": conn.server,
        "client": conn.client,
        "scheme": conn.scheme,
        "method": None,
        "root_path": conn.state.config.root_path,
        "path": None,
        "raw_path": None,
        "query_string": None,
        "headers": None,
        "state": None,
        "extensions": offered(conn.tls, "1.1", False),
    }


def http_scope(conn: ServerProtocol, method: str, http_version: str, raw_path: bytes,
               query_string: bytes, headers: Headers, trailers: bool = False,
               fields: Collection[bytes] | None = None) -> Scope:
    """The ASGI ``http`` scope of one request on ``conn``.

    ``raw_path`` is the path as received (ASCII bytes, still percent-encoded); the scope's
    ``path`` is it percent-decoded as UTF-8, both prefixed with ``config.root_path``. ``conn``
    gives ``client``, ``server``, ``scheme`` and ``extensions`` (in its ``scope_template``)
    and the server's state, whose lifespan ``state`` is copied, so one request cannot change
    what the next one sees (ASGI lifespan spec). ``trailers``: the request's TE lists
    ``trailers`` (``asgi_extensions.accepts_trailers``), so the trailers extension is offered
    on HTTP/1.1; another version gets its own (``asgi_extensions.offered``). ``fields``: the
    headers' names as a dict or set, when the caller has made one: the forwarding fields are
    looked up there, not by a loop over the headers (``proxy.ProxyHeaders.resolve``).
    """
    state = conn.state
    root_path = state.config.root_path
    path = raw_path.decode("ascii")
    if "%" in path:
        path = unquote(path)  # ASGI: "path": "HTTP request target excluding any query string",
        # percent-decoded and UTF-8 decoded
    scope = conn.scope_template.copy()
    scope["http_version"] = http_version
    scope["method"] = method
    scope["path"] = root_path + path if root_path else path
    scope["raw_path"] = root_path.encode() + raw_path if root_path else raw_path
    scope["query_string"] = query_string
    scope["headers"] = headers
    scope["state"] = state.lifespan_state.copy()
    if trailers or http_version != "1.1":  # the template's are 1.1's without TE: trailers
        scope["extensions"] = offered(conn.tls, http_version, trailers)
    # The proxy's fields believed only from a trusted peer (toyservers.proxy). A lookup in the
    # caller's dict, not resolve()'s loop, when there are none: 1.0k instructions a request
    # less on toy-h11 (callgrind, POST /user: 499.7k -> 498.7k)
    if state.proxy is not None and (fields is None or not NAMES.isdisjoint(fields)):
        forwarded = state.proxy.resolve(conn.client, headers)
        if forwarded is not None:
            apply_to_scope(scope, headers, forwarded)
    return scope


class ServerProtocol(Protocol):
    """What the ASGI side needs of a connection (``toyservers.protocol.HTTPProtocol``)."""

    client: tuple[str, int] | None
    server: tuple[str, int] | None
    scheme: str
    tls: dict[str, Any] | None
    state: ServerState
    scope_template: dict[str, Any]  # scope_template(self), once the fields above are known


def at_concurrency_limit(state: ServerState) -> bool:
    """True past ``config.limit_concurrency`` (connections or running apps): answer 503
    (RFC 9110 §15.6.4) instead of running the app, as uvicorn does."""
    limit = state.config.limit_concurrency
    return limit is not None and (len(state.connections) > limit or len(state.tasks) >= limit)


def log_access(client: tuple[str, int] | None, scope: Scope, status: int) -> None:
    """uvicorn's access line for the request of ``scope``: ``access_log.log_request``."""
    log_request(client, scope["method"], scope["raw_path"], scope["query_string"],
                scope["http_version"], status)


class RequestResponseCycle:
    """The base of one request's cycle: the request body, ``receive()``, the app's Task and the
    one failure policy.

    The protocol puts body bytes in ``body`` and calls ``wake()``; it sets ``more_body`` to
    False at the end of the body and calls ``disconnect()`` when the client goes. A server's cycle
    writes ``send()`` (setting ``response_started`` at ``http.response.start`` and
    ``response_complete`` after the last body, then calling ``wake()``) and two hooks that
    ``receive()`` calls only off the common path: ``write_continue()`` and ``resume_reading()``.
    """

    __slots__ = ("protocol", "scope", "disconnected", "response_started", "response_complete",
                 "task", "body", "more_body", "body_done", "expect_100", "waiter")

    def __init__(self, protocol: ServerProtocol, scope: Scope, expect_100: bool = False) -> None:
        self.protocol = protocol
        self.scope = scope
        self.disconnected = self.response_started = self.response_complete = False
        self.task: asyncio.Task[None] | None = None
        self.body = b""  # received, not yet handed to the app
        self.more_body = True  # more request body is still to come from the client
        self.body_done = False  # the last http.request message was handed to the app
        self.expect_100 = expect_100  # the client waits for 100 Continue, not yet sent
        self.waiter: asyncio.Future[None] | None = None  # receive() waiting for body

    def wake(self) -> None:
        """Wake ``receive()`` if it waits (new body bytes, end of body, disconnect, done)."""
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def disconnect(self) -> None:
        """The client is gone: ``receive()`` says ``http.disconnect``, ``send()`` raises."""
        self.disconnected = True
        self.wake()

    # --8<-- [start:receive]
    async def receive(self) -> Message:
        """``http.request`` with the body bytes read so far, or ``http.disconnect``."""
        if self.expect_100:
            self.expect_100 = False
            # RFC 9110 §10.1.1: the client waits for 100 before sending the body; we send it
            # once the app asks for a body that has not come (never after a response byte).
            if not self.body and self.more_body and not self.disconnected:
                self.write_continue()
        # Once the app has the whole body (body_done), only a disconnect can follow.
        while not self.body and (self.more_body or self.body_done) and not (
                self.disconnected or self.response_complete):
            await self.wait_for_body()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        body, self.body = self.body, b""
        more_body = self.more_body
        if more_body:
            self.resume_reading()
        else:
            self.body_done = True
        return {"type": "http.request", "body": body, "more_body": more_body}
    # --8<-- [end:receive]

    async def wait_for_body(self) -> None:
        """Let the client send more (``resume_reading``) and wait for ``wake()``: body bytes,
        the end of the body, a disconnect or the end of the response. A server on another
        I/O model than asyncio's overrides this and ``wake`` (toy-anyio: an anyio Event)."""
        self.waiter = asyncio.get_running_loop().create_future()
        self.resume_reading()  # may hand over held-back body and wake the waiter at once
        await self.waiter
        self.waiter = None

    def write_continue(self) -> None:
        """Write ``100 Continue`` if no byte of the response is out (RFC 9110 §15.2)."""
        raise NotImplementedError

    def resume_reading(self) -> None:
        """The app wants more body than has come: let the client send it."""
        raise NotImplementedError

    async def send(self, message: Message) -> None:
        raise NotImplementedError

    async def run_asgi(self, app: ASGIApp) -> None:
        """Run the app; nothing it raises leaves this Task (see the module docstring)."""
        try:
            result = await app(self.scope, self.receive, self.send)  # type: ignore[func-returns-value]
        except ClientDisconnected:
            logger.debug("client %s went away during the response", self.protocol.client)
        except BaseException as exc:  # SystemExit too: one app must not stop the server
            logger.error("Exception in ASGI application", exc_info=exc)
        else:
            if result is not None:
                logger.error("ASGI callable should return None, but returned %r", result)
            elif not (self.response_complete or self.disconnected):
                logger.error("ASGI callable returned without %s the response",
                             "completing" if self.response_started else "starting")
        finally:
            self.protocol.state.tasks.discard(self.task)
        if not (self.response_complete or self.disconnected):
            self.send_error(500)

    def send_error(self, status: int) -> None:
        """Answer ``status``, or end the response when it began: on HTTP/1.1 the connection's
        ``send_error`` (it then closes), on HTTP/2 the stream's."""
        raise NotImplementedError

    def start_task(self, app: ASGIApp) -> None:
        """Run the app in its own Task (its own contextvars copy, and a ``current_task()`` for
        ``asyncio.timeout`` and anyio), kept in ``state.tasks`` so a graceful shutdown can wait
        for it; ``run_asgi`` takes it out as it ends."""
        # asyncio.Task, not loop.create_task, and a name: uvloop's create_task adds a Python
        # call, and a Task without a name formats "Task-<n>": 1.8k instructions a request
        # (callgrind). So no task factory set on the loop is used (and none runs it eagerly).
        # The Task finds the running loop itself: passing it cost 0.57k more.
        self.task = task = asyncio.Task(self.run_asgi(app), name=TASK_NAME)
        self.protocol.state.tasks.add(task)
