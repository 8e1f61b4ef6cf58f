"""Lesson 6: the asgi row of ``bench layers`` by hand: ``apps/asgi_user.py`` on uvicorn.

The same server settings ``bench layers`` uses for its ``uvicorn`` rows (httptools parser, uvloop
event loop, warnings only, no access log), so what you send it with curl, httpx or a raw socket is
what wrk sends in the experiment. Usage:
``.venv/bin/python lessons/code/06-layers/serve_asgi_user.py [PORT]``.
"""

from __future__ import annotations

import sys

import uvicorn

from apps.asgi_user import app

# --8<-- [start:run]
if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    uvicorn.run(app, host="127.0.0.1", port=port, http="httptools", loop="uvloop",
                log_level="warning", access_log=False)
# --8<-- [end:run]
