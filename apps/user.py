"""The user endpoint of the layers experiment, shared by every app in this package.

``endpoint(body)`` takes the raw request body, decodes it into a :class:`User` (id, name,
email), copies it into a new ``User`` and encodes that back: the same work at every layer, so
the difference between two layers is the layer. msgspec does the decoding and encoding.

Errors are one exception type, :class:`UserError`, carrying the HTTP status an app should
answer with and a JSON error body:

- ``400 Bad Request``: the body is not JSON (malformed or truncated, RFC 9110 §15.5.1);
- ``422 Unprocessable Content``: valid JSON of the wrong shape, such as a missing field or a
  string where ``id`` should be a number (RFC 9110 §15.5.21).

The apps never answer 500 for a bad body.
"""

from __future__ import annotations

import msgspec

#: The request body wrk sends in ``bench layers`` and the tests send to check the echo.
SAMPLE_BODY = b'{"id": 1, "name": "user", "email": "user@email.com"}'

CONTENT_TYPE = "application/json"


# --8<-- [start:user]
class User(msgspec.Struct):
    """A user as the endpoint sees it: ``{"id": int, "name": str, "email": str}``."""

    id: int
    name: str
    email: str
# --8<-- [end:user]


class UserError(ValueError):
    """The body could not become a ``User``.

    Attributes:
        status: the HTTP status to answer with (400 for malformed JSON, 422 for the wrong shape).
        detail: a one-line human explanation (msgspec's message).
    """

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail

    def body(self) -> bytes:
        """The response body: ``{"error": "<reason phrase>", "detail": "<detail>"}`` as JSON."""
        reason = "malformed JSON" if self.status == 400 else "invalid user"
        return _encoder.encode({"error": reason, "detail": self.detail})


_decoder = msgspec.json.Decoder(User)
_encoder = msgspec.json.Encoder()


# --8<-- [start:endpoint]
def endpoint(body: bytes) -> bytes:
    """Decode ``body`` into a ``User``, copy it into a new one and return it encoded as JSON.

    Args:
        body: the request body, bytes.

    Returns:
        The echoed user as compact JSON bytes, e.g. ``b'{"id":1,"name":"user",...}'``.

    Raises:
        UserError: status 400 when ``body`` is not JSON (malformed, truncated or empty),
            status 422 when it is JSON but not a ``User``.
    """
    try:
        user = _decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise UserError(422, str(exc)) from None
    except msgspec.DecodeError as exc:
        raise UserError(400, str(exc)) from None
    copy = User(id=user.id, name=user.name, email=user.email)
    return _encoder.encode(copy)
# --8<-- [end:endpoint]
