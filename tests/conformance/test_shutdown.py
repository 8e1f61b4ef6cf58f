"""Graceful shutdown: SIGTERM while a slow request is in flight; then lifespan shutdown.

Each server gets a fresh process for this module (the shared one must keep serving): a request
to ``/slow`` (SLOW_MS) is started, the test waits until the app has it, sends SIGTERM to the
server's main process, and records whether the response still arrives whole and whether the
app's lifespan shutdown ran before the process exited.

Spec: ASGI Lifespan spec 2.0 (``lifespan.shutdown`` after the server stops serving); issue 3
(graceful shutdown on SIGINT/SIGTERM finishes in-flight requests).
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.conformance.conftest import conformance_server
from tests.conformance.support import Connection, Response, poll, request

feature = pytest.mark.feature

SLOW_MS = 1500
EXIT_WAIT = 15.0  # seconds the server gets to exit after SIGTERM


@dataclass
class ShutdownResult:
    """What one SIGTERM-during-a-request run observed."""

    response: Response | None
    error: str
    exit_code: int | None
    lifespan: list[str]
    log: str


@pytest.fixture(scope="module")
def shutdown_run(server_name: str, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[ShutdownResult]:
    workdir = tmp_path_factory.mktemp(f"shutdown-{server_name}")
    key = f"graceful-{time.monotonic_ns()}"
    response: Response | None = None
    error = ""
    exit_code: int | None = None
    with conformance_server(server_name, workdir) as running:
        process, lifespan_file = running.process, running.lifespan_file
        with Connection(process.port, timeout=10.0) as conn:
            conn.send(request("GET", f"/slow?ms={SLOW_MS}&key={key}"))
            started = poll(process.port, f"/status?key={key}", lambda v: v["status"] != "")
            assert started == {"status": "started"}, f"slow request never started: {started}"
            assert process.proc is not None
            process.proc.send_signal(signal.SIGTERM)
            try:
                response = conn.read_response()
            except OSError as exc:
                error = repr(exc)
        try:
            exit_code = process.proc.wait(timeout=EXIT_WAIT)
        except subprocess.TimeoutExpired:
            error = error or f"still running {EXIT_WAIT:g} s after SIGTERM"
        yield ShutdownResult(response, error, exit_code, lifespan_file.read_text().splitlines(),
                             process.log_tail())


@feature("graceful-shutdown")
def test_in_flight_request_finishes_after_sigterm(shutdown_run: ShutdownResult) -> None:
    response = shutdown_run.response
    assert response is not None, f"no response: {shutdown_run.error}\n{shutdown_run.log}"
    assert response.complete and response.status == 200 and response.body == b"slow done"
    assert shutdown_run.exit_code is not None, shutdown_run.error


@feature("lifespan")
def test_lifespan_shutdown_runs_on_sigterm(shutdown_run: ShutdownResult) -> None:
    assert shutdown_run.lifespan == ["startup", "shutdown"]
