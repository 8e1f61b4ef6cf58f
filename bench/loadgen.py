"""The load-generator interface: what every tool that drives a server under ``bench`` offers.

An experiment says what load it wants (:class:`Load`: connections, threads, seconds, the
request body) and gets one :class:`RunSummary` per run, in the same fields and units whatever
the tool: completed requests, RPS, latency percentiles in µs, errors by kind, duration. The
harness records the exact argv (:meth:`LoadGenerator.command`) beside each run.

wrk is the first implementation (:class:`bench.wrk.Wrk`, HTTP/1.1 with a Lua script). The
interface is shaped for the ones that come next, which are not built yet: h2load (HTTP/2 and
HTTP/1.1, reports percentiles and status classes as JSON-able text) and a Python client that
records a per-request timeline. A generator that cannot tell some error kinds apart reports
them under the nearest kind and 0 for the rest; one that cannot measure a percentile reports
None for it.

:func:`find` is the one place that turns a tool name into a ready generator, and the one
place that says a tool is missing.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from apps.user import SAMPLE_BODY

#: Error kinds of :attr:`RunSummary.errors`: could not connect, a read or write failed on an
#: open connection, a response with status >= 400, no response within the timeout.
ERROR_KINDS = ("connect", "read", "write", "status", "timeout")
#: Latency percentiles of :attr:`RunSummary.latency_us` every generator reports (or None).
PERCENTILES = ("p50", "p90", "p99", "p99.9")

#: Generators by name: ``"module:Class"``, imported on first use. Next: a Python client.
GENERATORS = {"wrk": "bench.wrk:Wrk", "h2load": "bench.h2load:H2Load"}


class LoadGenError(RuntimeError):
    """A run could not start, failed, or left no readable summary; the message says which."""


class ToolMissing(LoadGenError):
    """The generator's executable is not installed; the message says how to install it."""


@dataclass(frozen=True)
class Load:
    """What to send and how hard; the same request for every generator.

    Every generator sends ``POST <url>`` with ``body`` as ``application/json`` on
    ``connections`` keep-alive connections, each sending its next request when the answer
    arrives (a closed loop), for ``duration`` seconds.

    Attributes:
        connections: open connections.
        threads: client threads (or processes) sharing them.
        duration: whole seconds of load.
        timeout: seconds after which a request counts as a ``timeout`` error.
        body: the request body, bytes.
    """

    connections: int = 10
    threads: int = 1
    duration: int = 10
    timeout: float = 2.0
    body: bytes = SAMPLE_BODY


@dataclass(frozen=True)
class RunSummary:
    """One run of a load generator, in units every generator can report.

    Attributes:
        requests: completed requests (a response was read, whatever its status).
        duration_us: length of the run, microseconds.
        errors: counts by kind, keys :data:`ERROR_KINDS`.
        latency_us: microseconds; keys :data:`PERCENTILES` plus whatever else the tool gives
            (wrk: ``min``, ``mean``, ``max``, ``stdev``); None where no request completed.
        bytes: bytes read from the server, or None when the tool does not say.
        tool: the generator's name, e.g. ``"wrk"``.
    """

    requests: int
    duration_us: int
    errors: Mapping[str, int]
    latency_us: Mapping[str, float | None]
    bytes: int | None = None
    tool: str = "wrk"

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
        data = asdict(self)
        data["errors"], data["latency_us"] = dict(self.errors), dict(self.latency_us)
        return {**data, "rps": self.rps}


class LoadGenerator(Protocol):
    """A tool that loads one URL and reports one :class:`RunSummary` per run.

    ``cpu`` pins the tool's process to that CPU (None: not pinned). :meth:`command` and
    :meth:`run` with the same arguments describe the same run, so the harness can record the
    argv before it starts.
    """

    @property
    def name(self) -> str:
        """Short name for reports, e.g. ``"wrk"``."""
        ...

    @property
    def path(self) -> str:
        """The executable that runs, e.g. ``"/usr/bin/wrk"``."""
        ...

    def version(self) -> str:
        """The tool's version, e.g. ``"4.1.0"`` (``"unknown"`` when it does not say)."""
        ...

    def command(self, url: str, load: Load, *, cpu: int | None = None) -> list[str]:
        """The exact argv of one run against ``url``."""
        ...

    def run(self, url: str, load: Load, *, cpu: int | None = None) -> RunSummary:
        """Load ``url`` for ``load.duration`` seconds and return what was measured.

        Raises:
            LoadGenError: the tool failed or left no summary (the message says why).
        """
        ...


def find(name: str = "wrk") -> LoadGenerator:
    """The generator ``name`` ready to run.

    Raises:
        KeyError: no generator has that name.
        ToolMissing: its executable is not installed (the one "not found" message).
    """
    try:
        where = GENERATORS[name]
    except KeyError:
        raise KeyError(f"unknown load generator {name!r} (known: {', '.join(GENERATORS)})"
                       ) from None
    module, _, attr = where.partition(":")
    generator: LoadGenerator = getattr(importlib.import_module(module), attr).find()
    return generator
