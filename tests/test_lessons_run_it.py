"""Every command on lesson pages 1 to 6 runs as printed, and prints what the page says.

Each page's commands are cut out of its Markdown (``tests.support.pages``) and run from the
repository's root as a student would after ``make venv``, with the port and ``.venv/bin/``
swapped for this test's: the server command on a free port, then each "Run it" tab (curl,
httpx, raw socket) against it. Where the page shows the output (a ``text`` block after the
command), the output must match it, ``Date`` values and ports aside; where the output holds
timings, the test checks what the page says about them. Lessons 7 and 8 are checked the
same way in ``tests/test_lessons_wsgi_server.py`` and ``tests/test_lessons_workers.py``.
"""

from __future__ import annotations

import shutil

import pytest

from tests.support.pages import blocks, run_tab, same_output, section, started, tabs
from tests.test_lessons import LESSONS

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")


def check_tabs(text: str, port: int) -> dict[str, str]:
    """Run every tab of ``text`` against ``port``; check each against its shown output."""
    printed = {}
    for tab in tabs(text).values():
        printed[tab.name] = out = run_tab(tab.language, tab.code, port)
        if tab.expected is not None:
            same_output(tab.expected, out)
    return printed


# --- lesson 1 ----------------------------------------------------------------------------------

PAGE_1 = LESSONS / "01-bytes-on-a-socket.md"


def test_lesson1_step0a_commands() -> None:
    server_command, client, _silent = blocks(section(PAGE_1, "Step 0a: one client at a time"),
                                             "sh")
    (shown,) = blocks(section(PAGE_1, "Step 0a: one client at a time"), "text")
    with started(server_command) as server:
        same_output(shown, run_tab("sh", client, server.port))


def test_lesson1_step1_curl_command() -> None:
    text = section(PAGE_1, "Step 1: the same on an event loop")
    server_command, curl = blocks(text, "sh")
    (shown,) = blocks(text, "text")
    with started(server_command) as server:
        same_output(shown, run_tab("sh", curl, server.port, returncode=28))  # curl timed out


def test_lesson1_run_it() -> None:
    text = section(PAGE_1, "Run it")
    server_command = blocks(text.split("===", 1)[0], "sh")[0]
    with started(server_command) as server:
        check_tabs(text, server.port)
