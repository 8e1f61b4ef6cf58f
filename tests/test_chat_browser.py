"""Two Chromium pages chat through ``apps/chat.py``: over ws:// on an HTTP/1.1 toy server, and
over wss:// on toy-h2 with TLS, where Chromium opens its WebSocket with RFC 8441.

Each test serves the chat app in a thread (``tests/support/running.serving``), opens two pages
of one headless Chromium (Debian's ``chromium`` driven by Playwright, as
``tests/test_site_browser.py`` does; without it the tests skip with one line), and has each page
send a line that the other shows. How each WebSocket reached the server is read on the server
side: the chat app tells every client its ``websocket`` scope's ``http_version``, which toy-h2
sets to "2" only for a WebSocket opened as a stream of an HTTP/2 connection (an extended
CONNECT, ``toyservers/h2_websocket.py``) and to "1.1" for one that came with
``Upgrade: websocket`` on a connection of its own.

What Chromium does, and how we know: over TLS the page comes over HTTP/2 (ALPN), and toy-h2's
SETTINGS carry ``ENABLE_CONNECT_PROTOCOL = 1``; Chromium then opens the page's ``wss://``
WebSocket on that same connection (the scope says "2") with no flag given, as its "Intent to
ship: WebSockets over HTTP/2" (blink-dev, July 2018) says it does, for secure WebSockets only,
and only once the server has sent the setting. One test withholds the setting (the server
frames its SETTINGS without it) and Chromium falls back to a TLS connection of its own,
HTTP/1.1 with ``Upgrade: websocket`` (the scope says "1.1"). And Chromium answers the
WebSocket pings toy-h2 sends on that stream for ``--ws-ping-interval`` (counted on the
server), so its WebSocket stays open.

The certificate comes from trustme, issued for 127.0.0.1; Chromium trusts it through
``--ignore-certificate-errors-spki-list`` (the key's SHA-256), so the connection counts as a
valid one, not as one with a certificate error.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from apps import chat
from tests.support.running import serving
from toyservers import http2
from toyservers.h2_websocket_timers import StreamTimers

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: The toy server for the ws:// test: any with WebSocket over HTTP/1.1 (toy-httptools'
#: upgrade; toy-raw's would do as well).
HTTP1_SERVER = "toy-httptools"
NEXT_HOP = "performance.getEntriesByType('navigation')[0].nextHopProtocol"
WAIT_MS = 15_000  # how long a page may take to show what it waits for (a loaded machine)


@dataclass
class Certificate:
    certfile: str
    keyfile: str
    spki: str  # base64 of the SHA-256 of its public key (SubjectPublicKeyInfo, DER)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    """A certificate for 127.0.0.1 from a trustme CA."""
    issued = trustme.CA().issue_cert("127.0.0.1")
    folder = tmp_path_factory.mktemp("chat-tls")
    certfile, keyfile = folder / "cert.pem", folder / "key.pem"
    issued.cert_chain_pems[0].write_to_path(str(certfile))
    issued.private_key_pem.write_to_path(str(keyfile))
    key = x509.load_pem_x509_certificate(issued.cert_chain_pems[0].bytes()).public_key()
    der = key.public_bytes(serialization.Encoding.DER,
                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return Certificate(str(certfile), str(keyfile),
                       base64.b64encode(hashlib.sha256(der).digest()).decode())


@pytest.fixture(scope="module")
def browser(certificate: Certificate) -> Iterator[Any]:
    """One headless Chromium for the module, trusting ``certificate``."""
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed: run scripts/ensure-tools.sh chromium (as root)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed (dev extra)")
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu",
            f"--ignore-certificate-errors-spki-list={certificate.spki}"])
        yield launched
        launched.close()


def chat_between_two_pages(browser: Any, url: str) -> tuple[list[str], list[str]]:
    """Open ``url`` in two pages, send a line from each, and check the other shows it; the
    protocol each page came over (the Navigation Timing ``nextHopProtocol``: ``h2``,
    ``http/1.1``), and the ``http_version`` each page's WebSocket reached the server with."""
    context = browser.new_context()
    try:
        pages = [context.new_page(), context.new_page()]
        for page in pages:
            page.goto(url)
            page.wait_for_selector("body[data-state=open]", timeout=WAIT_MS)
            page.wait_for_selector("li.server", timeout=WAIT_MS)
        for sender, reader, line in ((0, 1, "hello from the first page"),
                                     (1, 0, "and back from the second")):
            pages[sender].fill("#text", line)
            pages[sender].click("button")
            reader_page = pages[reader]
            reader_page.wait_for_function(
                "line => [...document.querySelectorAll('li.chat')]"
                ".some(li => li.textContent.endsWith(': ' + line))", arg=line, timeout=WAIT_MS)
        return ([page.evaluate(NEXT_HOP) for page in pages],
                [page.get_attribute("li.server", "data-http-version") for page in pages])
    finally:
        context.close()


