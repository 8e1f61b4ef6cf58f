"""The load-generator interface and the harness under it: wrk for real, and a fake generator
that shows a row does not need wrk.

The real runs last one second against a server on 127.0.0.1; nothing asserts a speed.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench import harness, loadgen, wrk
from bench.harness import Method, Pinning, UsageProblem
from bench.loadgen import ERROR_KINDS, PERCENTILES, Load, LoadGenerator, LoadGenError, RunSummary
from bench.process import ServerProcess, free_port
from bench.rounds import Contender, measure_rounds, measure_server
from bench.wrk import POST_JSON, Wrk

needs_wrk = pytest.mark.skipif(shutil.which("wrk") is None,
                               reason="wrk is not installed (make test installs it)")
UNPINNED = Pinning(None, None, "not pinned (test)")


def raw_server(port: int) -> list[str]:
    """The asyncio row's server: quick to start, answers the echo check."""
    return [sys.executable, "-m", "apps.raw_user", "--host", "127.0.0.1", "--port", str(port)]


# --- wrk behind the interface ------------------------------------------------------------------


@needs_wrk
@pytest.mark.wrk
def test_wrk_runs_behind_the_interface_and_reports_a_run_summary() -> None:
    generator: LoadGenerator = Wrk.find()
    assert generator.name == "wrk" and generator.path == shutil.which("wrk")
    assert generator.version() and not generator.version().startswith("unknown")
    load = Load(connections=2, threads=1, duration=1, timeout=2.0)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    argv = generator.command(url, load)
    assert argv[0] == generator.path and argv[-1] == url
    assert argv[argv.index("--script") + 1] == str(POST_JSON)
    assert argv[argv.index("--connections") + 1] == "2"
    with ServerProcess(raw_server(port), port=port):
        summary = generator.run(url, load)
    assert isinstance(summary, RunSummary) and summary.tool == "wrk"
    assert summary.requests > 0 and summary.rps > 0
    assert 0.9e6 <= summary.duration_us <= 3e6
    assert set(summary.errors) == set(ERROR_KINDS) and summary.error_total == 0
    assert all(summary.latency_us[p] is not None for p in PERCENTILES)
    p50, p99 = summary.latency_us["p50"], summary.latency_us["p99"]
    assert p50 is not None and p99 is not None and 0 < p50 <= p99
    data = summary.to_json()
    assert data["rps"] == summary.rps and data["tool"] == "wrk"


@needs_wrk
@pytest.mark.wrk
def test_wrk_against_nothing_is_a_loadgen_error_or_all_connect_errors() -> None:
    url = f"http://127.0.0.1:{free_port()}/"
    try:
        summary = Wrk.find().run(url, Load(connections=1, duration=1))
    except LoadGenError:
        return
    assert summary.requests == 0 and summary.errors["connect"] > 0


def test_find_names_the_generators_and_says_once_when_one_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(KeyError, match="unknown load generator 'h3load' \\(known: wrk, h2load\\)"):
        loadgen.find("h3load")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(loadgen.ToolMissing) as missing:
        loadgen.find("wrk")
    assert str(missing.value) == wrk.MISSING
    assert wrk.MISSING.startswith("wrk not found: install it")
    with pytest.raises(UsageProblem) as usage:
        harness.load_generator("wrk")
    assert str(usage.value) == wrk.MISSING


# --- the harness drives any generator ----------------------------------------------------------


@dataclass
class FakeGenerator:
    """A load generator that sends nothing: each run returns the next canned summary, or
    raises when the list holds an error message."""

    outcomes: list[RunSummary | str]
    name: str = "fake"
    path: str = "/nowhere/fake"
    calls: list[tuple[str, Load, int | None]] = field(default_factory=list)

    def version(self) -> str:
        return "0.1"

    def command(self, url: str, load: Load, *, cpu: int | None = None) -> list[str]:
        return [self.path, f"--seconds={load.duration}", url]

    def run(self, url: str, load: Load, *, cpu: int | None = None) -> RunSummary:
        self.calls.append((url, load, cpu))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, str):
            raise LoadGenError(outcome)
        return outcome


def canned(requests: int) -> RunSummary:
    return RunSummary(requests=requests, duration_us=1_000_000,
                      errors=dict.fromkeys(ERROR_KINDS, 0),
                      latency_us={"p50": 100.0, "p90": 150.0, "p99": 300.0, "p99.9": 900.0},
                      tool="fake")


@dataclass
class Recorder:
    descriptions: list[str] = field(default_factory=list)
    advanced: int = 0

    def update(self, description: str) -> None:
        self.descriptions.append(description)

    def advance(self, steps: int = 1) -> None:
        self.advanced += steps


