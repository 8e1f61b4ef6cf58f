"""``python -m bench.wsgiref_server module:app --host H --port P``: the standard library's server.

``wsgiref.simple_server`` has no command line of its own (``python -m wsgiref.simple_server``
serves only its demo app), so the registry's ``wsgiref`` entry starts it through this launcher:
import the app, ``make_server``, ``serve_forever`` until SIGINT or SIGTERM. It is the reference
at the bottom of the WSGI rows: one process, one thread, one request per connection (its
handler speaks HTTP/1.0), exactly as the standard library ships it; the only change is that
``--no-access-log`` silences the per-request line it writes to stderr.

It lives in ``bench/`` (not ``tests/`` or ``toyservers/``) because the registry's argv must work
wherever ``bench`` runs: the ``bench`` package is installed with the distribution, ``tests`` is
not, and ``toyservers`` holds only the servers we write.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from toyservers.cli import AppImportError, import_from_string


class QuietHandler(WSGIRequestHandler):
    """The standard handler without its access-log line."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.wsgiref_server",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("app", help='the WSGI app, "module:attribute"')
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--no-access-log", action="store_true",
                        help="do not log one line per request")
    args = parser.parse_args(argv)
    sys.path.insert(0, ".")
    try:
        app = import_from_string(args.app)
    except AppImportError as exc:
        parser.exit(1, f"error: {exc}\n")
    handler = QuietHandler if args.no_access_log else WSGIRequestHandler
    with make_server(args.host, args.port, app, handler_class=handler) as server:
        def stop(signum: int, frame: object) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, stop)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
