"""Run the conformance suite once per ASGI server: selection, fixtures, xfail table, report.

- Servers: ``--conformance-servers A,B`` or ``CONFORMANCE_SERVERS=A,B``; by default every
  registered ASGI server that is installed (``toyservers.registry.available``). Tests that use
  the ``server`` fixture are parametrized over them (one process per server per session).
  ``--own-server 'COMMAND {port}'`` runs one server of your own instead, named ``own``, on
  the tests of ``support.WIRE_FEATURES`` (the others need the suite's app: skipped).
- Features: every test carries ``@pytest.mark.feature(name)`` with a name from
  ``support.FEATURES``; an untagged or unknown name is a usage error. A (server, feature) pair
  listed in ``support.UNSUPPORTED`` becomes ``xfail(strict=True)`` with the reason.
- Report: ``--conformance-report PATH`` (or ``CONFORMANCE_REPORT``) writes JSON
  ``{"features": [name, ...], "records": [record, ...]}``, one record per test:
  ``{"nodeid", "server", "feature", "outcome", "message"}`` with outcome one of ``passed``,
  ``failed``, ``error``, ``xfailed``, ``violation`` (a declared breach, see
  ``support.VIOLATIONS``), ``skipped``; the message is the failure's first line or
  the declared reason. The Autobahn test's record also has ``autobahn``: ``{"cases": [case
  patterns], "exclude": [case patterns left out], "counts": {behavior: n}, "not_ok": {case id:
  behavior}}``. ``bench conformance``
  builds the matrix from it.
- Slow behaviours (keep-alive idle timeout, slow headers) are probed in background threads
  started with the server, so their bounded waits overlap the other tests.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.conformance import apps, support
from tests.support.own_server import OWN, own_command, own_server
from tests.support.running import RunningServer, running_server
from tests.support.suite import option, record_outcome
from toyservers.registry import SERVERS, available

APP = "tests.conformance.apps:app"
IDLE_BOUND = 8.0  # seconds an idle keep-alive connection may stay open (uvicorn closes at 5)
SLOW_HEADERS_BOUND = 13.0  # seconds a trickled header block may last (toy servers: 10)
TRICKLE_INTERVAL = 0.5  # seconds between the bytes of a trickled header block

_records: dict[str, dict[str, Any]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance")
    group.addoption("--conformance-servers", default=None,
                    help="comma-separated registry names to run the conformance suite on")
    group.addoption("--conformance-report", default=None,
                    help="write each conformance test's outcome to this JSON file")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "feature(name): the conformance feature a test checks (support.FEATURES)"
    )



def selected_servers(config: pytest.Config) -> list[str]:
    """The servers to run on (``own`` alone with ``--own-server``); pytest.UsageError for a
    name the registry does not know."""
    if own_command(config):
        return [OWN]
    raw = option(config, "conformance_servers", "CONFORMANCE_SERVERS")
    names = [name.strip() for name in raw.split(",") if name.strip()]
    if not names:
        return available()
    unknown = [name for name in names if name not in SERVERS]
    if unknown:
        raise pytest.UsageError(f"unknown conformance servers: {', '.join(unknown)}")
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "server_name" in metafunc.fixturenames:
        names = selected_servers(metafunc.config)
        metafunc.parametrize("server_name", names, scope="session", ids=names)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees every item of the session, not only this folder's: other suites may
    # name a parameter server_name too.
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
                                    "name from tests/conformance/support.py FEATURES")
        server, feature = callspec.params["server_name"], marker.args[0]
        if server == OWN and feature not in support.WIRE_FEATURES:
            item.add_marker(pytest.mark.skip(reason=f"{feature}: needs the suite's ASGI app "
                                                    "(tests/conformance/apps.py)"))
            continue
        reason = support.unsupported_reason(server, feature)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))
        case = callspec.id.removeprefix(server).removeprefix("-")
        violation = support.violation_reason(server, getattr(item, "originalname", ""), case)
        if violation is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"violation: {violation}"))
        item.user_properties.append(("conformance_server", server))
        item.user_properties.append(("conformance_feature", feature))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    props = dict(report.user_properties)
    if "conformance_server" not in props:
        return
    record_outcome(_records, report, str(props["conformance_server"]),
                   str(props["conformance_feature"]))
    if "autobahn" in props:  # test_websocket.py's Autobahn counts, for the matrix's table
        _records[report.nodeid]["autobahn"] = props["autobahn"]


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = option(session.config, "conformance_report", "CONFORMANCE_REPORT")
    if path:
        report = {"features": support.FEATURES, "records": list(_records.values())}
        Path(path).write_text(json.dumps(report, indent=1))


# --- servers -----------------------------------------------------------------------------------


class Probe:
    """Runs ``fn`` in a daemon thread; ``result(timeout)`` returns its value or re-raises."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as exc:  # handed to the test that reads the result
            self._error = exc

    def result(self, timeout: float) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"probe still running after {timeout:g} s")
        if self._error is not None:
            raise self._error
        return self._value


