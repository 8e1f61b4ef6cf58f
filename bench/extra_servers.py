"""The servers only ``bench`` knows how to start, added to :data:`toyservers.registry.SERVERS`.

``toyservers`` names no file outside its own package; these three entries run programs that
live here or in the tutorial, so they are registered by ``bench`` itself (importing any
``bench`` module registers them, through ``bench/__init__.py``):

- ``bjoern``: bjoern has no command line, so :mod:`bench.bjoern_launcher` calls
  ``bjoern.run(app, host, port)``: one process, one thread, a libev loop in C that also calls
  the app. An optional extra (``pip install -e '.[bjoern]'``): offered only when named.
- ``wsgiref``: the standard library's one-thread ``wsgiref.simple_server``, through
  :mod:`bench.wsgiref_server`.
- ``bare``: the baseline of ``bench layers``, the least server that runs an ASGI app on
  httptools (:data:`BARE_FILE`, a lesson step file run by this interpreter); not a server to
  use, and never offered by :func:`toyservers.registry.available` unless asked for.
"""

from __future__ import annotations

from pathlib import Path

from toyservers.registry import Argv, ServerSpec, register

#: The baseline's program: a complete lesson step file, run by this interpreter.
BARE_FILE = Path(__file__).resolve().parent.parent / "lessons" / "code" / "05-speed" / \
    "bare_httptools.py"


def _literal(path: Path) -> str:
    """``path`` as an argv section: its braces doubled, so the placeholders leave it alone."""
    return str(path).replace("{", "{{").replace("}", "}}")


BJOERN = register(ServerSpec(
    "bjoern", "reference", "wsgi", "bjoern", "bjoern, C on libev, one thread",
    Argv("{python}", head=("-m", "bench.bjoern_launcher", "{app}"), access_log=None),
    frozenset({"http/1.1"}),
    one_process="bjoern.run() serves in one process and one thread; its multi-process "
                "recipe forks by hand after bjoern.listen()",
    extra="bjoern"))

WSGIREF = register(ServerSpec(
    "wsgiref", "reference", "wsgi", "python",
    "wsgiref.simple_server (standard library), one thread, HTTP/1.0",
    Argv("{python}", head=("-m", "bench.wsgiref_server", "{app}"),
         no_access_log=("--no-access-log",)),
    frozenset({"http/1.1"}), one_process="wsgiref.simple_server is one process and one thread"))

BARE = register(ServerSpec(
    "bare", "baseline", "asgi", "httptools",
    "baseline: ASGI on httptools, no checks, limits or timers",
    Argv("{python}", head=(_literal(BARE_FILE), "{app}"), access_log=None),
    frozenset({"http/1.1"}), one_process="a baseline: one process, nothing to configure",
    script=BARE_FILE))
