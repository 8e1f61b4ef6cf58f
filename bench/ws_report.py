"""How ``bench ws`` reports: each row's results.json entry, the ratios to the reference, issue
20's targets with their arithmetic, the two tables, "How it ran" and the files.

Everything after measuring reads results.json's content (:func:`bench.ws.measure`), so a
committed results file can be laid out again without measuring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from bench import report
from bench.report import cell, provenance
from bench.rounds import Measurement, Run
from bench.rows import measured_columns
from bench.stats import Paired, median, paired
from bench.ws_client import EchoSummary
from toyservers.registry import SERVERS

#: Issue 20's targets (set for toy-httptools; every toy row is held to them here):
#: messages per second at :data:`GOAL_CONNECTIONS` connections at least this many times the
#: reference's, and RSS per idle connection at most this many times the reference's.
GOAL_SPEED = 1.2
GOAL_CONNECTIONS = 10
GOAL_MEMORY = 1.0

ECHO_HEADERS = ["Server", "Conns", "msg/s", "min–max", "p50 ms", "p99 ms", "Errors",
                "CPU µs/msg", "server CPU", "ws-load CPU", "% of {ref}", "CPU/msg % of {ref}"]
ECHO_RIGHT = [False, *[True] * 11]
IDLE_HEADERS = ["Server", "Open", "RSS before MB", "RSS open MB", "KiB/conn", "min–max",
                "% of {ref}"]
IDLE_RIGHT = [False, *[True] * 6]
TITLE = "bench ws: WebSocket echo and idle connections"


@dataclass
class EchoResult:
    """An echo row before its columns are derived: server, connections, what was measured."""

    server: str
    connections: int
    measurement: Measurement


@dataclass
class IdleRun:
    """One idle run (a fresh server): what it measured, or why it failed.

    Attributes:
        server, round: the row and the round (0-based).
        command: the server's argv.
        error, log_tail: why the run failed and the server's last lines, else None.
        rss_before: the server tree's RSS after one checked echo, bytes.
        rss_open: its peak RSS with the idle connections open, bytes.
        opened: idle connections whose handshake succeeded.
        errors: failed handshakes by kind.
        open_us: how long opening them took, µs.
        closed: connections closed with the close handshake.
        client_cpu_seconds: ws-load's CPU time over its life, seconds.
    """

    server: str
    round: int
    command: list[str]
    error: str | None = None
    log_tail: str | None = None
    rss_before: int = 0
    rss_open: int = 0
    opened: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    open_us: int = 0
    closed: int = 0
    client_cpu_seconds: float | None = None

    @property
    def kib_per_connection(self) -> float | None:
        """(RSS open - RSS before) / opened, KiB (1024 bytes); None without an opened one."""
        if self.error is not None or self.opened <= 0:
            return None
        return (self.rss_open - self.rss_before) / self.opened / 1024

    def to_json(self) -> dict[str, Any]:
        """Every field, plus ``kib_per_connection``."""
        return {"round": self.round, "error": self.error, "rss_before": self.rss_before,
                "rss_open": self.rss_open, "opened": self.opened, "errors": self.errors,
                "open_us": self.open_us, "closed": self.closed,
                "client_cpu_seconds": self.client_cpu_seconds,
                "kib_per_connection": self.kib_per_connection}


# --- rows --------------------------------------------------------------------------------------


def _share(seconds: float | None, summary: EchoSummary | None) -> float | None:
    """``seconds`` of CPU over ``summary``'s echo window, % of one core."""
    if seconds is None or summary is None or summary.duration_us <= 0:
        return None
    return 100 * seconds * 1e6 / summary.duration_us


def _echo_summary(run: Run) -> EchoSummary | None:
    return run.summary if isinstance(run.summary, EchoSummary) else None


def ratio_columns(pair: Paired | None, key: str = "vs_reference") -> dict[str, Any]:
    """``<key>`` (median % of the reference over rounds), ``<key>_min``, ``<key>_max``,
    ``<key>_noisy`` (the rounds disagree on which is larger) and ``<key>_rounds`` (rounds
    compared); None (0, False) without a pair."""
    if pair is None:
        return {key: None, f"{key}_min": None, f"{key}_max": None, f"{key}_noisy": False,
                f"{key}_rounds": 0}
    pct = pair.pct_of_below
    return {key: pct.median, f"{key}_min": pct.minimum, f"{key}_max": pct.maximum,
            f"{key}_noisy": pair.noisy, f"{key}_rounds": pair.rounds}


