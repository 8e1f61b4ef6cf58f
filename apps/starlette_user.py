"""The user endpoint on Starlette: one route, one request handler, the shared endpoint.

``POST /`` answers with the echoed user (``application/json``); a body that is not a user gets
400 or 422 with a JSON error body (see :mod:`apps.user`). Starlette itself answers 404 for
other paths and 405 for other methods.

Run it: ``uvicorn apps.starlette_user:app``.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from apps.user import CONTENT_TYPE, UserError, endpoint


# --8<-- [start:app]
async def create_user(request: Request) -> Response:
    """Echo the user in the request body, or answer 400/422 with a JSON error."""
    body = await request.body()
    try:
        return Response(endpoint(body), media_type=CONTENT_TYPE)
    except UserError as exc:
        return Response(exc.body(), status_code=exc.status, media_type=CONTENT_TYPE)


app = Starlette(routes=[Route("/", create_user, methods=["POST"])])
# --8<-- [end:app]
