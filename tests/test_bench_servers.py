"""``bench servers`` and ``bench load``: their apps against a real redis-server and real
servers, the bearer-token Lua script under wrk, the pieces of their reports, and a smoke run
of each command.

Nothing here asserts a speed: figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from apps import load_app, servers_app
from bench import load, report, servers, servers_report
from bench.loadgen import Load
from bench.process import ServerProcess, free_port
from bench.redis_server import RedisServer
from bench.rounds import RssSampler
from bench.wrk_get import GET_BEARER, WrkGet
from toyservers.registry import get

HOST = "127.0.0.1"
HAVE_WRK = shutil.which("wrk") is not None
HAVE_REDIS = shutil.which("redis-server") is not None
needs_wrk = pytest.mark.skipif(not HAVE_WRK, reason="wrk is not installed (make test installs it)")
needs_redis = pytest.mark.skipif(not HAVE_REDIS,
                                 reason="redis-server is not installed (make test installs it)")


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


# --- the JWT + Redis endpoint on a real redis-server ----------------------------------------------


@pytest.fixture(scope="module")
def redis_and_app() -> Iterator[tuple[RedisServer, ServerProcess]]:
    """A seeded redis-server and the servers app on uvicorn, using it."""
    if not HAVE_REDIS:
        pytest.skip("redis-server is not installed (make test installs it)")
    with RedisServer() as redis:
        servers_app.seed(redis.host, redis.port, users=3, activities=4)
        port = free_port()
        argv = get("uvicorn").command(servers.APP, HOST, port)
        env = {"SERVERS_APP_REDIS": redis.address}
        with ServerProcess(argv, port=port, env=env) as app:
            yield redis, app


def get_path(app: ServerProcess, path: str, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.get(f"{app.url}{path}", headers=headers, timeout=10)


def test_the_throwaway_redis_is_gone_with_its_folder_after_the_block() -> None:
    if not HAVE_REDIS:
        pytest.skip("redis-server is not installed")
    with RedisServer() as redis:
        directory = redis.directory
        assert directory is not None and directory.is_dir()
        argv = redis.argv(directory)
        assert argv[argv.index("--save") + 1] == "" and "--appendonly" in argv
        assert redis.process is not None and redis.process.proc is not None
        proc = redis.process.proc
    assert proc.poll() is not None
    assert not directory.exists()


@needs_redis
def test_activities_answers_the_tokens_user_from_redis(
        redis_and_app: tuple[RedisServer, ServerProcess]) -> None:
    _, app = redis_and_app
    response = get_path(app, "/api/activities", servers_app.make_token("user2"))
    assert response.status_code == 200
    data = response.json()
    assert data["user"] == {"id": "2", "username": "user2", "full_name": "User 2",
                            "email": "user2@example.com"}
    assert [a["id"] for a in data["activities"]] == [0, 1, 2, 3]


@needs_redis
@pytest.mark.parametrize("token", [
    None,
    "not-a-jwt",
    servers_app.make_token("user1", key="another-key-of-at-least-32-bytes!!"),
    servers_app.make_token("user1", lifetime=-60),
    servers_app.make_token("nobody"),
], ids=["none", "malformed", "wrong-key", "expired", "unknown-user"])
def test_activities_refuses_a_bad_token_with_401(
        redis_and_app: tuple[RedisServer, ServerProcess], token: str | None) -> None:
    _, app = redis_and_app
    response = get_path(app, "/api/activities", token)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"


@needs_redis
def test_short_and_long_bodies(redis_and_app: tuple[RedisServer, ServerProcess]) -> None:
    _, app = redis_and_app
    short = get_path(app, "/api/shortbody")
    assert short.content == servers_app.SHORT_BODY and len(short.content) == 22
    assert short.headers["content-type"].startswith("text/plain")
    assert len(get_path(app, "/api/longbody").content) == 430_000


@needs_redis
def test_the_checks_accept_each_endpoint_and_refuse_a_wrong_token(
        redis_and_app: tuple[RedisServer, ServerProcess]) -> None:
    _, app = redis_and_app
    token = servers_app.make_token("user1")
    original = servers.ACTIVITIES
    try:
        servers.ACTIVITIES = 4  # the fixture seeded 4 per user
        for endpoint in servers.ENDPOINTS.values():
            assert servers.checker(endpoint, token)(HOST, app.port) is None, endpoint
    finally:
        servers.ACTIVITIES = original
    problem = servers.checker(servers.ENDPOINTS["activities"], "bad")(HOST, app.port)
    assert problem is not None and "status 401" in problem


@needs_wrk
@needs_redis
def test_wrk_sends_the_bearer_token_through_the_lua_script(
        redis_and_app: tuple[RedisServer, ServerProcess]) -> None:
    _, app = redis_and_app
    wrk = shutil.which("wrk")
    assert wrk is not None
    load_ = Load(connections=2, threads=1, duration=1)
    token = servers_app.make_token("user1")
    with_token = WrkGet(wrk, "/api/activities", token)
    argv = with_token.command(app.url + "/", load_)
    assert argv[-2:] == [f"{app.url}/api/activities", token]
    assert argv[argv.index("--script") + 1] == str(GET_BEARER)
    good = with_token.run(app.url + "/", load_)
    assert good.requests > 0 and good.errors["status"] == 0
    bad = WrkGet(wrk, "/api/activities").run(app.url + "/", load_)
    assert bad.requests > 0 and bad.errors["status"] == bad.requests  # every answer a 401


# --- the load app ------------------------------------------------------------------------------


def test_the_msisdn_view_answers_json_and_refuses_what_is_not_a_number() -> None:
    client = load_app.app.test_client()
    ok = client.get(load_app.SAMPLE_PATH)
    assert ok.status_code == 200
    assert ok.json == {"msisdn": "4915112345678", "country_code": "49", "country": "DE",
                       "valid": True}
    assert client.get("/api/v2/99912345678").json["valid"] is False
    for bad in ("12ab5678", "1234567", "1" * 16):
        response = client.get(f"/api/v2/{bad}")
        assert response.status_code == 400 and "error" in response.json


def test_uvicorn_serves_flask_through_a2wsgi() -> None:
    assert load.app_for("uvicorn") == "apps.load_app:asgi_app"
    assert load.app_for("gunicorn") == "apps.load_app:app"
    port = free_port()
    with ServerProcess(get("uvicorn").command(load.app_for("uvicorn"), HOST, port), port=port):
        assert load.check(HOST, port) is None


# --- report pieces -----------------------------------------------------------------------------


def test_feature_table_comes_from_the_registry_and_package_metadata() -> None:
    features = {f["server"]: f for f in (servers_report.feature_row(get(n)) for n in
                                         ("uvicorn", "hypercorn", "daphne", "toy-h11"))}
    assert features["hypercorn"]["http2"] == "h2, h2c"
    assert features["hypercorn"]["http3"].startswith("with aioquic (")
    assert features["uvicorn"]["http3"] == "no" and features["uvicorn"]["websocket"] == "yes"
    assert features["daphne"]["workers"] == "no" and features["daphne"]["workers_note"]
    assert features["toy-h11"]["workers"] == "--workers N"
    assert features["toy-h11"]["licence"] == "MIT"  # pyproject.toml's licence
    assert features["hypercorn"]["licence"] == "MIT"  # from its metadata
    assert servers_report.licence("no-such-distribution-here") == "not installed"


def test_published_ratios_come_from_the_data_file() -> None:
    published = report.load_published("servers")
    assert published["setup"]["servers"] == {"uvicorn": "0.27.0.post1", "hypercorn": "0.16.0",
                                             "daphne": "4.0.0"}
    row = servers.published_row(published, "shortbody", "daphne", "uvicorn")
    assert row is not None and row["rps"] == 3073
    assert row["pct_of_base"] == pytest.approx(100 * 3073 / 4253)
    assert servers.published_row(published, "shortbody", "granian", "uvicorn") is None
    levels = load.published_levels(report.load_published("load"))
    assert levels == (load.Level(12, 1000, 60), load.Level(24, 8000, 120))


def test_nofile_is_raised_for_the_connections_and_says_when_it_cannot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    info = load.raise_nofile(min(soft, 256))
    assert info["soft"] == soft and not info["note"].startswith("cannot")

    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 1024))

    def refuse(which: int, limits: tuple[int, int]) -> None:
        raise ValueError("not allowed")

    monkeypatch.setattr(resource, "setrlimit", refuse)
    info = load.raise_nofile(9024)
    assert info["note"].startswith("cannot raise the open-file limit to 9024 (hard limit 1024)")
    assert "\n" not in info["note"]


def test_cli_mistakes_are_one_line(tmp_path: Path) -> None:
    cases = [
        (("servers", "--compare", "gunicorn"), "'gunicorn' is not an ASGI server"),
        (("servers", "--endpoints", "nope"), "unknown endpoint 'nope'"),
        (("load", "--compare", "nope"), "unknown server 'nope'"),
        (("load", "--published", "--compare", "nope"), "unknown server 'nope'"),
        (("load", "--connections", "ten"), "--connections takes comma-separated"),
        (("load", "--connections", "1", "--threads", "2"), "at least one connection per"),
    ]
    for args, message in cases:
        run = run_cli(*args, "--output", str(tmp_path / "out"), timeout=60)
        assert run.returncode == 2, (args, run.stderr)
        assert message in run.stderr and "Traceback" not in run.stderr, (args, run.stderr)


# --- smoke runs ----------------------------------------------------------------------------


def assert_provenance(data: dict[str, Any]) -> None:
    assert data["wrk"]["version"] and data["machine"]["cores"] >= 1
    assert data["git"] is None or len(data["git"]["commit"]) == 40
    assert data["command"][1] in ("servers", "load")
    for row in data["rows"]:
        assert row["command"] and all(run["command"] for run in row["runs"])


@needs_wrk
@needs_redis
@pytest.mark.wrk
def test_bench_servers_smoke(tmp_path: Path) -> None:
    out = tmp_path / "servers"
    run = run_cli("servers", "--duration", "1", "--runs", "1", "--warmup", "0", "--compare", "",
                  "--output", str(out))
    assert run.returncode == 0, run.stderr
    assert "bench servers: ASGI servers on three endpoints" in run.stdout
    assert "What each server offers" in run.stdout
    data = json.loads((out / "results.json").read_text())
    assert_provenance(data)
    assert [(r["endpoint"], r["server"]) for r in data["rows"]] == [
        ("shortbody", "uvicorn"), ("longbody", "uvicorn"), ("activities", "uvicorn")]
    for row in data["rows"]:
        assert row["status"] == "ok", (row["error"], row["log_tail"])
        assert row["rps_median"] > 0 and row["errors"] == 0 and row["rss_peak_mb"] > 0
        assert row["published"]["pct_of_base"] == pytest.approx(100.0)
    assert data["redis"]["version"] and data["features"][0]["server"] == "uvicorn"
    assert data["published"]["setup"]["load_generator"] == "locust"
    md = (out / "results.md").read_text()
    assert "| activities | uvicorn |" in md and "**What each server offers**" in md
    for png in ("servers.png", "servers-rss.png"):
        assert (out / png).read_bytes().startswith(b"\x89PNG")


@needs_wrk
@pytest.mark.wrk
def test_bench_load_smoke(tmp_path: Path) -> None:
    out = tmp_path / "load"
    run = run_cli("load", "--connections", "20", "--duration", "1", "--runs", "1", "--warmup",
                  "0", "--compare", "uvicorn", "--output", str(out))
    assert run.returncode == 0, run.stderr
    assert "bench load: Flask under moderate and high load" in run.stdout
    data = json.loads((out / "results.json").read_text())
    assert_provenance(data)
    assert [(r["layer"], r["server"]) for r in data["rows"]] == [
        ("20 conn", "gunicorn"), ("20 conn", "uvicorn")]
    for row in data["rows"]:
        assert row["status"] == "ok", (row["error"], row["log_tail"])
        assert row["rps_median"] > 0 and row["connections"] == 20
        assert set(row["errors_by_kind"]) == {"connect", "read", "write", "status", "timeout"}
    assert data["rows"][1]["app"] == "apps.load_app:asgi_app"
    assert data["nofile"]["soft"] >= data["nofile"]["needed"]
    assert "| 20 conn | uvicorn |" in (out / "results.md").read_text()
    assert (out / "load.png").read_bytes().startswith(b"\x89PNG")


def test_the_rss_sampler_sums_the_children_of_a_server() -> None:
    """A parent that holds little and a child that holds 50 MB: the tree's peak counts both,
    as hypercorn's and granian's supervisors with their workers are counted."""
    code = ("import os, sys\n"
            "if os.fork() == 0:\n"
            "    block = b'x' * 50_000_000\n"
            "    print('ready', flush=True)\n"
            "    sys.stdin.read()\n"
            "    os._exit(0)\n"
            "os.wait()\n")
    with subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE) as parent:
        try:
            assert parent.stdout is not None
            assert parent.stdout.readline().strip() == b"ready"
            own = psutil.Process(parent.pid).memory_info().rss
            with RssSampler(parent.pid, interval=0.01) as sampler:
                pass
            assert own < 50_000_000 < sampler.peak
        finally:
            assert parent.stdin is not None
            parent.stdin.close()  # the child reads EOF and exits, then the parent
            parent.wait(timeout=10)
