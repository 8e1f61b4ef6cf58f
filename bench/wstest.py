"""Autobahn|Testsuite's fuzzing client against one WebSocket URL, and its report read back.

Autobahn|Testsuite (github.com/crossbario/autobahn-testsuite) is the suite WebSocket
implementations are judged by: ``wstest -m fuzzingclient`` connects to a server that echoes
every message (``apps/ws_echo.py``), plays each case (valid and broken framing, fragmentation,
UTF-8, close codes, big messages, compression) and judges what comes back. It runs on Python
2.7 only; ``scripts/ensure-tools.sh autobahn`` installs it into :func:`install_dir` beside a
``wstest`` script, and :func:`find_wstest` finds that script (None: not installed, and the
callers skip).

A case's verdict (``behavior``) is one of :data:`BEHAVIORS`: ``OK``; ``NON-STRICT`` (allowed
by RFC 6455 but not as strict as it could be, e.g. an invalid UTF-8 message failed only once
whole instead of at the first bad fragment); ``INFORMATIONAL`` (nothing to judge: which close
code came back, say); ``FAILED``; ``UNIMPLEMENTED`` (an extension the server did not
negotiate). Autobahn counts the first three as passing; the project's target for its own
servers is stricter, :data:`STRICT_PASS`: every case OK or INFORMATIONAL.

Case ids are dotted numbers (``"6.4.1"``); a case list names them with ``*`` wildcards
(``"6.*"``, ``"*"``), as Autobahn's spec file does. :data:`QUICK_CASES` (sections 1-7 and
10: framing, pings, reserved bits, opcodes, fragmentation, UTF-8, close handling, message
sizes up to 64 KiB; 247 cases, about 7 s a server here) run in ``make test`` without
:data:`QUICK_EXCLUDE`, five cases that only wait (242 cases, about 2 s a server);
:data:`ALL_CASES` (517 cases) adds 9 (performance: messages up to 16 MiB, 11 s) and 12-13
(permessage-deflate: 22 min against uvicorn), for ``bench autobahn``.

Spec: RFC 6455 (WebSocket), RFC 7692 (permessage-deflate); the suite's spec file and report
format (``index.json``: agent -> case id -> ``behavior``, ``behaviorClose``, ``duration``,
``remoteCloseCode``, ``reportfile``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: The version ``scripts/ensure-tools.sh autobahn`` installs (the folder is named for it).
VERSION = "25.10.1"
BEHAVIORS = ("OK", "NON-STRICT", "INFORMATIONAL", "FAILED", "UNIMPLEMENTED")
#: Autobahn's own idea of a pass.
AUTOBAHN_PASS = frozenset({"OK", "NON-STRICT", "INFORMATIONAL"})
#: The project's target for its own servers (issue 20): nothing merely non-strict.
STRICT_PASS = frozenset({"OK", "INFORMATIONAL"})
QUICK_CASES = ("1.*", "2.*", "3.*", "4.*", "5.*", "6.*", "7.*", "10.*")
#: The cases of QUICK_CASES that ``make test`` leaves out: each waits a second on Autobahn's
#: clock, and the five took 5 of the 7 s a server (toy-raw, 2026-11-27). 5.19 and 5.20 send a
#: fragmented message with pings, a second apart (5.6-5.18 interleave pings without waiting);
#: 6.4.2-6.4.4 send invalid UTF-8 a fragment at a time, a second apart, as 6.4.1 does, which
#: stays: the fail-fast case (the server must close at the first bad fragment).
QUICK_EXCLUDE = ("5.19", "5.20", "6.4.2", "6.4.3", "6.4.4")
ALL_CASES = ("*",)
#: Seconds one run may take before it is stopped: the quick sections took 11-17 s a server
#: here, the whole suite 22 min against uvicorn (sections 12 and 13, 1000 compressed messages
#: a case from a Python 2 client, are 98 % of it).
QUICK_TIMEOUT = 120.0
ALL_TIMEOUT = 3600.0


class WstestError(RuntimeError):
    """wstest could not run or wrote no report; the message ends with its output's tail."""


