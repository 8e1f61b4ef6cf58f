"""The user endpoint on FastAPI, written the way the FastAPI docs teach it.

A pydantic ``User`` model is the parameter of a ``@app.post("/")`` path operation and the
return type, so FastAPI reads the body, validates it, and serialises the answer through the
model: this is the layer whose cost ``bench layers`` measures. It does not use
:mod:`apps.user`'s msgspec endpoint on purpose; the work is the same (decode, copy, encode).

Errors are FastAPI's: a malformed body and a body of the wrong shape both get
``422 Unprocessable Content`` with FastAPI's JSON ``{"detail": [...]}``; never a 500.

Run it: ``uvicorn apps.fastapi_user:app``.
"""

from __future__ import annotations

from fastapi import FastAPI
from pydantic import BaseModel


# --8<-- [start:app]
class User(BaseModel):
    """``{"id": int, "name": str, "email": str}``."""

    id: int
    name: str
    email: str


app = FastAPI()


@app.post("/")
async def create_user(user: User) -> User:
    """Echo the user: a new ``User`` copied from the validated request body."""
    return User(id=user.id, name=user.name, email=user.email)
# --8<-- [end:app]