def test_the_harness_measures_a_row_with_any_load_generator(tmp_path: Path) -> None:
    generator = FakeGenerator([canned(10), canned(20), canned(30)])
    method = Method(duration=4, warmup=1, runs=2, connections=3)
    progress = Recorder()
    port = free_port()
    result = measure_server(raw_server(port), port, label="asyncio (raw)", method=method,
                            pinning=UNPINNED, generator=generator,
                            log_path=tmp_path / "raw.log", progress=progress)
    assert result.status == "ok", result.error
    assert [r.kind for r in result.runs] == ["warmup", "measured", "measured"]
    assert [s.requests for s in result.measured] == [20, 30]
    assert all(r.rss_peak_bytes > 1_000_000 for r in result.runs)
    assert result.runs[0].command == ["/nowhere/fake", "--seconds=1", f"http://127.0.0.1:{port}/"]
    assert [load.duration for _, load, _ in generator.calls] == [1, 4, 4]
    assert all(load.connections == 3 for _, load, _ in generator.calls)
    assert result.command == raw_server(port)
    assert progress.advanced == method.steps == 3
    assert progress.descriptions == ["asyncio (raw): starting", "asyncio (raw): warm-up",
                                     "asyncio (raw): round 1/2", "asyncio (raw): round 2/2"]
    assert [r.round for r in result.runs] == [None, 0, 1]
    assert all(r.cpu_seconds is not None and r.cpu_seconds >= 0 for r in result.runs)


def test_a_failed_run_ends_the_row_with_the_generators_message(tmp_path: Path) -> None:
    generator = FakeGenerator([canned(10), "socket exploded"])
    method = Method(warmup=0, runs=3)
    progress = Recorder()
    port = free_port()
    result = measure_server(raw_server(port), port, label="raw", method=method,
                            pinning=UNPINNED, generator=generator,
                            log_path=tmp_path / "raw.log", progress=progress)
    assert result.status == "failed"
    assert result.error == "fake failed: socket exploded"
    assert [r.error for r in result.runs] == [None, "socket exploded"]
    assert progress.advanced == 3  # the skipped run counts, so the bar still ends full


def test_a_server_that_does_not_start_or_answer_wrong_fails_its_row(tmp_path: Path) -> None:
    crash = [sys.executable, "-c", "print('boom: no such app'); raise SystemExit(3)"]
    generator = FakeGenerator([])
    result = measure_server(crash, free_port(), label="x", method=Method(), pinning=UNPINNED,
                            generator=generator, log_path=tmp_path / "x.log")
    assert result.status == "failed" and result.error is not None
    assert result.error.startswith("server did not start")
    assert "boom: no such app" in (result.log_tail or "")
    port = free_port()
    result = measure_server(raw_server(port), port, label="raw", method=Method(),
                            pinning=UNPINNED, generator=generator,
                            log_path=tmp_path / "raw.log", check=lambda host, port: "wrong")
    assert (result.status, result.error, result.runs) == ("failed", "wrong", [])
    assert generator.calls == []


# --- interleaved rounds ------------------------------------------------------------------------


def contender(label: str, generator: FakeGenerator, tmp_path: Path, *, fresh: bool = False
              ) -> Contender:
    return Contender(label, raw_server, generator, Method().load(1), tmp_path / f"{label}.log",
                     fresh=fresh)


def test_rounds_run_every_row_once_per_round_in_a_rotating_order(tmp_path: Path) -> None:
    order: list[str] = []

    @dataclass
    class Named(FakeGenerator):
        def run(self, url: str, load: Load, *, cpu: int | None = None) -> RunSummary:
            order.append(f"{self.name}{'-warm' if load.duration == 2 else ''}")
            return super().run(url, load, cpu=cpu)

    a, b, c = (Named([canned(n) for n in range(1, 5)], name=x) for x in "abc")
    method = Method(duration=1, warmup=2, runs=3)
    results = measure_rounds([contender(x.name, x, tmp_path) for x in (a, b, c)], method,
                             UNPINNED)
    assert order == ["a-warm", "b-warm", "c-warm", "a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert all(m.status == "ok" for m in results)
    assert [[r.round for r in m.measured_runs] for m in results] == [[0, 1, 2]] * 3
    # one server each, up throughout: the three servers listened on three ports at once
    assert len({m.command[-1] for m in results}) == 3


def test_a_row_that_fails_leaves_the_others_measured(tmp_path: Path) -> None:
    good, bad = FakeGenerator([canned(5)] * 3), FakeGenerator([canned(5), "refused"])
    progress = Recorder()
    method = Method(warmup=0, runs=3)
    ok, failed = measure_rounds([contender("good", good, tmp_path),
                                 contender("bad", bad, tmp_path)], method, UNPINNED, progress)
    assert ok.status == "ok" and len(ok.measured) == 3
    assert (failed.status, failed.error) == ("failed", "fake failed: refused")
    assert progress.advanced == 6


def test_a_fresh_contender_starts_a_new_server_each_round(tmp_path: Path) -> None:
    generator = FakeGenerator([canned(n) for n in range(1, 7)])
    method = Method(duration=1, warmup=1, runs=3)
    progress = Recorder()
    (result,) = measure_rounds([contender("w", generator, tmp_path, fresh=True)], method,
                               UNPINNED, progress)
    assert [r.kind for r in result.runs] == ["warmup", "measured"] * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.1.log", "w.2.log", "w.3.log"]
    assert progress.advanced == 6


def test_a_fixed_port_puts_each_row_on_the_next_one(tmp_path: Path) -> None:
    base = free_port()
    method = Method(warmup=0, runs=1, port=base)
    results = measure_rounds([contender(x, FakeGenerator([canned(1)]), tmp_path)
                              for x in "ab"], method, UNPINNED)
    assert [m.command[-1] for m in results] == [str(base), str(base + 1)]
