"""``bench conformance``: run the conformance suite and write the feature matrix it measures.

The suite (``tests/conformance``) runs in a pytest subprocess over the chosen servers and
writes one record per test (``--conformance-report``); this module folds the records into a
matrix, servers by features, where a cell is:

- ``unsupported``: every test of the feature xfailed as declared in
  ``tests/conformance/support.py`` (the server does not offer it);
- ``fail``: any test of the feature failed or errored (including a declared gap that passed),
  or broke a rule listed in ``VIOLATIONS`` (a reference server's known breach of a MUST);
- ``pass``: otherwise.

Output, in ``--output DIR`` (default ``results/conformance-<timestamp>/``): ``matrix.json``
shaped ``{"servers": {name: {"version": str}}, "features": [str],
"results": {server: {feature: "pass" | "fail" | "unsupported"}}}`` (plus ``failures`` and
``reasons`` detail keys, and ``git``, the project's commit as :func:`bench.harness.git_state`
gives it) and ``matrix.md``, the page the tutorial includes.

Servers come from the registry like every ``bench`` experiment's; by default every installed
toy and reference ASGI server (:func:`toyservers.registry.available`), not the ``bare``
baseline, which can still be named with ``--servers bare`` to see what it leaves out.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from bench.harness import git_state
from bench.report import OutputError, default_output, markdown_table, prepare_output, write_json
from toyservers.registry import SERVERS, available

ROOT = Path(__file__).resolve().parents[1]
SUITE = "tests/conformance"
Cell = str  # "pass" | "fail" | "unsupported"


class ConformanceError(RuntimeError):
    """The suite could not run (usage error, collection error) or wrote no report."""


def run_suite(servers: Sequence[str], report: Path, pytest_args: Sequence[str] = ()) -> int:
    """Run the suite on ``servers`` in a pytest subprocess writing records to ``report``.

    Returns pytest's exit status (0: all passed, 1: some tests failed). Raises
    ConformanceError for any other status or a missing report.
    """
    argv = [
        sys.executable, "-m", "pytest", SUITE, "-q", "-p", "no:cacheprovider",
        "--conformance-servers", ",".join(servers), "--conformance-report", str(report),
        *pytest_args,
    ]
    status = subprocess.call(argv, cwd=ROOT)
    if status not in (0, 1) or not report.exists():
        raise ConformanceError(f"pytest exited with status {status}: {' '.join(argv)}")
    return status


def build_matrix(report: dict[str, Any], servers: Sequence[str]) -> dict[str, Any]:
    """Fold the suite's records into the matrix (see the module docstring for its shape)."""
    records: list[dict[str, str]] = report["records"]
    features = [f for f in report["features"] if any(r["feature"] == f for r in records)]
    results: dict[str, dict[str, Cell]] = {}
    failures: dict[str, dict[str, list[str]]] = {}
    reasons: dict[str, dict[str, str]] = {}
    for server in servers:
        row: dict[str, Cell] = {}
        for feature in features:
            mine = [r for r in records if r["server"] == server and r["feature"] == feature]
            if not mine:
                continue
            outcomes = {r["outcome"] for r in mine}
            if outcomes & {"failed", "error", "violation"}:
                row[feature] = "fail"
                failures.setdefault(server, {})[feature] = [
                    f"{r['nodeid']}: {r['message'].splitlines()[0] if r['message'] else ''}"
                    for r in mine if r["outcome"] in ("failed", "error", "violation")
                ]
            elif outcomes == {"xfailed"}:
                row[feature] = "unsupported"
                reasons.setdefault(server, {})[feature] = mine[0]["message"]
            else:
                row[feature] = "pass"
        results[server] = row
    return {
        "servers": {name: {"version": SERVERS[name].version()} for name in servers},
        "features": features,
        "results": results,
        "failures": failures,
        "reasons": reasons,
    }


