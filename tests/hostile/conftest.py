"""One server process per server per module, started on a free port with the corpus' settings.

Toy servers run through ``launch.py`` (short deadlines, small body limit); uvicorn runs with
its registry command plus ``--timeout-keep-alive``, the one matching flag it has. A toy server
whose module does not exist yet makes its tests error with a clear message (never a skip).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.process import ServerProcess, free_port
from tests.hostile import corpus
from toyservers.registry import get

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.support.echo_app:app"
SERVERS = ["toy-raw", "toy-h11", "toy-httptools", "uvicorn"]


@dataclass
class RunningServer:
    """A started server: its registry ``name``, ``address`` and the process (for its log)."""

    name: str
    address: tuple[str, int]
    process: ServerProcess

    def alive(self) -> bool:
        """True while the server process has not exited."""
        return self.process.proc is not None and self.process.proc.poll() is None

    def log_tail(self) -> str:
        """The last lines the server printed (for assertion messages)."""
        return self.process.log_tail()


def command(name: str, port: int) -> list[str]:
    """argv serving the echo app on ``127.0.0.1:port`` with the corpus' settings."""
    spec = get(name)
    if spec.kind == "toy":
        return [sys.executable, "-m", "tests.hostile.launch", name, APP, str(port)]
    return [*spec.command(APP, "127.0.0.1", port),
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


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    """The server named by the test's ``server`` parameter, shared by the whole module."""
    name: str = request.param
    module = get(name).module
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.fail(f"{name}: module {module} does not exist yet", pytrace=False)
    port = free_port()
    with ServerProcess(command(name, port), port=port, cwd=ROOT) as process:
        yield RunningServer(name, ("127.0.0.1", port), process)
