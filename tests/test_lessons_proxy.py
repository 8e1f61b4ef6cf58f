"""Lesson 14 (behind a proxy, across machines): its commands as printed, and its transcript.

The page's commands run as a student runs them from a fresh clone (``tests/support/pages.py``:
``.venv/bin/`` is this interpreter's folder, port 8000 a free one); each needs nginx, HAProxy
or both (``make test`` installs them), and is skipped without. The PROXY protocol transcript
is what HAProxy really sends a backend with ``send-proxy`` and ``send-proxy-v2``, captured
here from a socket standing in for the backend, with the ports (which change from run to run)
masked.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from bench.cluster_stack import Address, Fleet, Proxy, Upstream, find_proxy
from bench.harness import fetch
from tests.support.pages import BIN, ROOT, blocks, localize, run_tab, started
from tests.support.pages import section as page_section

PAGE = ROOT / "lessons" / "14-behind-a-proxy.md"
RESULTS = ROOT / "lessons" / "results" / "cluster" / "results.json"
TRANSCRIPT = ROOT / "lessons" / "transcripts" / "14-proxy-protocol.txt"
HAVE = {name: find_proxy(name) for name in ("nginx", "haproxy")}
needs_nginx = pytest.mark.skipif(HAVE["nginx"] is None,
                                 reason="nginx is not installed (make test installs it)")
needs_haproxy = pytest.mark.skipif(HAVE["haproxy"] is None,
                                   reason="haproxy is not installed (make test installs it)")


def section(title: str) -> str:
    return page_section(PAGE, title)


def run_printed(command: str, timeout: float = 120) -> str:
    """A one-line command of the page, run from the repository's root; its output."""
    argv = shlex.split(command.replace(".venv/bin/", f"{BIN}/"))
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


# --- Run it --------------------------------------------------------------------------------------


@needs_nginx
def test_run_it_commands_run_as_printed() -> None:
    server_command, client = blocks(section("Run it"), "sh")
    with started(server_command) as server:
        out = run_tab("sh", client, server.port).splitlines()
    backends, whoami = out[:6], [json.loads(line) for line in out[6:]]
    assert sorted(set(backends)) == ["b1", "b2", "b3"] and backends[:3] == backends[3:]
    spoof_from_outside, spoof_from_inside = whoami
    assert spoof_from_outside["client"] == "127.0.0.2:0"
    assert spoof_from_outside["x-forwarded-for"] == "6.6.6.6, 127.0.0.2"
    assert spoof_from_inside["client"] == "6.6.6.6:0"


@needs_nginx
def test_the_slow_client_holds_the_sync_worker_but_not_nginx() -> None:
    (command,) = blocks(section("Why a proxy in front of a sync worker"), "sh")
    lines = run_printed(command.strip()).splitlines()
    direct, proxied = (float(re.search(r"took ([\d.]+) s", line)[1])  # type: ignore[index]
                       for line in lines)
    assert "straight to toy-wsgi" in lines[0] and "through nginx" in lines[1]
    assert direct > 1.0, lines  # the slow client pauses 2 s, 0.2 s after it connected
    assert proxied < 1.0, lines


@needs_nginx
def test_the_timeouts_command_prints_what_the_page_shows() -> None:
    text = section("Where 502 and 504 come from")
    (command,) = blocks(text, "sh")
    (shown,) = blocks(text, "text")
    assert run_printed(command.strip()) == shown


# --- the PROXY protocol, on the wire -----------------------------------------------------------


