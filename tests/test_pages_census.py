"""The census: every command on every page is run by some test, so none can drift unseen.

A page's commands are its ``sh`` blocks and the Python client tabs of its "Run it" section
(``=== "httpx"``, ``=== "raw socket"``); the other Python blocks are listings included from
tested files. Blocks of ``bench`` commands alone are run by ``tests/test_page_bench_commands.py``,
which collects them from every page itself. Every other block is run by a test named in
``RUN_BY`` for its page and ``## section``, a test that cuts the block out of the page (see
``tests/support/pages.py``) rather than typing its own copy, so this census checks that each
named test exists and reads that section by its title. A new section with commands fails here
until a test runs them. A new block in a section already claimed fails most claiming tests,
which unpack exactly the blocks they run; not those that read part of a section (lesson 12's
by-hand part) or the first block of each tab, so a block added there needs its test read.

``make test`` on the index is the one command no test runs: it is the suite itself, which CI
runs.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.pages import ROOT, blocks

LESSONS = ROOT / "lessons"

RUN_IT = "test_lessons_run_it.py"
RUN_BY: dict[tuple[str, str], list[str]] = {
    ("01-bytes-on-a-socket.md", "Step 0a: one client at a time"):
        [f"{RUN_IT}::test_lesson1_step0a_commands"],
    ("01-bytes-on-a-socket.md", "Step 1: the same on an event loop"):
        [f"{RUN_IT}::test_lesson1_step1_curl_command"],
    ("01-bytes-on-a-socket.md", "Run it"): [f"{RUN_IT}::test_lesson1_run_it"],
    ("02-wsgi.md", "Run it"): [f"{RUN_IT}::test_lesson2_run_it"],
    ("03-asgi.md", "Run it"): [f"{RUN_IT}::test_lesson3_run_it"],
    ("03-asgi.md", "Exercises"): [f"{RUN_IT}::test_lesson3_exercise_demo_commands"],
    ("03b-event-loop.md", "Step 1: a selector"):
        ["test_lessons_event_loop.py::test_step_commands_run_as_printed"],
    ("03b-event-loop.md", "Step 2: a loop that runs callbacks"):
        ["test_lessons_event_loop.py::test_step_commands_run_as_printed"],
    ("03b-event-loop.md", "Run it"):
        ["test_lessons_event_loop.py::test_run_it_commands_run_as_printed"],
    ("03b-event-loop.md", "Exercises"):
        ["test_lessons_event_loop.py::test_exercise_commands_run_as_printed_against_the_solution"],
    ("04-sans-io.md", "Step 1: bytes in, events out"):
        [f"{RUN_IT}::test_lesson4_scripts_print_what_the_page_shows"],
    ("04-sans-io.md", "The state machine, from h11's tables"):
        [f"{RUN_IT}::test_lesson4_scripts_print_what_the_page_shows"],
    ("04-sans-io.md", "Step 2: h11 on a blocking socket"):
        [f"{RUN_IT}::test_lesson4_step_servers"],
    ("04-sans-io.md", "Step 2b: the loop inside out"): [f"{RUN_IT}::test_lesson4_step_servers"],
    ("04-sans-io.md", "Step 2c: a deadline, a limit, flow control"):
        [f"{RUN_IT}::test_lesson4_step_servers"],
    ("04-sans-io.md", "Run it"): [f"{RUN_IT}::test_lesson4_run_it"],
    ("05-speed.md", "Step 1: the parser calls you"):
        [f"{RUN_IT}::test_lesson5_step1_prints_what_the_page_shows"],
    ("05-speed.md", "Step 2: the same server on two loops"):
        [f"{RUN_IT}::test_lesson5_step2_on_either_loop"],
    ("05-speed.md", "Step 2b: lesson 4's server on llhttp"):
        [f"{RUN_IT}::test_lesson5_step2b_commands_and_highlights"],
    ("05-speed.md", "Step 2c: what llhttp does not bound"):
        [f"{RUN_IT}::test_lesson5_step2c_commands"],
    ("05-speed.md", "Run it"): [f"{RUN_IT}::test_lesson5_run_it"],
    ("05-speed.md", "The bare baseline: the price of correctness"):
        [f"{RUN_IT}::test_lesson5_bare_commands"],
    ("06-cost-of-layers.md", "Run it"): [f"{RUN_IT}::test_lesson6_run_it"],
    ("06-cost-of-layers.md", "Exercises"):
        [f"{RUN_IT}::test_lesson6_exercise_command_runs_as_printed_with_the_solution"],
    ("07-wsgi-server.md", "Step 3b: a deadline, a limit, and a bound on a stalled send"):
        ["test_lessons_wsgi_server.py::test_step3b_commands_run_as_printed"],
    ("07-wsgi-server.md", "toy-wsgi: the same design, grown up"):
        ["test_lessons_wsgi_server.py::test_toy_wsgi_commands_run_as_printed"],
    ("07-wsgi-server.md", "Run it"):
        ["test_lessons_wsgi_server.py::test_run_it_commands_run_as_printed"],
    ("07-wsgi-server.md", "Try the real models"):
        ["test_lessons_wsgi_server.py::test_try_the_real_models_command_runs_as_printed"],
    ("08-workers.md", "Run it"):
        ["test_lessons_workers.py::test_run_it_toyserve_command_runs_as_printed",
         "test_lessons_workers.py::test_run_it_signal_commands_run_as_printed_one_line_at_a_time"],
    ("09-structured-concurrency.md", "Run it"):
        ["test_lessons_structured.py::test_run_it_commands_run_as_printed"],
    ("10-http2.md", "Step 2: a deadline, a limit, flow control"):
        ["test_lessons_h2.py::test_step2_commands_run_as_printed"],
    ("10-http2.md", "Run it"): ["test_lessons_h2.py::test_run_it_commands_run_as_printed"],
    ("10-http2.md", "Early Hints and trailers, on the wire"): [
        "test_lessons_hints.py::test_commands_run_as_printed"],
    ("11-servers-under-load.md", "Run it"):
        ["test_lessons_servers.py::test_run_it_commands_run_as_printed"],
    ("12-blocking-and-workers.md", "Exercise"):
        ["test_bench_workers.py::test_exercise_command_runs_as_printed_with_the_solution"],
    ("12-blocking-and-workers.md", "Run it"):
        ["test_bench_workers.py::test_run_it_by_hand_commands_run_as_printed"],
    ("13-websocket.md", "The opening handshake by hand"):
        ["test_lessons_ws.py::test_handshake_prints_what_the_page_shows"],
    ("13-websocket.md", "One frame, byte by byte"):
        ["test_lessons_ws.py::test_frame_commands_print_what_the_page_shows"],
    ("13-websocket.md", "Run it"): ["test_lessons_ws.py::test_run_it_commands_run_as_printed"],
    ("14-behind-a-proxy.md", "Why a proxy in front of a sync worker"):
        ["test_lessons_proxy.py::test_the_slow_client_holds_the_sync_worker_but_not_nginx"],
    ("14-behind-a-proxy.md", "Run it"):
        ["test_lessons_proxy.py::test_run_it_commands_run_as_printed"],
    ("14-behind-a-proxy.md", "Where 502 and 504 come from"):
        ["test_lessons_proxy.py::test_the_timeouts_command_prints_what_the_page_shows"],
    ("hardening.md", "Every limit and deadline"):
        ["test_page_hardening.py::test_limits_table_is_what_the_code_says"],
    ("hardening.md", "WSGI's header map: `_` poses as `-`"):
        ["test_page_hardening.py::test_header_map_command_runs_as_printed"],
    ("hardening.md", "Request smuggling: one CL.TE, worked"):
        ["test_page_hardening.py::test_smuggling_commands_run_as_printed"],
    ("test-your-own-server.md", "The hostile corpus"):
        ["test_page_own_server.py::test_hostile_corpus_commands_run_as_printed",
         "test_page_own_server.py::test_fix_one_changes_the_outcomes_the_page_names"],
    ("test-your-own-server.md", "Fix one"):
        ["test_page_own_server.py::test_fix_one_changes_the_outcomes_the_page_names"],
    ("test-your-own-server.md", "The conformance suite"):
        ["test_page_own_server.py::test_conformance_suite_command_runs_as_printed"],
    ("test-your-own-server.md", "h2spec"):
        ["test_page_own_server.py::test_h2spec_commands_run_as_printed"],
    ("index.md", "How to run the code"):
        [f"{RUN_IT}::test_index_commands", f"{RUN_IT}::test_index_make_commands_run_as_printed"],
    ("workshop.md", "Setup, for every student (no root)"):
        ["test_workshop.py::test_setup_commands_run_as_printed"],
    ("workshop.md", "Setup that needs root: the tools"):
        ["test_workshop.py::test_root_only_commands_run_as_printed"],
    ("workshop.md", "Timetable: two full days"):
        ["test_workshop.py::test_root_only_commands_run_as_printed"],
    ("workshop.md", "Offline: a classroom without internet"):
        ["test_workshop.py::test_offline_setup_runs_as_printed_with_no_index_reachable"],
}


def is_bench(block: str) -> bool:
    """A block of ``bench`` commands only (``.venv/bin/bench ...``, ``make bench ARGS=...``)."""
    lines = [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    return all(re.match(r"(\.venv/bin/bench|make bench) ", line) for line in lines)


def command_sections() -> dict[tuple[str, str], list[str]]:
    """(page, section title) -> the section's command blocks that are not ``bench`` alone."""
    found: dict[tuple[str, str], list[str]] = {}
    for page in sorted(LESSONS.glob("*.md")):
        parts = re.split(r"^## (.+)\n", page.read_text(), flags=re.M)
        for title, text in zip(parts[1::2], parts[2::2], strict=True):
            commands = blocks(text, "sh")
            if title == "Run it":  # the Python client tabs; elsewhere Python blocks are listings
                commands += blocks(text, "python")
            commands = [block for block in commands if not is_bench(block)]
            if commands:
                found[(page.name, title)] = commands
        assert not blocks(parts[0], "sh"), f"{page.name}: a command above the first section"
    return found


