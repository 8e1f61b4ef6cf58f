"""``bench h2``: what HTTP/2 multiplexing buys and what it costs, server by server.

The same app (:mod:`apps.h2_bodies`) on each server that speaks HTTP/2 (its registry
``protocols`` hold ``h2c`` or ``h2``): toy-h2 (``--server``), hypercorn and granian
(``--compare``), under three workloads:

- ``post``: ``POST /`` with the layers user (``apps.user.SAMPLE_BODY``), echoed as JSON;
- ``short``: ``GET /short``, a 22-byte body;
- ``long``: ``GET /long``, a 430 KB body (many DATA frames and window updates).

Each workload runs over each protocol:

- ``http/1.1``: wrk, ``--connections`` keep-alive connections, one request at a time each
  (``--no-h1`` leaves these rows out); the baseline multiplexing is measured against;
- ``h2c``: h2load in clear text with prior knowledge (RFC 9113 §3.3);
- ``h2``: h2load over TLS, ``h2`` chosen by ALPN (RFC 9113 §3.2), with a throwaway
  certificate made by trustme for 127.0.0.1;

and, for the two HTTP/2 protocols, over a sweep of connections × streams per connection
(``--connections 10 --streams 1,10``: h2load's ``-c`` and ``-m``; the product is the number
of requests in flight). ``-m 1`` is HTTP/2 with no multiplexing: only framing and HPACK differ
from HTTP/1.1.

Method (:mod:`bench.harness`, the same for every experiment): each row starts its server fresh
on a free port, pinned to one CPU with the load generator on the other, checks one real
request over the row's protocol comes back right (status 200 and the expected body, and
ALPN's ``h2`` over TLS), runs a warm-up and then ``--runs`` measured runs while a thread
samples the RSS of the server's process tree, and stops the tree. A row that fails is
reported with its log tail and the run goes on. RPS is the median over runs; ``× hypercorn``
divides a row's RPS by hypercorn's in the same workload, protocol and sweep point, in the
same run.

Goals (issue 11), checked from the rows and written with their arithmetic: toy-h2 ≥ 1.3×
hypercorn's RPS on ``post`` at ``-m 10``, and toy-h2's peak RSS ≤ hypercorn's there.

Output in ``--output`` (default ``results/h2-<timestamp>/``): results.json (settings, machine,
versions, git commit, every command, every run), results.md (the table, the goals, how it
ran), h2.png, and the same table in the terminal.
"""

from __future__ import annotations

import http.client
import itertools
import json
import socket
import ssl
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import typer
from rich.console import Console
from rich.panel import Panel

from apps.h2_bodies import LONG_BODY, SHORT_BODY
from apps.user import SAMPLE_BODY
from bench import report
from bench.command import consoles, finish, names, user_mistakes
from bench.h2load import H2Load
from bench.harness import (
    Measurement,
    Method,
    Pinning,
    UsageProblem,
    check_port,
    decide_pinning,
    environment,
    kept_on,
    load_generator,
    measure_server,
    validate_servers,
)
from bench.loadgen import Load, LoadGenerator, RunSummary
from bench.machine import usable_cpus
from bench.stats import summarize
from bench.wrk import LUA_DIR, POST_JSON, Wrk
from toyservers.registry import SERVERS, available, get

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


# --- one real request over the row's protocol, before measuring ------------------------------


