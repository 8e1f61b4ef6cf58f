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

import json
import re
import shlex
import shutil
import socket
import subprocess

import httpx
import pytest

from bench.process import ServerProcess
from tests.support.pages import (
    ROOT,
    blocks,
    changed_lines,
    check_server_section,
    check_tabs,
    localize,
    run_tab,
    same_output,
    section,
    started,
    tabs,
)
from tests.test_lessons import LESSONS

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")


# --- lesson 1 ----------------------------------------------------------------------------------

PAGE_1 = LESSONS / "01-bytes-on-a-socket.md"


def test_lesson1_step0a_commands() -> None:
    server_command, client, silent = blocks(section(PAGE_1, "Step 0a: one client at a time"),
                                            "sh")
    (shown,) = blocks(section(PAGE_1, "Step 0a: one client at a time"), "text")
    with started(server_command) as server:
        same_output(shown, run_tab("sh", client, server.port))
        # the silent client connects, waits for Enter (given at once here), and leaves
        left = subprocess.run(["bash", "-c", localize(silent, server.port)], cwd=ROOT,
                              input="\n", capture_output=True, text=True, timeout=30)
        assert left.returncode == 0 and "connected" in left.stdout, left.stderr
        same_output(shown, run_tab("sh", client, server.port))  # served again once it left


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


# --- lesson 2 ----------------------------------------------------------------------------------

PAGE_2 = LESSONS / "02-wsgi.md"


def longest(printed: str) -> float:
    """The longest of the ``/path: 1.2 s`` times the httpx tabs print, seconds."""
    times = [float(line.split(": ")[1].removesuffix(" s")) for line in printed.splitlines()]
    assert len(times) == 18, printed
    return max(times)


def test_lesson2_run_it() -> None:
    text = section(PAGE_2, "Run it")
    server_command, gunicorn = blocks(text.split("===", 1)[0], "sh")[0], blocks(text, "sh")[-1]
    with started(server_command, env={"SLOW_SECONDS": "0.5"}) as server:
        printed = check_tabs(text, server.port, slack={"sleep 0.2;": "sleep 1;"})
    assert longest(printed["httpx"]) >= 1.4  # three /slow in turn, 0.5 s each
    with started(gunicorn, env={"SLOW_SECONDS": "0.5"}) as server:
        assert longest(run_tab("python", tabs(text)["httpx"].code, server.port)) >= 1.4


# --- lesson 3 ----------------------------------------------------------------------------------

PAGE_3 = LESSONS / "03-asgi.md"


@pytest.mark.parametrize("which", [0, 1], ids=["python", "uvicorn"])
def test_lesson3_run_it(which: int) -> None:
    text = section(PAGE_3, "Run it")
    server_command = blocks(text.split("===", 1)[0], "sh")[which]
    # /slow must outlast the page's `sleep 0.2` and the first /fast by a wide margin
    with started(server_command, env={"SLOW_SECONDS": "1"}) as server:
        printed = check_tabs(text, server.port)
    curl = printed["curl"].split()
    assert curl[0] == "fast" and sorted(curl) == ["blocking", "fast", "fast", "slow"], curl
    lines = printed["httpx"].splitlines()
    assert longest(printed["httpx"]) < 2.0  # side by side (1 s), not three in turn (3 s)
    assert all(line.startswith("/fast") for line in lines[:15]), lines


# --- lesson 4 ----------------------------------------------------------------------------------

PAGE_4 = LESSONS / "04-sans-io.md"


@pytest.mark.parametrize("title", ["Step 1: bytes in, events out",
                                   "The state machine, from h11's tables"])
def test_lesson4_scripts_print_what_the_page_shows(title: str) -> None:
    text = section(PAGE_4, title)
    (command,) = blocks(text, "sh")
    (shown,) = blocks(text, "text")
    same_output(shown, run_tab("sh", command, 0))


@pytest.mark.parametrize("title", ["Step 2: h11 on a blocking socket",
                                   "Step 2b: the loop inside out",
                                   "Step 2c: a deadline, a limit, flow control"])
def test_lesson4_step_servers(title: str) -> None:
    check_server_section(PAGE_4, title)


