"""``bench cluster``: N toy servers behind nginx and behind HAProxy.

The backends are ``--backends`` processes (3 by default) of one registry server (``--server``,
toy-httptools by default), each serving ``apps/cluster_app.py`` on its own port; the proxies
are nginx and HAProxy from Debian's packages, run unprivileged from configs generated from
``bench/proxies/`` into a temporary folder (:mod:`bench.cluster_stack`). Everything listens
on 127.0.0.1. A proxy that is not installed has its rows skipped with one line
(``scripts/ensure-tools.sh nginx haproxy`` installs both; ``make bench ARGS=cluster`` runs it).

Four scenarios (``--scenarios``), each a table:

- **hop**: what the proxy's hop costs. wrk POSTs the user (``bench layers``' request) to one
  backend directly, and to each proxy in front of one backend with upstream keep-alive off
  (a new connection to the backend per request) and on, in interleaved rounds
  (:func:`bench.rounds.measure_rounds`); µs added and % of direct are computed round by round
  against the direct row's run of the same round. One backend, so the hop is the only
  difference: spreading the requests over N backends that share a core changes how much work
  each does per wake-up, which is not the hop's cost. The proxy's own CPU time per request and
  the backend's are columns of their own.
- **balance**, **failover**, **rolling**: what happens to requests when backends differ, die,
  or are restarted one by one under load (:mod:`bench.cluster_events`).
- **ws**: an idle WebSocket through nginx, whose ``proxy_read_timeout`` closes it unless the
  server's pings keep bytes coming (:mod:`bench.cluster_ws`).

Where things run (:func:`place`): wrk on ``--wrk-cpu``, the proxy on ``--server-cpu``, the
backends on the remaining CPUs, one each in turn; on a machine with only two, the backends
share the proxy's CPU: CPU 0 is then the whole "server side" (proxy and backends), CPU 1 the
client, and a row's CPU µs added is what the hop costs that core per request: the proxy's
work and the backend's extra work (a connection per request without keep-alive, the
forwarding headers) together. The direct row's backend runs on the proxy's CPU.

Left out: WebSocket through HAProxy, and backends in network namespaces with ``tc netem``
delays (the report says both).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from apps.user import SAMPLE_BODY
from bench import command as options
from bench import report
from bench.cluster_events import (
    BACKEND_OPTIONS,
    RollingHow,
    Stage,
    balance_run,
    failover_run,
    guarded,
    rolling_run,
)
from bench.cluster_report import how_it_ran, notes_of, table_sections, write_outputs
from bench.cluster_stack import APP, PROXIES, Fleet, Proxy, Upstream, find_proxy, proxy_version
from bench.cluster_ws import measure_ws
from bench.command import (
    consoles,
    invocation,
    logs_folder,
    names,
    pinning_for,
    user_mistakes,
)
from bench.harness import (
    Method,
    Pinning,
    UsageProblem,
    environment,
    kept_on,
    load_generator,
    validate_servers,
)
from bench.machine import usable_cpus
from bench.rounds import Contender, Measurement, measure_rounds, rotated
from bench.rows import RowPlan, RowResult, row_json
from bench.stats import summarize
from bench.wrk import POST_JSON
from toyservers.registry import get

SCENARIOS = ("hop", "balance", "failover", "rolling", "ws")
DEFAULT_SERVER = "toy-httptools"
#: The rolling-restart variants of each proxy (:mod:`bench.cluster_events`).
ROLLING: dict[str, tuple[RollingHow, ...]] = {
    "nginx": ("sigterm", "reload", "idle-close-on-response"),
    "haproxy": ("sigterm", "drain", "idle-close-on-response")}
MISSING = "{name} is not installed: scripts/ensure-tools.sh {name} installs it (make bench " \
          "ARGS=cluster does)"


@dataclass(frozen=True)
class Settings(Method):
    """Everything ``bench cluster`` was asked to do: the harness's :class:`Method` plus the
    cluster's shape.

    Attributes:
        server: the backends' registry server.
        backends: how many backends (2 or more).
        proxies: which proxies get rows.
        scenarios: which tables to measure (:data:`SCENARIOS`).
        wait_ms: what each request waits in the app in the failover and rolling rows, ms.
        slow_ms: what backend b1 waits per request in the balance rows, ms.
    """

    server: str = DEFAULT_SERVER
    backends: int = 3
    proxies: tuple[str, ...] = PROXIES
    scenarios: tuple[str, ...] = SCENARIOS
    wait_ms: float = 10.0
    slow_ms: float = 5.0


@dataclass(frozen=True)
class Placement:
    """Where each process runs: a CPU, or None when not pinned.

    Attributes:
        wrk, proxy: their CPUs.
        backends: the backends' CPUs, backend ``i`` on ``backends[i % len(backends)]``.
        text: one line for the report.
    """

    wrk: int | None
    proxy: int | None
    backends: tuple[int | None, ...]
    text: str


def place(pinning: Pinning, usable: list[int], backends: int) -> Placement:
    """Pin the backends on the CPUs that neither wrk nor the proxy has, one each in turn, or
    on the proxy's when none is left (module docstring)."""
    if pinning.server_cpu is None:
        return Placement(None, None, (None,), pinning.text.replace("server", "proxy, backends"))
    rest = tuple(c for c in usable if c not in (pinning.server_cpu, pinning.load_cpu))
    cpus = rest or (pinning.server_cpu,)
    shown = ", ".join(str(cpu) for cpu in cpus[:backends])
    text = (f"pinned: wrk on CPU {pinning.load_cpu}, the proxy on CPU {pinning.server_cpu}, "
            f"backends on CPU {shown}")
    if not rest:
        text += (f" (only {len(usable)} usable cores: the proxy and every backend share one, "
                 "the server side's)")
    return Placement(pinning.load_cpu, pinning.server_cpu, cpus, text)


