"""``python -m bench.bjoern_launcher module:app --host H --port P``: serve a WSGI app on bjoern.

bjoern (a WSGI server in C on libev) has no command line: a program calls
``bjoern.run(app, host, port)``, which serves in this process and this thread until SIGINT.
This is that program, so the registry can start bjoern like any other server. SIGTERM (how
``bench`` stops a server) ends the process at once, which is all a benchmark needs.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any


def load_app(target: str) -> Any:
    """The object named by ``"package.module:attr"``."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise SystemExit(f'app must look like "module:attribute", got "{target}"')
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and serve until stopped."""
    parser = argparse.ArgumentParser(prog="python -m bench.bjoern_launcher",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("app", help='the WSGI app, "module:attribute"')
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    try:
        import bjoern
    except ImportError as exc:
        raise SystemExit(f"bjoern is not installed ({exc}): apt-get install libev-dev, then "
                         "pip install bjoern (make layers ARGS=--wsgi does both)") from None
    app = load_app(args.app)
    bjoern.run(app, args.host, args.port)


if __name__ == "__main__":
    main()
