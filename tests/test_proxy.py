"""Behind a proxy (``toyservers.proxy``): every rule of the module docstring, then the same
headers through every toy server, spoofing from an untrusted peer included.
"""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from tests.support.running import HOST, running_server
from toyservers.config import Config
from toyservers.proxy import Forwarded, ProxyHeaders, Trusted, apply_to_scope, node
from toyservers.registry import SERVERS, get
from toyservers.state import ServerState

LOCAL = ("127.0.0.1", 50000)
TOYS = sorted(name for name, spec in SERVERS.items()
              if spec.kind == "toy" and spec.variant_of is None)


def resolve(headers: dict[str, str] | list[tuple[str, str]], trusted: str = "127.0.0.1",
            peer: tuple[str, int] | None = LOCAL) -> Forwarded | None:
    pairs = headers.items() if isinstance(headers, dict) else headers
    return ProxyHeaders(trusted).resolve(
        peer, [(k.lower().encode(), v.encode("latin-1")) for k, v in pairs])


# --- trust ---------------------------------------------------------------------------------


def test_a_server_builds_its_trusted_set_once() -> None:
    """ServerState.trusted is the one set the proxy headers and the PROXY readers ask."""
    state = ServerState(None, Config(forwarded_allow_ips="10.0.0.0/8"), {})
    assert state.proxy is not None and state.proxy.trusted is state.trusted
    assert "10.1.2.3" in state.trusted and "127.0.0.1" not in state.trusted
    off = ServerState(None, Config(proxy_headers=False, forwarded_allow_ips="*"), {})
    assert off.proxy is None and "203.0.113.9" in off.trusted  # --proxy-protocol still asks


def test_trust_by_address_network_or_everyone() -> None:
    trusted = Trusted("127.0.0.1, 10.0.0.0/8, ::1, fd00::/8, proxy.sock")
    assert "127.0.0.1" in trusted and "10.1.2.3" in trusted and "::1" in trusted
    assert "fd00::17" in trusted and "proxy.sock" in trusted
    assert "127.0.0.2" not in trusted and "11.0.0.1" not in trusted and None not in trusted
    assert "anything" in Trusted("*") and "1.2.3.4" in Trusted(" * ")


def test_an_untrusted_peer_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    spoof = {"X-Forwarded-For": "1.2.3.4", "X-Forwarded-Proto": "https",
             "Forwarded": "for=1.2.3.4;proto=https"}
    assert resolve(spoof, peer=("192.0.2.7", 1)) is None
    assert resolve(spoof, peer=None) is None  # a UNIX socket's peer: no address to trust
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "10.0.0.1")  # uvicorn's variable
    assert ProxyHeaders().resolve(LOCAL, [(b"x-forwarded-for", b"1.2.3.4")]) is None
    monkeypatch.delenv("FORWARDED_ALLOW_IPS")
    assert ProxyHeaders().resolve(LOCAL, [(b"x-forwarded-for", b"1.2.3.4")]) is not None


# --- X-Forwarded-* -------------------------------------------------------------------------


def test_the_client_is_the_right_most_untrusted_address() -> None:
    trusted = "127.0.0.1, 10.0.0.0/8"
    found = resolve({"X-Forwarded-For": "203.0.113.9, 10.0.0.2"}, trusted)
    assert found is not None and found.client == ("203.0.113.9", 0)
    # the client wrote a false first entry: our proxies appended after it, so it is skipped
    found = resolve({"X-Forwarded-For": "6.6.6.6, 203.0.113.9, 10.0.0.2"}, trusted)
    assert found is not None and found.client == ("203.0.113.9", 0)
    # every hop trusted: the left-most; repeated header lines are one list
    found = resolve([("X-Forwarded-For", "10.0.0.9"), ("X-Forwarded-For", "10.0.0.2")], trusted)
    assert found is not None and found.client == ("10.0.0.9", 0)
    found = resolve({"X-Forwarded-For": "[2001:db8::1]:4711"})
    assert found is not None and found.client == ("2001:db8::1", 4711)


def test_scheme_host_and_port_from_the_nearest_proxy() -> None:
    found = resolve({"X-Forwarded-Proto": "http, https", "X-Forwarded-Host": "example.com",
                     "X-Forwarded-Port": "8443"})
    assert found == Forwarded(None, "https", "example.com", 8443)


@pytest.mark.parametrize("headers", [
    {"X-Forwarded-For": "not-an-address"},
    {"X-Forwarded-For": "1.2.3.4:99999"},
    {"X-Forwarded-For": "1.2.3.4, <script>"},
    {"X-Forwarded-Proto": "javascript"},
    {"X-Forwarded-Host": "evil.com/path"},
    {"X-Forwarded-Host": "a b"},
    {"X-Forwarded-Port": "0"},
    {"X-Forwarded-Port": "80x"},
    {"Forwarded": 'for="unterminated'},
])
def test_malformed_values_are_ignored(headers: dict[str, str]) -> None:
    assert resolve(headers) is None


