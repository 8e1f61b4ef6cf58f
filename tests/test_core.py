"""The shared pieces every toy server stands on: lifespan, the registry, the toyserve CLI."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from bench.process import ServerProcess, free_port
from toyservers._server import serve_protocol
from toyservers.cli import AppImportError, import_from_string
from toyservers.config import Config
from toyservers.lifespan import Lifespan, LifespanFailure
from toyservers.registry import SERVERS, available, get
from toyservers.state import ServerState

TIMEOUT = 10.0  # seconds any one step of a test may take

# --- lifespan (ASGI lifespan spec 2.0) ---------------------------------------------------------


def lifespan_app(events: list[str], *, fail_startup: bool = False, raise_in: str | None = None
                 ) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "lifespan"
        while True:
            message = await receive()
            events.append(message["type"])
            if raise_in == message["type"]:
                raise RuntimeError("boom")
            if message["type"] == "lifespan.startup":
                scope["state"]["db"] = "connected"
                if fail_startup:
                    await send({"type": "lifespan.startup.failed", "message": "no database"})
                    return
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    return app


def test_lifespan_runs_startup_then_shutdown_and_shares_state() -> None:
    async def main() -> dict[str, Any]:
        events: list[str] = []
        lifespan = Lifespan(lifespan_app(events), "on")
        await lifespan.startup()
        assert events == ["lifespan.startup"]
        await lifespan.shutdown()
        assert events == ["lifespan.startup", "lifespan.shutdown"]
        return lifespan.state

    assert asyncio.run(main()) == {"db": "connected"}


def test_lifespan_startup_failed_raises_with_the_apps_message() -> None:
    async def main() -> None:
        await Lifespan(lifespan_app([], fail_startup=True), "auto").startup()

    with pytest.raises(LifespanFailure, match="no database"):
        asyncio.run(main())


@pytest.mark.parametrize(("mode", "fatal"), [("auto", False), ("on", True)])
def test_lifespan_app_raising_is_fatal_only_in_on_mode(mode: str, fatal: bool) -> None:
    async def main() -> None:
        lifespan = Lifespan(lifespan_app([], raise_in="lifespan.startup"), mode)
        await lifespan.startup()
        await lifespan.shutdown()

    if fatal:
        with pytest.raises(LifespanFailure, match="boom"):
            asyncio.run(main())
    else:
        asyncio.run(main())


def test_a_connection_failing_to_shut_down_stops_neither_the_rest_nor_lifespan() -> None:
    """serve_protocol's shutdown: one connection whose ``shutdown()`` raises is aborted and
    logged; the other is still shut down, and lifespan shutdown still runs."""
    events: list[str] = []
    made: list[Connection] = []

    class Connection(asyncio.Protocol):
        def __init__(self, state: ServerState) -> None:
            self.state, self.transport = state, None
            self.broken = not made  # the first connection's shutdown raises
            made.append(self)

        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.state.connections.add(self)

        def connection_lost(self, exc: Exception | None) -> None:
            self.state.connections.discard(self)

        def shutdown(self) -> None:
            if self.broken:
                raise RuntimeError("a bug in one connection's shutdown")
            assert self.transport is not None
            self.transport.close()

    async def main() -> list[bytes]:
        shutdown = asyncio.Event()
        bound: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
        server = asyncio.create_task(serve_protocol(
            Connection, lifespan_app(events), Config(port=0, lifespan="on"),
            ready=bound.set_result, shutdown=shutdown))
        host, port = await asyncio.wait_for(bound, TIMEOUT)
        clients = [await asyncio.open_connection(host, port) for _ in range(2)]
        async with asyncio.timeout(TIMEOUT):
            while len(made) < 2:  # polled until the server has accepted both
                await asyncio.sleep(0.01)
            shutdown.set()
            await server
            ends = [await reader.read() for reader, _ in clients]  # both closed: b"" each
        for _, writer in clients:
            writer.close()
        return ends

    assert asyncio.run(main()) == [b"", b""]
    assert events == ["lifespan.startup", "lifespan.shutdown"]


def test_lifespan_off_never_calls_the_app() -> None:
    events: list[str] = []

    async def main() -> None:
        lifespan = Lifespan(lifespan_app(events), "off")
        await lifespan.startup()
        await lifespan.shutdown()

    asyncio.run(main())
    assert events == []


# --- registry ----------------------------------------------------------------------------------


def test_registry_names_ours_and_the_reference_servers() -> None:
    assert {"toy-raw", "toy-h11", "toy-httptools"} <= set(SERVERS)
    assert {"uvicorn", "uvicorn-h11", "hypercorn", "daphne", "granian"} <= set(SERVERS)
    assert all(SERVERS[name].kind == "toy" for name in ("toy-raw", "toy-h11", "toy-httptools"))
    assert "gunicorn" not in available()  # a WSGI server is not offered for ASGI apps
    with pytest.raises(KeyError, match="unknown server 'nope'"):
        get("nope")


@pytest.mark.parametrize("name", ["uvicorn", "uvicorn-h11", "hypercorn", "daphne", "granian"])
def test_every_reference_command_serves_an_app(name: str) -> None:
    port = free_port()
    argv = SERVERS[name].command("tests.support.echo_app:app", "127.0.0.1", port)
    with ServerProcess(argv, port=port) as server:
        import httpx

        response = httpx.post(f"{server.url}/x?y=1", content=b"hello", timeout=10)
    assert response.status_code == 200
    assert response.json()["body"] == "hello"
    assert response.json()["query_string"] == "y=1"


# --- the toyserve CLI: one clear line for user mistakes ------------------------------------------


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("noColon", 'app must look like "module:attribute"'),
        ("no_such_module_xyz:app", 'could not import module "no_such_module_xyz"'),
        ("tests.support.echo_app:nope", 'attribute "nope" not found'),
    ],
)
def test_import_from_string_explains_bad_targets(target: str, message: str) -> None:
    with pytest.raises(AppImportError, match=message):
        import_from_string(target)


def run_toyserve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toyservers", *args],
        capture_output=True, text=True, timeout=30,
    )


def test_toyserve_bad_app_is_one_line_not_a_traceback() -> None:
    result = run_toyserve("no_such_module_xyz:app")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert 'could not import module "no_such_module_xyz"' in result.stderr


def test_toyserve_unknown_server_lists_the_choices() -> None:
    result = run_toyserve("tests.support.echo_app:app", "--server", "nginx")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "toy-httptools" in result.stderr


def test_toyserve_port_in_use_is_one_line(tmp_path: Any) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_toyserve("tests.support.echo_app:app", "--port", str(port))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_toyserve_ssl_key_without_certificate_is_a_usage_error(tmp_path: Any) -> None:
    key = tmp_path / "key.pem"
    key.write_text("not a key\n")
    result = run_toyserve("tests.support.echo_app:app", "--ssl-keyfile", str(key))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--ssl-keyfile and --ssl-certfile go together" in result.stderr


def test_toyserve_unusable_certificate_is_one_line(tmp_path: Any) -> None:
    pem = tmp_path / "junk.pem"
    pem.write_text("not a certificate\n")
    result = run_toyserve("tests.support.echo_app:app", "--port", "0",
                          "--ssl-keyfile", str(pem), "--ssl-certfile", str(pem))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr  # nothing started, nothing to stop
    assert f"cannot use the TLS certificate {pem}" in result.stderr


def test_toyserve_failed_startup_exits_3_with_the_apps_message(tmp_path: Any) -> None:
    (tmp_path / "failing_app.py").write_text(
        "async def app(scope, receive, send):\n"
        "    await receive()\n"
        "    await send({'type': 'lifespan.startup.failed', 'message': 'no database'})\n"
    )
    result = run_toyserve("failing_app:app", "--app-dir", str(tmp_path), "--port", "0")
    assert result.returncode == 3
    assert "Traceback" not in result.stderr
    assert "no database" in result.stderr


@pytest.mark.parametrize("name", ["toy-raw", "toy-h11", "toy-httptools"])
def test_each_request_runs_in_an_asyncio_task(name: str) -> None:
    """asyncio.timeout() and anyio cancel scopes need current_task() from the app's first step."""
    import httpx

    port = free_port()
    argv = SERVERS[name].command("tests.support.echo_app:task_app", "127.0.0.1", port)
    with ServerProcess(argv, port=port) as server:
        response = httpx.post(server.url, content=b"hi", timeout=10)
    assert (response.status_code, response.text) == (200, "task=True")


