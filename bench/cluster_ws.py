"""``bench cluster``'s ``ws`` table: an idle WebSocket through nginx, with and without pings.

To nginx a WebSocket is a request whose answer never ends: once the backend has switched
protocols (RFC 6455 §4.1; nginx passes ``Upgrade`` and ``Connection: upgrade`` on because its
config says so, ``bench/proxies/nginx.conf``), it copies bytes both ways, and
``proxy_read_timeout`` (60 s by default) still bounds how long it waits for the backend's next
byte. A WebSocket that is idle, a chat nobody writes in, sends nothing either way, and nginx
closes it when the timeout passes, without a Close frame: the client sees the connection drop
(1006). A server that sends a ping every ``--ws-ping-interval`` seconds (RFC 6455 §5.5.2)
keeps bytes coming from the backend, so an interval shorter than the timeout keeps the idle
connection up.

Each row runs one backend (``--server`` if it speaks WebSocket, else toy-raw) serving
``apps/ws_echo.py`` behind nginx with ``proxy_read_timeout`` :data:`READ_TIMEOUT_S`, the
backend pinging every :data:`PING_S` seconds or never. A run opens a WebSocket through nginx
(the client's own pings off, so only the server's keep it up), echoes one message, stays
silent for :data:`IDLE_S` seconds, then echoes another: the connection *survived* when the
second echo comes back, and was *cut* when it closed during the silence (how long after, and
the close code the client saw). Short values, so the table takes seconds: the rule is the
same at nginx's 60 s and uvicorn's 20 s ping interval.

HAProxy has its own idle bound for a tunnel (``timeout tunnel``), not measured here.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import connect

from bench import report
from bench.cluster_events import Stage, guarded
from bench.cluster_stack import Backend, Fleet, Upstream
from bench.process import free_port
from toyservers.registry import get

APP = "apps.ws_echo:app"
READ_TIMEOUT_S = 2.0  # nginx's proxy_read_timeout for these rows (its default: 60 s)
PING_S = 1.0  # the server's --ws-ping-interval in the row with pings
IDLE_S = 5.0  # how long the client stays silent: past the read timeout, twice over
FALLBACK = "toy-raw"  # the toy server that speaks WebSocket, when --server does not
HEADERS = ["Proxy", "Server pings", "proxy_read_timeout", "Silent for", "Survived",
           "Cut after (median)", "Close code seen"]


def ws_server(server: str) -> str:
    """The backends' server for this table: ``server`` if it speaks WebSocket, else
    :data:`FALLBACK`."""
    return server if "websocket" in get(server).protocols else FALLBACK


def idle_run(url: str, round_index: int) -> dict[str, Any]:
    """One run (module docstring): ``{"round", "survived", "lived_s", "close_code"}``;
    ``lived_s`` is how long the silent connection stayed open (:data:`IDLE_S` when it
    survived), ``close_code`` the code of the Close frame the client got, None without one.

    Raises:
        RuntimeError: the handshake or the first echo failed (the proxy or backend is broken).
    """
    try:
        return silent_run(url, round_index)
    except WebSocketException as exc:  # a refused handshake (nginx's 502), a closed echo
        raise RuntimeError(f"{type(exc).__name__}: {exc}") from None


def silent_run(url: str, round_index: int) -> dict[str, Any]:
    """:func:`idle_run`'s body; the websockets library's errors go through."""
    with connect(url, ping_interval=None, open_timeout=10, close_timeout=2) as ws:
        ws.send("before")
        if ws.recv(timeout=10) != "before":
            raise RuntimeError("the first echo through nginx did not come back")
        silent = time.monotonic()
        try:
            ws.recv(timeout=IDLE_S)  # nothing is sent to the client: only a close ends this
        except TimeoutError:
            ws.send("after")
            survived = ws.recv(timeout=10) == "after"
            return {"round": round_index, "survived": survived, "lived_s": IDLE_S,
                    "close_code": None}
        except ConnectionClosed as closed:
            return {"round": round_index, "survived": False,
                    "lived_s": round(time.monotonic() - silent, 3),
                    "close_code": closed.rcvd.code if closed.rcvd else None}
    raise RuntimeError("the backend sent a message the client did not ask for")


def measure_ws(stage: Stage, nginx: str | None, runs: int, progress: report.RichProgress
               ) -> list[dict[str, Any]]:
    """The ``ws`` table's rows (results.json ``websocket``): nginx in front of one backend
    pinging every :data:`PING_S` s, then never; ``runs`` runs each. ``nginx`` is its path
    (None: not installed, the rows skipped)."""
    server = ws_server(stage.server)
    rows = []
    for ping in (PING_S, 0.0):
        label = f"nginx, pings every {ping:g} s" if ping else "nginx, no pings"
        row: dict[str, Any] = {
            "label": label, "proxy": "nginx", "server": server, "ping_s": ping,
            "read_timeout_s": READ_TIMEOUT_S, "idle_s": IDLE_S,
            "status": "ok" if nginx else "skipped", "runs": [],
            "error": None if nginx else "nginx is not installed: scripts/ensure-tools.sh "
                                        "nginx installs it (make bench ARGS=cluster does)"}
        rows.append(row)
        if nginx is None:
            for _ in range(runs):
                progress.advance()
            continue
        name = f"ws-ping-{ping:g}"
        backend = Backend("b1", server, stage.host, free_port(stage.host),
                          stage.logs / f"{name}-b1.log", cpu=stage.backend_cpus[0], app=APP,
                          options=("--ws-ping-interval", f"{ping:g}"))
        fleet = Fleet([backend])
        proxy = stage.proxy("nginx", nginx, name, fleet,
                            Upstream(read_timeout=READ_TIMEOUT_S))
        try:
            fleet.start()
            proxy.start(stage.proxy_cpu, stage.logs / f"{name}-nginx.log")
            url = f"ws://{stage.host}:{proxy.port}/"
            for round_index in range(runs):
                result = guarded(partial(idle_run, url, round_index), progress,
                                 f"{label}: round {round_index + 1}/{runs}")
                if "error" in result:
                    row["status"], row["error"] = "failed", result["error"]
                    for _ in range(runs - round_index - 1):
                        progress.advance()
                    break
                row["runs"].append(result)
        except (OSError, RuntimeError, TimeoutError) as exc:  # a process did not start
            row["status"], row["error"] = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            proxy.stop()
            fleet.stop()
    return rows


def ws_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    """The table's cells, one line per row."""
    cells = []
    for row in rows:
        first = [row["proxy"], f"every {row['ping_s']:g} s" if row["ping_s"] else "none",
                 f"{row['read_timeout_s']:g} s", f"{row['idle_s']:g} s"]
        if row["status"] != "ok" or not row["runs"]:
            cells.append([*first, row["status"], "–", "–"])
            continue
        runs = row["runs"]
        cut = sorted(r["lived_s"] for r in runs if not r["survived"])
        codes = sorted({str(r["close_code"]) if r["close_code"] else "none (1006)"
                        for r in runs if not r["survived"]})
        cells.append([*first, f"{sum(r['survived'] for r in runs)}/{len(runs)}",
                      f"{cut[len(cut) // 2]:.1f} s" if cut else "–",
                      ", ".join(codes) if codes else "–"])
    return cells
