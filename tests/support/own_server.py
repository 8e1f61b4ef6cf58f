"""Your own server under the project's suites: ``--own-server 'COMMAND {port}'``.

The hostile corpus (``tests/hostile/test_hostile.py``), the conformance suite
(``tests/conformance``) and h2spec (``tests/test_h2spec.py``) run against the registry's
servers. Given ``--own-server`` (or ``OWN_SERVER`` in the environment) they run against one
server started by that command instead, named ``own`` in the test ids: a student's server, one
of the lesson steps, anything that listens on ``127.0.0.1`` at the port it is given.

The command is split as a shell would (``shlex``), run from the repository's root, with
``{port}`` replaced by a free port; leading ``NAME=value`` words set environment variables, as
in a shell (``KEEP_ALIVE_SECONDS=1 .venv/bin/python my_server.py {port}``). The server must
accept connections within ``STARTUP_TIMEOUT`` seconds; it is stopped, with the processes it
started, at the end.

What each suite checks on it (the lessons' "Test your own server" page walks through them):

- hostile (``tests/hostile/test_hostile.py``): every case and slow-client test. An accepted
  case's response must be a 200 (and ``NEXT``'s after it), but its body is not read as the
  echo app's JSON: the app is yours. ``test_findings.py`` beside it needs the project's apps
  and runs on the registry's servers whatever the option says: select ``test_hostile.py``.
- conformance: the tests of ``support.WIRE_FEATURES`` only, the ones any server that answers
  ``GET`` with 200 can be checked on; the others need the suite's ASGI app and are skipped
  with that reason.
- h2spec: its ``generic``, ``http2`` and ``hpack`` sections over cleartext (prior knowledge).
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.process import ServerProcess, free_port
from tests.support.running import HOST, ROOT, STARTUP_TIMEOUT, RunningServer
from tests.support.suite import option

OWN = "own"  # the name the own server goes by in test ids and reports
OPTION = "--own-server"
ENV = "OWN_SERVER"


def add_option(parser: pytest.Parser) -> None:
    """Register ``--own-server`` (tests/conftest.py calls this)."""
    parser.addoption(OPTION, default=None, metavar="COMMAND",
                     help="run the hostile corpus, the conformance suite and h2spec against the "
                          "server this command starts ('{port}' is replaced by a free port); "
                          f"or set {ENV}")


def own_command(config: pytest.Config) -> str | None:
    """The ``--own-server`` command (else ``OWN_SERVER``), or None when neither is given.

    Raises:
        pytest.UsageError: the command has no ``{port}`` to fill in.
    """
    command = option(config, "own_server", ENV)
    if not command:
        return None
    if "{port}" not in command:
        raise pytest.UsageError(f"{OPTION} needs '{{port}}' in its command: {command!r}")
    return command


def argv_and_env(command: str, port: int) -> tuple[list[str], dict[str, str]]:
    """The command's words with ``{port}`` filled in, and the ``NAME=value`` words before the
    program as environment variables."""
    words = shlex.split(command.replace("{port}", str(port)))
    env = {}
    while words and "=" in words[0] and not words[0].startswith(("/", ".")):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words:
        raise pytest.UsageError(f"{OPTION}: no program in {command!r}")
    return words, env


@contextlib.contextmanager
def own_server(command: str, log_path: Path | None = None) -> Iterator[RunningServer]:
    """Start ``command`` on a free port of 127.0.0.1, wait until it accepts, stop it after.

    Raises:
        bench.process.ServerStartError: the server exited or never listened.
    """
    port = free_port(HOST)
    argv, env = argv_and_env(command, port)
    process = ServerProcess(argv, host=HOST, port=port, cwd=ROOT, env=env,
                            startup_timeout=STARTUP_TIMEOUT, log_path=log_path)
    process.start()
    try:
        yield RunningServer(OWN, process)
    finally:
        process.stop()
