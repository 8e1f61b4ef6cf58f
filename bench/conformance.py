"""``bench conformance``: run the conformance suites and write the feature matrices they measure.

Two suites, one per interface: ``tests/conformance`` (ASGI servers, ASGI and HTTP features)
and ``tests/conformance_wsgi`` (WSGI servers, PEP 3333 and HTTP/1.1 features). Each runs in a
pytest subprocess over the chosen servers of its interface and writes one record per test
(``--conformance-report`` / ``--wsgi-conformance-report``); this module folds the records
into a matrix, servers by features, where a cell is:

- ``unsupported``: every test of the feature xfailed as declared in the suite's
  ``support.py`` (the server does not offer it);
- ``fail``: any test of the feature failed or errored (including a declared gap that passed),
  or broke a rule listed in ``VIOLATIONS`` (a reference server's known breach of a MUST);
- ``skipped``: every test of the feature was skipped (a tool it needs is missing here:
  Autobahn|Testsuite for ``autobahn``);
- ``pass``: otherwise.

The ``autobahn`` feature's test also records Autobahn|Testsuite's counts per behavior
(``OK``, ``NON-STRICT``, ``INFORMATIONAL``, ``FAILED``, ``UNIMPLEMENTED``) and the cases that
were not ``OK``: the matrix keeps them under ``autobahn`` (server -> ``{"cases", "exclude",
"counts", "not_ok"}``) and the page shows them as a table of their own under the matrix.

Output, in ``--output DIR`` (default ``results/conformance-<timestamp>/``): for the ASGI
servers ``matrix.json`` shaped ``{"servers": {name: {"version": str}}, "features": [str],
"results": {server: {feature: "pass" | "fail" | "unsupported"}}}`` (plus ``failures`` and
``reasons`` detail keys, and ``git``, the project's commit as :func:`bench.harness.git_state`
gives it) and ``matrix.md``, the page the tutorial includes; for the WSGI servers the same
as ``matrix-wsgi.json`` and ``matrix-wsgi.md``. A suite with no server chosen writes nothing.

Servers come from the registry like every ``bench`` experiment's; by default every installed
toy and reference server of both interfaces (:func:`toyservers.registry.available`), not the
``bare`` baseline, which can still be named with ``--servers bare`` to see what it leaves out.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from bench.harness import git_state
from bench.report import OutputError, default_output, markdown_table, prepare_output, write_json
from toyservers.registry import SERVERS, Interface, available

ROOT = Path(__file__).resolve().parents[1]
Cell = str  # "pass" | "fail" | "unsupported" | "skipped"


@dataclass(frozen=True)
class Suite:
    """One conformance suite: where it is, its pytest options, what it writes, its words."""

    path: str
    servers_option: str
    report_option: str
    stem: str  # matrix.json/.md, matrix-wsgi.json/.md
    title: str
    rules: str  # what a MUST comes from, for the page's first paragraph
    level: int  # the heading level of the page's title (the WSGI page sits under the ASGI one)


SUITES: dict[Interface, Suite] = {
    "asgi": Suite("tests/conformance", "--conformance-servers", "--conformance-report",
                  "matrix", "What each server supports", "RFC 9110/9112 or the ASGI spec", 1),
    "wsgi": Suite("tests/conformance_wsgi", "--wsgi-conformance-servers",
                  "--wsgi-conformance-report", "matrix-wsgi", "What each WSGI server supports",
                  "RFC 9110/9112 or PEP 3333", 2),
}


class ConformanceError(RuntimeError):
    """The suite could not run (usage error, collection error) or wrote no report."""


def run_suite(servers: Sequence[str], report: Path, pytest_args: Sequence[str] = (),
              suite: Suite = SUITES["asgi"]) -> int:
    """Run ``suite`` on ``servers`` in a pytest subprocess writing records to ``report``.

    Returns pytest's exit status (0: all passed, 1: some tests failed). Raises
    ConformanceError for any other status or a missing report.
    """
    argv = [
        sys.executable, "-m", "pytest", suite.path, "-q", "-p", "no:cacheprovider",
        suite.servers_option, ",".join(servers), suite.report_option, str(report),
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
            elif outcomes == {"skipped"}:
                row[feature] = "skipped"
                reasons.setdefault(server, {})[feature] = mine[0]["message"]
            else:
                row[feature] = "pass"
        results[server] = row
    autobahn = {r["server"]: r["autobahn"] for r in records
                if "autobahn" in r and r["server"] in servers}
    return {
        "servers": {name: {"version": SERVERS[name].version()} for name in servers},
        "features": features,
        "results": results,
        "failures": failures,
        "reasons": reasons,
        "autobahn": {name: autobahn[name] for name in servers if name in autobahn},
    }


#: The behaviors Autobahn|Testsuite gives a case, in its report's order (bench.wstest).
AUTOBAHN_BEHAVIORS = ("OK", "NON-STRICT", "INFORMATIONAL", "FAILED", "UNIMPLEMENTED")


def autobahn_table(autobahn: dict[str, Any]) -> str:
    """The Autobahn counts as a Markdown table: one row per server, a column per behavior,
    then the cases that were not OK."""
    heads = ["server", "cases", *AUTOBAHN_BEHAVIORS, "not OK"]
    rows = [[server, ", ".join(entry["cases"]) + (f" but {', '.join(entry['exclude'])}"
                                                   if entry.get("exclude") else ""),
             *(str(entry["counts"].get(b, 0)) for b in AUTOBAHN_BEHAVIORS),
             ", ".join(f"{case} {behavior}" for case, behavior in entry["not_ok"].items())]
            for server, entry in autobahn.items()]
    return markdown_table(heads, rows, [False, False, *[True] * 5, False])


def render_markdown(matrix: dict[str, Any], how: Sequence[str] = (),
                    suite: Suite = SUITES["asgi"]) -> str:
    """``matrix.md``: features down, servers across (name, version, passes), then details;
    ``suite`` gives the title, the rules named and the heading level."""
    servers = list(matrix["servers"])
    results = matrix["results"]
    mark = {"pass": "pass", "fail": "**fail**", "unsupported": "unsupported",
            "skipped": "skipped"}
    headers = ["feature", *(f"{s} {matrix['servers'][s]['version']}" for s in servers)]
    rows = [[feature, *(mark.get(results[s].get(feature, ""), "") for s in servers)]
            for feature in matrix["features"]]
    rows.append(["**passes**", *(
        f"**{sum(1 for c in results[s].values() if c == 'pass')}/{len(results[s])}**"
        for s in servers)])
    title, sub = "#" * suite.level, "#" * (suite.level + 1)
    parts = [f"{title} {suite.title}\n",
             f"Measured by the conformance suite (`{suite.path}`), not taken from READMEs. "
             "`unsupported`: the server does not offer it (declared, and the tests confirm it "
             "fails); `fail`: the server claims it and a test fails, or it breaks a MUST of "
             f"{suite.rules} (each listed below with the rule).\n",
             markdown_table(headers, rows)]
    if matrix.get("autobahn"):
        parts += [f"{sub} Autobahn|Testsuite\n",
                  "The `autobahn` row's run, case by case (`wstest -m fuzzingclient` against "
                  "an echo): a reference server passes the row as Autobahn judges (no case "
                  "FAILED or UNIMPLEMENTED), ours only with every case OK or INFORMATIONAL. "
                  "NON-STRICT: allowed, but not as strict as it could be (an invalid message "
                  "failed once whole rather than at its first bad fragment, say). "
                  "All sections, big messages and compression included: `bench autobahn`.\n",
                  autobahn_table(matrix["autobahn"])]
    if matrix["failures"]:
        parts.append(f"{sub} Failures\n")
        for server, by_feature in matrix["failures"].items():
            for feature, tests in by_feature.items():
                parts += [f"- **{server}**, {feature}: `{test}`" for test in tests]
        parts.append("")
    if matrix["reasons"]:
        parts.append(f"{sub} Not offered or not run\n")
        for server, by_feature in matrix["reasons"].items():
            parts += [f"- **{server}**, {feature}: {why}" for feature, why in by_feature.items()]
        parts.append("")
    if how:
        parts.append(f"{sub} How it ran\n")
        parts += [f"- {line}" for line in how]
    return "\n".join(parts) + "\n"


def run(servers: Sequence[str] | None = None, output: Path | None = None,
        pytest_args: Sequence[str] = ()) -> Path:
    """Run each suite on its servers and write its matrix (``matrix.json`` and ``matrix.md``
    for ASGI, ``matrix-wsgi.*`` for WSGI) to ``output``; returns it.

    Raises:
        KeyError: an unknown server name.
        OutputError: ``output`` is not writable.
        ConformanceError: a suite could not run.
    """
    chosen = list(servers) if servers else [*available(), *available(interface="wsgi")]
    for name in chosen:
        if name not in SERVERS:
            raise KeyError(f"unknown server {name!r} (known: {', '.join(SERVERS)})")
    folder = prepare_output(output or default_output("conformance"))
    git = git_state()
    for interface, suite in SUITES.items():
        names = [name for name in chosen if SERVERS[name].interface == interface]
        if names:
            _run_one(suite, names, folder, pytest_args, git)
    return folder


def _run_one(suite: Suite, chosen: list[str], folder: Path, pytest_args: Sequence[str],
             git: dict[str, Any] | None) -> None:
    """Run ``suite`` on ``chosen`` and write its two files to ``folder``."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "report.json"
        run_suite(chosen, report_path, pytest_args, suite)
        report = json.loads(report_path.read_text())
    seconds = time.monotonic() - started
    matrix = build_matrix(report, chosen)
    matrix["git"] = git
    write_json(folder / f"{suite.stem}.json", matrix)
    how = [f"`bench conformance --servers {','.join(chosen)}`",
           f"{len(report['records'])} tests in {seconds:.0f} s, "
           f"Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}"]
    if git is not None:
        how.append(f"toyservers at commit {git['commit'][:12]}"
                   + (", with uncommitted changes" if git["dirty"] else ""))
    (folder / f"{suite.stem}.md").write_text(render_markdown(matrix, how, suite),
                                             encoding="utf-8")


