"""Does Chromium act on a 103 (Early Hints, RFC 8297) from a toy server? Over HTTP/2
with TLS on toy-h2 it does, in some runs; over HTTP/1.1 on toy-httptools, with TLS or
without, it does not.

The app below sends, for ``/``, an ``http.response.early_hint`` with
``Link: </style.css>; rel=preload; as=style``, then holds the page back until ``/style.css``
has been asked for (an ``asyncio.Event`` set by that request) or ``hold`` seconds have passed,
and only then sends the HTML that references ``/style.css``. It records the order of
``hint sent``, ``style.css requested`` and ``page sent``: a browser that acted on the hint asks
for the style sheet between the first and the last; one that did not asks for it after the
page (once it has parsed it), and the page waits out its ``hold`` (a server-side bound, not a
sleep of the test's).

What Chromium does, and how we know (seen with Chromium 156.0.8078.108, the Playwright build):
over HTTP/2 with TLS (``nextHopProtocol`` "h2") the navigation's 103 makes it fetch
``/style.css`` before the page is sent (server side: the order), and the page's
``performance.getEntriesByType('resource')`` entry for it has ``initiatorType``
"early-hints". Not in every run, though: on a loaded machine about half the runs show no
fetch on the hint (the page waits out its ``hold``, the entry says "link"), a cause not found
yet, so the HTTP/2 tests accept either outcome and check that both sides agree.
Over HTTP/1.1, cleartext or TLS, it ignores the 103: the style sheet is asked
for after the page, by the ``link`` element (``initiatorType`` "link"). A hinted response
with ``Cache-Control: no-store`` is fetched on the hint and then again for the page, the
preload not reused (the last test), so the style sheet here is sent with ``max-age``.

The certificate and the browser come from ``tests/test_chat_browser.py``'s fixtures (trustme,
``--ignore-certificate-errors-spki-list``); without Chromium the tests skip with one line.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from tests.support.running import serving
from tests.test_chat_browser import NEXT_HOP, WAIT_MS, Certificate, browser, certificate

__all__ = ["browser", "certificate"]  # the fixtures, used by name

LINK = b"</style.css>; rel=preload; as=style"
PAGE = (b'<!doctype html><html><head><link rel="stylesheet" href="/style.css"></head>'
        b"<body><p>early hints</p></body></html>")
STYLE = b"/* marker: early-hints-style */ p { color: rgb(1, 2, 3); }"
STYLE_ENTRY = ("performance.getEntriesByType('resource')"
               ".filter(e => e.name.endsWith('/style.css')).map(e => e.initiatorType)")


class EarlyHintsApp:
    """A pure ASGI app: ``/`` (hint, hold, page) and ``/style.css``; ``events`` is the order
    of what happened, ``hold`` the longest the page waits for the style request (seconds),
    ``style_cache`` the style sheet's Cache-Control."""

    def __init__(self, hold: float, style_cache: bytes = b"max-age=60") -> None:
        self.hold, self.style_cache = hold, style_cache
        self.events: list[str] = []
        self.styled: asyncio.Event | None = None  # made in the server's event loop

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        if self.styled is None:
            self.styled = asyncio.Event()
        if scope["path"] == "/style.css":
            self.events.append("style.css requested")
            self.styled.set()
            await self.respond(send, b"text/css", STYLE, cache=self.style_cache)
        elif scope["path"] == "/":
            await send({"type": "http.response.early_hint", "links": [LINK]})
            self.events.append("hint sent")
            with contextlib.suppress(TimeoutError):  # not asked for: the page all the same
                await asyncio.wait_for(self.styled.wait(), self.hold)
            self.events.append("page sent")
            await self.respond(send, b"text/html; charset=utf-8", PAGE)
        else:
            await self.respond(send, b"text/plain", b"not found", status=404)

    @staticmethod
    async def respond(send: Any, kind: bytes, body: bytes, status: int = 200,
                      cache: bytes = b"no-store") -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", kind), (b"cache-control", cache)]})
        await send({"type": "http.response.body", "body": body})


def open_page(browser: Any, url: str) -> tuple[str, list[str], str]:
    """Open ``url``; the page's ``nextHopProtocol``, the ``initiatorType`` of its resource
    entries for ``/style.css``, and the version of the browser."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(url, timeout=WAIT_MS, wait_until="commit")
        page.wait_for_function("getComputedStyle(document.querySelector('p')).color"
                               " === 'rgb(1, 2, 3)'", timeout=WAIT_MS)
        return page.evaluate(NEXT_HOP), page.evaluate(STYLE_ENTRY), browser.version
    finally:
        context.close()


def test_chromium_acts_on_early_hints_over_h2_on_toy_h2(
        browser: Any, certificate: Certificate) -> None:
    """HTTP/2, TLS: when Chromium acts on the hint it fetches the style sheet before the page
    is sent and the entry says "early-hints"; it does not in every run (see the module)."""
    app = EarlyHintsApp(hold=5.0)
    with serving("toy-h2", app, ssl_certfile=certificate.certfile,
                 ssl_keyfile=certificate.keyfile) as port:
        protocol, initiators, version = open_page(browser, f"https://127.0.0.1:{port}/")
    print(f"Chromium {version}: {protocol}, {app.events}, {initiators}")
    assert protocol == "h2"
    acted = app.events == ["hint sent", "style.css requested", "page sent"]
    assert acted or app.events == ["hint sent", "page sent", "style.css requested"]
    assert initiators == (["early-hints"] if acted else ["link"])


def test_chromium_ignores_early_hints_over_http1_on_toy_httptools(browser: Any) -> None:
    """HTTP/1.1, cleartext: the 103 is ignored; the style sheet comes after the page."""
    app = EarlyHintsApp(hold=1.0)
    with serving("toy-httptools", app) as port:
        protocol, initiators, version = open_page(browser, f"http://127.0.0.1:{port}/")
    print(f"Chromium {version}: {protocol}, {app.events}, {initiators}")
    assert protocol == "http/1.1"
    assert app.events == ["hint sent", "page sent", "style.css requested"]
    assert initiators == ["link"]


def test_chromium_ignores_early_hints_over_http1_with_tls_on_toy_httptools(
        browser: Any, certificate: Certificate) -> None:
    """HTTP/1.1 over TLS: a secure context, and still the 103 is ignored."""
    app = EarlyHintsApp(hold=1.0)
    with serving("toy-httptools", app, ssl_certfile=certificate.certfile,
                 ssl_keyfile=certificate.keyfile) as port:
        protocol, initiators, version = open_page(browser, f"https://127.0.0.1:{port}/")
    print(f"Chromium {version}: {protocol}, {app.events}, {initiators}")
    assert protocol == "http/1.1"
    assert app.events == ["hint sent", "page sent", "style.css requested"]
    assert initiators == ["link"]


def test_a_no_store_hinted_response_is_fetched_twice_over_h2(
        browser: Any, certificate: Certificate) -> None:
    """With ``Cache-Control: no-store`` the early-hints preload is not used by the page."""
    app = EarlyHintsApp(hold=5.0, style_cache=b"no-store")
    with serving("toy-h2", app, ssl_certfile=certificate.certfile,
                 ssl_keyfile=certificate.keyfile) as port:
        protocol, initiators, version = open_page(browser, f"https://127.0.0.1:{port}/")
    print(f"Chromium {version}: {protocol}, {app.events}, {initiators}")
    assert protocol == "h2"
    assert app.events in (["hint sent", "style.css requested", "page sent",
                           "style.css requested"],  # acted on, and not reused
                          ["hint sent", "page sent", "style.css requested"])  # not acted on
    assert initiators == ["link"]
