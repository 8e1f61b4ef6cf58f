"""Run the WSGI conformance suite once per WSGI server: selection, fixtures, xfails, report.

The ASGI suite's machinery (``tests/conformance/conftest.py``), for WSGI servers:

- Servers: ``--wsgi-conformance-servers A,B`` or ``WSGI_CONFORMANCE_SERVERS=A,B``; by default
  every registered WSGI server that is installed (``available(interface="wsgi")``): toy-wsgi
  and toy-wsgi-gthread, gunicorn and gunicorn-gthread, waitress, wsgiref. Tests using the
  ``server`` fixture are parametrized over them (one process per server per session).
- Features: every test carries ``@pytest.mark.feature(name)`` with a name from
  ``support.FEATURES``; a (server, feature) pair in ``support.UNSUPPORTED`` becomes
  ``xfail(strict=True)`` with the reason, and so does a test listed in ``support.VIOLATIONS``
  or ``support.TOY_BUGS`` (reported as ``violation``).
- Slow behaviours (the keep-alive idle timeout) are probed in a background thread started
  with the server, as in the ASGI suite, so the bounded wait overlaps the other tests.
- Report: ``--wsgi-conformance-report PATH`` (or ``WSGI_CONFORMANCE_REPORT``) writes the ASGI
  suite's JSON shape, ``{"features": [...], "records": [...]}``; ``bench conformance`` builds
  the WSGI matrix from it.

A single-threaded server (toy-wsgi's sync worker, gunicorn's, wsgiref) serves one connection
at a time, so every test sends its whole request at once and closes its connections: a
client left silent would hold the only thread until the server's own timeout.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conformance.conftest import Probe, idle_probe
from tests.conformance_wsgi import support
from tests.support.running import RunningServer, running_server
from tests.support.suite import option, record_outcome
from toyservers.registry import SERVERS, available

APP = "tests.conformance_wsgi.apps:app"
_SERVER, _FEATURE = "wsgi_conformance_server", "wsgi_conformance_feature"
_records: dict[str, dict[str, str]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("wsgi conformance")
    group.addoption("--wsgi-conformance-servers", default=None,
                    help="comma-separated registry names to run the WSGI conformance suite on")
    group.addoption("--wsgi-conformance-report", default=None,
                    help="write each WSGI conformance test's outcome to this JSON file")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "feature(name): the conformance feature a test checks (support.FEATURES)"
    )



def selected_servers(config: pytest.Config) -> list[str]:
    """The servers to run on; pytest.UsageError for a name that is not a WSGI server."""
    raw = option(config, "wsgi_conformance_servers", "WSGI_CONFORMANCE_SERVERS")
    names = [name.strip() for name in raw.split(",") if name.strip()]
    if not names:
        return available(interface="wsgi")
    wrong = [name for name in names if name not in SERVERS or SERVERS[name].interface != "wsgi"]
    if wrong:
        raise pytest.UsageError(f"not WSGI servers: {', '.join(wrong)}")
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "server_name" in metafunc.fixturenames:
        names = selected_servers(metafunc.config)
        metafunc.parametrize("server_name", names, scope="session", ids=names)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Every item of the session passes here: only this folder's are ours.
    here = Path(__file__).parent
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or "server_name" not in callspec.params:
            continue
        if not item.path.is_relative_to(here):
            continue
        marker = item.get_closest_marker("feature")
        if marker is None or not marker.args or marker.args[0] not in support.FEATURES:
            raise pytest.UsageError(f"{item.nodeid}: needs @pytest.mark.feature(<name>) with a "
                                    "name from tests/conformance_wsgi/support.py FEATURES")
        server, feature = callspec.params["server_name"], marker.args[0]
        # A declared breach first: its reason is the one reported when a test is in both
        # tables (a MUST broken inside a feature the server does not offer is still a fail).
        case = callspec.id.removeprefix(server).removeprefix("-")
        violation = support.violation_reason(server, getattr(item, "originalname", ""), case)
        if violation is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"violation: {violation}"))
        reason = support.unsupported_reason(server, feature)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))
        item.user_properties.append((_SERVER, server))
        item.user_properties.append((_FEATURE, feature))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    props = dict(report.user_properties)
    if _SERVER not in props:
        return
    record_outcome(_records, report, str(props[_SERVER]), str(props[_FEATURE]))


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = option(session.config, "wsgi_conformance_report", "WSGI_CONFORMANCE_REPORT")
    if path:
        report = {"features": support.FEATURES, "records": list(_records.values())}
        Path(path).write_text(json.dumps(report, indent=1))


@dataclass
class WSGIServer(RunningServer):
    """A server process serving ``apps:app``, with the slow probes started alongside it."""

    probes: dict[str, Probe] = field(default_factory=dict)


@pytest.fixture(scope="session")
def server(server_name: str, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[WSGIServer]:
    """The shared server process for ``server_name`` (one per session), probes running: the
    ASGI suite's keep-alive idle probe (a request, then silence, up to IDLE_BOUND s), whose
    wait overlaps the other tests. (No slow-headers probe: on a one-thread server a trickled
    head would hold the only thread, and every other test with it.)"""
    workdir = tmp_path_factory.mktemp(f"conformance-wsgi-{server_name}")
    with running_server(server_name, app=APP, log_path=workdir / "server.log") as running:
        started = WSGIServer(server_name, running.process)
        started.probes["idle"] = Probe(lambda: idle_probe(started.port))
        yield started