def test_lesson4_run_it() -> None:
    text = section(PAGE_4, "Run it")
    with started(blocks(text.split("===", 1)[0], "sh")[0]) as server:
        check_tabs(text, server.port)


# --- lesson 5 ----------------------------------------------------------------------------------

PAGE_5 = LESSONS / "05-speed.md"


def test_lesson5_step1_prints_what_the_page_shows() -> None:
    text = section(PAGE_5, "Step 1: the parser calls you")
    (command,) = blocks(text, "sh")
    (shown,) = blocks(text, "text")
    same_output(shown, run_tab("sh", command, 0))


def test_lesson5_step2_on_either_loop() -> None:
    text = section(PAGE_5, "Step 2: the same server on two loops")
    on_asyncio, on_uvloop, curl = blocks(text, "sh")
    (shown,) = blocks(text, "text")
    with started(on_uvloop) as server:
        same_output(shown, run_tab("sh", curl, server.port))
    with started(on_asyncio) as server:
        out = run_tab("sh", curl, server.port)
    assert "x-loop: asyncio.unix_events._UnixSelectorEventLoop" in out, out


def test_lesson5_step2b_commands_and_highlights() -> None:
    text = section(PAGE_5, "Step 2b: lesson 4's server on llhttp")
    server_command, client = blocks(text, "sh")
    (shown,) = blocks(text, "text")
    with started(server_command) as server:
        same_output(shown, run_tab("sh", client, server.port))
    match = re.search(r'title="lessons/code/05-speed/step2b_asgi.py" linenums="1" '
                      r'hl_lines="([^"]*)"', text)
    assert match, "the step 2b listing lost its highlights"
    code = ROOT / "lessons" / "code"
    assert match.group(1) == changed_lines(code / "04-sans-io" / "step2b_asyncio.py",
                                           code / "05-speed" / "step2b_asgi.py")


def test_lesson5_step2c_commands() -> None:
    check_server_section(PAGE_5, "Step 2c: what llhttp does not bound")


def test_lesson5_run_it() -> None:
    text = section(PAGE_5, "Run it")
    with started(blocks(text.split("===", 1)[0], "sh")[0]) as server:
        check_tabs(text, server.port)


def test_lesson5_bare_commands() -> None:
    text = section(PAGE_5, "The bare baseline: the price of correctness")
    server_command, curl, bench = blocks(text, "sh")
    (shown,) = blocks(text, "text")
    with started(server_command) as server:
        same_output(shown, run_tab("sh", curl, server.port))
    assert bench.startswith(".venv/bin/bench layers ")


def test_lesson5_attribute_count_is_the_codes() -> None:
    from toyservers.httptools_server import HttpToolsProtocol

    match = re.search(r"the protocol has (\d+) \((\d+) from the shared `HTTPProtocol` and "
                      r"`HTTP1Protocol` bases, (\d+) of its own\)",
                      " ".join(PAGE_5.read_text().split()))
    assert match, "the sentence counting the protocol's attributes moved: update this test"
    counts = {"own": 0, "base": 0}
    for cls in HttpToolsProtocol.__mro__:
        if "__slots__" in cls.__dict__ and cls.__module__.startswith("toyservers."):
            own = cls.__module__ == HttpToolsProtocol.__module__
            counts["own" if own else "base"] += len(cls.__dict__["__slots__"])
    base, own = counts["base"], counts["own"]
    assert tuple(map(int, match.groups())) == (base + own, base, own)


# --- lesson 6 ----------------------------------------------------------------------------------

PAGE_6 = LESSONS / "06-cost-of-layers.md"


def test_lesson6_run_it() -> None:
    text = section(PAGE_6, "Run it")
    server_command = [b for b in blocks(text.split("===", 1)[0], "sh")][0]
    with started(server_command) as server:
        wrk = tabs(text).pop("wrk")
        for tab in tabs(text).values():
            if tab.name != "wrk":
                same_output(tab.expected or "", run_tab(tab.language, tab.code, server.port))
        if shutil.which("wrk") is not None:
            assert "Requests/sec" in run_tab("sh", wrk.code, server.port)


