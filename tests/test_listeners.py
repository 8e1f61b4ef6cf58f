"""Where the servers listen (``toyservers.listeners``): ``--uds``, ``--fd`` and systemd socket
activation, on every toy server and under ``--workers``; the UNIX socket file's rules.

The servers run as ``toyserve`` processes; a request goes over the socket they were given, and
the socket file's life is checked after a SIGTERM.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from apps.user import SAMPLE_BODY
from toyservers import listeners
from toyservers.config import Config
from toyservers.registry import SERVERS

TOYSERVE = [sys.executable, "-m", "toyservers"]
ROOT = Path(__file__).resolve().parents[1]
TOYS = sorted(name for name, spec in SERVERS.items()
              if spec.kind == "toy" and spec.variant_of is None)
START = 30.0  # seconds a server gets to listen
STOP = 30.0  # seconds it gets to exit after SIGTERM


def app_for(name: str) -> str:
    return "apps.wsgi_user:app" if SERVERS[name].interface == "wsgi" else "apps.asgi_user:app"


def post(sock: socket.socket) -> bytes:
    """POST the layers' user on a connected socket; the response's body (Connection: close)."""
    sock.settimeout(10)
    sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: " + str(len(SAMPLE_BODY)).encode()
                 + b"\r\n\r\n" + SAMPLE_BODY)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), data[:300]
    return body


def connect_unix(path: Path, proc: subprocess.Popen[bytes]) -> socket.socket:
    """A connection to the server listening at ``path``, polled until it accepts."""
    deadline = time.monotonic() + START
    while True:
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.connect(str(path))
            return sock
        except OSError:
            sock.close()
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no server on {path}: {proc.stdout and proc.stdout.read()!r}"
                                     ) from None
            time.sleep(0.05)


def connect_tcp(port: int, proc: subprocess.Popen[bytes]) -> socket.socket:
    deadline = time.monotonic() + START
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(proc.stdout and proc.stdout.read()) from None
            time.sleep(0.05)


@contextmanager
def toyserve(*args: str, pass_fds: tuple[int, ...] = ()) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([*TOYSERVE, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, pass_fds=pass_fds)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


# --- the rules, without a server --------------------------------------------------------------


def test_a_unix_socket_is_made_open_to_all_and_removed_only_when_it_is_ours(tmp_path: Path
                                                                           ) -> None:
    path = str(tmp_path / "app.sock")
    sock = listeners.unix_socket(path, 8)
    assert stat.S_IMODE(os.stat(path).st_mode) == listeners.UDS_MODE
    with pytest.raises(OSError) as live:  # a second server on a live socket
        listeners.unix_socket(path, 8)
    assert live.value.errno == errno.EADDRINUSE
    sock.close()
    listeners.release(path)
    assert not os.path.exists(path)
    # another server's socket at the same path is not ours to remove
    sock = listeners.unix_socket(path, 8)
    os.unlink(path)
    other = listeners.unix_socket(path, 8)
    listeners.MADE.pop(path)  # as if another process had made it
    listeners.release(path)
    assert os.path.exists(path)
    sock.close()
    other.close()


def test_a_leftover_socket_is_replaced_and_any_other_file_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.sock"
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))  # bound, never listening: a crashed server's leftover
    dead.close()
    listeners.unix_socket(str(path), 8).close()
    listeners.release(str(path))
    path.write_text("not a socket")
    with pytest.raises(OSError) as refused:
        listeners.unix_socket(str(path), 8)
    assert refused.value.errno == errno.EEXIST
    assert path.read_text() == "not a socket"


def test_systemd_variables_count_only_for_this_process_and_are_then_removed() -> None:
    assert listeners.systemd_fds({"LISTEN_PID": "1", "LISTEN_FDS": "1"}) == 0
    assert listeners.systemd_fds({"LISTEN_FDS": "1"}) == 0
    assert listeners.systemd_fds({"LISTEN_PID": "x", "LISTEN_FDS": "1"}) == 0
    env = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "2", "LISTEN_FDNAMES": "a:b"}
    assert listeners.systemd_fds(env) == 2
    assert env == {}  # a worker forked later does not take them for its own


def test_where_names_what_was_asked() -> None:
    assert listeners.where(Config(host="127.0.0.1", port=9)) == "127.0.0.1:9"
    assert listeners.where(Config(uds="/run/a.sock")) == "unix socket /run/a.sock"
    assert listeners.where(Config(fd=5)) == "descriptor 5"


# --- every toy server ----------------------------------------------------------------------


@pytest.mark.parametrize("name", TOYS)
def test_every_toy_serves_a_unix_socket_and_removes_it_on_exit(name: str, tmp_path: Path
                                                               ) -> None:
    path = tmp_path / "app.sock"
    with toyserve(app_for(name), "--server", name, "--uds", str(path)) as proc:
        with connect_unix(path, proc) as sock:
            assert json.loads(post(sock)) == json.loads(SAMPLE_BODY)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP) == 0
        log = proc.stdout.read().decode() if proc.stdout else ""
    assert f"unix:{path}" in log
    assert not path.exists(), log


@pytest.mark.parametrize("name", TOYS)
def test_every_toy_serves_an_inherited_descriptor(name: str) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    fd = listener.fileno()
    with toyserve(app_for(name), "--server", name, "--fd", str(fd), pass_fds=(fd,)) as proc:
        listener.close()  # the server holds its own copy
        with connect_tcp(port, proc) as sock:
            assert json.loads(post(sock)) == json.loads(SAMPLE_BODY)


@pytest.mark.parametrize("name", ["toy-httptools", "toy-wsgi"])
def test_systemd_socket_activation(name: str) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port, fd = listener.getsockname()[1], listener.fileno()
    # as systemd does: the socket on descriptor 3, LISTEN_PID set to the server's own pid
    exec_as_systemd = ("import os, sys; os.dup2(int(sys.argv[1]), 3); "
                       "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1'); "
                       "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])")
    proc = subprocess.Popen([sys.executable, "-c", exec_as_systemd, str(fd), *TOYSERVE[1:],
                             app_for(name), "--server", name, "--port", "1"], cwd=ROOT,
                            pass_fds=(fd,), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    listener.close()
    try:
        with connect_tcp(port, proc) as sock:  # --port 1 was never bound: systemd's socket won
            assert json.loads(post(sock)) == json.loads(SAMPLE_BODY)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STOP)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.parametrize("name", ["toy-httptools", "toy-wsgi"])
def test_workers_share_a_unix_socket_that_the_master_removes(name: str, tmp_path: Path
                                                             ) -> None:
    path = tmp_path / "app.sock"
    with toyserve(app_for(name), "--server", name, "--uds", str(path), "--workers", "2") as proc:
        for _ in range(4):
            with connect_unix(path, proc) as sock:
                assert json.loads(post(sock)) == json.loads(SAMPLE_BODY)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP) == 0
    assert not path.exists()


def test_a_live_socket_is_one_line_and_status_1(tmp_path: Path) -> None:
    path = tmp_path / "app.sock"
    with toyserve(app_for("toy-raw"), "--server", "toy-raw", "--uds", str(path)) as first:
        connect_unix(path, first).close()
        second = subprocess.run([*TOYSERVE, "apps.asgi_user:app", "--uds", str(path)], cwd=ROOT,
                                capture_output=True, text=True, timeout=START)
        assert second.returncode == 1
        assert f"cannot listen on unix socket {path}" in second.stderr
        assert "Traceback" not in second.stderr
        with connect_unix(path, first) as sock:  # the first one still serves
            post(sock)


def test_reuse_port_with_a_unix_socket_is_a_usage_error(tmp_path: Path) -> None:
    run = subprocess.run([*TOYSERVE, "apps.asgi_user:app", "--workers", "2", "--reuse-port",
                          "--uds", str(tmp_path / "a.sock")], cwd=ROOT, capture_output=True,
                         text=True, timeout=START)
    assert run.returncode == 2
    assert "--reuse-port binds a TCP port per worker" in run.stderr
