"""One server process per server per module, started on a free port with the corpus' settings.

With ``--own-server 'COMMAND {port}'`` the tests that take ``server`` run once, against the
server that command starts (``tests/support/own_server.py``), instead of once per name here.
Toy servers run through ``launch.py`` (short deadlines, small body limit; toy-wsgi with the
gthread worker, which keeps connections alive, and as ``toy-wsgi-sync`` with the sync one);
uvicorn runs with its registry command plus ``--timeout-keep-alive``, the one matching flag it
has, and gunicorn (the WSGI reference) with its gthread worker and the matching flags it has
(keep-alive, request-line and field limits).
WSGI servers answer with ``tests/support/wsgi_echo_app.py``, the same JSON. Servers are
started by ``tests/support/running.py`` (as in tests/conformance): a toy server whose module
does not exist yet makes its tests fail with a clear message (never a skip).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile import corpus
from tests.support.own_server import OWN, own_command, own_server
from tests.support.running import RunningServer, running_server
from toyservers.registry import get

APPS = {"asgi": "tests.support.echo_app:app", "wsgi": "tests.support.wsgi_echo_app:app"}
SERVERS = ["toy-raw", "toy-h11", "toy-httptools", "uvicorn", "toy-wsgi", "toy-wsgi-sync",
           "gunicorn", "toy-anyio", "toy-anyio-trio"]
# A test server name that is a registry name plus a worker model: toy-wsgi's sync worker.
VARIANTS = {"toy-wsgi-sync": ("toy-wsgi", "sync")}
# gunicorn's gthread worker keeps connections alive (its sync worker closes after each
# response); its limits: the request line (at most 8190), fields per request, bytes per field.
GUNICORN = ("--worker-class", "gthread", "--threads", "4", "--graceful-timeout", "1",
            "--keep-alive", str(corpus.TIMEOUT_KEEP_ALIVE), "--limit-request-line", "8190",
            "--limit-request-fields", str(corpus.MAX_HEADERS),
            "--limit-request-field_size", str(corpus.MAX_HEADER_SIZE))


def command(name: str, port: int) -> list[str]:
    """argv serving the echo app on ``127.0.0.1:port`` with the corpus' settings."""
    name, worker_class = VARIANTS.get(name, (name, "gthread"))
    spec = get(name)
    app = APPS[spec.interface]
    if spec.kind == "toy":
        return [sys.executable, "-m", "tests.hostile.launch", name, app, str(port),
                worker_class]
    if name == "gunicorn":
        return [*spec.command(app, "127.0.0.1", port), *GUNICORN]
    return [*spec.command(app, "127.0.0.1", port),
            "--timeout-keep-alive", str(corpus.TIMEOUT_KEEP_ALIVE)]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each server's known differences ``xfail(strict=True)``, from
    ``corpus.KNOWN_DIFFERENCES`` (uvicorn's, and the gaps a toy server inherits from its parser).

    The key is the case name for corpus tests and the test function's name otherwise.
    """
    here = Path(__file__).parent
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or here not in item.path.parents:
            continue
        differences = corpus.KNOWN_DIFFERENCES.get(callspec.params.get("server", ""), {})
        case = callspec.params.get("case")
        key = case.name if isinstance(case, corpus.Case) else getattr(item, "originalname", "")
        if key in differences:
            reason = f"{callspec.params['server']} differs: {differences[key]}"
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes ``server`` runs once per name in SERVERS, or once against ``own``
    with ``--own-server`` (tests/support/own_server.py)."""
    if "server" in metafunc.fixturenames:  # this folder's tests only: a conftest's hook
        names = [OWN] if own_command(metafunc.config) else SERVERS
        metafunc.parametrize("server", names, indirect=True)


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    """The server named by the test's ``server`` parameter, shared by the whole module."""
    name: str = request.param
    if name == OWN:
        with own_server(str(own_command(request.config))) as server:
            yield server
        return
    with running_server(VARIANTS.get(name, (name,))[0], lambda port: command(name, port)) \
            as server:
        yield server
