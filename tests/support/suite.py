"""What the ASGI and WSGI conformance suites (``tests/conformance``, ``tests/conformance_wsgi``)
share in their conftests: reading an option, and one outcome record per test for the report
that ``bench conformance`` turns into the feature matrix."""

from __future__ import annotations

import os
from typing import Any

import pytest

#: A test's phases can end differently (a failing teardown after a passing call): its record
#: keeps the worst, in this order.
OUTCOME_RANK = {"passed": 0, "skipped": 1, "xfailed": 2, "violation": 3, "failed": 4,
                "error": 5}


def option(config: pytest.Config, name: str, env: str) -> str:
    """The command-line option ``name``, else the environment variable ``env``, else ""."""
    value = config.getoption(name, default=None)
    return str(value) if value else os.environ.get(env, "")


def record_outcome(records: dict[str, dict[str, Any]], report: pytest.TestReport,
                   server: str, feature: str) -> None:
    """Fold one phase's ``report`` into ``records[report.nodeid]``: passed, skipped,
    xfailed, violation (an xfail whose reason starts "violation: "), failed or error, with
    the xfail reason or the failure's message; the worst phase wins."""
    if report.when == "call" and report.passed:
        outcome = "passed"
    elif report.skipped:
        outcome = "skipped"
        if hasattr(report, "wasxfail"):
            violation = str(report.wasxfail).startswith("violation: ")
            outcome = "violation" if violation else "xfailed"
    elif report.failed:
        outcome = "failed" if report.when == "call" else "error"
    else:
        return
    message = str(getattr(report, "wasxfail", "")) if outcome in ("xfailed", "violation") else ""
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        message = str(getattr(crash, "message", "")) or report.longreprtext.splitlines()[-1:][0]
    record = records.setdefault(report.nodeid, {
        "nodeid": report.nodeid, "server": server, "feature": feature,
        "outcome": "passed", "message": "",
    })
    if OUTCOME_RANK[outcome] >= OUTCOME_RANK[record["outcome"]]:
        record["outcome"] = outcome
        record["message"] = message or record["message"]