def h2_fetch(host: str, port: int, *, method: str = "GET", path: str = "/", body: bytes = b"",
             context: ssl.SSLContext | None = None, timeout: float = CHECK_TIMEOUT
             ) -> tuple[int, bytes]:
    """One HTTP/2 request on a fresh connection: ``(status, response body)``.

    Clear text with prior knowledge when ``context`` is None (RFC 9113 §3.3), else TLS with
    ALPN offering only ``h2`` (§3.2). Request bodies of this size fit the initial window.

    Raises:
        OSError: the connection failed or timed out (``timeout`` seconds per operation).
        ValueError: TLS chose no ``h2``, or the server ended the connection or reset the
            stream first.
    """
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    raw = socket.create_connection((host, port), timeout=timeout)
    sock: socket.socket = raw
    try:
        if context is not None:
            sock = context.wrap_socket(raw, server_hostname=host)
            if sock.selected_alpn_protocol() != "h2":
                raise ValueError(f"ALPN chose {sock.selected_alpn_protocol()!r}, not 'h2'")
        conn.initiate_connection()
        headers = [(":method", method), (":path", path),
                   (":scheme", "https" if context else "http"), (":authority", f"{host}:{port}")]
        if body:
            headers += [("content-type", "application/json"),
                        ("content-length", str(len(body)))]
        conn.send_headers(1, headers, end_stream=not body)
        if body:
            conn.send_data(1, body, end_stream=True)
        sock.sendall(conn.data_to_send())
        status, data = 0, bytearray()
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise ValueError("the server closed the connection before the response ended")
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers or []).get(b":status", b"0"))
                elif isinstance(event, h2.events.DataReceived):
                    data += event.data or b""
                    conn.acknowledge_received_data(event.flow_controlled_length or 0, 1)
                elif isinstance(event, h2.events.StreamEnded):
                    return status, bytes(data)
                elif isinstance(event, h2.events.StreamReset | h2.events.ConnectionTerminated):
                    raise ValueError(f"the server ended the request: {event}")
            sock.sendall(conn.data_to_send())
    finally:
        sock.close()


def h1_fetch(host: str, port: int, *, method: str = "GET", path: str = "/", body: bytes = b"",
             timeout: float = CHECK_TIMEOUT) -> tuple[int, bytes]:
    """One HTTP/1.1 request: ``(status, response body)``; OSError or
    http.client.HTTPException when it fails."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body else {}
        conn.request(method, path, body=body or None, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def check_row(plan: RowPlan, context: ssl.SSLContext | None) -> Callable[[str, int], str | None]:
    """The harness's check for ``plan``: None when one request over its protocol answers 200
    with the expected body, else the problem in one line."""
    workload = WORKLOADS[plan.workload]

    def check(host: str, port: int) -> str | None:
        try:
            if plan.protocol == "http/1.1":
                status, body = h1_fetch(host, port, method=workload.method,
                                        path=workload.path, body=workload.body)
            else:
                status, body = h2_fetch(host, port, method=workload.method, path=workload.path,
                                        body=workload.body,
                                        context=context if plan.protocol == "h2" else None)
        except (OSError, ValueError, http.client.HTTPException, h2.exceptions.H2Error) as exc:
            return f"check request over {plan.protocol} failed: {exc!r}"
        if status != 200:
            return f"check request over {plan.protocol} got status {status}: {body[:200]!r}"
        if workload.expect is None:
            try:
                same = json.loads(body) == json.loads(workload.body)
            except ValueError:
                same = False
            if not same:
                return f"check request got {body[:200]!r}, not the echoed user"
        elif body != workload.expect:
            return (f"check request got {len(body)} bytes, not the {len(workload.expect)}-byte "
                    f"{workload.path} body")
        return None

    return check


# --- the load generator of a row ---------------------------------------------------------------


@dataclass(frozen=True)
class Routed:
    """A load generator aimed at the row's scheme and path: the harness gives every generator
    ``http://host:port/``, and this rewrites it (``https`` for TLS rows, ``/short``...)."""

    inner: LoadGenerator
    scheme: str
    target: str

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def path(self) -> str:
        return self.inner.path

    def version(self) -> str:
        return self.inner.version()

    def url(self, url: str) -> str:
        """``url`` with this scheme and path."""
        parts = urlsplit(url)
        return urlunsplit((self.scheme, parts.netloc, self.target, "", ""))

    def command(self, url: str, load: Load, *, cpu: int | None = None) -> list[str]:
        return self.inner.command(self.url(url), load, cpu=cpu)

    def run(self, url: str, load: Load, *, cpu: int | None = None) -> RunSummary:
        return self.inner.run(self.url(url), load, cpu=cpu)


def row_generator(plan: RowPlan, wrk: Wrk | None, h2load: H2Load) -> LoadGenerator:
    """wrk for HTTP/1.1 rows (the POST or the GET script), h2load with ``-m streams`` else."""
    workload = WORKLOADS[plan.workload]
    scheme = "https" if plan.protocol == "h2" else "http"
    if plan.protocol == "http/1.1":
        assert wrk is not None
        script = POST_JSON if workload.method == "POST" else GET_SCRIPT
        return Routed(replace(wrk, script=script), scheme, workload.path)
    return Routed(replace(h2load, streams=plan.streams, method=workload.method), scheme,
                  workload.path)


