"""``bench cluster``: the config templates, the backends' app, where things run, a whole run.

Nothing here asserts a speed, nor a count of failed requests: figures depend on the machine
and on what else runs on it. A whole run of every scenario against real nginx and HAProxy
processes, and what it reports, is checked on lesson 14's command (:func:`check_a_whole_run`,
called by tests/test_page_bench_commands.py, which runs it shortened), so that the experiment
runs once in make test.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from apps import cluster_app
from apps.user import SAMPLE_BODY
from bench import cluster_ws
from bench.cluster import Settings, measure_failover, measure_rolling, place
from bench.cluster_events import Stage
from bench.cluster_stack import (
    Address,
    Fleet,
    Upstream,
    config_text,
    find_proxy,
    proxy_version,
    render,
)
from bench.harness import Pinning, fetch
from bench.loadgen import Load
from bench.rounds import NoProgress

HAVE = {name: find_proxy(name) for name in ("nginx", "haproxy")}
needs_proxies = pytest.mark.skipif(
    None in HAVE.values(), reason="nginx and haproxy are not installed (make test installs them)")
needs_wrk = pytest.mark.skipif(shutil.which("wrk") is None,
                               reason="wrk is not installed (make test installs it)")
BACKENDS = [Address("b1", "127.0.0.1", 18001), Address("b2", "127.0.0.1", 18002)]


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.cli", "cluster", *args],
                          capture_output=True, text=True, timeout=timeout)


# --- the templates -----------------------------------------------------------------------------


def test_render_indents_a_value_of_several_lines_and_drops_an_empty_one() -> None:
    template = "a {{x}} b\n    {{block}}\n    {{empty}}\nend\n"
    assert render(template, {"x": "1", "block": "one;\ntwo;", "empty": ""}) == (
        "a 1 b\n    one;\n    two;\nend\n")


def test_render_refuses_a_missing_or_a_misspelt_value() -> None:
    with pytest.raises(KeyError):
        render("{{x}}\n", {})
    with pytest.raises(ValueError, match="no placeholder for y"):
        render("{{x}}\n", {"x": "1", "y": "2"})


def test_nginx_config_says_what_the_upstream_is(tmp_path: Path) -> None:
    off = config_text("nginx", tmp_path, "127.0.0.1:8080", BACKENDS,
                      Upstream(keepalive=False, down=frozenset({"b2"})))
    assert "server 127.0.0.1:18001 max_fails=1 fail_timeout=1s;" in off
    assert "server 127.0.0.1:18002 max_fails=1 fail_timeout=1s down;" in off
    assert "        ''      close;\n" in off and "keepalive 32;" not in off
    assert "        least_conn;\n" not in off and "{{" not in off
    on = config_text("nginx", tmp_path, "127.0.0.1:8080", BACKENDS,
                     Upstream(balance="leastconn"))
    assert "        least_conn;\n" in on and "        keepalive 32;\n" in on
    assert "        ''      \"\";\n" in on  # no Connection header: the connection stays
    for text in (on, off):  # WebSocket: Upgrade passed on, Connection: upgrade with it
        assert "map $http_upgrade $connection_upgrade {" in text
        assert "proxy_set_header Upgrade $http_upgrade;" in text
        assert "proxy_set_header Connection $connection_upgrade;" in text
        assert "proxy_http_version 1.1;" in text


def test_haproxy_config_says_what_the_upstream_is(tmp_path: Path) -> None:
    text = config_text("haproxy", tmp_path, "127.0.0.1:8080", BACKENDS,
                       Upstream(keepalive=False, balance="leastconn", checks=True))
    assert "    server b1 127.0.0.1:18001 check\n" in text
    assert "balance leastconn" in text and "option http-server-close" in text
    assert f"stats socket {tmp_path}/admin.sock" in text


@needs_proxies
@pytest.mark.parametrize("name", ["nginx", "haproxy"])
def test_the_generated_configs_are_valid(name: str, tmp_path: Path) -> None:
    path = HAVE[name]
    assert path is not None
    for upstream in (Upstream(), Upstream(keepalive=False, balance="leastconn", checks=True,
                                          down=frozenset({"b1"}))):
        config = tmp_path / "proxy.conf"
        config.write_text(config_text(name, tmp_path, "127.0.0.1:8080", BACKENDS, upstream))
        argv = ([path, "-t", "-q", "-p", str(tmp_path), "-c", str(config), "-e",
                 str(tmp_path / "error.log")] if name == "nginx" else [path, "-c", "-f",
                                                                      str(config)])
        check = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr
    assert proxy_version(path)[0].isdigit() or proxy_version(path).startswith("nginx/")


# --- where things run ----------------------------------------------------------------------------


def test_on_two_cores_the_backends_share_the_proxys_cpu() -> None:
    placement = place(Pinning(0, 1, "pinned"), [0, 1], 3)
    assert (placement.wrk, placement.proxy, placement.backends) == (1, 0, (0,))
    assert "share one" in placement.text


def test_with_more_cores_each_backend_gets_one_in_turn() -> None:
    placement = place(Pinning(0, 1, "pinned"), [0, 1, 2, 3], 3)
    assert placement.backends == (2, 3)
    assert "backends on CPU 2, 3" in placement.text and "share" not in placement.text


def test_unpinned_nothing_is_placed() -> None:
    placement = place(Pinning(None, None, "not pinned (--no-pin)"), [0, 1], 3)
    assert placement.backends == (None,) and placement.proxy is None


# --- the backends' app -------------------------------------------------------------------------


def call(path: str, method: str = "GET", body: bytes = b"",
         headers: list[tuple[bytes, bytes]] | None = None) -> tuple[int, dict[bytes, bytes], bytes]:
    """One request through ``apps.cluster_app.app``: status, headers, body."""
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": method, "path": path, "scheme": "http",
             "client": ("10.0.0.1", 5000), "headers": headers or [(b"host", b"x")]}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(cluster_app.app(scope, receive, send))
    return sent[0]["status"], dict(sent[0]["headers"]), b"".join(m.get("body", b"")
                                                                for m in sent[1:])


def test_the_app_echoes_on_post_answers_get_and_names_the_backend() -> None:
    before = cluster_app.served
    status, headers, body = call("/", "POST", SAMPLE_BODY)
    assert status == 200 and json.loads(body) == json.loads(SAMPLE_BODY)
    assert headers[b"x-backend"] == cluster_app.NAME.encode()
    assert call("/")[0] == 200
    assert cluster_app.served == before + 2
    assert json.loads(call("/count")[2])["requests"] == before + 2
    assert call("/health")[2] == b"ok" and cluster_app.served == before + 2
    assert call("/", "PUT")[0] == 405 and call("/nope")[0] == 404
    assert call("/", "POST", b"{")[0] == 400


def test_whoami_shows_what_the_server_handed_over() -> None:
    who = json.loads(call("/whoami", headers=[(b"host", b"example.com"),
                                              (b"x-forwarded-for", b"1.2.3.4")])[2])
    assert who == {"client": "10.0.0.1:5000", "scheme": "http", "host": "example.com",
                   "x-forwarded-for": "1.2.3.4", "forwarded": None}


def test_a_backend_starts_counts_and_stops_gracefully(tmp_path: Path) -> None:
    fleet = Fleet.plan(2, "toy-httptools", "127.0.0.1", [None], tmp_path, "t-")
    fleet.start()
    try:
        b1 = fleet["b1"]
        status, headers, _ = fetch(b1.host, b1.port, method="POST", body=SAMPLE_BODY)
        assert status == 200 and headers["x-backend"] == "b1"
        assert fleet.counts() == {"b1": 1, "b2": 0}
        assert b1.terminate() < 10 and b1.pid is None
        fleet.start()  # only b1 was stopped: started again, on its port, counting from 0
        assert fleet.counts() == {"b1": 0, "b2": 0}
    finally:
        fleet.stop()


# --- rows that cannot run, and the command ----------------------------------------------------


def test_a_missing_proxy_skips_its_rows_with_the_install_line(tmp_path: Path) -> None:
    settings = Settings(proxies=("nginx",))
    stage = Stage("wrk", Load(), "toy-httptools", 2, "127.0.0.1", None, None, (None,),
                  tmp_path, tmp_path, 10, 5)
    for measure in (measure_failover, measure_rolling):
        rows = measure(settings, stage, {"nginx": None}, NoProgress())  # type: ignore[arg-type]
        assert rows and all(r["status"] == "skipped" for r in rows)
        assert "scripts/ensure-tools.sh nginx" in rows[0]["error"]


@pytest.mark.parametrize("args", [("--proxies", "envoy"), ("--scenarios", "hop,chaos"),
                                  ("--server", "nope")])
def test_cli_mistakes_are_one_line(args: tuple[str, ...], tmp_path: Path) -> None:
    out = run_cli(*args, "--output", str(tmp_path / "out"))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().startswith("error: ") and len(out.stderr.strip().splitlines()) == 1


def check_a_whole_run(out: Path, backends: int = Settings.backends) -> None:
    """What a run of every scenario (``bench cluster``, the options as printed) wrote in
    ``out``, with ``backends`` backends: each table, its rows and their figures, the report's
    sections and the configs. It runs once in make test, shortened, as lesson 14 prints it
    (tests/test_page_bench_commands.py calls this on its output)."""
    names = {f"b{i}" for i in range(1, backends + 1)}
    data = json.loads((out / "results.json").read_text())
    for key in ("machine", "python", "packages", "git", "command", "pinning", "placement",
                "proxies", "wrk"):
        assert key in data
    assert [r["layer"] for r in data["rows"]] == [
        "direct", "nginx, keep-alive off", "nginx, keep-alive on", "haproxy, keep-alive off",
        "haproxy, keep-alive on"]
    for row in data["rows"]:
        assert row["status"] == "ok" and row["rps_median"] > 0, row
        assert row["backends_cpu_us"] is not None
    assert all(r["proxy_cpu_us"] is not None for r in data["rows"][1:])
    assert data["rows"][1]["us_added"] is not None and data["rows"][1]["below"] == (
        "direct/toy-httptools")
    assert [r["status"] for r in data["websocket"]] == ["ok", "ok"]
    assert [r["how"] for r in data["rolling"]] == [
        "sigterm", "reload", "idle-close-on-response", "sigterm", "drain",
        "idle-close-on-response"]
    for scenario in ("balance", "failover", "rolling"):
        assert len(data[scenario]) == (6 if scenario == "rolling" else 4), scenario
        for row in data[scenario]:
            assert row["status"] == "ok" and len(row["runs"]) == 1, row
    for row in data["balance"]:
        assert sum(row["runs"][0]["per_backend"].values()) > 0
    for row in data["failover"]:
        assert row["runs"][0]["killed"] == "b1"
        assert set(row["runs"][0]["per_backend"]) == names - {"b1"}
    for row in data["rolling"]:
        assert set(row["runs"][0]["steps"]) == names
    text = (out / "results.md").read_text()
    assert "**Failover: b1 SIGKILLed halfway through each run**" in text
    assert re.search(r"exit after SIGTERM .*nginx idle-close-on-response \d+\.\d\d", text)
    assert (out / "cluster.png").stat().st_size > 0
    configs = sorted(p.name for p in (out / "configs").iterdir())
    assert "hop-nginx-ka-on-nginx.conf" in configs and "rolling-haproxy-drain-haproxy.cfg" in \
        configs
    assert "<folder>/admin.sock" in (out / "configs" / "rolling-haproxy-drain-haproxy.cfg"
                                     ).read_text()


@needs_proxies
@needs_wrk
@pytest.mark.wrk
@pytest.mark.timeout(120)
def test_an_idle_websocket_through_nginx_lives_on_the_servers_pings(tmp_path: Path) -> None:
    """With pings every second the silent connection outlives nginx's 2 s read timeout;
    without, nginx closes it, no earlier than the timeout and without a Close frame."""
    out = tmp_path / "out"
    run = run_cli("--scenarios", "ws", "--proxies", "nginx", "--runs", "1", "--output",
                  str(out), timeout=110)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    pings, silent = data["websocket"]
    assert (pings["ping_s"], silent["ping_s"]) == (cluster_ws.PING_S, 0.0)
    assert pings["status"] == silent["status"] == "ok", data["websocket"]
    assert pings["runs"][0]["survived"] and pings["runs"][0]["lived_s"] == cluster_ws.IDLE_S
    cut = silent["runs"][0]
    assert not cut["survived"] and cut["close_code"] is None  # dropped: the client sees 1006
    assert cut["lived_s"] >= cluster_ws.READ_TIMEOUT_S - 0.1  # nginx's timeout, not sooner
    assert "**WebSocket through nginx: an idle connection" in (out / "results.md").read_text()
    config = (out / "configs" / "ws-ping-0-nginx.conf").read_text()
    assert "proxy_read_timeout 2s;" in config and "$connection_upgrade" in config