def skipped_error(name: str, found: dict[str, str | None]) -> str | None:
    """Why ``name``'s rows are skipped (not installed), or None."""
    return MISSING.format(name=name) if found.get(name) is None else None


# --- the hop -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HopRow:
    """One row of the hop table: ``direct`` (proxy None) or a proxy with upstream keep-alive
    on or off."""

    proxy: str | None
    keepalive: bool

    @property
    def label(self) -> str:
        if self.proxy is None:
            return "direct"
        return f"{self.proxy}, keep-alive {'on' if self.keepalive else 'off'}"


def hop_rows(proxies: tuple[str, ...]) -> list[HopRow]:
    """direct, then each proxy with upstream keep-alive off and on."""
    return [HopRow(None, False), *(HopRow(p, ka) for p in proxies for ka in (False, True))]


def hop_contender(row: HopRow, settings: Settings, stage: Stage, fleet: Fleet,
                  found: dict[str, str | None], logs: Path) -> Contender:
    """How the rounds measure ``row``: its server is the proxy (the backends, shared, are its
    companions), or for ``direct`` one more backend."""
    generator = load_generator("wrk")
    load = settings.load(settings.duration)
    if row.proxy is None:
        return Contender(row.label, lambda port: get(settings.server).command(
            APP, settings.host, port), generator, load, logs / "hop-direct.log",
            env={"BACKEND_NAME": "direct"})
    path = found[row.proxy]
    assert path is not None
    name = f"hop-{row.proxy}-ka-{'on' if row.keepalive else 'off'}"
    proxy = stage.proxy(row.proxy, path, name, fleet, Upstream(keepalive=row.keepalive))
    return Contender(row.label, proxy.argv, generator, load, logs / f"{name}.log",
                     companions=fleet.pids)


