"""The user endpoint on Flask, a WSGI framework: one view calling the shared endpoint.

``POST /`` answers with the echoed user (``application/json``); a body that is not a user gets
400 or 422 with a JSON error body (see :mod:`apps.user`). Flask answers 404 and 405 itself.

Run it: ``gunicorn apps.flask_user:app``.
"""

from __future__ import annotations

from flask import Flask, Response, request

from apps.user import CONTENT_TYPE, UserError, endpoint

app = Flask(__name__)


@app.post("/")
def create_user() -> Response:
    """Echo the user in the request body, or answer 400/422 with a JSON error."""
    try:
        return Response(endpoint(request.get_data()), mimetype=CONTENT_TYPE)
    except UserError as exc:
        return Response(exc.body(), status=exc.status, mimetype=CONTENT_TYPE)
