"""Serve ``bench servers``' app by hand: a throwaway redis-server, seeded, then uvicorn.

Run: ``.venv/bin/python lessons/code/11-servers/serve_servers_app.py PORT [SERVER]`` (SERVER:
a registry name, uvicorn by default). It does what ``bench servers`` does before it loads a
row: starts redis-server on a free loopback port in a temporary folder with no persistence,
fills it with 100 users and their activities, and starts the server on ``127.0.0.1:PORT``
with the app's settings in its environment. Ctrl-C (or SIGTERM) stops both and removes the folder.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

from apps import servers_app
from bench.process import ServerProcess
from bench.redis_server import RedisServer
from toyservers.registry import get


def stop(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends the program the way Ctrl-C does, so the ``with`` blocks clean up."""
    raise KeyboardInterrupt


# --8<-- [start:main]
def main(port: int, server: str = "uvicorn") -> None:
    signal.signal(signal.SIGTERM, stop)
    with RedisServer() as redis:
        servers_app.seed(redis.host, redis.port, users=100, activities=10)
        argv = get(server).command("apps.servers_app:app", "127.0.0.1", port)
        env = {"SERVERS_APP_REDIS": redis.address}
        with ServerProcess(argv, port=port, env=env) as app:
            print(f"redis-server on {redis.address}, {server} on {app.url}", flush=True)
            try:
                signal.pause()
            except KeyboardInterrupt:
                print("stopping", flush=True)
# --8<-- [end:main]


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000, *sys.argv[2:3])