def measure_hop(settings: Settings, stage: Stage, placement: Placement,
                found: dict[str, str | None], logs: Path, progress: report.RichProgress
                ) -> list[dict[str, Any]]:
    """The hop table's rows (results.json ``rows``): :func:`bench.rows.row_json` each, every
    proxy row compared with ``direct``, plus ``proxy``, ``keepalive``, and the medians
    ``proxy_cpu_us`` and ``backends_cpu_us`` (CPU µs per request)."""
    rows = hop_rows(settings.proxies)
    live = [r for r in rows if r.proxy is None or found[r.proxy] is not None]
    fleet = stage.fleet("hop-", lambda _: 0.0, count=1)
    pinning = Pinning(placement.proxy, placement.wrk, placement.text)
    measured: dict[HopRow, Measurement] = {}
    progress.update("hop: starting the backends")
    fleet.start()
    try:
        contenders = [hop_contender(r, settings, stage, fleet, found, logs) for r in live]
        measured = dict(zip(live, measure_rounds(contenders, settings, pinning, progress),
                            strict=True))
    finally:
        fleet.stop()
    out: list[dict[str, Any]] = []
    for row in rows:
        measurement = measured.get(row) or Measurement(
            "skipped", error=skipped_error(row.proxy or "", found))
        plan = RowPlan(row.label, settings.server, APP,
                       "wrk straight to one backend" if row.proxy is None else
                       f"wrk to {row.proxy} in front of one backend")
        json_row = row_json(RowResult(plan, measurement), out[0] if out else None)
        json_row.update(hop_cpu(json_row, row.proxy is not None, out[0] if out else None))
        out.append({"proxy": row.proxy, "keepalive": row.keepalive, **json_row})
    return out


def cpu_by_round(row: dict[str, Any]) -> dict[int, float]:
    """A hop row's server-side CPU µs per request in each round: the proxy's and the
    backend's added up (``direct``: its backend's)."""
    found = {}
    for run in row["runs"]:
        if run["kind"] == "measured" and run["cpu_us_per_request"] is not None:
            found[run["round"]] = (run["cpu_us_per_request"]
                                   + (run.get("companion_cpu_us_per_request") or 0.0))
    return found


def hop_cpu(row: dict[str, Any], proxied: bool, direct: dict[str, Any] | None
            ) -> dict[str, float | None]:
    """The CPU columns of a hop row: the median CPU µs per request of the proxy
    (``proxy_cpu_us``) and of the backend (``backends_cpu_us``; for ``direct`` its server's
    own) over the measured runs, and what the proxied path adds to the CPU time per request
    of both sides together over ``direct``'s, round by round: ``cpu_added`` (median),
    ``cpu_added_min``, ``cpu_added_max``. Unlike µs added, which is read off the throughput,
    this does not move when the machine's other programs take more or less of the core."""
    runs = [r for r in row["runs"] if r["kind"] == "measured" and r["summary"]]

    def median_of(key: str) -> float | None:
        values = [r[key] for r in runs if r.get(key) is not None]
        return summarize(values).median if values else None

    columns: dict[str, float | None] = {
        "proxy_cpu_us": median_of("cpu_us_per_request") if proxied else None,
        "backends_cpu_us": median_of("companion_cpu_us_per_request" if proxied
                                     else "cpu_us_per_request"),
        "cpu_added": None, "cpu_added_min": None, "cpu_added_max": None}
    if direct is not None:
        mine, theirs = cpu_by_round(row), cpu_by_round(direct)
        added = [mine[r] - theirs[r] for r in sorted(mine) if r in theirs]
        if added:
            spread = summarize(added)
            columns.update(cpu_added=spread.median, cpu_added_min=spread.minimum,
                           cpu_added_max=spread.maximum)
    return columns


# --- the scenarios under load ------------------------------------------------------------------


Run = Callable[[int], dict[str, Any]]


def rounds_of(rows: list[dict[str, Any]], runs: dict[int, Run], count: int,
              progress: report.RichProgress) -> None:
    """Run ``count`` interleaved rounds: round ``r`` calls ``runs[i](r)`` for each live row
    ``i``, in an order rotated by ``r``; a run that fails ends its row as ``failed``."""
    for round_index in range(count):
        for i in rotated(list(runs), round_index):
            row = rows[i]
            if row["status"] != "ok":
                progress.advance()
                continue
            result = guarded(partial(runs[i], round_index), progress,
                             f"{row['label']}: round {round_index + 1}/{count}")
            if "error" in result:
                row["status"], row["error"] = "failed", result["error"]
            else:
                row["runs"].append(result)


def event_row(label: str, proxy: str, found: dict[str, str | None], **fields: Any
              ) -> dict[str, Any]:
    """A scenario row before its runs: ``skipped`` when ``proxy`` is missing."""
    error = skipped_error(proxy, found)
    return {"label": label, "proxy": proxy, **fields, "status": "skipped" if error else "ok",
            "error": error, "runs": []}