def test_the_largest_steps_are_what_lesson_6_says() -> None:
    """Lesson 6 reads the stack asyncio -> uvicorn -> Starlette -> FastAPI two ways: in percent
    the largest drops are the first interface and FastAPI, published and ours; in µs added,
    FastAPI adds the most, and Starlette more than the ASGI server added over bare (uvicorn's
    asgi row) and more than the first interface (bare's row)."""
    rows = json.loads((LESSONS / "results" / "layers" / "results.json").read_text())["rows"]
    rps = {(row["layer"], row["server"]): row["rps_median"] for row in rows}
    added = {(row["layer"], row["server"]): row["us_added"] for row in rows}
    stack = [("asyncio", "raw"), ("asgi", "uvicorn"), ("starlette", "uvicorn"),
             ("fastapi", "uvicorn")]
    ours = [rps[upper] / rps[lower] for lower, upper in zip(stack, stack[1:], strict=False)]
    published_text = (LESSONS / "results" / "published" / "layers.md").read_text()
    published = [float(re.search(rf"^\| {re.escape(name)} \| [\d,]+ \| −([\d.]+) %",
                                 published_text, re.M).group(1))  # type: ignore[union-attr]
                 for name in ("uvicorn (pure ASGI)", "Starlette", "FastAPI")]
    for kept in (ours, [1 - p / 100 for p in published]):
        asgi, starlette_kept, fastapi_kept = kept
        assert starlette_kept > max(asgi, fastapi_kept), kept  # the two largest drops

    server_us = added[("asgi", "uvicorn")]  # what uvicorn adds over bare
    fastapi, starlette = added[("fastapi", "uvicorn")], added[("starlette", "uvicorn")]
    # the stack of layers, not the other servers compared beside its asgi row
    in_stack = [v for (layer, server), v in added.items() if server in ("bare", "uvicorn")]
    assert fastapi == max(v for v in in_stack if v is not None)
    assert fastapi > starlette > server_us
    assert added[("asgi", "bare")] < starlette  # the first interface, cheap in µs


def test_lesson6_arithmetic_with_a_1_ms_query_is_the_committed_tables() -> None:
    """"What this experiment leaves out" works out each row with a 1 ms query behind it: the
    wait caps it at connections / (1 ms + t), the core at 1 / t (its RPS). Every figure that
    paragraph prints is recomputed here from the committed results.json, in its words."""
    data = json.loads((LESSONS / "results" / "layers" / "results.json").read_text())
    connections = data["settings"]["connections"]
    rows = {(r["layer"], r["server"]): r["rps_median"] for r in data["rows"] if r["rps_median"]}
    cap = {key: connections / (1e-3 + 1 / rps) for key, rps in rows.items()}
    waits = [key for key in rows if rows[key] > cap[key]]  # the wait is the tighter limit
    cpu_bound = sorted(rows[key] for key in rows if key not in waits)
    fastapi = rows[("fastapi", "uvicorn")]

    def k(value: float) -> str:
        return f"{value / 1000:.1f}k"

    text = " ".join(section(PAGE_6, "What this experiment leaves out").split())
    names = {"asyncio": "asyncio", "axum": "axum", "fastapi": "FastAPI on uvicorn"}
    top, bottom = max(cap, key=cap.__getitem__), min(cap, key=cap.__getitem__)
    assert connections == 10 and "the 10 connections each wait 1 ms + t" in text
    assert (f"runs from {k(cap[top])} requests per second ({names[top[0]]}) to "
            f"{k(cap[bottom])} ({names[bottom[0]]})") in text
    if len(waits) == len(rows):  # every row above its cap: the page says so, and the span
        assert "every row's RPS is above its cap" in text
        assert f"between {k(min(cap.values()))} and {k(max(cap.values()))}" in text
        assert f"FastAPI included (its core limit, {k(fastapi)}" in text
    else:  # the rows below their cap keep their own limit: the page must name them
        assert "every row's RPS is above its cap" not in text
        assert all(k(rps) in text for rps in cpu_bound), cpu_bound