def test_daphne_tls_endpoint_survives_colons_and_backslashes(tmp_path: Any) -> None:
    """The Twisted endpoint string daphne gets must name the same files and host."""
    import trustme
    from twisted.internet import reactor
    from twisted.internet.endpoints import serverFromString

    folder = tmp_path / "a:b\\c"
    folder.mkdir()
    issued = trustme.CA().issue_cert("localhost")
    cert, key = folder / "cert.pem", folder / "key.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    argv = SERVERS["daphne"].command("m:app", "::1", 8443, tls=(str(cert), str(key)))
    endpoint = serverFromString(reactor, argv[argv.index("-e") + 1])
    assert endpoint._interface == "::1" and endpoint._port == 8443  # type: ignore[attr-defined]


def test_tls_extension_names_the_servers_own_certificate() -> None:
    """The ``server_cert`` of the ASGI tls extension is the first certificate of the chain."""
    import trustme

    from toyservers.tls import _first_certificate

    ca = trustme.CA()
    issued = ca.create_child_ca().issue_cert("localhost")
    chain = "".join(pem.bytes().decode("ascii") for pem in issued.cert_chain_pems)
    assert chain.count("BEGIN CERTIFICATE") >= 2
    assert _first_certificate(chain) == issued.cert_chain_pems[0].bytes().decode("ascii")
    assert _first_certificate("no certificate here") is None
