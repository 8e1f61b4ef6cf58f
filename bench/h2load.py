"""h2load (nghttp2's load generator) as a :class:`bench.loadgen.LoadGenerator`: HTTP/2 with
many streams per connection, in clear text (prior knowledge) or over TLS (ALPN).

One run is ``h2load -D <seconds> -c <connections> -m <streams> -t <threads>``, POSTing
``Load.body`` from a temporary file (``-d``) or GETting the URL's path, with
``--log-file`` writing one line per request (start time in µs, status, µs until the response
ended). h2load's text summary gives the counts (``requests: ... done, ... errored, ...
timeout``, ``status codes: ... 4xx, ... 5xx``, ``finished in``, traffic bytes); it prints no
percentiles, so :func:`percentiles` computes p50/p90/p99/p99.9 from the log file. An
``http://`` URL speaks h2c with prior knowledge (RFC 9113 §3.3), ``https://`` negotiates
``h2`` with ALPN (§3.2); h2load does not verify the server's certificate.

Install: ``apt-get install nghttp2-client`` (``scripts/ensure-tools.sh h2load`` does it).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.loadgen import ERROR_KINDS, PERCENTILES, Load, LoadGenError, RunSummary, ToolMissing

#: What every ``bench`` command says when h2load is not installed.
MISSING = ("h2load not found: install it (apt-get install nghttp2-client, brew install "
           "nghttp2) or run `make bench`, which does")

_FINISHED = re.compile(r"finished in ([\d.]+)(us|ms|s),")
_REQUESTS = re.compile(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                       r"(\d+) failed, (\d+) errored, (\d+) timeout")
_STATUS = re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx")
_TRAFFIC = re.compile(r"traffic: \S+ \((\d+)\) total")
_UNIT_US = {"us": 1, "ms": 1_000, "s": 1_000_000}


class H2LoadError(LoadGenError):
    """h2load could not run, failed, or printed no readable summary; the message says which."""


def percentiles(durations_us: Sequence[float]) -> dict[str, float | None]:
    """``min``, ``mean``, ``max`` and :data:`bench.loadgen.PERCENTILES` of request durations
    (µs), nearest-rank; every value None for an empty sequence."""
    keys = ("min", "mean", "max", *PERCENTILES)
    if not durations_us:
        return dict.fromkeys(keys)
    ordered = sorted(durations_us)
    out: dict[str, float | None] = {"min": float(ordered[0]),
                                    "mean": sum(ordered) / len(ordered),
                                    "max": float(ordered[-1])}
    for key in PERCENTILES:
        rank = math.ceil(round(float(key[1:]) * len(ordered) / 100, 6))  # no 999.0000001
        out[key] = float(ordered[max(rank, 1) - 1])
    return out


def read_log(text: str) -> list[float]:
    """Request durations (µs) from h2load's ``--log-file``: tab-separated lines of start time
    (µs since the epoch), status code, µs until the response ended; other lines ignored."""
    durations = []
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[2].strip().isdigit():
            durations.append(float(fields[2]))
    return durations


def parse_summary(output: str, durations_us: Sequence[float]) -> RunSummary:
    """h2load's text summary plus the log file's durations as a :class:`RunSummary`.

    ``requests`` is h2load's ``done`` count; errors: ``status`` the 4xx and 5xx responses,
    ``timeout`` its timeouts, ``read`` the other ``errored`` requests (h2load does not tell
    read from write or connect errors), ``connect`` and ``write`` 0.

    Raises:
        H2LoadError: a summary line is missing.
    """
    finished, requests, status = (_FINISHED.search(output), _REQUESTS.search(output),
                                  _STATUS.search(output))
    if finished is None or requests is None or status is None:
        raise H2LoadError(f"h2load printed no summary: {output[-500:]}")
    duration_us = round(float(finished.group(1)) * _UNIT_US[finished.group(2)])
    done, errored, timeouts = (int(requests.group(i)) for i in (3, 6, 7))
    errors = dict.fromkeys(ERROR_KINDS, 0)
    errors.update(status=int(status.group(3)) + int(status.group(4)), timeout=timeouts,
                  read=max(errored - timeouts, 0))
    traffic = _TRAFFIC.search(output)
    return RunSummary(requests=done, duration_us=duration_us, errors=errors,
                      latency_us=percentiles(durations_us),
                      bytes=int(traffic.group(1)) if traffic else None, tool="h2load")


def h2load_version(path: str) -> str:
    """h2load's version, e.g. ``"1.52.0"`` (from ``h2load --version``)."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    found = re.search(r"nghttp2/(\S+)", out.stdout + out.stderr)
    return found.group(1) if found else "unknown"


