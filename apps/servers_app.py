"""The app of ``bench servers``: three GET endpoints on FastAPI, as the server comparison ran.

- ``GET /api/shortbody``: a 22-byte ``text/plain`` body (:data:`SHORT_BODY`); what a server
  costs per request when the app does nothing.
- ``GET /api/longbody``: a 430,000-byte ``text/plain`` body (:data:`LONG_BODY`); what it
  costs to push bytes: the server's write path, flow control and buffers.
- ``GET /api/pathsend``: the same 430,000 bytes from a file (:func:`long_body_file`), by
  Starlette's ``FileResponse``: one ``http.response.pathsend`` message where the server offers
  the extension (the server sends the file), else the file read in 64 KiB pieces in a thread.
- ``GET /api/activities``: a close-to-real endpoint. An OAuth2 bearer token (a JWT signed
  with HS256, RFC 7519) is decoded with PyJWT; its ``sub`` claim names a user, looked up in
  Redis database 0 (a hash ``user:<name>``); that user's activities are read from Redis
  database 1 (a list ``activities:<id>`` of JSON strings); the answer is
  ``{"user": {...}, "activities": [...]}`` as JSON. Two awaited round trips to Redis per
  request, through the ``redis`` package's asyncio client.

A missing, malformed, expired or wrongly signed token, or a user who is not in Redis, gets
``401`` with ``WWW-Authenticate: Bearer`` (RFC 6750 §3); never a 500.

Settings come from the environment, so every server runs the same app unchanged:
``SERVERS_APP_REDIS`` (``host:port``, default ``127.0.0.1:6379``) and
``SERVERS_APP_SECRET`` (the HS256 key; default :data:`DEFAULT_SECRET`, a teaching value).
The Redis clients are made on the first request in each process, not in a lifespan handler,
because daphne does not run the ASGI lifespan protocol.

:func:`make_token` and :func:`seed` are what ``bench servers`` and the tests use to make a
token and fill a fresh Redis.

Run it: ``SERVERS_APP_REDIS=127.0.0.1:6379 uvicorn apps.servers_app:app``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import jwt
import redis
import redis.asyncio
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import FileResponse, PlainTextResponse, Response
from fastapi.security import OAuth2PasswordBearer

#: The 22-byte body of ``/api/shortbody``.
SHORT_BODY = b"short body from bench\n"
#: The 430,000-byte body of ``/api/longbody``: printable lines of 100 bytes.
LONG_BODY = (b"x" * 99 + b"\n") * 4300
#: The HS256 key when ``SERVERS_APP_SECRET`` is unset: a teaching value, never a real secret.
DEFAULT_SECRET = "toyservers-bench-teaching-key-not-a-secret"
ALGORITHM = "HS256"
#: Redis databases: users in 0, their activities in 1 (as the published experiment).
USERS_DB, ACTIVITIES_DB = 0, 1

# --8<-- [start:clients]
_clients: dict[int, redis.asyncio.Redis] = {}


def redis_address() -> tuple[str, int]:
    """``SERVERS_APP_REDIS`` as ``(host, port)``; ``("127.0.0.1", 6379)`` when unset."""
    host, _, port = os.environ.get("SERVERS_APP_REDIS", "127.0.0.1:6379").rpartition(":")
    return host or "127.0.0.1", int(port)


def client(db: int) -> redis.asyncio.Redis:
    """This process's client for Redis database ``db``, made on first use (one connection
    pool per database, reused by every request)."""
    found = _clients.get(db)
    if found is None:
        host, port = redis_address()
        found = _clients[db] = redis.asyncio.Redis(host=host, port=port, db=db,
                                                   decode_responses=True)
    return found
# --8<-- [end:clients]


def secret() -> str:
    """The HS256 key: ``SERVERS_APP_SECRET``, else :data:`DEFAULT_SECRET`."""
    return os.environ.get("SERVERS_APP_SECRET", DEFAULT_SECRET)


app = FastAPI()
oauth2 = OAuth2PasswordBearer(tokenUrl="/api/token")


@app.get("/api/shortbody")
async def shortbody() -> Response:
    """22 bytes of plain text."""
    return PlainTextResponse(SHORT_BODY)


@app.get("/api/longbody")
async def longbody() -> Response:
    """430,000 bytes of plain text."""
    return PlainTextResponse(LONG_BODY)


_long_body_stat: dict[str, os.stat_result] = {}


def long_body_file() -> Path:
    """The file holding :data:`LONG_BODY`: ``SERVERS_APP_LONG_BODY_FILE``, or one in the
    system's temporary folder; written (whole, by a rename) when missing or different."""
    default = Path(tempfile.gettempdir()) / f"toyservers-longbody-{os.getuid()}.txt"
    path = Path(os.environ.get("SERVERS_APP_LONG_BODY_FILE", default))
    if not path.is_file() or path.read_bytes() != LONG_BODY:
        part = path.with_name(f"{path.name}.{os.getpid()}")
        part.write_bytes(LONG_BODY)
        part.replace(path)
    return path


