"""h2spec, the HTTP/2 conformance tool, against every server here that speaks HTTP/2.

h2spec (github.com/summerwind/h2spec, installed by ``scripts/ensure-tools.sh h2spec`` with the
Go toolchain) opens connections and sends frames by hand, valid and invalid, and checks each
answer against RFC 7540 and RFC 7541: its ``generic``, ``http2`` and ``hpack`` sections, run
whole with ``--strict``. It writes a JUnit report, which we read case by case; a case's id is
its section and number (``http2/3.5/2``), as ``h2spec http2/3.5/2`` runs it alone.

Each server runs twice: cleartext with prior knowledge (``h2c``) and over TLS with ALPN
(``h2``). toy-h2 must pass every case in both. What a reference server fails is declared in
``DECLARED`` with the reason, as the conformance suite declares violations: each declared case
is an ``xfail(strict=True)`` test, so a server that starts passing one shows, and any other
failing case fails ``test_h2spec``. With ``--own-server 'COMMAND {port}'`` h2spec runs once,
over cleartext with prior knowledge, against the server that command starts
(``tests/support/own_server.py``), with nothing declared.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.support.own_server import OWN, own_command, own_server
from tests.support.running import HOST, running_server
from toyservers.registry import available

APP = "tests.support.echo_app:app"
SERVERS = [name for name in ("toy-h2", "hypercorn", "granian") if name in available()]
MODES = ("h2c", "tls")
CASE_TIMEOUT = 3  # seconds h2spec waits for an answer (its -o; 2 by default): room for a busy CI
RUN_TIMEOUT = 90  # seconds one whole h2spec run may take

_INVALID_PREFACE = ("answers an invalid connection preface (\"INVALID CONNECTION PREFACE\") as "
                    "a bad HTTP/1.1 request instead of closing (RFC 7540 §3.5: a connection "
                    "error; h2spec expects the TCP connection closed)")
#: (server, mode) -> h2spec case id -> why the server fails it.
DECLARED: dict[tuple[str, str], dict[str, str]] = {
    ("hypercorn", "h2c"): {"http2/3.5/2": _INVALID_PREFACE},
    ("granian", "h2c"): {"http2/3.5/2": _INVALID_PREFACE},
    ("granian", "tls"): {"http2/3.5/2": "even after ALPN chose h2, answers an invalid "
                                        "connection preface with an HTTP/1.1 response instead "
                                        "of closing (RFC 7540 §3.5)"},
}


def find_h2spec() -> str | None:
    """The h2spec binary: on PATH, else where ``go install`` puts it ($GOBIN, $GOPATH/bin)."""
    found = shutil.which("h2spec")
    if found:
        return found
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go",
                                                                        os.X_OK) else None)
    if go is None:
        return None
    for var in ("GOBIN", "GOPATH"):
        out = subprocess.run([go, "env", var], capture_output=True, text=True, timeout=30)
        if out.stdout.strip():
            path = Path(out.stdout.strip()) / ("" if var == "GOBIN" else "bin") / "h2spec"
            if path.is_file():
                return str(path)
    return None


H2SPEC = find_h2spec()
pytestmark = pytest.mark.skipif(
    H2SPEC is None,
    reason="h2spec is not installed: run scripts/ensure-tools.sh h2spec (needs Go: go.dev/dl)")


def parse_report(path: Path) -> dict[str, str | None]:
    """Case id -> None when it passed, else h2spec's message (a skip counts as a failure:
    every case must have run)."""
    cases: dict[str, str | None] = {}
    for suite in ET.parse(path).getroot().iter("testsuite"):
        for number, case in enumerate(suite.iter("testcase"), 1):
            problem = next((child for child in case if child.tag in (
                "failure", "error", "skipped")), None)
            case_id = f"{suite.get('package')}/{number}"
            cases[case_id] = None if problem is None else (
                f"{case.get('classname')}: {problem.tag}: {(problem.text or '').strip()}")
    return cases


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A throwaway certificate for 127.0.0.1 (h2spec is run with -k: it verifies nothing)."""
    workdir = tmp_path_factory.mktemp("h2spec-tls")
    issued = trustme.CA().issue_cert(HOST, "localhost")
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    issued.private_key_and_cert_chain_pem.write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    return str(cert), str(key)


_results: dict[tuple[str, str], dict[str, str | None]] = {}


@pytest.fixture
def results(request: pytest.FixtureRequest, certificate: tuple[str, str],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str | None]]:
    """h2spec's verdict on ``(server, mode)``, run once per session."""
    key = (request.param[0], request.param[1])
    if key not in _results:
        server, mode = key
        report = tmp_path_factory.mktemp(f"h2spec-{server}-{mode}") / "report.xml"
        tls = certificate if mode == "tls" else None
        own = own_command(request.config)
        with (own_server(own) if server == OWN and own else
              running_server(server, app=APP, tls=tls)) as running:
            argv = [str(H2SPEC), "-h", HOST, "-p", str(running.port), "--strict",
                    "-o", str(CASE_TIMEOUT), "-j", str(report)] + (["-t", "-k"] if tls else [])
            done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        assert report.is_file(), f"h2spec wrote no report: {done.stdout[-2000:]}{done.stderr}"
        _results[key] = parse_report(report)
        summary = next((line for line in reversed(done.stdout.splitlines()) if "tests," in line),
                       "no summary line")
        print(f"h2spec {server} {mode}: {summary}")
    yield _results[key]


RUNS = [(server, mode) for server in SERVERS for mode in MODES]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``test_h2spec`` runs once per (server, mode) in RUNS, or once against ``own`` over
    cleartext with ``--own-server``, which leaves the declared failures of the reference
    servers out (tests/support/own_server.py)."""
    own = own_command(metafunc.config) is not None
    if metafunc.function is test_h2spec:
        runs = [(OWN, "h2c")] if own else RUNS
        metafunc.parametrize("results", runs, ids=[f"{s}-{m}" for s, m in runs],
                             indirect=True)
    elif metafunc.function is test_h2spec_declared_failure:
        metafunc.parametrize(("results", "case_id"), [] if own else DECLARED_CASES,
                             indirect=["results"])


def test_h2spec(results: dict[str, str | None], request: pytest.FixtureRequest) -> None:
    """Every case of the three sections passes, except the ones declared for this server."""
    server, mode = request.node.callspec.params["results"]
    sections = {case_id.split("/")[0] for case_id in results}
    assert sections == {"generic", "http2", "hpack"} and len(results) > 100, sorted(sections)
    declared = DECLARED.get((server, mode), {})
    failing = {case_id: why for case_id, why in results.items()
               if why is not None and case_id not in declared}
    assert not failing, f"{server} ({mode}) fails h2spec cases: " + "; ".join(
        f"{case_id} {why}" for case_id, why in sorted(failing.items()))


DECLARED_CASES = [pytest.param((server, mode), case_id, id=f"{server}-{mode}-{case_id}",
                               marks=pytest.mark.xfail(strict=True, reason=why))
                  for (server, mode), cases in DECLARED.items() if server in SERVERS
                  for case_id, why in cases.items()]


def test_h2spec_declared_failure(results: dict[str, str | None], case_id: str) -> None:
    """A case a reference server is declared to fail: xfail while it does (see DECLARED)."""
    assert case_id in results, f"h2spec has no case {case_id}"
    assert results[case_id] is None, results[case_id]