def test_index_commands() -> None:
    text = section(LESSONS / "index.md", "How to run the code")
    _, _, server_command, curl = blocks(text, "sh")
    (shown,) = blocks(text, "text")
    with started(server_command) as server:
        same_output(shown, run_tab("sh", curl, server.port))


def make_lines(block: str) -> dict[str, str]:
    """``make`` command lines of a block by target (``venv``, ``exercise``), comments cut."""
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return {line.split()[1]: line for line in lines if line.startswith("make ")}


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.timeout(180)
def test_index_make_commands_run_as_printed() -> None:
    """The setup step and the make targets the index lists, but ``make test``: the suite that
    runs this test. ``make venv`` finds the venv up to date (``make test`` made it)."""
    setup, targets = blocks(section(LESSONS / "index.md", "How to run the code"), "sh")[:2]
    commands = {**make_lines(setup), **make_lines(targets)}
    assert sorted(commands) == ["docs", "exercise", "serve-docs", "test", "venv"], commands

    def make(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", commands[name]], cwd=ROOT, capture_output=True,
                              text=True, timeout=150)

    assert make("venv").returncode == 0
    checked = make("exercise")  # lesson 1's starter: every check fails, one line each
    failing = [line for line in checked.stdout.splitlines() if line.startswith("test_")]
    assert checked.returncode != 0 and len(failing) >= 10, checked.stdout + checked.stderr
    assert "Traceback" not in checked.stdout, checked.stdout
    index = ROOT / "site" / "index.html"
    index.unlink(missing_ok=True)  # so the check below sees this build's, not an older one
    built = make("docs")
    assert built.returncode == 0 and index.exists(), built.stderr
    with socket.socket() as probe:  # the page's fixed port: something else there would answer
        if probe.connect_ex(("127.0.0.1", 8001)) == 0:
            pytest.skip("port 8001 is taken (a make serve-docs already running?)")
    with ServerProcess(shlex.split(commands["serve-docs"]), port=8001, cwd=ROOT,
                       startup_timeout=60) as docs:
        assert "toyservers" in httpx.get(f"{docs.url}/", timeout=10).text.lower()
        assert docs.proc is not None and docs.proc.poll() is None, "mkdocs serve exited"


# --- every page: highlighted changes are the changes -------------------------------------------

WHOLE_STEP = re.compile(
    r'the lines changed from `(?P<base>[\w.]+)` highlighted"\n\n'
    r' *```python linenums="1" hl_lines="(?P<lines>[^"]*)"\n *--8<-- "(?P<file>[^"]+)"')


def test_highlighted_lines_are_the_lines_that_changed_from_the_step_before() -> None:
    found = 0
    for page in sorted(LESSONS.glob("*.md")):
        for match in WHOLE_STEP.finditer(page.read_text()):
            new = ROOT / match["file"]
            expected = changed_lines(new.with_name(match["base"]), new)
            assert match["lines"] == expected, f"{page.name}: {new.name}: hl_lines={expected!r}"
            found += 1
    assert found >= 5


def test_lesson3_exercise_demo_commands() -> None:
    server_command, curl = blocks(section(PAGE_3, "Exercises"), "sh")
    with started(server_command) as server:
        status, timing = run_tab("sh", curl, server.port).splitlines()
    assert status == "200"
    match = re.fullmatch(r"server-timing: app;dur=(\d+(\.\d+)?)", timing.strip())
    assert match and float(match.group(1)) >= 100, timing  # about the 120 ms slept


def test_lesson6_exercise_command_runs_as_printed_with_the_solution() -> None:
    """The "Exercises" command, with the solution in place of the starter (which raises until
    a student fills it in): one line per row of the committed results file."""
    (command,) = blocks(section(PAGE_6, "Exercises"), "sh")
    out = run_tab("sh", command.replace("starter.py", "solution.py"), port=0)
    rows = json.loads((LESSONS / "results" / "layers" / "results.json").read_text())["rows"]
    lines = out.splitlines()
    assert len(lines) == len(rows), out
    for line, row in zip(lines, rows, strict=True):
        assert line.split()[:2] == [row["layer"], row["server"]], (line, row)
        assert f"{row['us_per_request']:.1f} µs/req" in line, (line, row)