def install_dir() -> Path:
    """Where ``scripts/ensure-tools.sh autobahn`` installs: ``$AUTOBAHN_DIR``, else
    ``$XDG_CACHE_HOME/toyservers/autobahntestsuite-VERSION`` (``~/.cache`` by default)."""
    if os.environ.get("AUTOBAHN_DIR"):
        return Path(os.environ["AUTOBAHN_DIR"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "toyservers" / f"autobahntestsuite-{VERSION}"


def find_wstest() -> Path | None:
    """The ``wstest`` script the installer wrote, or None when it is not installed."""
    script = install_dir() / "wstest"
    return script if os.access(script, os.X_OK) else None


#: One line for a skip or an error when wstest is missing.
MISSING = ("Autobahn|Testsuite is not installed: run scripts/ensure-tools.sh autobahn "
           "(it needs Python 2.7, e.g. pyenv install 2.7.18)")


def case_key(case_id: str) -> tuple[int, ...]:
    """``"6.10.2"`` -> ``(6, 10, 2)``: the order Autobahn's report lists cases in."""
    return tuple(int(part) for part in case_id.split("."))


@dataclass(frozen=True)
class CaseResult:
    """One case's verdict: ``behavior`` (the messages) and ``behavior_close`` (the closing
    handshake), the close code the server sent (None: none), the case's duration (ms)."""

    case: str
    behavior: str
    behavior_close: str
    remote_close_code: int | None
    duration_ms: int


@dataclass(frozen=True)
class Report:
    """Every case of one run against one server, keyed by case id."""

    agent: str
    cases: dict[str, CaseResult]

    def counts(self) -> dict[str, int]:
        """Cases per behavior, every one of :data:`BEHAVIORS` present (0 when none)."""
        found = Counter(result.behavior for result in self.cases.values())
        return {behavior: found.get(behavior, 0) for behavior in BEHAVIORS}

    def failing(self, passing: frozenset[str] = STRICT_PASS) -> dict[str, str]:
        """Case id -> behavior of every case whose behavior is not in ``passing``, in order."""
        return {case: self.cases[case].behavior for case in sorted(self.cases, key=case_key)
                if self.cases[case].behavior not in passing}

    def summary(self) -> str:
        """``"247 cases: 233 OK, 11 NON-STRICT, 3 INFORMATIONAL"`` (behaviors with 0 left out)."""
        parts = [f"{count} {behavior}" for behavior, count in self.counts().items() if count]
        return f"{len(self.cases)} cases: " + ", ".join(parts)


def compact_ids(behaviors: Mapping[str, str], behavior: str) -> list[str]:
    """The ids of the cases in ``behaviors`` (case id -> behavior, every case of a run) that
    got ``behavior``, in order, a whole section or subsection that all got it written as
    Autobahn's pattern for it: ``{"12.1.1": "UNIMPLEMENTED", ...}`` -> ``["12.*", "13.*"]``."""
    chosen = sorted((c for c, b in behaviors.items() if b == behavior), key=case_key)
    groups: dict[str, list[str]] = {}
    for case in behaviors:
        parts = case.split(".")
        for depth in range(1, len(parts)):
            groups.setdefault(".".join(parts[:depth]), []).append(case)
    out: list[str] = []
    covered: set[str] = set()
    for case in chosen:
        if case in covered:
            continue
        parts = case.split(".")
        for depth in range(1, len(parts)):  # the widest group this case completes
            members = groups[".".join(parts[:depth])]
            if len(members) > 1 and all(behaviors[m] == behavior for m in members):
                out.append(".".join(parts[:depth]) + ".*")
                covered.update(members)
                break
        else:
            out.append(case)
    return out


def parse_report(index: Path, agent: str) -> Report:
    """Read ``index.json`` (Autobahn's report) for ``agent``.

    Raises:
        WstestError: the file is missing, not JSON, or has no entry for ``agent``.
    """
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
        entries = data[agent]
    except (OSError, ValueError, KeyError) as exc:
        raise WstestError(f"no Autobahn report for {agent} in {index}: {exc}") from None
    cases = {case: CaseResult(case, entry["behavior"], entry["behaviorClose"],
                              entry.get("remoteCloseCode"), int(entry.get("duration") or 0))
             for case, entry in entries.items()}
    return Report(agent, cases)


def write_spec(path: Path, url: str, agent: str, outdir: Path, cases: Iterable[str],
               exclude: Iterable[str] = ()) -> None:
    """The fuzzing client's spec file: one server (``agent`` at ``url``), the cases to run
    and to leave out, the report folder."""
    spec = {"outdir": str(outdir), "servers": [{"agent": agent, "url": url}],
            "cases": list(cases), "exclude-cases": list(exclude), "exclude-agent-cases": {}}
    path.write_text(json.dumps(spec, indent=1), encoding="utf-8")


def run_fuzzingclient(url: str, workdir: Path, *, agent: str = "server",
                      cases: Sequence[str] = QUICK_CASES, exclude: Sequence[str] = (),
                      timeout: float = QUICK_TIMEOUT, wstest: Path | None = None) -> Report:
    """Run ``wstest -m fuzzingclient`` against ``url`` (``ws://host:port/path``) and return its
    report; the spec, the output (``wstest.log``) and Autobahn's report (``report/``: an
    ``index.html`` and one JSON and HTML file per case) are written in ``workdir``.

    Raises:
        WstestError: wstest is not installed, took longer than ``timeout`` seconds, or wrote
            no report.
    """
    program = wstest or find_wstest()
    if program is None:
        raise WstestError(MISSING)
    workdir.mkdir(parents=True, exist_ok=True)
    spec, outdir, log = workdir / "fuzzingclient.json", workdir / "report", workdir / "wstest.log"
    write_spec(spec, url, agent, outdir, cases, exclude)
    with log.open("wb") as output:
        try:
            subprocess.run([str(program), "-m", "fuzzingclient", "-s", str(spec)], cwd=workdir,
                           stdout=output, stderr=subprocess.STDOUT, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise WstestError(f"wstest still running after {timeout:g} s against {url}: "
                              + _tail(log)) from None
    if not (outdir / "index.json").is_file():
        raise WstestError(f"wstest wrote no report for {url}: " + _tail(log))
    return parse_report(outdir / "index.json", agent)


def _tail(log: Path, lines: int = 10) -> str:
    text = log.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(text[-lines:]) or "(no output)"