# --- Forwarded (RFC 7239) ------------------------------------------------------------------


def test_forwarded_elements_pairs_and_quoted_values() -> None:
    found = resolve({"Forwarded": 'for=192.0.2.60;proto=https;by=203.0.113.43;host="a.example"'})
    assert found == Forwarded(("192.0.2.60", 0), "https", "a.example", None)
    found = resolve({"Forwarded": 'For="[2001:db8:cafe::17]:4711"'})  # names are case-blind
    assert found is not None and found.client == ("2001:db8:cafe::17", 4711)
    found = resolve({"Forwarded": "for=198.51.100.17, for=127.0.0.1;proto=http"})
    assert found is not None and found.client == ("198.51.100.17", 0)
    assert found.scheme is None  # proto= belongs to the element of our own proxy


def test_obfuscated_and_unknown_nodes_are_kept_and_stop_the_walk() -> None:
    assert node("_hidden") == ("_hidden", 0) and node("unknown") == ("unknown", 0)
    assert node("_gazonk:_port") is None  # an obfuscated port is not a port we can use
    found = resolve({"Forwarded": "for=_hidden, for=unknown"}, "127.0.0.1")
    assert found is not None and found.client == ("unknown", 0)


def test_forwarded_wins_and_a_malformed_one_falls_back() -> None:
    both = {"Forwarded": "for=192.0.2.1", "X-Forwarded-For": "192.0.2.2"}
    assert resolve(both) == Forwarded(("192.0.2.1", 0), None, None, None)
    broken = {"Forwarded": "for=192.0.2.1;;=x", "X-Forwarded-For": "192.0.2.2"}
    assert resolve(broken) == Forwarded(("192.0.2.2", 0), None, None, None)


def test_the_scope_gets_client_scheme_host_and_server() -> None:
    headers = [(b"host", b"127.0.0.1:8000"), (b"accept", b"*/*")]
    scope: dict[str, Any] = {"type": "websocket", "scheme": "ws", "client": LOCAL,
                             "server": ("127.0.0.1", 8000), "headers": headers}
    apply_to_scope(scope, headers, Forwarded(("1.2.3.4", 0), "https", "example.com", None))
    assert scope["client"] == ("1.2.3.4", 0) and scope["scheme"] == "wss"
    assert scope["server"] == ("example.com", 443)
    assert scope["headers"] == [(b"accept", b"*/*"), (b"host", b"example.com")]
    assert headers[0] == (b"host", b"127.0.0.1:8000")  # the parser's list is left alone
    scope = {"type": "http", "scheme": "http", "headers": headers}
    apply_to_scope(scope, headers, Forwarded(None, None, None, 8443))
    assert scope["server"] == ("127.0.0.1", 8443)
    assert (b"host", b"127.0.0.1:8443") in scope["headers"]


# --- through every toy server --------------------------------------------------------------


def ask(port: int, headers: dict[str, str]) -> dict[str, Any]:
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request("GET", "/", headers={"Host": f"{HOST}:{port}", **headers})
        response = conn.getresponse()
        assert response.status == 200
        data: dict[str, Any] = json.loads(response.read())
        return data
    finally:
        conn.close()


def app_of(name: str) -> str:
    wsgi = get(name).interface == "wsgi"
    return "tests.support.proxy_app:" + ("wsgi_app" if wsgi else "app")


PROXIED = {"X-Forwarded-For": "6.6.6.6, 203.0.113.9", "X-Forwarded-Proto": "https",
           "X-Forwarded-Host": "shop.example"}


@pytest.mark.parametrize("name", TOYS)
def test_every_toy_believes_its_trusted_proxy(name: str) -> None:
    with running_server(name, app=app_of(name)) as server:
        seen = ask(server.port, PROXIED)
        assert seen["client"] == ["203.0.113.9", 0]
        assert seen["scheme"] == "https" and seen["host"] == "shop.example"
        assert seen["server"] == ["shop.example", 443]
        seen = ask(server.port, {"Forwarded": 'for="[2001:db8::7]:4711";proto=https'})
        assert seen["client"] == ["2001:db8::7", 4711] and seen["scheme"] == "https"
        plain = ask(server.port, {})
        assert plain["client"][0] == HOST and plain["scheme"] == "http"


@pytest.mark.parametrize("name", TOYS)
@pytest.mark.parametrize("flags", [["--forwarded-allow-ips", "10.9.9.9"], ["--no-proxy-headers"]])
def test_every_toy_ignores_a_spoofing_peer(name: str, flags: list[str]) -> None:
    def argv(port: int) -> list[str]:
        return [*get(name).command(app_of(name), HOST, port), *flags]

    with running_server(name, argv) as server:
        seen = ask(server.port, {**PROXIED, "Forwarded": "for=1.2.3.4;proto=https"})
    assert seen["client"][0] == HOST and seen["scheme"] == "http"
    assert seen["host"] == f"{HOST}:{server.port}"
