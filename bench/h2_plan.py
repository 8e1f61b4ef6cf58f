"""What ``bench h2`` measures: the workloads, the servers that speak HTTP/2, and the rows.

A row is a workload on a server over a protocol at one sweep point (connections × streams);
:func:`plan_rows` lists them in table order, :func:`choose_servers` says which servers can
have rows (and why the others have none). See :mod:`bench.h2` for the experiment.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from apps.h2_bodies import LONG_BODY, SHORT_BODY
from apps.user import SAMPLE_BODY
from bench.harness import Method, validate_servers
from bench.wrk import LUA_DIR
from toyservers.registry import SERVERS

APP = "apps.h2_bodies:app"
DEFAULT_SERVER = "toy-h2"
DEFAULT_COMPARE = ("hypercorn", "granian")
#: The server every row's RPS is divided by (same workload, protocol and sweep point).
REFERENCE = "hypercorn"
#: wrk's script for the GET workloads (post_json.lua's summary hook, method GET).
GET_SCRIPT = LUA_DIR / "get.lua"
#: Protocols, in table order: HTTP/1.1 with wrk, then HTTP/2 in clear text and over TLS.
PROTOCOLS = ("http/1.1", "h2c", "h2")
#: The goals of issue 11: toy-h2's RPS over hypercorn's on ``post`` at this many streams.
GOAL_STREAMS = 10
GOAL_RATIO = 1.3
CHECK_TIMEOUT = 5.0  # seconds the check request may take


@dataclass(frozen=True)
class Workload:
    """One request the rows send: method, path, request body, the expected response body
    (None: the echoed request body, compared as JSON), and one line for reports."""

    name: str
    method: str
    path: str
    body: bytes
    expect: bytes | None
    description: str


WORKLOADS = {
    "post": Workload("post", "POST", "/", SAMPLE_BODY, None,
                     f"POST / with the layers user ({len(SAMPLE_BODY)} B JSON), echoed"),
    "short": Workload("short", "GET", "/short", b"", SHORT_BODY,
                      f"GET /short, a {len(SHORT_BODY)}-byte body"),
    "long": Workload("long", "GET", "/long", b"", LONG_BODY,
                     f"GET /long, a {len(LONG_BODY):,}-byte body"),
}


@dataclass(frozen=True)
class Settings(Method):
    """Everything ``bench h2`` was asked to do: the harness's :class:`Method` (its
    ``connections`` is unused: each row has its own) plus which rows to measure.

    Attributes:
        server: the server measured first (toy-h2).
        compare: the servers measured beside it.
        workloads: names from :data:`WORKLOADS`.
        modes: HTTP/2 protocols to run, ``"h2c"`` and/or ``"h2"`` (TLS).
        sweep_connections: h2load's ``-c`` values (and wrk's connections).
        sweep_streams: h2load's ``-m`` values.
        h1: add the HTTP/1.1 rows (wrk).
    """

    server: str = DEFAULT_SERVER
    compare: tuple[str, ...] = DEFAULT_COMPARE
    workloads: tuple[str, ...] = tuple(WORKLOADS)
    modes: tuple[str, ...] = ("h2c", "h2")
    sweep_connections: tuple[int, ...] = (10,)
    sweep_streams: tuple[int, ...] = (1, 10)
    h1: bool = True


@dataclass(frozen=True)
class RowPlan:
    """One row: a workload on a server over a protocol with ``connections`` × ``streams``
    requests in flight (``streams`` is 1 for HTTP/1.1)."""

    workload: str
    server: str
    protocol: str
    connections: int
    streams: int

    @property
    def label(self) -> str:
        return f"{self.workload} {self.protocol} {self.connections}×{self.streams} {self.server}"


def speaks(server: str, protocol: str) -> bool:
    """True when the registry says ``server`` speaks ``protocol`` (TLS: and serves HTTPS)."""
    spec = SERVERS[server]
    if protocol == "h2" and spec.argv.listen_tls is None:
        return False
    return protocol in spec.protocols


def choose_servers(settings: Settings, installed: Sequence[str]) -> tuple[list[str], list[str]]:
    """The servers to measure, and one note per server left out: not registered yet (the
    default toy-h2 before it exists), not installed, or speaking no HTTP/2.

    Raises:
        UsageProblem: a name given explicitly is unknown or not an ASGI server.
    """
    chosen, notes = [], []
    for name in dict.fromkeys((settings.server, *settings.compare)):
        if name == DEFAULT_SERVER and name not in SERVERS:
            notes.append(f"{name} rows skipped: no such server in this checkout yet")
            continue
        validate_servers([name])
        if name not in installed:
            notes.append(f"{name} rows skipped: not installed here")
        elif not any(speaks(name, p) for p in ("h2c", "h2")):
            notes.append(f"{name} rows skipped: it speaks no HTTP/2 (registry protocols: "
                         f"{', '.join(sorted(SERVERS[name].protocols))})")
        else:
            chosen.append(name)
    return chosen, notes


def plan_rows(settings: Settings, servers: Sequence[str]) -> list[RowPlan]:
    """The rows, grouped by workload, then protocol and sweep point, then server."""
    plans = []
    for workload in settings.workloads:
        for protocol in PROTOCOLS:
            if protocol == "http/1.1":
                if not settings.h1:
                    continue
                points = [(c, 1) for c in settings.sweep_connections]
            elif protocol in settings.modes:
                points = list(itertools.product(settings.sweep_connections,
                                                settings.sweep_streams))
            else:
                continue
            for connections, streams in points:
                plans += [RowPlan(workload, server, protocol, connections, streams)
                          for server in servers if speaks(server, protocol)]
    return plans