# --- what came out -------------------------------------------------------------------------


@dataclass
class RowResult:
    """A row's plan and what the harness measured for it."""

    plan: RowPlan
    measurement: Measurement = field(default_factory=Measurement)


def row_json(result: RowResult) -> dict[str, Any]:
    """The ``rows`` entry of results.json for one row.

    Keys: ``workload``, ``server``, ``protocol``, ``connections``, ``streams``, ``tool``,
    ``status``, ``error``, ``log_tail``, ``command`` (the server's argv); ``rps_median``,
    ``rps_runs``, ``rps_min``, ``rps_max`` (req/s), ``spread_pct``, ``spread_flag``;
    ``p50_ms``, ``p90_ms``, ``p99_ms`` (median over runs); ``errors``, ``errors_by_kind``;
    ``rss_peak_mb`` (10^6 bytes, the largest over measured runs); ``vs_reference`` (filled
    by :func:`rows_json`); ``runs`` (every run with its load generator's argv).
    """
    plan, measurement = result.plan, result.measurement
    summaries = measurement.measured
    row: dict[str, Any] = {
        "workload": plan.workload, "server": plan.server, "protocol": plan.protocol,
        "connections": plan.connections, "streams": plan.streams,
        "tool": "wrk" if plan.protocol == "http/1.1" else "h2load",
        "status": measurement.status, "error": measurement.error,
        "log_tail": measurement.log_tail, "command": measurement.command,
        "rps_median": None, "rps_runs": [], "rps_min": None, "rps_max": None,
        "spread_pct": None, "spread_flag": False, "p50_ms": None, "p90_ms": None,
        "p99_ms": None, "errors": None, "errors_by_kind": None, "rss_peak_mb": None,
        "vs_reference": None, "runs": [run.to_json() for run in measurement.runs],
    }
    if measurement.status != "ok" or not summaries:
        return row
    rps = [s.rps for s in summaries]
    spread = summarize(rps)
    by_kind = {kind: sum(s.errors[kind] for s in summaries) for kind in summaries[0].errors}

    def latency_ms(key: str) -> float | None:
        values = [v for s in summaries if (v := s.latency_us.get(key)) is not None]
        return summarize(values).median / 1000 if values else None

    peak = max(r.rss_peak_bytes for r in measurement.runs if r.kind == "measured")
    row.update({
        "rps_median": spread.median, "rps_runs": rps, "rps_min": spread.minimum,
        "rps_max": spread.maximum, "spread_pct": 100 * spread.spread,
        "spread_flag": spread.flagged, "p50_ms": latency_ms("p50"),
        "p90_ms": latency_ms("p90"), "p99_ms": latency_ms("p99"),
        "errors": sum(by_kind.values()), "errors_by_kind": by_kind,
        "rss_peak_mb": peak / 1e6 if peak else None,
    })
    return row


def _key(row: dict[str, Any]) -> tuple[str, str, int, int]:
    return row["workload"], row["protocol"], row["connections"], row["streams"]


def rows_json(results: Sequence[RowResult]) -> list[dict[str, Any]]:
    """Every row's :func:`row_json`, with ``vs_reference``: its RPS over :data:`REFERENCE`'s
    in the same workload, protocol and sweep point (None without both)."""
    rows = [row_json(r) for r in results]
    reference = {_key(r): r["rps_median"] for r in rows if r["server"] == REFERENCE}
    for row in rows:
        base = reference.get(_key(row))
        if row["rps_median"] is not None and base:
            row["vs_reference"] = row["rps_median"] / base
    return rows