def register(app: typer.Typer) -> None:
    """Add the ``conformance`` command to the ``bench`` typer app."""

    @app.command("conformance")
    def conformance(
        servers: Annotated[str, typer.Option(
            "--servers", help="Comma-separated registry names, ASGI and WSGI servers alike "
                              "(default: every installed one).")
        ] = "",
        output: Annotated[Path | None, typer.Option(
            "--output", help="Folder for matrix.json and matrix.md (ASGI), matrix-wsgi.json "
                             "and matrix-wsgi.md (WSGI) (default: "
                             "results/conformance-<timestamp>).")
        ] = None,
    ) -> None:
        """Run the conformance suites on each server and write the feature matrices."""
        names = [name.strip() for name in servers.split(",") if name.strip()]
        try:
            folder = run(names or None, output)
        except (KeyError, OutputError, ConformanceError) as exc:
            typer.echo(f"error: {exc.args[0] if exc.args else exc}", err=True)
            raise typer.Exit(2) from None
        for suite in SUITES.values():
            path = folder / f"{suite.stem}.json"
            if not path.exists():
                continue
            matrix = json.loads(path.read_text())
            for name, row in matrix["results"].items():
                passes = sum(1 for cell in row.values() if cell == "pass")
                fails = sum(1 for cell in row.values() if cell == "fail")
                typer.echo(f"{name:17} {passes:3} pass {fails:3} fail")
            typer.echo(f"wrote {path} and {path.with_suffix('.md')}")
