"""A student's setup, checked in about ten seconds without root: ``make workshop-check``.

Prints one line per check (``ok`` or ``FAIL`` with what to do) and exits 1 if any failed:
the Python and its virtualenv, the imports the lessons need, a lesson server answering on
127.0.0.1, and one exercise's tests passing on its solution. Tools that need root to install
(wrk, chromium) are reported, not required: ``sudo make workshop-tools`` installs them.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODULES = ["h11", "httptools", "h2", "wsproto", "uvicorn", "starlette", "fastapi", "flask",
           "httpx", "pytest", "toyservers", "bench"]


def main() -> int:
    failures = 0

    def report(ok: bool, what: str, fix: str = "") -> None:
        nonlocal failures
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'}  {what}" + ("" if ok else f": {fix}"), flush=True)

    report(sys.version_info >= (3, 11), f"Python {sys.version.split()[0]}",
           "the lessons need Python 3.11 or newer")
    report(sys.prefix != sys.base_prefix, f"virtualenv {sys.prefix}",
           "run it through make, or activate .venv first")
    missing = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    report(not missing, f"imports ({', '.join(MODULES)})",
           f"missing {', '.join(missing)}: run `make venv` (or `make venv OFFLINE=1`)")
    if missing:
        return 1

    import httpx

    from bench.process import ServerProcess, ServerStartError, free_port

    port = free_port()
    step = ROOT / "lessons" / "code" / "03-asgi" / "step1_scope.py"
    try:
        with ServerProcess([sys.executable, str(step), str(port)], port=port, cwd=ROOT,
                           startup_timeout=15) as server:
            answer = httpx.get(f"{server.url}/check", timeout=5)
            report(answer.status_code == 200 and "path=/check" in answer.text,
                   f"lesson 3's server answers on 127.0.0.1:{port}",
                   f"got {answer.status_code}: {answer.text[:80]!r}")
    except (ServerStartError, httpx.HTTPError) as exc:
        report(False, "lesson 3's server answers on 127.0.0.1", str(exc).splitlines()[0])

    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(ROOT / "lessons" / "exercises" / "03-asgi")],
        cwd=ROOT, env={**os.environ, "EXERCISE_IMPL": "solution"}, capture_output=True,
        text=True, timeout=120)
    summary = (result.stdout.strip().splitlines() or ["no output"])[-1]
    report(result.returncode == 0, f"exercise 3's tests on its solution ({summary})",
           "see `EXERCISE_IMPL=solution make exercise N=3`")

    for tool, use in (("curl", "the lessons' Run it tabs"), ("wrk", "the benchmarks"),
                      ("chromium", "the site test")):
        found = shutil.which(tool)
        print(f"{'ok  ' if found else 'note'}  {tool}: "
              f"{found or f'not installed ({use}); root-only: sudo make workshop-tools'}")
    print("ready for the workshop" if not failures else f"{failures} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