@dataclass
class IdleResult:
    """Keep-alive idle probe: did the server close an idle connection, after how long (s)."""

    first_status: int
    closed: bool
    seconds: float


@dataclass
class SlowHeadersResult:
    """Slow-headers probe: closed or not, after how long (s), what the server sent first."""

    closed: bool
    seconds: float
    sent: bytes


def idle_probe(port: int) -> IdleResult:
    """One request, then silence: time until the server closes (at most IDLE_BOUND s)."""
    with support.Connection(port) as conn:
        conn.send(support.request("GET", "/length"))
        response = conn.read_response()
        assert response is not None and response.complete
        start = time.monotonic()
        closed = conn.closed_within(IDLE_BOUND)
        return IdleResult(response.status, closed, time.monotonic() - start)


def slow_headers_probe(port: int) -> SlowHeadersResult:
    """A header block trickled one byte every TRICKLE_INTERVAL s, never finished."""
    with support.Connection(port) as conn:
        start = time.monotonic()
        conn.send(b"GET /length HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Trickle: ")
        while time.monotonic() - start < SLOW_HEADERS_BOUND:
            if conn.closed_within(TRICKLE_INTERVAL):
                return SlowHeadersResult(True, time.monotonic() - start, conn.buffer)
            try:
                conn.send(b"a")
            except OSError:
                return SlowHeadersResult(True, time.monotonic() - start, conn.buffer)
        return SlowHeadersResult(False, time.monotonic() - start, conn.buffer)


@dataclass
class ConformanceServer(RunningServer):
    """A server process serving ``apps:app``, with the probes started alongside it."""

    lifespan_file: Path
    probes: dict[str, Probe] = field(default_factory=dict)


@contextlib.contextmanager
def conformance_server(name: str, workdir: Path, *, tls: tuple[str, str] | None = None,
                       own: str | None = None) -> Iterator[ConformanceServer]:
    """``name`` serving the conformance app on a free port (tests/support/running.py), with
    the lifespan record file in ``workdir``; ``tls`` is a ``(certfile, keyfile)`` pair: serve
    HTTPS. ``name`` ``own`` runs the ``--own-server`` command ``own`` instead (its own app:
    only ``support.WIRE_FEATURES`` run). Raises bench.process.ServerStartError."""
    lifespan_file = workdir / "lifespan.txt"
    lifespan_file.write_text("")
    if name == OWN:
        assert own is not None, "the own server needs its command"
        with own_server(own, log_path=workdir / "server.log") as running:
            yield ConformanceServer(name, running.process, lifespan_file)
        return
    with running_server(name, app=APP, tls=tls, env={apps.LIFESPAN_FILE_ENV: str(lifespan_file)},
                        log_path=workdir / "server.log") as running:
        yield ConformanceServer(name, running.process, lifespan_file)


@pytest.fixture(scope="session")
def server(server_name: str, tmp_path_factory: pytest.TempPathFactory,
           request: pytest.FixtureRequest) -> Iterator[ConformanceServer]:
    """The shared server process for ``server_name`` (one per session), probes running."""
    workdir = tmp_path_factory.mktemp(f"conformance-{server_name}")
    own = own_command(request.config)
    with conformance_server(server_name, workdir, own=own) as running:
        running.probes["idle"] = Probe(lambda: idle_probe(running.port))
        running.probes["slow-headers"] = Probe(lambda: slow_headers_probe(running.port))
        yield running


@dataclass
class TLSServer(RunningServer):
    """A second process of the same server, serving HTTPS with a certificate for 127.0.0.1
    from a throwaway CA; ``client_context`` trusts that CA."""

    client_context: ssl.SSLContext
    server_cert: str  # the PEM certificate the server presents


@pytest.fixture(scope="session")
def tls_server(server_name: str, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[TLSServer]:
    """``server_name`` serving HTTPS (one process per session, started on first use)."""
    workdir = tmp_path_factory.mktemp(f"conformance-tls-{server_name}")
    ca = trustme.CA()
    issued = ca.issue_cert(support.HOST, "localhost")
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    for extra in issued.cert_chain_pems[1:]:
        extra.write_to_path(str(cert), append=True)
    issued.private_key_pem.write_to_path(str(key))
    context = ssl.create_default_context()
    ca.configure_trust(context)
    with conformance_server(server_name, workdir, tls=(str(cert), str(key))) as running:
        yield TLSServer(server_name, running.process, context,
                        issued.cert_chain_pems[0].bytes().decode("ascii"))
