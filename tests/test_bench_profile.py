"""``bench profile``: real profiled runs under wrk, the cProfile table, and the user mistakes.

The two end-to-end runs last one second of wrk each: one layer under pyinstrument, one under
cProfile. Each checks that the report exists and names the app's own function, which only
happens when the profiler really ran inside the server while wrk loaded it.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness import UsageProblem
from bench.profile import PROFILABLE, Target, resolve
from bench.profile_report import pstats_table, short_path

ROOT = Path(__file__).resolve().parent.parent
needs_wrk = pytest.mark.skipif(shutil.which("wrk") is None,
                               reason="wrk is not installed (make test installs it)")


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 90
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.cli", "profile", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


# --- end to end --------------------------------------------------------------------------------


@needs_wrk
@pytest.mark.wrk
def test_pyinstrument_report_of_the_asgi_layer_names_the_app(tmp_path: Path) -> None:
    out = tmp_path / "asgi"
    result = run_cli("--layer", "asgi", "--server", "uvicorn", "--duration", "1",
                     "--output", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    tree = (out / "profile.txt").read_text()
    # the call tree reaches the pure ASGI app's coroutine and its response helper
    assert re.search(r"\bapp\s+apps/asgi_user\.py:\d+", tree), tree
    assert re.search(r"RequestResponseCycle\.run_asgi\s+uvicorn/", tree), tree
    top = (out / "profile-top.txt").read_text()
    assert "apps/asgi_user.py" in top and len(top) < len(tree)
    assert "<html" in (out / "profile.html").read_text()[:2000].lower()
    data = json.loads((out / "results.json").read_text())
    assert (data["layer"], data["server"], data["profiler"]["name"]) == (
        "asgi", "uvicorn", "pyinstrument")
    summary = data["wrk"]["summary"]
    assert summary["requests"] > 0
    assert sum(summary["errors"].values()) == 0, summary
    assert data["server_command"][:4] == [sys.executable, "-m", "bench.profile", "--child"]
    assert "--duration" in data["wrk_command"] and data["machine"]["cores"] >= 1
    assert set(data["files"]) == {"profile.txt", "profile-top.txt", "profile.html"}
    assert re.fullmatch(r"[0-9a-f]{40}", data["git"]["commit"]), data["git"]
    assert data["load_generator"] == "wrk" and data["pinning"]["text"]


@needs_wrk
@pytest.mark.wrk
def test_cprofile_report_of_the_asyncio_layer_names_the_endpoint(tmp_path: Path) -> None:
    out = tmp_path / "raw"
    result = run_cli("--layer", "asyncio", "--profiler", "cprofile", "--duration", "1",
                     "--output", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    stats = pstats.Stats(str(out / "profile.pstats"))
    functions = {name for (_, _, name) in stats.stats}  # type: ignore[attr-defined]
    assert {"data_received", "endpoint"} <= functions
    table = (out / "profile.txt").read_text()
    assert re.search(r"apps/user\.py:\d+\(endpoint\)", table), table
    requests = json.loads((out / "results.json").read_text())["wrk"]["summary"]["requests"]
    assert f"{requests:,} requests answered" in table


# --- the cProfile table ------------------------------------------------------------------------


def _work(n: int) -> int:
    return sum(_square(i) for i in range(n))


def _square(i: int) -> int:
    return i * i


def test_pstats_table_ranks_functions_and_divides_by_requests() -> None:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(50):
        _work(200)
    profile.disable()
    stats = pstats.Stats(profile)
    table = pstats_table(stats, requests=50, top=5, prefixes=[str(ROOT)])
    lines = table.splitlines()
    assert lines[0].startswith("cProfile: ") and lines[0].endswith("50 requests answered")
    by_cum = lines[lines.index(next(x for x in lines if x.startswith("Top 5 by cum"))) + 2:]
    assert "tests/test_bench_profile.py" in by_cum[0] and "(_work)" in by_cum[0]
    row = next(x for x in lines if x.endswith("(_square)"))
    calls, _own, _cum, per_request = row.split()[:4]
    assert calls == "10,000"
    raw = stats.stats  # type: ignore[attr-defined]
    cum_s = next(v[3] for k, v in raw.items() if k[2] == "_square")
    assert float(per_request.replace(",", "")) == pytest.approx(cum_s * 1e6 / 50, abs=0.05)
    assert "–" in pstats_table(stats, requests=0, top=1).splitlines()[4]


def test_short_path_strips_the_longest_prefix() -> None:
    prefixes = ["/usr/lib", "/usr/lib/site-packages"]
    assert short_path("/usr/lib/site-packages/a/b.py", prefixes) == "a/b.py"
    assert short_path("/usr/lib/json/x.py", prefixes) == "json/x.py"
    assert short_path("/usr/libx/y.py", prefixes) == "/usr/libx/y.py"


# --- names and mistakes ------------------------------------------------------------------------


def test_resolve_picks_the_server_and_the_app() -> None:
    assert resolve("fastapi", None, "cprofile") == Target(
        "fastapi", "uvicorn", "apps.fastapi_user:app")
    assert resolve("asyncio", None, "pyinstrument") == Target("asyncio", "raw", "apps.raw_user")
    assert resolve("asgi", "toy-httptools", "pyinstrument").server == "toy-httptools"
    assert "granian" not in PROFILABLE


@pytest.mark.parametrize(("layer", "server", "profiler", "message"), [
    ("nope", None, "pyinstrument", "unknown layer 'nope'"),
    ("asgi", "nope", "pyinstrument", "unknown server 'nope'"),
    ("asgi", "granian", "pyinstrument", "granian runs the app outside"),
    ("asgi", "raw", "pyinstrument", "only runs the asyncio layer"),
    ("asyncio", "uvicorn", "pyinstrument", "drop --server uvicorn"),
    ("asgi", None, "perf", "unknown profiler 'perf'"),
])
def test_resolve_refuses_bad_names(layer: str, server: str | None, profiler: str,
                                   message: str) -> None:
    with pytest.raises(UsageProblem, match=re.escape(message)):
        resolve(layer, server, profiler)


@pytest.mark.parametrize(("args", "message"), [
    (("--layer", "django"), "unknown layer 'django' (known: asyncio, asgi, starlette, fastapi)"),
    (("--layer", "asgi", "--server", "hypercorn"),
     "hypercorn runs the app outside the process bench starts, so a profiler cannot see it "
     "(profilable: uvicorn, uvicorn-h11, toy-raw, toy-h11, toy-httptools, toy-anyio, "
     "toy-anyio-trio)"),
])
def test_bad_names_end_with_one_line_and_no_output(tmp_path: Path, args: tuple[str, ...],
                                                   message: str) -> None:
    out = tmp_path / "out"
    result = run_cli(*args, "--output", str(out))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [f"error: {message}"], result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not out.exists()


def test_missing_wrk_ends_with_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    result = run_cli("--layer", "asgi", "--output", str(tmp_path / "out"),
                     env={**os.environ, "PATH": str(empty)})
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: wrk not found"), result.stderr
    assert not (tmp_path / "out").exists()