def goals(rows: Sequence[dict[str, Any]], server: str = DEFAULT_SERVER) -> list[dict[str, Any]]:
    """Issue 11's goals for every ``post`` sweep point at ``-m`` :data:`GOAL_STREAMS`: one
    entry per (protocol, connections) and goal, ``{"goal", "protocol", "connections", "met"
    (True, False, or None when a row is missing), "arithmetic"}``."""
    out = []
    found = {(_key(r), r["server"]): r for r in rows}
    points = sorted({(r["protocol"], r["connections"]) for r in rows
                     if r["workload"] == "post" and r["streams"] == GOAL_STREAMS})
    for protocol, connections in points:
        key = ("post", protocol, connections, GOAL_STREAMS)
        mine, theirs = found.get((key, server)), found.get((key, REFERENCE))
        where = f"post, {protocol}, -c {connections} -m {GOAL_STREAMS}"
        rps_goal = f"{server} RPS ≥ {GOAL_RATIO}× {REFERENCE}'s ({where})"
        rss_goal = f"{server} peak RSS ≤ {REFERENCE}'s ({where})"
        problem = next((f"no {name} row" if row is None else f"the {name} row {row['status']}"
                        for name, row in ((server, mine), (REFERENCE, theirs))
                        if row is None or row["status"] != "ok" or not row["rps_median"]),
                       None)
        if problem is not None or mine is None or theirs is None:
            for goal in (rps_goal, rss_goal):
                out.append({"goal": goal, "protocol": protocol, "connections": connections,
                            "met": None, "arithmetic": problem})
            continue
        ratio = mine["rps_median"] / theirs["rps_median"]
        out.append({"goal": rps_goal, "protocol": protocol, "connections": connections,
                    "met": ratio >= GOAL_RATIO,
                    "arithmetic": f"{mine['rps_median']:,.0f} / {theirs['rps_median']:,.0f} = "
                                  f"{ratio:.2f}× ({'≥' if ratio >= GOAL_RATIO else '<'} "
                                  f"{GOAL_RATIO})"})
        a, b = mine["rss_peak_mb"], theirs["rss_peak_mb"]
        out.append({"goal": rss_goal, "protocol": protocol, "connections": connections,
                    "met": a <= b,
                    "arithmetic": f"{a:.1f} MB {'≤' if a <= b else '>'} {b:.1f} MB"})
    return out


# --- the table -----------------------------------------------------------------------------

HEADERS = ["Workload", "Protocol", "c×m", "Server", "RPS", "min–max", "p50 ms", "p99 ms",
           "Errors", "RSS MB", f"× {REFERENCE}"]
