"""``bench`` off Linux: macOS has neither ``os.sched_getaffinity`` nor
``os.sched_setaffinity``, so there ``bench`` runs unpinned with a one-line note instead of
failing. Each test removes both from ``os`` and runs the code that used to call them.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from bench import wrk
from bench.harness import Method, decide_pinning, kept_on
from bench.machine import usable_cpus
from bench.process import ServerProcess, free_port


@pytest.fixture
def no_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    """What macOS's ``os`` looks like: neither affinity call."""
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)


@pytest.mark.usefixtures("no_affinity")
def test_without_affinity_every_cpu_is_usable_and_pinning_is_off_with_a_note() -> None:
    assert usable_cpus() == list(range(os.cpu_count() or 1))
    pinning = decide_pinning(Method(), [0, 1])
    assert (pinning.server_cpu, pinning.load_cpu) == (None, None)
    assert pinning.text.startswith("not pinned: this system cannot pin a process to a CPU")
    with kept_on(1):  # leaves this process where it was, without a word
        pass


@pytest.mark.usefixtures("no_affinity")
def test_without_affinity_a_server_asked_to_pin_still_starts(tmp_path: Path) -> None:
    port = free_port()
    code = (f"import socket, time; s = socket.create_server(('127.0.0.1', {port})); "
            "time.sleep(60)")
    with ServerProcess([sys.executable, "-c", code], port=port, cpu=0,
                       log_path=tmp_path / "log") as server:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        assert server.proc is not None and server.proc.poll() is None


@pytest.mark.usefixtures("no_affinity")
def test_without_affinity_wrk_asked_to_pin_still_runs(tmp_path: Path) -> None:
    # a stand-in for wrk: writes the summary the Lua done() hook would
    fake = tmp_path / "wrk.py"
    fake.write_text(
        "import json, os\n"
        "summary = {'requests': 1, 'duration_us': 1, 'bytes': 1, 'errors': {k: 0 for k in "
        "('connect', 'read', 'write', 'status', 'timeout')}, 'latency_us': {k: 1 for k in "
        "('min', 'mean', 'max', 'stdev', 'p50', 'p90', 'p99', 'p99.9')}}\n"
        "open(os.environ['BENCH_WRK_JSON'], 'w').write(json.dumps(summary))\n")
    summary = wrk.run_wrk([sys.executable, str(fake), "--duration", "1s"], body=b"{}", cpu=0)
    assert summary.requests == 1
