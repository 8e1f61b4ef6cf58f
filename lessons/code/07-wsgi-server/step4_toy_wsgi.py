"""Lesson 7, step 4: toy-wsgi (``toyservers/wsgi_server.py``) running Flask, unchanged.

Run: ``.venv/bin/python lessons/code/07-wsgi-server/step4_toy_wsgi.py 8000``; it does what
``toyserve apps.flask_user:app --server toy-wsgi --worker-class gthread --threads 4 --port 8000``
does, without the command line. Then
``curl -i -d '{"id": 1, "name": "ada", "email": "ada@example.com"}' http://127.0.0.1:8000/``.

toy-wsgi is step 3 grown up: the same main thread with a selector and a pool, reading
requests with the project's sans-IO parser (``toyservers/http1_parser.py``), with a deadline
on every read, limits on sizes, chunked bodies, ``Expect: 100-continue``, a 500 when the app
fails, ``wsgi.file_wrapper`` sent with ``sendfile``, and graceful shutdown. The app is the
Flask user endpoint of ``bench layers``: Flask is a WSGI app like step 1's ``app``.

Deliberately left out: everything ``toyserve`` adds (flags, logging setup).
Spec: see ``toyservers/wsgi_server.py``'s docstring.
"""

from __future__ import annotations

import sys

# --8<-- [start:run]
from apps.flask_user import app
from toyservers.config import Config
from toyservers.wsgi_server import run

if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    run(app, Config(port=port, worker_class="gthread", threads=4, access_log=False))
# --8<-- [end:run]