def measure_balance(settings: Settings, stage: Stage, found: dict[str, str | None],
                    progress: report.RichProgress) -> list[dict[str, Any]]:
    """Each proxy with round robin and least-connections in front of one fleet whose b1
    waits ``slow_ms`` per request; each row's proxy up for every round."""
    rows = [event_row(f"{p} {b}", p, found, balance=b) for p in settings.proxies
            for b in ("roundrobin", "leastconn")]
    fleet = stage.fleet("balance-", lambda i: settings.slow_ms if i == 0 else 0.0)
    proxies: list[Proxy] = []
    runs: dict[int, Run] = {}
    try:
        progress.update("balance: starting the backends")
        fleet.start()
        for i, row in enumerate(rows):
            if row["status"] != "ok":
                continue
            path = found[row["proxy"]]
            assert path is not None
            proxy = stage.proxy(row["proxy"], path, f"balance-{row['proxy']}", fleet,
                                Upstream(balance=row["balance"]))
            proxies.append(proxy)
            log = stage.logs / f"balance-{row['proxy']}-{row['balance']}.log"
            proxy.start(stage.proxy_cpu, log)
            runs[i] = partial(balance_run, stage, fleet, f"http://{stage.host}:{proxy.port}/")
        rounds_of(rows, runs, settings.runs, progress)
    finally:
        for proxy in proxies:
            proxy.stop()
        fleet.stop()
    return rows


def proxy_maker(stage: Stage, name: str, path: str, label: str, upstream: Upstream
                ) -> Callable[[Fleet], Proxy]:
    return lambda fleet: stage.proxy(name, path, label, fleet, upstream)


def measure_failover(settings: Settings, stage: Stage, found: dict[str, str | None],
                     progress: report.RichProgress) -> list[dict[str, Any]]:
    """Each proxy under GET and under POST, b1 SIGKILLed halfway through each run."""
    rows = [event_row(f"{p} {m}", p, found, method=m) for p in settings.proxies
            for m in ("GET", "POST")]
    fleet = stage.fleet("failover-", lambda _: settings.wait_ms)
    runs: dict[int, Run] = {}
    for i, row in enumerate(rows):
        if row["status"] == "ok":
            label = f"failover-{row['proxy']}-{row['method']}"
            make = proxy_maker(stage, row["proxy"], str(found[row["proxy"]]), label,
                               Upstream(checks=True))
            runs[i] = partial(failover_run, stage, fleet, make, row["method"], label)
    try:
        rounds_of(rows, runs, settings.runs, progress)
    finally:
        fleet.stop()
    return rows


def measure_rolling(settings: Settings, stage: Stage, found: dict[str, str | None],
                    progress: report.RichProgress) -> list[dict[str, Any]]:
    """Each proxy's ways of restarting every backend in turn (:data:`ROLLING`), under POST;
    the rows whose backends take options (:data:`BACKEND_OPTIONS`) get a fleet of their own."""
    rows = [event_row(f"{p} {how}", p, found, how=how) for p in settings.proxies
            for how in ROLLING[p]]
    fleets: dict[tuple[str, ...], Fleet] = {}
    runs: dict[int, Run] = {}
    for i, row in enumerate(rows):
        if row["status"] == "ok":
            options = BACKEND_OPTIONS.get(row["how"], ())
            if options not in fleets:
                prefix = f"rolling-{row['how']}-" if options else "rolling-"
                fleets[options] = stage.fleet(prefix, lambda _: settings.wait_ms,
                                              options=options)
            label = f"rolling-{row['proxy']}-{row['how']}"
            make = proxy_maker(stage, row["proxy"], str(found[row["proxy"]]), label,
                               Upstream(checks=True))
            runs[i] = partial(rolling_run, stage, fleets[options], make, row["how"], label)
    try:
        rounds_of(rows, runs, settings.runs, progress)
    finally:
        for fleet in fleets.values():
            fleet.stop()
    return rows


# --- measuring ---------------------------------------------------------------------------------