def capture_proxy_header(version: int, folder: Path) -> bytes:
    """What HAProxy with ``send-proxy`` (1) or ``send-proxy-v2`` (2) sends the backend when a
    client on 127.0.0.2 asks ``GET /whoami``: the PROXY header and the request, as received."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    received = bytearray()

    def backend() -> None:
        sock, _ = listener.accept()
        with sock:
            while not (b"GET " in received and received.endswith(b"\r\n\r\n")):
                received.extend(sock.recv(65536))
            sock.sendall(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")

    path = HAVE["haproxy"]
    assert path is not None
    proxy = Proxy("haproxy", path, folder / f"v{version}", [Address("b1", "127.0.0.1", port)],
                  Upstream(send_proxy=version))
    thread = threading.Thread(target=backend)
    try:
        proxy.start(None, folder / f"haproxy-v{version}.log")
        thread.start()
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10,
                                      source_address=("127.0.0.2", 0)) as client:
            client.sendall(b"GET /whoami HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Connection: close\r\n\r\n")
            while client.recv(65536):
                pass
        thread.join(10)
    finally:
        proxy.stop()
        listener.close()
    return bytes(received)


V2_FIELDS = [(12, "signature"), (1, "version 2, command PROXY"), (1, "TCP over IPv4"),
             (2, "length of what follows"), (4, "source address"),
             (4, "destination address"), (2, "source port"), (2, "destination port")]


def render(v1: bytes, v2: bytes) -> str:
    """The transcript: each capture's header (v2 byte by byte, named) and then the request
    HAProxy forwarded, ports masked, CR and LF shown as ``\\r`` and ``\\n``."""
    out = []
    header, _, request = v1.partition(b"\r\n")
    line = re.sub(rb" \d+ \d+$", b" <client port> <proxy port>", header)
    out += [">>> HAProxy with send-proxy sends the backend the header line, then the request",
            "    " + line.decode() + "\\r\\n"]
    out += ["    " + part.replace("\r", "\\r").replace("\n", "\\n")
            for part in request.decode().splitlines(keepends=True)]
    length = 16 + int.from_bytes(v2[14:16], "big")
    out.append(f">>> HAProxy with send-proxy-v2 sends the backend ({len(v2)} bytes, the "
               f"header {length})")
    offset = 0
    for size, name in V2_FIELDS:
        field = v2[offset:offset + size]
        hexed = "xx " * size if "port" in name else field.hex(" ") + " "
        out.append(f"    {hexed:<37}  {name}")
        offset += size
    assert offset == length, f"TLVs after the addresses: {v2[offset:length]!r}"
    out.append("    (then the same request)")
    assert v2[length:] == request, "the v2 capture's request differs from the v1 one's"
    return "\n".join(out) + "\n"


@needs_haproxy
def test_transcript_matches_what_haproxy_sends(tmp_path: Path) -> None:
    captured = render(capture_proxy_header(1, tmp_path), capture_proxy_header(2, tmp_path))
    if os.environ.get("UPDATE_TRANSCRIPTS") == "1":
        TRANSCRIPT.write_text(captured)
    assert TRANSCRIPT.exists(), f"{TRANSCRIPT} is missing: run with UPDATE_TRANSCRIPTS=1"
    assert TRANSCRIPT.read_text() == captured, (
        f"{TRANSCRIPT.name} is stale: rerun with UPDATE_TRANSCRIPTS=1 and review the diff")


@needs_haproxy
def test_a_toy_server_reads_the_client_from_haproxys_proxy_header(tmp_path: Path) -> None:
    fleet = Fleet.plan(1, "toy-httptools", "127.0.0.1", [None], tmp_path)
    fleet.backends[0].options = ("--proxy-protocol",)
    path = HAVE["haproxy"]
    assert path is not None
    proxy = Proxy("haproxy", path, tmp_path / "haproxy", fleet.addresses,
                  Upstream(send_proxy=2))
    try:
        fleet.start()  # /health straight from the bench: no header is HTTP from the peer
        proxy.start(None, tmp_path / "haproxy.log")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10,
                                      source_address=("127.0.0.2", 0)) as client:
            client.sendall(b"GET /whoami HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Connection: close\r\n\r\n")
            answer = b""
            while chunk := client.recv(65536):
                answer += chunk
        who = json.loads(answer.partition(b"\r\n\r\n")[2])
        assert who["client"].startswith("127.0.0.2:") and who["client"] != "127.0.0.2:0"
        assert fetch("127.0.0.1", fleet.backends[0].port, "/health")[0] == 200
    finally:
        proxy.stop()
        fleet.stop()


def test_localize_is_what_the_run_it_test_uses() -> None:
    assert localize(".venv/bin/python x.py 8000", 1234).endswith("x.py 1234")


# --- what the page says about the committed figures --------------------------------------------


def test_the_pages_words_hold_for_its_committed_figures() -> None:
    """The page describes the tables in words, not figures; each claim is checked here against
    the results file it includes, so a new run that contradicts the words fails."""
    data = json.loads(RESULTS.read_text())
    hop = {row["layer"]: row for row in data["rows"]}
    for proxy in ("nginx", "haproxy"):
        on, off = hop[f"{proxy}, keep-alive on"], hop[f"{proxy}, keep-alive off"]
        assert on["cpu_added"] > 0 and off["cpu_added"] > 2 * on["cpu_added"]
        assert on["backends_cpu_us"] > hop["direct"]["backends_cpu_us"]  # forwarded headers
    balance = {(r["proxy"], r["balance"]): r for r in data["balance"]}
    for proxy in ("nginx", "haproxy"):
        for run in balance[(proxy, "roundrobin")]["runs"]:
            counts = run["per_backend"]
            assert abs(counts["b1"] / sum(counts.values()) - 1 / 3) < 0.02
        for run in balance[(proxy, "leastconn")]["runs"]:
            counts = run["per_backend"]
            assert counts["b1"] / sum(counts.values()) < 0.2
    failover = {(r["proxy"], r["method"]): r["runs"] for r in data["failover"]}
    assert all(run["failed"] == 0 for run in failover[("nginx", "GET")])
    assert all(run["failed"] > 0 and run["summary"]["errors"]["status"] == run["failed"]
               for run in failover[("nginx", "POST")])
    for method in ("GET", "POST"):
        assert all(run["failed"] > 0 and run["summary"]["errors"]["read"] > 0
                   for run in failover[("haproxy", method)])
    rolling = {(r["proxy"], r["how"]): r["runs"] for r in data["rolling"]}
    assert all(run["failed"] == 0 for run in rolling[("haproxy", "drain")])
    reload_errors = [run["summary"]["errors"] for run in rolling[("nginx", "reload")]]
    assert all(e["status"] == 0 for e in reload_errors)  # the backend side: no 502
    assert sum(e["read"] for e in reload_errors) > 0  # the clients' side: closed under them
    assert all(row["status"] == "ok" for key in ("rows", "balance", "failover", "rolling")
               for row in data[key])