def echo_row(result: EchoResult) -> dict[str, Any]:
    """The ``rows`` entry of one echo row (its ratio added by :func:`echo_rows`).

    Keys: ``server``, ``description``, ``connections``, ``status``, ``error``, ``log_tail``,
    ``command``; ``messages_per_s`` (median over rounds), ``messages_per_s_runs``,
    ``messages_per_s_min``, ``messages_per_s_max``, ``rounds``, ``spread_pct``,
    ``spread_flag``; ``p50_ms``, ``p90_ms``, ``p99_ms`` (round trips, median over runs);
    ``errors``, ``errors_by_kind``; ``rss_peak_mb``; ``cpu_us_per_message`` (the server tree's
    CPU µs per message, median) and ``cpu_us_runs``; ``server_cpu_pct`` and
    ``client_cpu_pct`` (each one's CPU time over the run / the echo window, % of one core,
    median); the ratios to the reference (:func:`echo_rows`), None here; ``runs`` (every run,
    the client's CPU seconds in its summary).
    """
    m = result.measurement
    spec = SERVERS[result.server]
    row: dict[str, Any] = {
        "server": result.server, "description": spec.description,
        "connections": result.connections, "status": m.status, "error": m.error,
        "log_tail": m.log_tail, "command": m.command, "messages_per_s": None,
        "messages_per_s_runs": [], "messages_per_s_min": None, "messages_per_s_max": None,
        "rounds": [], "spread_pct": None, "spread_flag": False, "p50_ms": None,
        "p90_ms": None, "p99_ms": None, "errors": None, "errors_by_kind": None,
        "rss_peak_mb": None, "cpu_us_per_message": None, "cpu_us_runs": [],
        "server_cpu_pct": None, "client_cpu_pct": None, **ratio_columns(None),
        **ratio_columns(None, "cpu_vs_reference"),
        "runs": [run.to_json() for run in m.runs],
    }
    if m.status != "ok" or not m.measured:
        return row
    columns = measured_columns(m)
    runs = m.measured_runs
    row.update({
        "messages_per_s": columns["rps_median"], "messages_per_s_runs": columns["rps_runs"],
        "messages_per_s_min": columns["rps_min"], "messages_per_s_max": columns["rps_max"],
        **{key: columns[key] for key in (
            "rounds", "spread_pct", "spread_flag", "p50_ms", "p90_ms", "p99_ms", "errors",
            "errors_by_kind", "rss_peak_mb", "cpu_us_runs")},
        "cpu_us_per_message": columns["cpu_us_per_request"],
        "server_cpu_pct": median([v for r in runs
                                  if (v := _share(r.cpu_seconds, _echo_summary(r)))
                                  is not None]),
        "client_cpu_pct": median([v for r in runs if (s := _echo_summary(r)) is not None
                                  and (v := _share(s.client_cpu_seconds, s)) is not None]),
    })
    return row


def _by_round(rounds: Sequence[int], values: Sequence[float | None]) -> dict[int, float]:
    return {r: v for r, v in zip(rounds, values, strict=False) if v is not None}


def echo_rows(results: Sequence[EchoResult], reference: str) -> list[dict[str, Any]]:
    """Every echo row, each against ``reference``'s row at the same connections, round by
    round (:func:`ratio_columns`): its messages per second as a % of the reference's
    (``vs_reference``), and its CPU µs per message as a % of the reference's
    (``cpu_vs_reference``: on a busy machine a server's share of its core moves its rate from
    round to round, much less what a message costs it)."""
    rows = [echo_row(r) for r in results]
    base = {row["connections"]: row for row in rows if row["server"] == reference}
    for row in rows:
        other = base.get(row["connections"])
        if other is None or other is row or row["status"] != "ok":
            continue
        for key, runs in (("vs_reference", "messages_per_s_runs"),
                          ("cpu_vs_reference", "cpu_us_runs")):
            pair = paired(_by_round(row["rounds"], row[runs]),
                          _by_round(other["rounds"], other[runs]))
            row.update(ratio_columns(pair, key))
    return rows