def test_every_section_with_commands_is_claimed_by_a_test() -> None:
    found = command_sections()
    unclaimed = sorted(set(found) - set(RUN_BY))
    assert not unclaimed, f"commands no test runs (add a test and a RUN_BY entry): {unclaimed}"
    stale = sorted(set(RUN_BY) - set(found))
    assert not stale, f"RUN_BY names sections without commands: {stale}"


@pytest.mark.parametrize(("page", "title"), sorted(RUN_BY), ids=[f"{p}:{t}" for p, t in
                                                                   sorted(RUN_BY)])
def test_each_claiming_test_exists_and_reads_its_section(page: str, title: str) -> None:
    for node in RUN_BY[(page, title)]:
        module, name = node.split("::")
        tree = ast.parse((ROOT / "tests" / module).read_text())
        functions = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
        assert name in functions, f"{node} does not exist"
        strings = {c.value for c in ast.walk(functions[name]) if isinstance(c, ast.Constant)}
        assert title in strings or any(title in s for s in strings if isinstance(s, str)), (
            f"{node} never names the section {title!r}: does it read the page?")


def test_make_test_is_the_one_command_left_to_ci() -> None:
    lines = [line.split("#")[0].strip() for block in command_sections()[("index.md",
             "How to run the code")] for line in block.splitlines()]
    assert "make test" in lines
    assert Path(ROOT / ".ci" / "run").read_text().count("make test") >= 1
