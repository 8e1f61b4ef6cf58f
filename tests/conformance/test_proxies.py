"""Behind a proxy: forwarding headers, RFC 7239 ``Forwarded``, the PROXY protocol, and where a
server can listen (a UNIX socket, an inherited descriptor, systemd socket activation).

Each server's command line for these comes from the registry (``Argv.proxy_headers`` and the
``listen_*`` sections of ``toyservers/registry.py``), trusting 127.0.0.1 only; a server the
registry gives no such option fails the row, which ``support.UNSUPPORTED`` declares with the
reason. A peer that is not trusted is the same test client connecting from 127.0.0.2.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance import apps
from tests.conformance.conftest import APP
from tests.support.listening import (
    FORWARDED,
    MALFORMED,
    NO_OPTION,
    RFC_7239,
    TRUSTED,
    UNTRUSTED,
    V1,
    V2,
    Connect,
    from_address,
    get,
    serving_on,
    started,
    through_proxy_protocol,
)
from tests.support.running import RunningServer


@pytest.fixture(scope="session")
def proxied_server(server_name: str) -> Iterator[RunningServer | None]:
    """The server believing forwarding headers from 127.0.0.1 (one per session)."""
    yield from started(server_name, APP, proxy_headers=True)


@pytest.fixture(scope="session")
def proxy_protocol_server(server_name: str) -> Iterator[RunningServer | None]:
    """The server reading PROXY headers from 127.0.0.1 (one per session)."""
    yield from started(server_name, APP, listen="listen_proxy_protocol")


def scope_through(connect: Connect, headers: list[tuple[str, str]]) -> dict[str, object]:
    value = get(connect, "/scope", headers).json()
    assert isinstance(value, dict)
    return value


@pytest.mark.feature("proxy-headers")
def test_forwarding_headers_are_believed_from_a_trusted_proxy_only(
        proxied_server: RunningServer | None) -> None:
    assert proxied_server is not None, NO_OPTION
    scope = scope_through(from_address(TRUSTED, proxied_server.port), FORWARDED)
    assert scope["client"] is not None and scope["client"][0] == "203.0.113.9"  # type: ignore
    assert scope["scheme"] == "https"
    scope = scope_through(from_address(UNTRUSTED, proxied_server.port), FORWARDED + RFC_7239)
    assert scope["client"] is not None and scope["client"][0] == UNTRUSTED  # type: ignore
    assert scope["scheme"] == "http"  # the same headers from another peer: nothing changes


@pytest.mark.feature("forwarded")
def test_rfc_7239_forwarded_from_a_trusted_proxy(proxied_server: RunningServer | None
                                                 ) -> None:
    assert proxied_server is not None, NO_OPTION
    scope = scope_through(from_address(TRUSTED, proxied_server.port), RFC_7239)
    assert scope["client"] == ["2001:db8::9", 4711]  # RFC 7239 §6: a quoted IPv6 with port
    assert scope["scheme"] == "https"


@pytest.mark.feature("proxy-protocol")
def test_proxy_headers_v1_and_v2_are_believed_from_a_trusted_proxy_only(
        proxy_protocol_server: RunningServer | None) -> None:
    assert proxy_protocol_server is not None, NO_OPTION
    port = proxy_protocol_server.port
    for header in (V1, V2):
        response = through_proxy_protocol(TRUSTED, port, header, "/scope")
        assert response is not None and response.status == 200, header[:6]
        assert response.json()["client"] == ["203.0.113.9", 56324]  # type: ignore[index]
    malformed = through_proxy_protocol(TRUSTED, port, MALFORMED, "/scope")
    assert malformed is None or malformed.status >= 400  # refused, never served
    untrusted = through_proxy_protocol(UNTRUSTED, port, V1, "/scope")
    if untrusted is not None and untrusted.status == 200:  # served: then as the peer itself
        assert untrusted.json()["client"][0] == UNTRUSTED  # type: ignore[index]


@pytest.mark.feature("uds")
def test_serves_on_a_unix_socket(server_name: str) -> None:
    with serving_on(server_name, APP, "listen_uds") as connect:
        assert get(connect, "/length").body == apps.HELLO


@pytest.mark.feature("fd")
def test_serves_an_inherited_descriptor(server_name: str) -> None:
    with serving_on(server_name, APP, "listen_fd") as connect:
        assert get(connect, "/length").body == apps.HELLO


@pytest.mark.feature("socket-activation")
def test_serves_the_socket_systemd_passes(server_name: str) -> None:
    with serving_on(server_name, APP, "listen_activated") as connect:
        assert get(connect, "/length").body == apps.HELLO
