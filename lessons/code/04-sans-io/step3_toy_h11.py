"""Lesson 4, step 3: toy-h11, the sans-IO server of ``toyservers/h11_server.py``, from Python.

Run: ``.venv/bin/python lessons/code/04-sans-io/step3_toy_h11.py 8000``; it does what
``toyserve apps.asgi_user:app --server toy-h11 --port 8000`` does, without the command line.
Then ``curl -i -d '{"id": 1, "name": "ada", "email": "ada@example.com"}' http://127.0.0.1:8000/``.

The server is step 2's loop turned inside out: asyncio calls ``data_received`` with bytes,
the protocol feeds h11 and pulls events, and each request runs an ASGI app in its own Task.
The app is the user endpoint every layer in ``bench layers`` serves.

Deliberately left out: everything ``toyserve`` adds (flags, logging setup, ``--app-dir``).
Spec: see ``toyservers/h11_server.py``'s docstring.
"""

from __future__ import annotations

import sys

# --8<-- [start:run]
from apps.asgi_user import app
from toyservers.config import Config
from toyservers.h11_server import run

if __name__ == "__main__":
    run(app, Config(port=int(sys.argv[1]) if len(sys.argv) > 1 else 8000, loop="asyncio"))
# --8<-- [end:run]