RIGHT = [False, False, True, False, True, True, True, True, True, True, True]


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def table_cells(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The formatted cells of each row, in :data:`HEADERS` order; ``*`` marks a spread over
    10 %, and a failed row says so in the RPS column."""
    cells = []
    for row in rows:
        head = [row["workload"], row["protocol"], f"{row['connections']}×{row['streams']}",
                row["server"]]
        if row["status"] != "ok" or row["rps_median"] is None:
            cells.append([*head, row["status"], *["–"] * 6])
            continue
        flag = " *" if row["spread_flag"] else ""
        cells.append([
            *head, f"{row['rps_median']:,.0f}{flag}",
            f"{row['rps_min']:,.0f}–{row['rps_max']:,.0f}",
            _fmt(row["p50_ms"], ".2f"), _fmt(row["p99_ms"], ".2f"), f"{row['errors']:,}",
            _fmt(row["rss_peak_mb"], ".1f"), _fmt(row["vs_reference"], ".2f", "×"),
        ])
    return cells


def how_it_ran(data: dict[str, Any]) -> list[str]:
    """The "how it ran" lines of the report, from results.json's content."""
    s, machine = data["settings"], data["machine"]
    lines = [data["pinning"]["text"]]
    tools = [f"h2load {data['h2load']['version']}"]
    if "wrk" in data:
        tools.append(f"wrk {data['wrk']['version']} (the http/1.1 rows)")
    lines.append(
        f"{', '.join(tools)}: {s['threads']} thread(s); c×m is connections × streams per "
        f"connection (h2load -c and -m); {s['duration_s']} s per run, {s['warmup_s']} s warm-up, "
        f"{s['runs']} run(s) per row; RPS is the median, with min–max over runs")
    lines += [f"{name}: {WORKLOADS[name].description}" for name in s["workloads"]]
    lines.append("h2c: HTTP/2 in clear text with prior knowledge; h2: over TLS with ALPN "
                 "(a trustme certificate); http/1.1: wrk, one request at a time per connection")
    lines.append(f"× {REFERENCE}: the row's RPS over {REFERENCE}'s in the same workload, "
                 "protocol and c×m; * marks runs spread more than 10 %")
    lines.append(f"app: {APP} on every server; servers: {', '.join(s['servers'])}")
    lines.append(f"machine: {machine['cpu_model']}, {machine['cores']} cores; "
                 f"Python {data['python']['version']}; {data['date']}")
    git = data.get("git")
    lines.append("toyservers: not a git checkout" if git is None else
                 f"toyservers at commit {git['commit'][:12]}"
                 + (", with uncommitted changes" if git["dirty"] else ""))
    lines.append("command: `" + " ".join(data["command"]) + "`")
    return lines


def goal_lines(data: dict[str, Any]) -> list[str]:
    """One line per goal: met, not met or not measured, with its arithmetic."""
    words = {True: "met", False: "**not met**", None: "not measured"}
    return [f"{g['goal']}: {words[g['met']]} ({g['arithmetic']})" for g in data["goals"]]


def write_outputs(out: Path, data: dict[str, Any]) -> list[Path]:
    """Write results.json, results.md and h2.png into ``out``; return their paths."""
    rows = data["rows"]
    notes = [*goal_lines(data), *data["notes"]]
    notes += [f"{r['workload']} {r['protocol']} {r['connections']}×{r['streams']} "
              f"({r['server']}) {r['status']}: {r['error']}" for r in rows if r["status"] != "ok"]
    paths = out / "results.json", out / "results.md", out / "h2.png"
    report.write_json(paths[0], data)
    report.write_markdown(paths[1], "bench h2: HTTP/2 against HTTP/1.1, server by server",
                          how_it_ran(data), HEADERS, table_cells(rows), notes, RIGHT)
    ok = [r for r in rows if r["status"] == "ok" and r["rps_median"] is not None]
    report.bar_chart(paths[2], [f"{r['workload']} {r['protocol']} {r['connections']}×"
                                f"{r['streams']} {r['server']}" for r in ok],
                     [r["rps_median"] for r in ok], [r["rps_min"] for r in ok],
                     [r["rps_max"] for r in ok],
                     title="The same app over HTTP/1.1 (wrk) and HTTP/2 (h2load), requests/s",
                     xlabel="requests per second, median (min–max whiskers)",
                     subtitle=data["pinning"]["text"])
    return list(paths)


# --- measuring -----------------------------------------------------------------------------


def _program() -> str:
    """How ``bench`` was called: ``bench`` for ``python -m bench.cli`` too."""
    name = Path(sys.argv[0]).name
    return "bench" if name in ("cli.py", "__main__.py") else name


def make_certificate(folder: Path) -> tuple[tuple[str, str], ssl.SSLContext]:
    """A throwaway CA and a certificate for 127.0.0.1 in ``folder``: ``((certfile,
    keyfile), client context trusting the CA and offering ALPN h2)``.

    Raises:
        UsageProblem: trustme (the ``dev`` extra) is not installed.
    """
    try:
        import trustme
    except ImportError:
        raise UsageProblem("the TLS rows need trustme: pip install -e '.[dev]' (make bench "
                           "does), or leave them out with --modes h2c") from None
    folder.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = folder / "cert.pem", folder / "key.pem"
    issued.private_key_pem.write_to_path(str(key))
    issued.cert_chain_pems[0].write_to_path(str(cert))
    for extra in issued.cert_chain_pems[1:]:
        extra.write_to_path(str(cert), append=True)
    context = ssl.create_default_context()
    ca.configure_trust(context)
    context.set_alpn_protocols(["h2"])
    return (str(cert), str(key)), context


def measure(settings: Settings, console: Console, out: Path) -> dict[str, Any]:
    """Measure every row and return results.json's content (see :func:`write_outputs`).

    Raises:
        UsageProblem: h2load (or wrk) is missing, a server name is unknown, a CPU or the
            port is unusable, or no server to measure speaks HTTP/2.
    """
    h2load = load_generator("h2load")
    assert isinstance(h2load, H2Load)
    wrk = load_generator("wrk") if settings.h1 else None
    assert wrk is None or isinstance(wrk, Wrk)
    servers, notes = choose_servers(settings, available())
    for note in notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    if not servers:
        raise UsageProblem("no server to measure speaks HTTP/2 (see the notes above)")
    check_port(settings.host, settings.port)
    pinning: Pinning = decide_pinning(settings, usable_cpus(), client="the load generator",
                                      flags=("--server-cpu", "--load-cpu"))
    if pinning.server_cpu is None and settings.pin:
        console.print(f"[yellow]note:[/] {pinning.text}")
    started = datetime.now(UTC)
    env = environment(h2load)  # the git state before the run writes its files
    with tempfile.TemporaryDirectory(prefix="bench-h2-tls-") as tls_dir:
        tls, context = (None, None)
        if "h2" in settings.modes:  # a throwaway key: never written to the results folder
            tls, context = make_certificate(Path(tls_dir))
        results = _measure_rows(settings, servers, pinning, tls, context, h2load, wrk, console,
                                out)
    rows = rows_json(results)
    return _finish(settings, servers, notes, pinning, started, env, rows, wrk)


def _measure_rows(settings: Settings, servers: list[str], pinning: Pinning,
                  tls: tuple[str, str] | None, context: ssl.SSLContext | None, h2load: H2Load,
                  wrk: Wrk | None, console: Console, out: Path) -> list[RowResult]:
    """Measure every planned row in order with the harness, one line printed per row."""
    plans = plan_rows(settings, servers)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results: list[RowResult] = []
    with kept_on(pinning.load_cpu), report.progress_bar(console) as progress:
        task = progress.add_task("starting", total=settings.steps * len(plans))
        for plan in plans:
            port = settings.pick_port()
            argv = get(plan.server).command(APP, settings.host, port,
                                            tls=tls if plan.protocol == "h2" else None)
            measurement = measure_server(
                argv, port, label=plan.label, method=replace(settings,
                                                             connections=plan.connections),
                pinning=pinning, generator=row_generator(plan, wrk, h2load),
                log_path=logs / (plan.label.replace(" ", "-").replace("/", "") + ".log"),
                progress=report.RichProgress(progress, task), check=check_row(plan, context))
            results.append(RowResult(plan, measurement))
            if measurement.status == "ok":
                rps = summarize([s.rps for s in measurement.measured]).median
                progress.console.print(f"[green]✓[/] {plan.label}: {rps:,.0f} requests/s")
            else:
                progress.console.print(Panel(measurement.log_tail or "(empty log)",
                                             title=f"[red]✗ {plan.label} failed:[/] "
                                                   f"{measurement.error}", title_align="left"))
    return results


def _finish(settings: Settings, servers: list[str], notes: list[str], pinning: Pinning,
            started: datetime, env: dict[str, Any], rows: list[dict[str, Any]],
            wrk: Wrk | None) -> dict[str, Any]:
    """results.json's content from what :func:`measure` gathered."""
    if wrk is not None:
        env["wrk"] = {"path": wrk.path, "version": wrk.version()}
    return {
        "experiment": "h2",
        "date": started.isoformat(timespec="seconds"),
        "command": [_program(), *sys.argv[1:]],
        "settings": {
            "threads": settings.threads, "duration_s": settings.duration,
            "warmup_s": settings.warmup, "runs": settings.runs, "servers": servers,
            "server": settings.server, "compare": list(settings.compare),
            "workloads": list(settings.workloads), "modes": list(settings.modes),
            "connections": list(settings.sweep_connections),
            "streams": list(settings.sweep_streams), "h1": settings.h1,
            "host": settings.host, "timeout_s": settings.timeout, "app": APP,
            "post_body": SAMPLE_BODY.decode(), "reference": REFERENCE,
        },
        "pinning": {"server_cpu": pinning.server_cpu, "load_cpu": pinning.load_cpu,
                    "text": pinning.text},
        **env,
        "notes": notes,
        "rows": rows,
        "goals": goals(rows, settings.server),
    }


# --- the command ---------------------------------------------------------------------------


def _counts(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in names(text))
    except ValueError:
        raise UsageProblem(f"{option} takes comma-separated whole numbers, not {text!r}"
                           ) from None
    if not values or min(values) < 1:
        raise UsageProblem(f"{option} takes numbers of 1 or more, not {text!r}")
    return values


def parse_settings(*, workloads: str, modes: str, connections: str, streams: str,
                   **rest: Any) -> Settings:
    """Settings from the command's options; UsageProblem names the first bad value."""
    chosen = names(workloads)
    unknown = [n for n in chosen if n not in WORKLOADS]
    if unknown or not chosen:
        raise UsageProblem(f"unknown workload {unknown[0] if unknown else workloads!r} in "
                           f"--workloads (known: {', '.join(WORKLOADS)})")
    chosen_modes = names(modes)
    bad = [m for m in chosen_modes if m not in ("h2c", "h2")]
    if bad:
        raise UsageProblem(f"unknown mode {bad[0]!r} in --modes (known: h2c, h2)")
    return Settings(workloads=chosen, modes=chosen_modes,
                    sweep_connections=_counts(connections, "--connections"),
                    sweep_streams=_counts(streams, "--streams"), **rest)


def command(
    duration: Annotated[int, typer.Option(min=1, help="Seconds per measured run.")] = 10,
    warmup: Annotated[int, typer.Option(min=0, help="Seconds of warm-up per row (0: none).")
                      ] = 2,
    runs: Annotated[int, typer.Option(min=1, help="Measured runs per row.")] = 3,
    server: Annotated[str, typer.Option(help="The server measured first.")] = DEFAULT_SERVER,
    compare: Annotated[str, typer.Option(help="Comma-separated servers measured beside it "
                                              "('' for none).")] = ",".join(DEFAULT_COMPARE),
    workloads: Annotated[str, typer.Option(
        help="Comma-separated workloads: post (the layers user, echoed), short (GET, 22 B), "
             "long (GET, 430 KB).")] = ",".join(WORKLOADS),
    modes: Annotated[str, typer.Option(
        help="Comma-separated HTTP/2 modes: h2c (clear text, prior knowledge), h2 (TLS, "
             "ALPN).")] = "h2c,h2",
    connections: Annotated[str, typer.Option(
        help="Comma-separated connection counts to sweep (h2load -c; wrk's connections).")
                           ] = "10",
    streams: Annotated[str, typer.Option(
        help="Comma-separated streams per connection to sweep (h2load -m).")] = "1,10",
    h1: Annotated[bool, typer.Option(help="Add the HTTP/1.1 rows (wrk, same app).")] = True,
    threads: Annotated[int, typer.Option(min=1, help="Load-generator threads.")] = 1,
    pin: Annotated[bool, typer.Option(help="Pin the server and the load generator to "
                                           "separate CPUs.")] = True,
    server_cpu: Annotated[int, typer.Option(help="CPU for the server when pinned.")] = 0,
    load_cpu: Annotated[int, typer.Option(help="CPU for h2load/wrk when pinned.")] = 1,
    host: Annotated[str, typer.Option(help="Address the servers listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535,
                                      help="Port for every server (0: a free one per row).")
                    ] = 0,
    output: Annotated[Path | None, typer.Option(
        help="Folder for results.json, results.md and h2.png "
             "[default: results/h2-<timestamp>]")] = None,
) -> None:
    """HTTP/2 against HTTP/1.1: h2load (h2c and TLS, a sweep of connections × streams) and
    wrk on toy-h2, hypercorn and granian, the same app."""
    console, errors = consoles()
    out = output if output is not None else report.default_output("h2")
    with user_mistakes(errors):
        settings = parse_settings(
            workloads=workloads, modes=modes, connections=connections, streams=streams,
            duration=duration, warmup=warmup, runs=runs, server=server,
            compare=names(compare), h1=h1, threads=threads, pin=pin,
            server_cpu=server_cpu, load_cpu=load_cpu, host=host, port=port)
        if not settings.modes and not settings.h1:
            raise UsageProblem("nothing to measure: --modes is empty and --no-h1 was given")
        report.prepare_output(out)
        data = measure(settings, console, out)
    finish(console, errors, "bench h2: HTTP/2 against HTTP/1.1", HEADERS,
           table_cells(data["rows"]), how_it_ran(data), RIGHT, data["rows"],
           lambda: write_outputs(out, data), notes=goal_lines(data))


def register(app: typer.Typer) -> None:
    """Add ``h2`` to the ``bench`` CLI."""
    app.command("h2")(command)