@dataclass(frozen=True)
class H2Load:
    """h2load as a load generator.

    Attributes:
        path: the h2load executable.
        streams: concurrent streams per connection (``-m``); 1 is one request at a time per
            connection, like HTTP/1.1 keep-alive without pipelining.
        method: ``"POST"`` (sends ``Load.body`` as ``application/json``) or ``"GET"``.
        name: ``"h2load"``.
    """

    path: str
    streams: int = 1
    method: str = "POST"
    name: str = "h2load"

    @classmethod
    def find(cls) -> H2Load:
        """h2load from PATH; :class:`bench.loadgen.ToolMissing` (:data:`MISSING`) if absent."""
        path = shutil.which("h2load")
        if path is None:
            raise ToolMissing(MISSING)
        return cls(path)

    def version(self) -> str:
        """h2load's (nghttp2's) version."""
        return h2load_version(self.path)

    def command(self, url: str, load: Load, *, cpu: int | None = None,
                body_file: str = "{body}", log_file: str = "{log}") -> list[str]:
        """The exact argv of one run; ``{body}`` and ``{log}`` stand for the temporary request
        body and log files (their real names are filled in by :meth:`run`). With ``cpu``,
        prefixed by ``taskset -c CPU``."""
        argv = [self.path, "-D", str(load.duration), "-c", str(load.connections),
                "-m", str(self.streams), "-t", str(load.threads),
                "-T", f"{max(1, math.ceil(load.timeout))}", f"--log-file={log_file}"]
        if self.method == "POST":
            argv += ["-d", body_file, "-H", "content-type: application/json"]
        argv.append(url)
        taskset = shutil.which("taskset") if cpu is not None else None
        return [taskset, "-c", str(cpu), *argv] if taskset else argv

    def run(self, url: str, load: Load, *, cpu: int | None = None,
            grace: float = 30.0) -> RunSummary:
        """Run h2load against ``url`` for ``load.duration`` seconds.

        Raises:
            H2LoadError: h2load did not start, exited non-zero, overran its duration by
                ``grace`` seconds, or printed no summary.
        """
        with tempfile.TemporaryDirectory(prefix="h2load-") as tmp:
            body, log = Path(tmp) / "body", Path(tmp) / "log.tsv"
            body.write_bytes(load.body)
            argv = self.command(url, load, cpu=cpu, body_file=str(body), log_file=str(log))
            try:
                out = subprocess.run(argv, capture_output=True, text=True,
                                     timeout=load.duration + grace, env=dict(os.environ))
            except FileNotFoundError:
                raise H2LoadError(f"{argv[0]} not found") from None
            except subprocess.TimeoutExpired:
                raise H2LoadError(f"h2load ran {grace:g} s past its duration and was stopped"
                                  ) from None
            output = (out.stdout + out.stderr).strip()
            if out.returncode != 0:
                raise H2LoadError(f"h2load exited with status {out.returncode}: "
                                  f"{output[-500:]}")
            summary = parse_summary(output, read_log(log.read_text() if log.exists() else ""))
        if summary.requests == 0:
            raise H2LoadError(f"h2load completed no request: {output[-500:]}")
        return summary
