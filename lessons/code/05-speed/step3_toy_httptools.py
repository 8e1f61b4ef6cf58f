"""Lesson 5, step 3: toy-httptools, the server of ``toyservers/httptools_server.py``, from Python.

Run: ``.venv/bin/python lessons/code/05-speed/step3_toy_httptools.py 8000`` (uvloop) or
``LOOP=asyncio .venv/bin/python lessons/code/05-speed/step3_toy_httptools.py 8000``; it does what
``toyserve apps.asgi_user:app --server toy-httptools --loop uvloop --port 8000`` does. Then
``curl -i -d '{"id": 1, "name": "ada", "email": "ada@example.com"}' http://127.0.0.1:8000/``.

Step 2's callbacks grown into a full ASGI server: the same user endpoint as lesson 4's
toy-h11, the same ``Config``, a different parser and (by default) a different loop.

Deliberately left out: everything ``toyserve`` adds (flags, logging setup, ``--app-dir``).
Spec: see ``toyservers/httptools_server.py``'s docstring.
"""

from __future__ import annotations

import os
import sys

# --8<-- [start:run]
from apps.asgi_user import app
from toyservers.config import Config
from toyservers.httptools_server import run

if __name__ == "__main__":
    run(app, Config(port=int(sys.argv[1]) if len(sys.argv) > 1 else 8000,
                    loop="asyncio" if os.environ.get("LOOP") == "asyncio" else "uvloop"))
# --8<-- [end:run]
