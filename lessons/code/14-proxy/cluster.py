"""A small cluster by hand: three toy servers behind nginx (or HAProxy), until Ctrl-C.

Usage: ``.venv/bin/python lessons/code/14-proxy/cluster.py PORT [nginx|haproxy]``. It starts
what ``bench cluster`` starts for its balance rows: three backends ``b1``, ``b2``, ``b3``
(toy-httptools serving ``apps/cluster_app.py``, each on a free port of 127.0.0.1, each
answering with an ``x-backend`` header that names it), then the proxy on ``127.0.0.1:PORT``,
from the config ``bench/proxies/`` generates into a temporary folder; it prints where
everything is and the config's path, so you can read what runs. Ctrl-C (or SIGTERM) stops them
all."""

from __future__ import annotations

import signal
import sys
import tempfile
from pathlib import Path
from types import FrameType

from bench.cluster_stack import Fleet, Proxy, Upstream, find_proxy


def stop(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends the program the way Ctrl-C does, so the ``finally`` blocks clean up."""
    raise KeyboardInterrupt


# --8<-- [start:main]
def main(port: int, name: str = "nginx") -> None:
    signal.signal(signal.SIGTERM, stop)
    path = find_proxy(name)
    if path is None:
        sys.exit(f"{name} is not installed: scripts/ensure-tools.sh {name} installs it")
    with tempfile.TemporaryDirectory(prefix="cluster-") as folder:
        fleet = Fleet.plan(3, "toy-httptools", "127.0.0.1", [None], Path(folder))
        proxy = Proxy(name, path, Path(folder) / name, fleet.addresses, Upstream(checks=True))
        try:
            fleet.start()
            proxy.start(None, Path(folder) / f"{name}.log", port)
            for backend in fleet.backends:
                print(f"{backend.name} on http://127.0.0.1:{backend.port}", flush=True)
            print(f"{name} on http://127.0.0.1:{port}, config {proxy.config_path}", flush=True)
            signal.pause()
        except KeyboardInterrupt:
            print("stopping", flush=True)
        finally:
            proxy.stop()
            fleet.stop()
# --8<-- [end:main]


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000, *sys.argv[2:3])