def idle_rows(runs: Sequence[IdleRun], servers: Sequence[str], reference: str
              ) -> list[dict[str, Any]]:
    """One ``idle`` entry per server: ``server``, ``status`` (``failed`` when any run
    failed), ``error``, ``log_tail``, ``command``; ``opened`` (fewest over runs), ``errors``;
    ``rss_before_mb`` and ``rss_open_mb`` (median, 10^6 bytes); ``kib_per_connection``
    (median), ``kib_runs``, ``kib_min``, ``kib_max``, ``rounds``; the ratio to ``reference``
    round by round (:func:`ratio_columns`, on KiB per connection); ``runs``."""
    rows = []
    for server in servers:
        mine = [r for r in runs if r.server == server]
        failed = next((r for r in mine if r.error is not None), None)
        good = [r for r in mine if r.kib_per_connection is not None]
        kib = [r.kib_per_connection for r in good if r.kib_per_connection is not None]
        row: dict[str, Any] = {
            "server": server, "status": "failed" if failed or not good else "ok",
            "error": failed.error if failed else (None if good else "no run"),
            "log_tail": failed.log_tail if failed else None,
            "command": mine[0].command if mine else [],
            "opened": min((r.opened for r in good), default=0),
            "errors": sum(sum(r.errors.values()) for r in good),
            "rss_before_mb": median([r.rss_before / 1e6 for r in good]),
            "rss_open_mb": median([r.rss_open / 1e6 for r in good]),
            "kib_per_connection": median(kib), "kib_runs": kib,
            "kib_min": min(kib, default=None), "kib_max": max(kib, default=None),
            "rounds": [r.round for r in good], **ratio_columns(None),
            "runs": [r.to_json() for r in mine],
        }
        rows.append(row)
    base = next((r for r in rows if r["server"] == reference and r["status"] == "ok"), None)
    for row in rows:
        if base is not None and row is not base and row["status"] == "ok":
            row.update(ratio_columns(paired(_by_round(row["rounds"], row["kib_runs"]),
                                            _by_round(base["rounds"], base["kib_runs"]))))
    return rows


# --- issue 20's targets --------------------------------------------------------------------------


def goals(rows: Sequence[Mapping[str, Any]], idle: Sequence[Mapping[str, Any]],
          reference: str) -> list[dict[str, Any]]:
    """Each toy row set against issue 20's targets: ``server``, ``what`` (``"speed"``: msg/s
    at :data:`GOAL_CONNECTIONS` connections; ``"memory"``: RSS per idle connection),
    ``target`` (x reference), ``ratio`` (median over rounds, x reference), ``ratio_min``,
    ``ratio_max``, ``met`` (the median meets it), ``decided`` (every round is on the same
    side of the target: otherwise the run cannot claim either verdict), ``noisy`` (the rounds
    disagree on which of the two rows is larger); for speed, ``cpu_ratio``,
    ``cpu_ratio_min`` and ``cpu_ratio_max`` (CPU µs per message over the reference's: below
    1 is cheaper), None for memory."""
    found = []
    toys = [r for r in rows if SERVERS[r["server"]].kind == "toy"
            and r["connections"] == GOAL_CONNECTIONS]
    for what, target, table in (("speed", GOAL_SPEED, toys),
                                ("memory", GOAL_MEMORY,
                                 [r for r in idle if SERVERS[r["server"]].kind == "toy"])):
        for row in table:
            if row["vs_reference"] is None:
                continue
            ratio = row["vs_reference"] / 100
            low, high = row["vs_reference_min"] / 100, row["vs_reference_max"] / 100
            met = ratio >= target if what == "speed" else ratio <= target
            # decided: every round on the same side of the target
            decided = low >= target or high < target if what == "speed" else \
                high <= target or low > target
            cpu = row.get("cpu_vs_reference")
            found.append({"server": row["server"], "what": what, "reference": reference,
                          "target": target, "ratio": ratio,
                          "ratio_min": low, "ratio_max": high, "met": met,
                          "decided": decided, "noisy": row["vs_reference_noisy"],
                          "cpu_ratio": None if cpu is None else cpu / 100,
                          "cpu_ratio_min": None if cpu is None
                          else row["cpu_vs_reference_min"] / 100,
                          "cpu_ratio_max": None if cpu is None
                          else row["cpu_vs_reference_max"] / 100})
    return found


