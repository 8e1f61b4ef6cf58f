"""Run wrk with a Lua script and read the JSON summary its ``done()`` hook writes.

The script (``bench/lua/post_json.lua``) writes one JSON object to the file named by the
``BENCH_WRK_JSON`` environment variable; :func:`parse_summary` turns it into a
:class:`WrkSummary`. wrk's own text output is kept only for error messages, never parsed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

LUA_DIR = Path(__file__).parent / "lua"
POST_JSON = LUA_DIR / "post_json.lua"

ERROR_KINDS = ("connect", "read", "write", "status", "timeout")
PERCENTILES = ("p50", "p90", "p99", "p99.9")


class WrkError(RuntimeError):
    """wrk could not run, failed, or left no readable summary; the message says which."""


@dataclass(frozen=True)
class WrkSummary:
    """One wrk run as the Lua ``done()`` hook reported it.

    Attributes:
        requests: completed requests.
        duration_us: length of the run, microseconds.
        bytes: bytes read from the server.
        errors: counts by kind: ``connect``, ``read``, ``write``, ``status`` (responses with
            status >= 400), ``timeout``.
        latency_us: ``min``, ``mean``, ``max``, ``stdev`` and the percentiles ``p50``, ``p90``,
            ``p99``, ``p99.9``, microseconds; ``None`` where no request completed.
    """

    requests: int
    duration_us: int
    bytes: int
    errors: dict[str, int]
    latency_us: dict[str, float | None]

    @property
    def rps(self) -> float:
        """Requests per second over the run (0.0 for an empty run)."""
        return self.requests * 1e6 / self.duration_us if self.duration_us > 0 else 0.0

    @property
    def error_total(self) -> int:
        """All errors, every kind added up."""
        return sum(self.errors.values())

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: the fields plus ``rps``."""
        return {**asdict(self), "rps": self.rps}


def parse_summary(text: str) -> WrkSummary:
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
        return WrkSummary(
            requests=_int(data["requests"]),
            duration_us=_int(data["duration_us"]),
            bytes=_int(data["bytes"]),
            errors=errors,
            latency_us=latency,
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
            grace: float = 30.0) -> WrkSummary:
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
    pin = cpu is not None and Path(argv[0]).name != "taskset"

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
