"""Lesson 3b (the event loop): its step servers, its "Run it" commands and its transcript.

- Each step under ``lessons/code/03b-event-loop/`` runs as a subprocess on a free port and is
  sent real requests; steps 2 and 3 must answer ``/fast`` while ``/slow`` waits.
- Step 2's ``Loop`` is also driven directly: timers in order, cancelled ones skipped.
- "Run it" and the exercise's commands run as printed (``tests.support.pages``: a free port in
  place of 8000, this interpreter's directory in place of ``.venv/bin/``).
- The transcript on the page is captured here from step 3 (``UPDATE_TRANSCRIPTS=1`` rewrites).
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from tests.support.pages import (
    blocks,
    check_server_section,
    run_tab,
    same_output,
    section,
    started,
    tabs,
)
from tests.test_lessons import (
    TIMEOUT,
    exchange,
    render,
    slow_state_when_fast_is_done,
    split,
    step,
    wait_for_log,
    without_date,
)

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "lessons" / "03b-event-loop.md"
CODE = ROOT / "lessons" / "code" / "03b-event-loop"
TRANSCRIPT = ROOT / "lessons" / "transcripts" / "03b-coroutines-fast.txt"
PEAK = re.compile(r"GET /big\?mib=4: 4194304 bytes, writing paused (\d+) times, "
                  r"write buffer peaked at (\d+) bytes")


def test_step1_selector_serves_many_connections_in_one_thread() -> None:
    with step("03b-event-loop/step1_selectors.py") as server:
        status, headers, body = split(exchange(server, b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"))
        assert (status, body) == (200, b"you asked for GET /hello HTTP/1.1\n")
        assert headers["connection"] == "close"
        # twenty clients connected at once, heads sent last-first: each gets its own answer
        socks = [socket.create_connection((server.host, server.port), timeout=TIMEOUT)
                 for _ in range(20)]
        for i, sock in reversed(list(enumerate(socks))):
            sock.sendall(f"GET /{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        for i, sock in enumerate(socks):
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
            sock.close()
            assert answer.endswith(f"GET /{i} HTTP/1.1\n".encode()), answer
        # a head that never ends is dropped, and the server goes on
        assert exchange(server, b"GET / HTTP/1.1\r\nX: " + b"a" * 10_000) == b""
        assert httpx.get(f"{server.url}/again", timeout=TIMEOUT).status_code == 200


@pytest.mark.parametrize("relpath", ["step2_callbacks.py", "step3_coroutines.py"])
def test_slow_does_not_hold_fast_back(relpath: str) -> None:
    with step(f"03b-event-loop/{relpath}", env={"SLOW_SECONDS": "1"}) as server:
        assert httpx.get(f"{server.url}/fast", timeout=TIMEOUT).text == "fast\n"
        assert slow_state_when_fast_is_done(server) == "pending"
        assert httpx.get(f"{server.url}/slow", timeout=TIMEOUT).text == "slow\n"


def load_step2() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lesson3b_step2", CODE / "step2_callbacks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_step2_loop_runs_timers_in_order_and_skips_cancelled_ones() -> None:
    loop = load_step2().Loop()
    ran: list[str] = []
    loop.call_later(0.02, ran.append, "later")
    loop.call_later(0.01, ran.append, "sooner")
    loop.call_later(0.01, ran.append, "sooner, second").cancel()
    loop.call_soon(ran.append, "soon")
    loop.run_once()  # nothing due yet: only call_soon runs, select() does not wait
    assert ran == ["soon"]
    while len(ran) < 3:
        loop.run_once()  # select() sleeps until the next timer: no busy loop, no test sleep
    assert ran == ["soon", "sooner", "later"]
    assert loop.timers == []


# --- every command, as printed ------------------------------------------------------------------


def template(shown: str) -> re.Pattern[str]:
    """A shown output line with ``N`` and ``M`` standing for counts: the pattern it promises."""
    parts = re.split(r"\b[NM]\b", shown.strip())
    return re.compile(r"(\d+)".join(re.escape(part) for part in parts) + r"\n?")


@pytest.mark.parametrize("title", ["Step 1: a selector", "Step 2: a loop that runs callbacks"])
def test_step_commands_run_as_printed(title: str) -> None:
    check_server_section(PAGE, title)


# --- "Run it", as printed ---------------------------------------------------------------------


def test_run_it_commands_run_as_printed() -> None:
    text = section(PAGE, "Run it")
    head, tail = text.split("===", 1)[0], text.rsplit("\n    ```\n", 1)[1]
    (serve3,), (serve4, download) = blocks(head, "sh"), blocks(tail, "sh")
    shown_size, shown_log = blocks(tail, "text")
    run_it = tabs(text)
    with started(serve3) as server:
        out = run_tab("sh", run_it["curl"].code, server.port)
        assert out.splitlines()[0] == "fast" and out.splitlines()[-1] == "slow", out
        out = run_tab("python", run_it["httpx"].code, server.port)
        times = re.findall(r"^/(fast|slow): \1 after (\d+\.\d) s$", out, re.MULTILINE)
        fast = [float(t) for path, t in times if path == "fast"]
        slow = [float(t) for path, t in times if path == "slow"]
        assert len(fast) == 5 and len(slow) == 1 and slow[0] >= 2.0, out
        assert max(fast) < slow[0] - 1.0, f"/fast waited for /slow: {out}"
        out = run_tab("python", run_it["raw socket"].code, server.port)  # timing: above
        assert out.count("HTTP/1.1 200 OK") == 2 and "fast\n" in out and "slow\n" in out, out
    for no_drain in ("0", "1"):
        with started(serve4, env={"NO_DRAIN": no_drain}) as server:
            same_output(shown_size, run_tab("sh", download, server.port))
            log = wait_for_log(server, "peaked at")
            assert template(shown_log).search(log), (shown_log, log)
            pauses, peak = map(int, PEAK.search(log).groups())  # type: ignore[union-attr]
        if no_drain == "0":  # the page: two 64 KiB pieces at most, dozens of pauses
            assert peak <= 2 * 64 * 1024 and pauses >= 12, (pauses, peak)
        else:  # the page: most of the 4 MiB
            assert peak > 2 * 1024 * 1024, (pauses, peak)


def test_exercise_commands_run_as_printed_against_the_solution() -> None:
    serve, upload = blocks(section(PAGE, "Exercises"), "sh")
    (shown,) = blocks(section(PAGE, "Exercises"), "text")
    # the starter raises NotImplementedError until the student fills it: run the solution
    with started(serve.replace("starter.py", "solution.py")) as server:
        out = run_tab("sh", upload, server.port)
    match = template(shown).fullmatch(out)
    assert match and int(match.group(1)) >= 1, out
    assert int(match.group(2)) <= 64 * 1024 + 256 * 1024, out


# --- transcript --------------------------------------------------------------------------------


def test_transcript_matches_what_step3_sends() -> None:
    request = b"GET /fast HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with step("03b-event-loop/step3_coroutines.py") as server:
        captured = render([("client", request), ("server", exchange(server, request))])
    if os.environ.get("UPDATE_TRANSCRIPTS") == "1":
        TRANSCRIPT.write_text(captured)
    assert TRANSCRIPT.exists(), f"{TRANSCRIPT} is missing: run with UPDATE_TRANSCRIPTS=1"
    assert without_date(TRANSCRIPT.read_text()) == without_date(captured), (
        f"{TRANSCRIPT.name} is stale: rerun with UPDATE_TRANSCRIPTS=1 and review the diff")
