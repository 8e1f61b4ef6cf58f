"""Where 504 and 502 come from: nginx in front of a backend too slow, then of none at all.

Usage: ``.venv/bin/python lessons/code/14-proxy/timeouts.py``. It starts one toy-httptools
backend whose every request waits 1.5 s (``BACKEND_WAIT_MS``) behind nginx with
``proxy_read_timeout 1s``, and sends:

1. ``GET /``: the backend is working on it when nginx's read timeout expires, so nginx gives
   up and answers ``504 Gateway Time-out`` itself (the backend finishes later, for nobody);
2. ``GET /health``, which does not wait: 200 from the same backend, through the same nginx;
3. ``GET /`` again once the backend is stopped: nginx's connection is refused, there is no
   other backend to try, and it answers ``502 Bad Gateway``.

After each answer it prints the line nginx wrote in its error log, the proxy's side of it.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from bench.cluster_stack import Fleet, Proxy, Upstream, find_proxy
from bench.harness import fetch


def last_error(log: Path, seen: int) -> tuple[str, int]:
    """The newest line of nginx's error log past line ``seen``, without its timestamp and
    process ids, and how many lines the log has."""
    lines = log.read_text().splitlines() if log.exists() else []
    new = [line for line in lines[seen:] if "[error]" in line]
    text = re.sub(r"^\S+ \S+ \[error\] \d+#\d+: \*\d+ ", "", new[-1]) if new else "(nothing)"
    return text.split(", client:")[0], len(lines)


# --8<-- [start:main]
def main() -> None:
    nginx = find_proxy("nginx")
    if nginx is None:
        sys.exit("nginx is not installed: scripts/ensure-tools.sh nginx installs it")
    with tempfile.TemporaryDirectory(prefix="timeouts-") as folder:
        fleet = Fleet.plan(1, "toy-httptools", "127.0.0.1", [None], Path(folder),
                           wait_ms=lambda _: 1500)
        proxy = Proxy("nginx", nginx, Path(folder) / "nginx", fleet.addresses,
                      Upstream(read_timeout=1))
        log, seen = proxy.folder / "error.log", 0
        try:
            fleet.start()
            proxy.start(None, Path(folder) / "nginx.log")
            for what, path in (("the backend takes 1.5 s", "/"), ("it answers at once",
                               "/health"), ("no backend listens", "/")):
                if what == "no backend listens":
                    fleet.stop()
                status = fetch("127.0.0.1", proxy.port, path, timeout=10)[0]
                error, seen = last_error(log, seen)
                print(f"GET {path:7} ({what}): {status}")
                if status >= 500:
                    print(f"    nginx's error log: {error}")
        finally:
            proxy.stop()
            fleet.stop()
# --8<-- [end:main]


if __name__ == "__main__":
    main()
