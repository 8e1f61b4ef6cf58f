"""``bench conformance``: folding the suite's records into the matrix, and what a real run
writes (:func:`check_the_matrices`, on the servers page's two commands)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.conformance import SUITES, build_matrix, render_markdown
from toyservers.registry import SERVERS


def record(server: str, feature: str, outcome: str, message: str = "", test: str = "t"
           ) -> dict[str, str]:
    return {"nodeid": f"tests/conformance/x.py::{test}[{server}]", "server": server,
            "feature": feature, "outcome": outcome, "message": message}


REPORT = {
    "features": ["keep-alive", "websocket", "date-header", "head", "never-run"],
    "records": [
        record("toy-h11", "keep-alive", "passed"),
        record("toy-h11", "websocket", "xfailed", "HTTP/1.1 only"),
        record("toy-h11", "date-header", "passed"),
        record("toy-h11", "head", "passed", test="a"),
        record("toy-h11", "head", "failed", "AssertionError: body sent", test="b"),
        record("daphne", "keep-alive", "passed"),
        record("daphne", "websocket", "passed"),
        record("daphne", "date-header", "violation", "violation: sends no Date header"),
        record("daphne", "head", "passed"),
    ],
}


def test_cells_are_pass_unsupported_or_fail() -> None:
    matrix = build_matrix(REPORT, ["toy-h11", "daphne"])
    assert matrix["features"] == ["keep-alive", "websocket", "date-header", "head"]
    assert matrix["results"] == {
        "toy-h11": {"keep-alive": "pass", "websocket": "unsupported", "date-header": "pass",
                    "head": "fail"},
        "daphne": {"keep-alive": "pass", "websocket": "pass", "date-header": "fail",
                   "head": "pass"},
    }
    assert matrix["reasons"] == {"toy-h11": {"websocket": "HTTP/1.1 only"}}
    assert "violation: sends no Date header" in matrix["failures"]["daphne"]["date-header"][0]
    assert "body sent" in matrix["failures"]["toy-h11"]["head"][0]
    assert set(matrix["servers"]) == {"toy-h11", "daphne"}


def test_markdown_has_a_row_per_feature_and_the_pass_counts() -> None:
    text = render_markdown(build_matrix(REPORT, ["toy-h11", "daphne"]), ["how it ran"])
    assert "| date-header | pass | **fail** |" in text
    assert "| websocket | unsupported | pass |" in text
    assert "**2/4**" in text and "**3/4**" in text
    assert "- **toy-h11**, websocket: HTTP/1.1 only" in text
    assert "- how it ran" in text


AUTOBAHN = {"cases": ["1.*", "10.*"], "exclude": ["10.1.1"],
            "counts": {"OK": 233, "NON-STRICT": 11, "INFORMATIONAL": 3},
            "not_ok": {"3.2": "NON-STRICT", "7.1.6": "INFORMATIONAL"}}


def test_autobahn_counts_become_a_table_and_a_skip_is_no_pass() -> None:
    report = {"features": ["websocket", "autobahn"], "records": [
        record("daphne", "websocket", "passed"),
        {**record("daphne", "autobahn", "passed"), "autobahn": AUTOBAHN},
        record("hypercorn", "websocket", "passed"),
        record("hypercorn", "autobahn", "skipped", "Autobahn|Testsuite is not installed"),
    ]}
    matrix = build_matrix(report, ["daphne", "hypercorn"])
    assert matrix["results"]["daphne"]["autobahn"] == "pass"
    assert matrix["results"]["hypercorn"]["autobahn"] == "skipped"
    assert matrix["autobahn"] == {"daphne": AUTOBAHN}
    text = render_markdown(matrix)
    assert "| autobahn | pass | skipped |" in text
    assert "## Autobahn|Testsuite" in text
    assert ("| daphne | 1.*, 10.* but 10.1.1 | 233 | 11 | 3 | 0 | 0 | 3.2 NON-STRICT, "
            "7.1.6 INFORMATIONAL |"
            in text)
    assert "- **hypercorn**, autobahn: Autobahn|Testsuite is not installed" in text
    assert "**1/2**" in text  # hypercorn: websocket passes, the skipped row does not count


def check_the_matrices(out: Path, servers: list[str]) -> None:
    """What ``bench conformance --servers SERVERS`` wrote in ``out``: a matrix per interface
    that has a server named (none for the other), a row per server named with 20 features or
    more, every toy server's cells passed or declared unsupported, keep-alive passed, and the
    page's title. The real runs are the servers page's two commands, run (as printed) by
    tests/test_page_bench_commands.py, which calls this: one ASGI and one WSGI run."""
    for interface, suite in SUITES.items():
        named = [name for name in servers if SERVERS[name].interface == interface]
        path = out / f"{suite.stem}.json"
        assert path.exists() == bool(named), (path, named)
        if not named:
            continue
        matrix = json.loads(path.read_text())
        assert list(matrix["servers"]) == named
        for name in named:
            row = matrix["results"][name]
            assert len(row) >= 20, row
            if SERVERS[name].kind == "toy":
                assert "fail" not in row.values(), matrix["failures"]
                assert row["keep-alive"] == "pass"
        title = ("# What each server supports" if interface == "asgi"
                 else "## What each WSGI server supports")
        assert path.with_suffix(".md").read_text().startswith(title)


WSGI_REPORT = {
    "features": ["environ-keys", "keep-alive", "head"],
    "records": [
        record("toy-wsgi", "environ-keys", "passed"),
        record("toy-wsgi", "keep-alive", "xfailed", "the sync worker closes"),
        record("toy-wsgi", "head", "passed"),
        record("waitress", "environ-keys", "passed"),
        record("waitress", "keep-alive", "passed"),
        record("waitress", "head", "violation", "violation: sends a body to HEAD"),
    ],
}


def test_the_wsgi_table_sits_under_the_asgi_one() -> None:
    matrix = build_matrix(WSGI_REPORT, ["toy-wsgi", "waitress"])
    text = render_markdown(matrix, ["how it ran"], SUITES["wsgi"])
    assert text.startswith("## What each WSGI server supports\n")
    assert "`tests/conformance_wsgi`" in text and "PEP 3333" in text
    assert "| keep-alive | unsupported | pass |" in text
    assert "| head | pass | **fail** |" in text
    assert "### Failures" in text and "### Not offered" in text and "### How it ran" in text
    assert "\n## " not in text  # every heading below the title is one level down


def test_the_suites_each_have_their_folder_and_options() -> None:
    assert {name: suite.path for name, suite in SUITES.items()} == {
        "asgi": "tests/conformance", "wsgi": "tests/conformance_wsgi"}
    assert [suite.stem for suite in SUITES.values()] == ["matrix", "matrix-wsgi"]
    for suite in SUITES.values():
        assert (Path(__file__).parents[1] / suite.path / "conftest.py").is_file()


def test_bench_conformance_unknown_server_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.cli", "conformance", "--servers", "nginx",
         "--output", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    known = ", ".join(SERVERS)
    assert result.stderr.strip() == f"error: unknown server 'nginx' (known: {known})"
