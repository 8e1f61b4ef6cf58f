"""The built tutorial site, loaded page by page in headless Chromium.

For every page: no console error, no request to anything but 127.0.0.1 (such requests are
aborted and reported: the site must work in a classroom without internet), every mermaid
diagram rendered as SVG, and no code block wider than its box at 1400 px (hidden tabs and
folded solutions are opened first). With ``SCREENSHOT_DIR`` set, screenshots of two pages
(lesson 3b's diagram, lesson 6) are saved there.

Chromium is Debian's ``chromium`` package driven by Playwright's Python package with that
executable; no browser is downloaded. Without it the test skips with one line saying so.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = {"03b-event-loop/index.html": "lesson-03b-event-loop.png",
               "06-cost-of-layers/index.html": "lesson-06-cost-of-layers.png"}

# Closed shadow roots hide material's rendered diagrams from the page's scripts: open them.
OPEN_SHADOWS = """
const attach = Element.prototype.attachShadow;
Element.prototype.attachShadow = function (init) {
  return attach.call(this, {...init, mode: "open"});
};
"""

# Show every tab and folded block, then list the code blocks that scroll sideways.
OVERFLOWING_CODE = """() => {
  document.querySelectorAll("details").forEach(d => d.open = true);
  const style = document.createElement("style");
  style.textContent = ".tabbed-block { display: block !important; }";
  document.head.appendChild(style);
  return [...document.querySelectorAll("pre > code")]
    .filter(c => c.offsetParent !== null && c.scrollWidth > c.clientWidth + 1)
    .map(c => `${c.scrollWidth - c.clientWidth}px too wide: ${c.textContent.slice(0, 60)}`);
}"""

RENDERED_DIAGRAMS = """() => [...document.querySelectorAll("div.mermaid")]
    .filter(d => d.shadowRoot && d.shadowRoot.querySelector("svg")).length"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The site built strictly into a temporary directory, served on 127.0.0.1."""
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed: run scripts/ensure-tools.sh chromium (as root)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extra)")
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert build.returncode == 0, build.stdout + build.stderr
    handler = functools.partial(Quiet, directory=str(out))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/", out
    finally:
        httpd.shutdown()
        httpd.server_close()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_every_page_loads_offline_renders_its_diagrams_and_fits(site: tuple[str, Path]) -> None:
    from playwright.sync_api import Request, Route, sync_playwright

    base, out = site
    pages = sorted(str(p.relative_to(out)) for p in out.rglob("index.html")
                   if p.parent.name not in ("search", "assets") and p.parent != out / "404")
    assert len(pages) >= 10, pages
    shots = Path(os.environ["SCREENSHOT_DIR"]) if os.environ.get("SCREENSHOT_DIR") else None
    if shots is not None:
        shots.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        context.add_init_script(OPEN_SHADOWS)
        current = [""]

        def guard(route: Route, request: Request) -> None:
            if urlsplit(request.url).hostname == "127.0.0.1" or request.url.startswith("data:"):
                route.continue_()
            else:
                problems.append(f"{current[0]}: request left the machine: {request.url}")
                route.abort()

        context.route("**/*", guard)
        page = context.new_page()
        page.on("console", lambda m: m.type == "error" and problems.append(
            f"{current[0]}: console error: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"{current[0]}: page error: {e}"))
        for name in pages:
            current[0] = name
            html = (out / name).read_text()
            expected = html.count('<pre class="mermaid">')
            page.goto(base + name, wait_until="load")
            if expected:
                try:
                    page.wait_for_function(f"({RENDERED_DIAGRAMS})() >= {expected}",
                                           timeout=20_000)
                except Exception:
                    rendered = page.evaluate(RENDERED_DIAGRAMS)
                    problems.append(f"{name}: {rendered} of {expected} diagrams rendered as SVG")
            if shots is not None and name in SCREENSHOTS:
                if expected:  # show a diagram, rendered offline
                    page.locator("div.mermaid").first.scroll_into_view_if_needed()
                page.screenshot(path=str(shots / SCREENSHOTS[name]), full_page=False)
            problems += [f"{name}: code block {w}" for w in page.evaluate(OVERFLOWING_CODE)]
        browser.close()
    assert not problems, "\n".join(problems)