def goal_lines(data: Mapping[str, Any]) -> list[str]:
    """One sentence per goal, with its arithmetic (or why there is none)."""
    lines = []
    for goal in data["goals"]:
        sign = "≥" if goal["what"] == "speed" else "≤"
        what = (f"messages/s at {GOAL_CONNECTIONS} connections" if goal["what"] == "speed"
                else "RSS per idle connection")
        verdict = ("met" if goal["met"] else "not met") if goal["decided"] else (
            f"undecided: the rounds fall on both sides of it (their median "
            f"{'meets' if goal['met'] else 'misses'} it), so this run cannot claim either")
        lines.append(
            f"{goal['server']}: {what} {goal['ratio']:.2f}x {goal['reference']} (rounds "
            f"{goal['ratio_min']:.2f}–{goal['ratio_max']:.2f}x); issue 20's target (set "
            f"for toy-httptools) {sign} {goal['target']:g}x: {verdict}"
            + ("" if goal.get("cpu_ratio") is None else
               f"; CPU µs per message {goal['cpu_ratio']:.2f}x {goal['reference']}'s (rounds "
               f"{goal['cpu_ratio_min']:.2f}–{goal['cpu_ratio_max']:.2f}x)"))
    if not lines:
        lines.append(f"issue 20's targets: no toy row with a {data['settings']['reference']} "
                     "row to compare with in this run")
    return lines


# --- tables and files ---------------------------------------------------------------------------


def vs_cell(row: Mapping[str, Any], reference: str, key: str = "vs_reference") -> str:
    """A "% of reference" cell (:func:`ratio_columns`' ``key``): median (min–max), ``noise
    (a–b)`` when the rounds disagree on which is larger, ``reference`` on its own row, "–"
    with nothing to compare."""
    if row["server"] == reference and row["status"] == "ok":
        return "reference"
    if row.get(key) is None:
        return "–"
    low, high = row[f"{key}_min"], row[f"{key}_max"]
    if row[f"{key}_noisy"]:
        return f"noise ({low:.0f}–{high:.0f} %)"
    if row[f"{key}_rounds"] < 2:
        return f"{row[key]:.1f} %"
    return f"{row[key]:.1f} % ({low:.0f}–{high:.0f})"


def echo_cells(rows: Sequence[Mapping[str, Any]], reference: str) -> list[list[str]]:
    """The echo table's cells, in :data:`ECHO_HEADERS` order (``*``: runs spread > 10 %)."""
    cells = []
    for row in rows:
        if row["status"] != "ok" or row["messages_per_s"] is None:
            cells.append([row["server"], str(row["connections"]), row["status"],
                          *["–"] * 9])
            continue
        flag = " *" if row["spread_flag"] else ""
        cells.append([
            row["server"], str(row["connections"]), f"{row['messages_per_s']:,.0f}{flag}",
            f"{row['messages_per_s_min']:,.0f}–{row['messages_per_s_max']:,.0f}",
            cell(row["p50_ms"], ".2f"), cell(row["p99_ms"], ".2f"), f"{row['errors']:,}",
            cell(row["cpu_us_per_message"], ".1f"), cell(row["server_cpu_pct"], ".0f", " %"),
            cell(row["client_cpu_pct"], ".0f", " %"), vs_cell(row, reference),
            vs_cell(row, reference, "cpu_vs_reference")])
    return cells


def idle_cells(rows: Sequence[Mapping[str, Any]], reference: str) -> list[list[str]]:
    """The idle table's cells, in :data:`IDLE_HEADERS` order."""
    cells = []
    for row in rows:
        if row["status"] != "ok":
            cells.append([row["server"], row["status"], *["–"] * 5])
            continue
        cells.append([
            row["server"], f"{row['opened']:,}", cell(row["rss_before_mb"], ".1f"),
            cell(row["rss_open_mb"], ".1f"), cell(row["kib_per_connection"], ".1f"),
            f"{row['kib_min']:.1f}–{row['kib_max']:.1f}", vs_cell(row, reference)])
    return cells