def test_two_pages_chat_over_ws_on_http1(browser: Any) -> None:
    with serving(HTTP1_SERVER, chat.app) as port:
        pages, websockets = chat_between_two_pages(browser, f"http://127.0.0.1:{port}/")
    assert (pages, websockets) == (["http/1.1"] * 2, ["1.1"] * 2)


def test_two_pages_chat_over_wss_on_toy_h2_and_chromium_uses_rfc8441(
        browser: Any, certificate: Certificate) -> None:
    """The page comes over HTTP/2 (TLS, ALPN h2); its WebSocket is a stream of that
    connection: an extended CONNECT, the scope's http_version "2"."""
    with serving("toy-h2", chat.app, ssl_certfile=certificate.certfile,
                 ssl_keyfile=certificate.keyfile) as port:
        pages, websockets = chat_between_two_pages(browser, f"https://127.0.0.1:{port}/")
    assert (pages, websockets) == (["h2"] * 2, ["2"] * 2)


def test_without_the_setting_chromium_opens_an_http1_connection(
        browser: Any, certificate: Certificate, monkeypatch: pytest.MonkeyPatch) -> None:
    """RFC 8441 §3: a client may send an extended CONNECT only after the server's SETTINGS
    said ENABLE_CONNECT_PROTOCOL = 1. Withheld, Chromium's wss:// goes over HTTP/1.1."""
    connection = http2.connection
    monkeypatch.setattr(http2, "connection",
                        lambda size, connect_protocol=False: connection(size, False))
    with serving("toy-h2", chat.app, ssl_certfile=certificate.certfile,
                 ssl_keyfile=certificate.keyfile) as port:
        pages, websockets = chat_between_two_pages(browser, f"https://127.0.0.1:{port}/")
    assert (pages, websockets) == (["h2"] * 2, ["1.1"] * 2)  # the page over HTTP/2 all the
    # same: only the WebSocket took a connection of its own


def test_chromium_answers_toy_h2s_keepalive_pings_on_its_rfc8441_stream(
        browser: Any, certificate: Certificate, monkeypatch: pytest.MonkeyPatch) -> None:
    """toy-h2 pings each WebSocket stream every ``--ws-ping-interval`` (here 0.2 s), and
    closes one whose pong is missing for ``--ws-ping-timeout`` with 1011: Chromium answers the
    pings inside its RFC 8441 stream, so its WebSocket outlives five of them and still chats.
    The pongs are counted on the server as they come (``StreamTimers.pong``), not waited for."""
    answered = threading.Semaphore(0)
    pong = StreamTimers.pong

    def counted(self: StreamTimers, ws: Any, payload: bytes) -> None:
        kind, _, pinged = self.due.get(ws, ("", 0.0, b""))
        if kind == "pong" and payload == pinged:
            answered.release()  # the answer to our keepalive ping
        pong(self, ws, payload)

    monkeypatch.setattr(StreamTimers, "pong", counted)
    with serving("toy-h2", chat.app, ssl_certfile=certificate.certfile,
                 ssl_keyfile=certificate.keyfile, ws_ping_interval=0.2,
                 ws_ping_timeout=WAIT_MS / 1000) as port:
        context = browser.new_context()
        try:
            page = context.new_page()
            page.goto(f"https://127.0.0.1:{port}/")
            page.wait_for_selector("li.server[data-http-version='2']", timeout=WAIT_MS)
            for _ in range(5):
                assert answered.acquire(timeout=WAIT_MS / 1000), "no pong from Chromium"
            assert page.get_attribute("body", "data-state") == "open"
            page.fill("#text", "still here")
            page.click("button")
            page.wait_for_function(
                "[...document.querySelectorAll('li.chat')]"
                ".some(li => li.textContent.endsWith(': still here'))", timeout=WAIT_MS)
        finally:
            context.close()