def steps_of(settings: Settings) -> int:
    """Progress steps: the hop rows' warm-ups and runs, one per scenario run."""
    count = 0
    if "hop" in settings.scenarios:
        count += (1 + 2 * len(settings.proxies)) * settings.steps
    rows = {"balance": 2 * len(settings.proxies), "failover": 2 * len(settings.proxies),
            "rolling": sum(len(ROLLING[p]) for p in settings.proxies)}
    for scenario, count_of_rows in rows.items():
        if scenario in settings.scenarios:
            count += count_of_rows * settings.runs
    if "ws" in settings.scenarios and "nginx" in settings.proxies:
        count += 2 * settings.runs
    return count


def measure(settings: Settings, console: Console, out: Path) -> dict[str, Any]:
    """Measure every scenario asked for and return results.json's content.

    Raises:
        UsageProblem: wrk is missing, the server is unknown, a CPU or the address is unusable.
    """
    generator = load_generator("wrk")
    pinning = pinning_for(settings, console, client=generator.name)
    placement = place(pinning, usable_cpus(), settings.backends)
    found = {name: find_proxy(name) for name in settings.proxies}
    proxies = {}
    for name, path in found.items():
        proxies[name] = {"path": path, "version": proxy_version(path) if path else None}
        if path is None:
            console.print(f"[yellow]–[/] {MISSING.format(name=name)}: its rows are skipped",
                          highlight=False)
    logs = logs_folder(out)
    where = environment(generator)  # before any result file exists: git's state as it ran
    started = datetime.now(UTC)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in SCENARIOS}
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as folder, \
            kept_on(placement.wrk), report.progress_bar(console) as bar:
        stage = Stage(generator.path, settings.load(settings.duration), settings.server,
                      settings.backends, settings.host, placement.wrk, placement.proxy,
                      placement.backends, logs, Path(folder), settings.wait_ms, settings.slow_ms)
        progress = report.RichProgress(bar, bar.add_task("starting", total=steps_of(settings)))
        if "hop" in settings.scenarios:
            results["hop"] = measure_hop(settings, stage, placement, found, logs, progress)
        measures = {"balance": measure_balance, "failover": measure_failover,
                    "rolling": measure_rolling}
        for name, measure_one in measures.items():
            if name in settings.scenarios:
                results[name] = measure_one(settings, stage, found, progress)
        if "ws" in settings.scenarios and "nginx" in settings.proxies:
            results["ws"] = measure_ws(stage, found["nginx"], settings.runs, progress)
        keep_configs(Path(folder), out)
    return {
        "experiment": "cluster",
        "date": started.isoformat(timespec="seconds"),
        "command": invocation(),
        "settings": {
            "connections": settings.connections, "threads": settings.threads,
            "duration_s": settings.duration, "warmup_s": settings.warmup,
            "runs": settings.runs, "server": settings.server, "backends": settings.backends,
            "proxies": list(settings.proxies), "scenarios": list(settings.scenarios),
            "wait_ms": settings.wait_ms, "slow_ms": settings.slow_ms, "host": settings.host,
            "timeout_s": settings.timeout, "body": SAMPLE_BODY.decode(),
            "lua_script": str(POST_JSON), "app": APP,
        },
        "pinning": pinning.to_json(),
        "placement": {"wrk": placement.wrk, "proxy": placement.proxy,
                      "backends": list(placement.backends), "text": placement.text},
        **where,
        "proxies": proxies,
        "rows": results["hop"],
        "balance": results["balance"], "failover": results["failover"],
        "rolling": results["rolling"], "websocket": results["ws"],
    }


def keep_configs(folder: Path, out: Path) -> None:
    """Copy one generated config of each proxy and scenario into ``out/configs``, so the
    results keep what ran (the temporary folder goes); the configs of an earlier run into
    the same folder are removed first."""
    target = out / "configs"
    shutil.rmtree(target, ignore_errors=True)
    for config in sorted(folder.glob("*/*.c*")):
        if config.suffix in (".conf", ".cfg"):
            name = f"{config.parent.name.rsplit('-', 1)[0]}-{config.name}"
            target.mkdir(exist_ok=True)
            if not (target / name).exists():
                text = config.read_text().replace(str(config.parent), "<folder>")
                (target / name).write_text(text)


# --- the command -------------------------------------------------------------------------------