def render_markdown(matrix: dict[str, Any], how: Sequence[str] = ()) -> str:
    """``matrix.md``: features down, servers across (name, version, passes), then details."""
    servers = list(matrix["servers"])
    results = matrix["results"]
    mark = {"pass": "pass", "fail": "**fail**", "unsupported": "unsupported"}
    headers = ["feature", *(f"{s} {matrix['servers'][s]['version']}" for s in servers)]
    rows = [[feature, *(mark.get(results[s].get(feature, ""), "") for s in servers)]
            for feature in matrix["features"]]
    rows.append(["**passes**", *(
        f"**{sum(1 for c in results[s].values() if c == 'pass')}/{len(results[s])}**"
        for s in servers)])
    parts = ["# What each server supports\n",
             "Measured by the conformance suite (`tests/conformance`), not taken from READMEs. "
             "`unsupported`: the server does not offer it (declared, and the tests confirm it "
             "fails); `fail`: the server claims it and a test fails, or it breaks a MUST of "
             "RFC 9110/9112 or the ASGI spec (each listed below with the rule).\n",
             markdown_table(headers, rows)]
    if matrix["failures"]:
        parts.append("## Failures\n")
        for server, by_feature in matrix["failures"].items():
            for feature, tests in by_feature.items():
                parts += [f"- **{server}**, {feature}: `{test}`" for test in tests]
        parts.append("")
    if matrix["reasons"]:
        parts.append("## Not offered\n")
        for server, by_feature in matrix["reasons"].items():
            parts += [f"- **{server}**, {feature}: {why}" for feature, why in by_feature.items()]
        parts.append("")
    if how:
        parts.append("## How it ran\n")
        parts += [f"- {line}" for line in how]
    return "\n".join(parts) + "\n"


def run(servers: Sequence[str] | None = None, output: Path | None = None,
        pytest_args: Sequence[str] = ()) -> Path:
    """Run the suite and write ``matrix.json`` and ``matrix.md`` to ``output``; returns it.

    Raises:
        KeyError: an unknown server name.
        OutputError: ``output`` is not writable.
        ConformanceError: the suite could not run.
    """
    chosen = list(servers) if servers else available()
    for name in chosen:
        if name not in SERVERS:
            raise KeyError(f"unknown server {name!r} (known: {', '.join(SERVERS)})")
    folder = prepare_output(output or default_output("conformance"))
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "report.json"
        run_suite(chosen, report_path, pytest_args)
        report = json.loads(report_path.read_text())
    seconds = time.monotonic() - started
    matrix = build_matrix(report, chosen)
    git = git_state()
    matrix["git"] = git
    write_json(folder / "matrix.json", matrix)
    how = [f"`bench conformance --servers {','.join(chosen)}`",
           f"{len(report['records'])} tests in {seconds:.0f} s, "
           f"Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}"]
    if git is not None:
        how.append(f"toyservers at commit {git['commit'][:12]}"
                   + (", with uncommitted changes" if git["dirty"] else ""))
    (folder / "matrix.md").write_text(render_markdown(matrix, how), encoding="utf-8")
    return folder


def register(app: typer.Typer) -> None:
    """Add the ``conformance`` command to the ``bench`` typer app."""

    @app.command("conformance")
    def conformance(
        servers: Annotated[str, typer.Option(
            "--servers", help="Comma-separated registry names (default: every ASGI server).")
        ] = "",
        output: Annotated[Path | None, typer.Option(
            "--output", help="Folder for matrix.json and matrix.md "
                             "(default: results/conformance-<timestamp>).")
        ] = None,
    ) -> None:
        """Run the conformance suite on each server and write the feature matrix."""
        names = [name.strip() for name in servers.split(",") if name.strip()]
        try:
            folder = run(names or None, output)
        except (KeyError, OutputError, ConformanceError) as exc:
            typer.echo(f"error: {exc.args[0] if exc.args else exc}", err=True)
            raise typer.Exit(2) from None
        matrix = json.loads((folder / "matrix.json").read_text())
        for name, row in matrix["results"].items():
            passes = sum(1 for cell in row.values() if cell == "pass")
            fails = sum(1 for cell in row.values() if cell == "fail")
            typer.echo(f"{name:15} {passes:3} pass {fails:3} fail")
        typer.echo(f"wrote {folder / 'matrix.json'} and {folder / 'matrix.md'}")
