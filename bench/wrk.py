"""wrk, the first load generator: run it with a Lua script and read the JSON its ``done()``
hook writes.

The script (``bench/lua/post_json.lua``) writes one JSON object to the file named by the
``BENCH_WRK_JSON`` environment variable; :func:`parse_summary` turns it into a
:class:`bench.loadgen.RunSummary`. wrk's own text output is kept only for error messages,
never parsed. :class:`Wrk` is the :class:`bench.loadgen.LoadGenerator` the harness drives.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.loadgen import ERROR_KINDS, PERCENTILES, Load, LoadGenError, RunSummary, ToolMissing

LUA_DIR = Path(__file__).parent / "lua"
POST_JSON = LUA_DIR / "post_json.lua"

#: What every ``bench`` command says when wrk is not installed.
MISSING = ("wrk not found: install it (apt-get install wrk, brew install wrk) "
           "or run `make layers`, which does")


class WrkError(LoadGenError):
    """wrk could not run, failed, or left no readable summary; the message says which."""


def parse_summary(text: str) -> RunSummary:
    """Read the JSON the Lua ``done()`` hook wrote.

    Args:
        text: the file's content, one JSON object (see ``bench/lua/post_json.lua``).

    Raises:
        WrkError: the text is not JSON, or a field is missing or has the wrong type.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WrkError(f"wrk summary is not JSON ({exc.msg}): {text[:200]!r}") from None
    if not isinstance(data, dict):
        raise WrkError(f"wrk summary is not a JSON object: {text[:200]!r}")
    try:
        errors = {kind: _int(data["errors"][kind]) for kind in ERROR_KINDS}
        latency_raw = data["latency_us"]
        latency = {
            key: _optional_float(latency_raw[key])
            for key in ("min", "mean", "max", "stdev", *PERCENTILES)
        }
        return RunSummary(
            requests=_int(data["requests"]),
            duration_us=_int(data["duration_us"]),
            bytes=_int(data["bytes"]),
            errors=errors,
            latency_us=latency,
            tool="wrk",
        )
    except (KeyError, TypeError) as exc:
        raise WrkError(f"wrk summary lacks or mistypes {exc}: {text[:200]!r}") from None


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{value!r} is not a number")
    return int(value)


def _optional_float(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


def find_wrk() -> str | None:
    """The path of the wrk executable on PATH, or None."""
    return shutil.which("wrk")


def wrk_version(wrk: str) -> str:
    """wrk's version line, e.g. ``"4.1.0"`` (``wrk -v`` prints it and exits non-zero)."""
    try:
        out = subprocess.run([wrk, "-v"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    first = (out.stdout + out.stderr).strip().splitlines()
    if not first:
        return "unknown"
    words = first[0].split()
    return words[1] if len(words) > 1 else first[0]


def wrk_command(wrk: str, url: str, *, connections: int, threads: int, duration: int,
                script: Path = POST_JSON, cpu: int | None = None,
                timeout: float = 2.0) -> list[str]:
    """The exact argv of one wrk run; with ``cpu``, prefixed by ``taskset -c CPU``.

    Args:
        duration: whole seconds (wrk reads ``-d`` as an integer with a unit).
        timeout: seconds after which wrk counts a request as timed out.
    """
    argv = [
        wrk, "--threads", str(threads), "--connections", str(connections),
        "--duration", f"{duration}s", "--timeout", f"{timeout:g}s",
        "--script", str(script), url,
    ]
    if cpu is not None:
        taskset = shutil.which("taskset")
        if taskset is not None:
            return [taskset, "-c", str(cpu), *argv]
    return argv


def run_wrk(argv: list[str], *, body: bytes, cpu: int | None = None,
            grace: float = 30.0) -> RunSummary:
    """Run ``argv`` (from :func:`wrk_command`) and return the summary its Lua hook wrote.

    ``cpu`` pins wrk with ``sched_setaffinity`` when ``argv`` does not start with taskset.

    Raises:
        WrkError: wrk did not start, exited non-zero, overran its duration by ``grace``
            seconds, or wrote no readable summary (the message ends with wrk's output).
    """
    handle, name = tempfile.mkstemp(prefix="wrk-", suffix=".json")
    os.close(handle)
    path = Path(name)
    env = {**os.environ, "BENCH_WRK_JSON": str(path), "BENCH_WRK_BODY": body.decode()}
    pin = cpu is not None and Path(argv[0]).name != "taskset" and \
        hasattr(os, "sched_setaffinity")  # Linux-only

    def affinity() -> None:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    duration = _duration_of(argv)
    try:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, env=env,
                                 timeout=duration + grace, preexec_fn=affinity if pin else None)
        except FileNotFoundError:
            raise WrkError(f"{argv[0]} not found") from None
        except subprocess.TimeoutExpired:
            raise WrkError(f"wrk ran {grace:g} s past its duration and was stopped") from None
        output = (out.stdout + out.stderr).strip()
        if out.returncode != 0:
            raise WrkError(f"wrk exited with status {out.returncode}: {output[-500:]}")
        text = path.read_text()
        if not text.strip():
            raise WrkError(f"wrk wrote no summary: {output[-500:]}")
        return parse_summary(text)
    finally:
        path.unlink(missing_ok=True)


def _duration_of(argv: list[str]) -> float:
    """The ``--duration`` of a wrk argv in seconds (10 when absent, wrk's default)."""
    if "--duration" in argv:
        value = argv[argv.index("--duration") + 1]
        return float(value.rstrip("s"))
    return 10.0


@dataclass(frozen=True)
class Wrk:
    """wrk as a :class:`bench.loadgen.LoadGenerator`: POST/JSON through ``post_json.lua``.

    Attributes:
        path: the wrk executable.
        script: the Lua script that sets the request and writes the JSON summary.
        name: ``"wrk"``.
    """

    path: str
    script: Path = POST_JSON
    name: str = "wrk"

    @classmethod
    def find(cls) -> Wrk:
        """wrk from PATH.

        Raises:
            ToolMissing: wrk is not installed (:data:`MISSING`).
        """
        path = find_wrk()
        if path is None:
            raise ToolMissing(MISSING)
        return cls(path)

    def version(self) -> str:
        """wrk's version, e.g. ``"4.1.0"``."""
        return wrk_version(self.path)

    def command(self, url: str, load: Load, *, cpu: int | None = None) -> list[str]:
        """The exact argv of one run (see :func:`wrk_command`)."""
        return wrk_command(self.path, url, connections=load.connections,
                           threads=load.threads, duration=load.duration,
                           script=self.script, cpu=cpu, timeout=load.timeout)

    def run(self, url: str, load: Load, *, cpu: int | None = None) -> RunSummary:
        """Run wrk against ``url``; WrkError when it fails (see :func:`run_wrk`)."""
        return run_wrk(self.command(url, load, cpu=cpu), body=load.body, cpu=cpu)