def validate(settings: Settings) -> None:
    """UsageProblem for an unknown server, proxy or scenario."""
    validate_servers([settings.server])
    for proxy in settings.proxies:
        if proxy not in PROXIES:
            raise UsageProblem(f"unknown proxy {proxy!r} in --proxies (known: "
                               f"{', '.join(PROXIES)})")
    for scenario in settings.scenarios:
        if scenario not in SCENARIOS:
            raise UsageProblem(f"unknown scenario {scenario!r} in --scenarios (known: "
                               f"{', '.join(SCENARIOS)})")
    if not settings.proxies or not settings.scenarios:
        raise UsageProblem("--proxies and --scenarios must each name at least one")


def command(
    connections: options.Connections = 10,
    threads: options.Threads = 1,
    duration: options.Duration = 10,
    warmup: options.Warmup = 2,
    runs: options.Runs = 3,
    server: Annotated[str, typer.Option(help="The backends' server (an ASGI registry name).")
                      ] = DEFAULT_SERVER,
    backends: Annotated[int, typer.Option(min=2, help="Backend processes behind each proxy.")
                        ] = 3,
    proxies: Annotated[str, typer.Option(help="Comma-separated proxies: nginx, haproxy.")
                       ] = ",".join(PROXIES),
    scenarios: Annotated[str, typer.Option(
        help="Comma-separated tables: hop (direct against each proxy, keep-alive off and on), "
             "balance (round robin and least-connections), failover (SIGKILL a backend, GET "
             "and POST), rolling (restart every backend in turn), ws (an idle WebSocket "
             "through nginx, with and without server pings).")] = ",".join(SCENARIOS),
    wait_ms: Annotated[float, typer.Option(
        min=0, help="Milliseconds every request waits in the app in the failover and rolling "
                    "rows (as on a database), so requests are in flight when a backend goes.")
                       ] = 10.0,
    slow_ms: Annotated[float, typer.Option(
        min=0, help="Milliseconds backend b1 waits per request in the balance rows.")] = 5.0,
    pin: options.Pin = True,
    server_cpu: Annotated[int, typer.Option(help="CPU for the proxy (and the backends when "
                                                 "no other is free) when pinned.")] = 0,
    wrk_cpu: options.WrkCpu = 1,
    host: options.Host = "127.0.0.1",
    output: Annotated[Path | None, typer.Option(
        help="Folder for results.json, results.md and cluster.png "
             "[default: results/cluster-<timestamp>]")] = None,
) -> None:
    """N toy servers behind nginx and HAProxy: the hop's cost, balancing, failover, a rolling
    restart, and an idle WebSocket through nginx."""
    console, errors = consoles()
    settings = Settings(connections=connections, threads=threads, duration=duration,
                        warmup=warmup, runs=runs, server=server, backends=backends,
                        proxies=names(proxies), scenarios=names(scenarios), wait_ms=wait_ms,
                        slow_ms=slow_ms, pin=pin, server_cpu=server_cpu, load_cpu=wrk_cpu,
                        host=host)
    out = output if output is not None else report.default_output("cluster")
    with user_mistakes(errors):
        validate(settings)
        report.prepare_output(out)
        data = measure(settings, console, out)
    show(console, errors, data, lambda: write_outputs(out, data))


def show(console: Console, errors: Console, data: dict[str, Any],
         write: Callable[[], list[Path]]) -> None:
    """Print every table (the "How it ran" lines under the last) and the notes, write the
    files, and exit 1 when no row of any table ran (:func:`bench.command.finish`'s rule)."""
    sections = table_sections(data)
    for i, (title, heads, cells, right) in enumerate(sections):
        caption = "\n".join(how_it_ran(data)) if i == len(sections) - 1 else ""
        console.print(report.rich_table(title, heads, cells, caption, right))
    for line in notes_of(data):
        console.print(line, highlight=False)
    console.print("wrote " + ", ".join(str(p) for p in write()))
    rows = [*data["rows"], *data["balance"], *data["failover"], *data["rolling"],
            *data.get("websocket", [])]
    if not any(row["status"] == "ok" for row in rows):
        errors.print("[bold red]error:[/] every row failed (see the logs above)")
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``cluster`` to the ``bench`` CLI."""
    app.command("cluster")(command)
