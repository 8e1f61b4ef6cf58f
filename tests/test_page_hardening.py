"""The Hardening page: its table is the code's, its commands run as printed, and its worked
request-smuggling example fools the lax parser and no toy server.

- ``lessons/diagrams/hardening-limits.md`` must be what ``lessons/code/hardening/limits_table.py``
  generates from ``toyservers/`` today, and every setting it lists must be read by a server.
- The page's ``sh`` blocks run from the repository's root as printed (``tests.support.pages``:
  ``.venv/bin/`` and port 8000 swapped for this test's), and print what the page shows.
- ``lax_parser.ATTACK`` (CL.TE) is one request to the proxy's reading and two to the lax
  server's, and every toy server answers it with 400 and a close, never reading the request
  smuggled behind it.
"""

from __future__ import annotations

import re

import pytest

from tests.hostile.wire import exchange
from tests.support.hostile_clients import load
from tests.support.pages import ROOT, blocks, run_tab, same_output, section, started
from tests.support.running import running_server
from tests.test_lessons import LESSONS
from toyservers.registry import SERVERS

PAGE = LESSONS / "hardening.md"
CODE = LESSONS / "code" / "hardening"
TOYS = [name for name, spec in SERVERS.items() if spec.kind == "toy"]
APPS = {"asgi": "tests.support.echo_app:app", "wsgi": "tests.support.wsgi_echo_app:app"}


def test_limits_table_is_what_the_code_says() -> None:
    text = section(PAGE, "Every limit and deadline")
    (command,) = blocks(text, "sh")
    (shown,) = blocks(text, "text")
    same_output(shown, run_tab("sh", command, 0))  # --check: exits 1 when the file is stale
    module = load(CODE / "limits_table.py")
    assert module.OUTPUT.read_text() == module.render()
    assert '--8<-- "lessons/diagrams/hardening-limits.md"' in text


def test_every_setting_in_the_table_is_read_by_a_server() -> None:
    """A setting the table lists is one the servers keep: some module but config.py and the
    command line reads ``config.<name>`` (or ``self.config.<name>``)."""
    module = load(CODE / "limits_table.py")
    sources = "\n".join(path.read_text() for path in (ROOT / "toyservers").glob("*.py")
                        if path.name not in ("config.py", "cli.py"))
    settings = [name for name, *_ in module.settings()]
    assert {"timeout_headers", "max_body_size", "limit_concurrency"} <= set(settings)
    unread = [name for name in settings if not re.search(rf"config\.{name}\b", sources)]
    assert not unread, f"settings no server reads: {unread}"
    constants = {name.split(".")[1] for name, *_ in module.constants()}
    assert {"MAX_RESETS", "HIGH_WATER_LIMIT", "SEND_TIMEOUT"} <= constants


def test_a_constant_gets_its_own_comment_not_the_next_ones() -> None:
    """A comment beside a constant goes on in the comment lines under it only when a blank
    line ends them; a block just above the next statement is that statement's."""
    module = load(CODE / "limits_table.py")
    lines = ["A = 1  # beside A", "# above B", "B = 2", "C = 3  # beside C:", "# goes on", "",
             "# --- Serving ---", "D = 4  # beside D", "# --- Serving ---"]
    assert [module.comment_for(lines, n) for n in (1, 3, 4, 8)] == [
        "beside A", "above B", "beside C: goes on", "beside D"]
    rows = {name: comment for name, _, comment in module.constants()}
    assert rows["websocket.MAX_CONTROL_PAYLOAD"].endswith("(§5.5)")
    assert rows["websocket.MAX_SIZE"].startswith("largest message, bytes")


def test_header_map_command_runs_as_printed() -> None:
    text = section(PAGE, "WSGI's header map: `_` poses as `-`")
    (command,) = blocks(text, "sh")
    (shown,) = blocks(text, "text")
    same_output(shown, run_tab("sh", command, 0))


def test_lax_parser_is_fooled() -> None:
    lax = load(CODE / "lax_parser.py")
    assert [line for line, _ in lax.proxy_view(lax.ATTACK)] == ["POST / HTTP/1.1"]
    assert lax.lax_view(lax.ATTACK) == [("POST / HTTP/1.1", b""), ("GET /admin HTTP/1.1", b"")]


@pytest.mark.parametrize("name", TOYS)
def test_every_toy_server_refuses_the_cl_te_request(name: str) -> None:
    """400 with ``Connection: close``, then the close: ``GET /admin`` is never answered."""
    lax = load(CODE / "lax_parser.py")
    with running_server(name, app=APPS[SERVERS[name].interface]) as server:
        result = exchange(server.address, lax.ATTACK, 5.0)
    assert [r.status for r in result.responses] == [400], result.describe()
    assert result.responses[0].closes() and result.closed and not result.rest, result.describe()


def test_smuggling_commands_run_as_printed() -> None:
    text = section(PAGE, "Request smuggling: one CL.TE, worked")
    read_twice, server_command, send = blocks(text, "sh")
    alone, against_toy = blocks(text, "text")
    same_output(alone, run_tab("sh", read_twice, 0))
    with started(server_command) as server:
        same_output(against_toy, run_tab("sh", send, server.port))