@app.get("/api/pathsend")
async def pathsend() -> Response:
    """:data:`LONG_BODY` from :func:`long_body_file`, its ``os.stat`` taken once per process
    (else Starlette stats the file in a thread on every request)."""
    if not _long_body_stat:
        path = long_body_file()
        _long_body_stat[str(path)] = path.stat()
    [(path_name, stat)] = _long_body_stat.items()
    return FileResponse(path_name, media_type="text/plain", stat_result=stat)


# --8<-- [start:activities]
def unauthorized(detail: str) -> HTTPException:
    """401 with ``WWW-Authenticate: Bearer``, as RFC 6750 §3 asks of a refused token."""
    return HTTPException(401, detail, headers={"WWW-Authenticate": "Bearer"})


async def current_user(token: Annotated[str, Depends(oauth2)]) -> dict[str, str]:
    """The user the bearer token names, from Redis database 0.

    Raises:
        HTTPException: 401 when the token does not decode (malformed, expired, wrong key)
            or names no user.
    """
    try:
        claims = jwt.decode(token, secret(), algorithms=[ALGORITHM])
    except jwt.InvalidTokenError as exc:
        raise unauthorized(f"invalid token: {exc}") from None
    user = await client(USERS_DB).hgetall(f"user:{claims.get('sub')}")
    if not user:
        raise unauthorized("unknown user")
    return {str(k): str(v) for k, v in user.items()}


@app.get("/api/activities")
async def activities(user: Annotated[dict[str, str], Depends(current_user)]
                     ) -> dict[str, Any]:
    """The user and their activities (Redis database 1), as JSON."""
    items = await client(ACTIVITIES_DB).lrange(f"activities:{user['id']}", 0, -1)
    return {"user": user, "activities": [json.loads(item) for item in items]}
# --8<-- [end:activities]


# --- what the bench and the tests use --------------------------------------------------------


def make_token(username: str, *, key: str | None = None, lifetime: float = 86400.0) -> str:
    """A bearer token for ``username``: a JWT (HS256) with ``sub`` and ``exp`` (``lifetime``
    seconds from now), signed with ``key`` (default :func:`secret`)."""
    claims = {"sub": username, "exp": int(time.time() + lifetime)}
    return jwt.encode(claims, key if key is not None else secret(), algorithm=ALGORITHM)


def username(number: int) -> str:
    """The name of seeded user ``number``: ``"user1"``, ``"user2"``..."""
    return f"user{number}"


def seed(host: str, port: int, *, users: int = 100, activities: int = 10) -> None:
    """Fill a Redis at ``host:port`` with ``users`` users (database 0) and ``activities``
    activities each (database 1), replacing what those databases held.

    A user is a hash ``user:userN`` with ``id``, ``username``, ``full_name``, ``email``; an
    activity a JSON string ``{"id", "kind", "at"}`` (``at``: seconds since the epoch).
    """
    with redis.Redis(host=host, port=port, db=USERS_DB) as users_db, \
            redis.Redis(host=host, port=port, db=ACTIVITIES_DB) as activities_db:
        users_db.flushdb()
        activities_db.flushdb()
        kinds = ("login", "upload", "comment", "like", "logout")
        for number in range(1, users + 1):
            name = username(number)
            users_db.hset(f"user:{name}", mapping={
                "id": str(number), "username": name, "full_name": f"User {number}",
                "email": f"{name}@example.com"})
            entries = [json.dumps({"id": i, "kind": kinds[i % len(kinds)],
                                   "at": 1_700_000_000 + 60 * i})
                       for i in range(activities)]
            if entries:
                activities_db.rpush(f"activities:{number}", *entries)
