"""Short output for ``make exercise N=<n>``: one line per failing check, with its hint.

``make exercise`` runs pytest with ``--tb=no -rN``, so no tracebacks are printed (the server
checks' failures would otherwise run through httpx's internals, hundreds of lines). This hook
then writes, for each failing check, its name and the first line of what went wrong: the
starter's ``NotImplementedError`` says which function to write, an assertion says what was
expected. Run pytest on the directory without those options to see the full tracebacks.
"""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    if config.getoption("tbstyle") != "no":
        return  # full tracebacks were asked for and printed already
    failed = terminalreporter.stats.get("failed", [])
    if not failed:
        return
    terminalreporter.section(f"{len(failed)} checks still fail")
    for report in failed:
        name = report.nodeid.split("::", 1)[-1]
        crash = getattr(report.longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(report.longrepr)
        first = text.strip().splitlines()[0] if text.strip() else "failed"
        terminalreporter.write_line(f"{name}: {first}")
