"""Run one toy server with the hostile corpus' short deadlines and small body limit.

``toyserve`` has no flags for the header/body deadlines or the body limit, so the tests start
toy servers through this script instead: it builds a ``Config`` from the values in
``corpus.py`` and calls the server module's ``run()``. toy-wsgi runs the worker model given
(gthread unless told, with 4 threads; the ASGI servers ignore both settings).

Usage: ``python -m tests.hostile.launch SERVER APP PORT [WORKER_CLASS]`` (for example
``python -m tests.hostile.launch toy-h11 tests.support.echo_app:app 8123``).
"""

from __future__ import annotations

import sys

from tests.hostile import corpus
from toyservers.cli import configure_logging, import_from_string
from toyservers.config import Config, WorkerClass
from toyservers.registry import get


def hostile_config(port: int, worker_class: WorkerClass = "gthread") -> Config:
    """The Config every toy server gets in these tests: corpus limits, 1-second deadlines."""
    return Config(
        host="127.0.0.1", port=port, loop="auto", lifespan="auto",
        timeout_keep_alive=float(corpus.TIMEOUT_KEEP_ALIVE),
        timeout_headers=corpus.TIMEOUT_HEADERS, timeout_body=corpus.TIMEOUT_BODY,
        timeout_graceful_shutdown=1.0,
        max_request_line=corpus.MAX_REQUEST_LINE, max_header_size=corpus.MAX_HEADER_SIZE,
        max_headers=corpus.MAX_HEADERS, max_body_size=corpus.MAX_BODY_SIZE,
        access_log=False, log_level="warning", worker_class=worker_class, threads=4,
    )


def main(argv: list[str]) -> None:
    """Parse ``SERVER APP PORT [WORKER_CLASS]`` and block serving; exits on a usage error."""
    if len(argv) not in (3, 4) or argv[3:] not in ([], ["sync"], ["gthread"]):
        sys.exit("usage: python -m tests.hostile.launch SERVER MODULE:APP PORT [WORKER_CLASS]")
    server, app, port, *worker_class = argv
    configure_logging("warning", access_log=False)
    config = hostile_config(int(port), "sync" if worker_class == ["sync"] else "gthread")
    get(server).load().run(import_from_string(app), config)


if __name__ == "__main__":
    main(sys.argv[1:])