def how_it_ran(data: Mapping[str, Any]) -> list[str]:
    """The "How it ran" lines, from results.json's content."""
    s = data["settings"]
    ref = s["reference"]
    lines = [
        "command: " + " ".join(data["command"]),
        data["pinning"]["text"],
        f"ws-load {data['ws-load']['version']}: one thread; each connection sends a "
        f"{s['message_bytes']}-byte text message, waits for its echo and repeats; "
        f"{s['duration_s']} s per run, {s['warmup_s']} s warm-up, then {s['runs']} "
        "interleaved round(s) (one run of every row per round, every server up throughout); "
        "msg/s is the median, with min–max over rounds; p50/p99 are round trips",
        "CPU µs/msg: the server process tree's user + system CPU time over each run divided "
        "by its messages (median); server CPU and ws-load CPU: each one's CPU time over the "
        "run (connecting and closing included) over the echo window, % of one core: a "
        "client near 100 % would be the limit, not the server",
        f"idle: a fresh server per run, checked with one echo; its tree's RSS; then "
        f"{s['idle_connections']:,} WebSockets opened by ws-load (64 handshakes at a time) "
        f"and held, sending nothing; the tree's peak RSS over {s['idle_hold_s']:g} s; KiB/conn "
        "= (RSS open - RSS before) / opened (1 KiB = 1024 bytes), median with min–max over "
        "rounds" if s["idle_connections"] else "idle: no idle rows (--idle 0)",
        f"% of {ref}: each row's msg/s against {ref}'s run of the same round (same "
        "connections), then the median (min–max over rounds); CPU/msg % of "
        f"{ref}: the same for CPU µs per message (below 100 % is cheaper), which a busy "
        "machine moves much less than msg/s: a server pinned to a shared core gets a share of "
        "it that changes from run to run, and its rate with it; noise (a–b) where the rounds "
        "disagree on which is larger; * marks runs spread more than 10 %",
        data["ws_load_build"]["note"],
    ]
    return lines + provenance(dict(data))


def notes_of(data: Mapping[str, Any]) -> list[str]:
    """The notes: servers left out, then each failed row."""
    failed = [f"{r['server']} c{r['connections']} {r['status']}: {r['error']}"
              for r in data["rows"] if r["status"] != "ok"]
    failed += [f"{r['server']} idle {r['status']}: {r['error']}"
               for r in data["idle"] if r["status"] != "ok"]
    return [*data["notes"], *failed]


def write_outputs(out: Path, data: Mapping[str, Any]) -> list[Path]:
    """Write results.json and results.md into ``out``; return their paths."""
    ref = data["settings"]["reference"]
    json_path, md_path = out / "results.json", out / "results.md"
    report.write_json(json_path, dict(data))
    parts = [f"**{TITLE}**\n",
             f"Echo, {data['settings']['message_bytes']}-byte text messages:\n",
             report.markdown_table([h.format(ref=ref) for h in ECHO_HEADERS],
                                   echo_cells(data["rows"], ref), ECHO_RIGHT)]
    if data["idle"]:
        parts += [f"RSS per idle connection, "
                  f"{data['settings']['idle_connections']:,} open:\n",
                  report.markdown_table([h.format(ref=ref) for h in IDLE_HEADERS],
                                        idle_cells(data["idle"], ref), IDLE_RIGHT)]
    parts += ["**Targets**\n", "".join(f"- {line}\n" for line in goal_lines(data)),
              "**How it ran**\n", "".join(f"- {line}\n" for line in how_it_ran(data))]
    notes = notes_of(data)
    if notes:
        parts.append("**Notes**\n\n" + "".join(f"- {note}\n" for note in notes))
    md_path.write_text("\n".join(parts), encoding="utf-8")
    return [json_path, md_path]


def print_and_write(console: Console, errors: Console, out: Path, data: Mapping[str, Any]
                    ) -> None:
    """Print both tables, the targets and the notes, write the files and name them; raise
    ``typer.Exit(1)`` when no echo row was measured."""
    ref = data["settings"]["reference"]
    how = "\n".join(how_it_ran(data))  # the caption of the last table
    console.print(report.rich_table(TITLE, [h.format(ref=ref) for h in ECHO_HEADERS],
                                    echo_cells(data["rows"], ref),
                                    "" if data["idle"] else how, ECHO_RIGHT))
    if data["idle"]:
        console.print(report.rich_table(
            f"RSS per idle connection, {data['settings']['idle_connections']:,} open",
            [h.format(ref=ref) for h in IDLE_HEADERS], idle_cells(data["idle"], ref), how,
            IDLE_RIGHT))
    for line in [*goal_lines(data), *notes_of(data)]:
        console.print(line, highlight=False)
    console.print("wrote " + ", ".join(str(p) for p in write_outputs(out, data)))
    if not any(row["status"] == "ok" for row in data["rows"]):
        errors.print("[bold red]error:[/] every row failed (see the logs above)")
        raise typer.Exit(1)

