"""The house rules of ``toyservers/`` that a reader relies on, checked from the source.

- Every server module has the same sections in the same order (``# --- Constants ---``,
  ``Protocol interface``, ``ASGI interface`` or ``WSGI interface``, ``Serving``), so two can
  be read side by side (``../shared/CONVENTIONS.md``, "What we do" 3).
- A module is read in one sitting: none over 450 lines, no class over 200.
- Dependencies point one way: the modules of ``toyservers`` (and of ``bench``) import each
  other without a cycle, so they can be read bottom up.
- The sans-IO modules import nothing that does I/O, and toy-wsgi (threads and blocking
  sockets) loads no asyncio or anyio at all.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "toyservers"
MODULES = {path.stem: path for path in sorted(PACKAGE.glob("*.py"))}
BENCH = {path.stem: path for path in sorted(PACKAGE.with_name("bench").glob("*.py"))}
SERVERS = {
    "raw_asyncio": "ASGI", "h11_server": "ASGI", "httptools_server": "ASGI", "h2_server": "ASGI",
    "anyio_server": "ASGI", "wsgi_server": "WSGI",
}
SANS_IO = ["_types", "config", "state", "access_log", "http1", "http1_parser", "http2",
           "asgi_extensions", "proxy", "proxy_protocol", "websocket", "websocket_deflate",
           "websocket_handshake"]
DOES_IO = {"asyncio", "anyio", "trio", "uvloop", "sniffio", "socket", "selectors", "ssl",
           "threading", "subprocess"}
BANNER = re.compile(r"^\s*# --- (.+?) -+$")


def banners(name: str) -> list[str]:
    return [m[1] for line in MODULES[name].read_text().splitlines() if (m := BANNER.match(line))]


def imports(name: str, package: str = "toyservers") -> set[str]:
    """Every module ``name`` imports, anywhere in the file (``TYPE_CHECKING`` blocks too)."""
    found: set[str] = set()
    modules = MODULES if package == "toyservers" else BENCH
    for node in ast.walk(ast.parse(modules[name].read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            if node.module == package:
                found.update(f"{package}.{alias.name}" for alias in node.names)
    return found


def internal(name: str, package: str = "toyservers") -> set[str]:
    return {m.split(".")[1] for m in imports(name, package)
            if m.startswith(f"{package}.")} - {name}


@pytest.mark.parametrize("name", sorted(SERVERS))
def test_server_modules_have_the_same_sections_in_order(name: str) -> None:
    interface = f"{SERVERS[name]} interface"
    assert banners(name) == ["Constants", "Protocol interface", interface, "Serving"]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_and_class_reads_in_one_sitting(name: str) -> None:
    source = MODULES[name].read_text()
    assert len(source.splitlines()) <= 450, f"{name}.py: {len(source.splitlines())} lines"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            assert size <= 200, f"{name}.{node.name}: {size} lines"


@pytest.mark.parametrize("package", ["toyservers", "bench"])
def test_the_modules_import_each_other_without_a_cycle(package: str) -> None:
    modules = MODULES if package == "toyservers" else BENCH
    graph = {name: internal(name, package) for name in modules}
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        assert state.get(name) != "open", "import cycle: " + " -> ".join([*path, name])
        state[name] = "open"
        for other in sorted(graph[name]):
            visit(other, [*path, name])
        state[name] = "done"

    for name in sorted(graph):
        visit(name, [])


@pytest.mark.parametrize("name", SANS_IO)
def test_sans_io_modules_import_nothing_that_does_io(name: str) -> None:
    outside = {m.split(".")[0] for m in imports(name)} & DOES_IO
    assert not outside, f"{name}.py imports {sorted(outside)}"
    assert internal(name) <= set(SANS_IO), f"{name}.py imports {sorted(internal(name))}"


def test_toy_wsgi_loads_no_asyncio() -> None:
    """WSGI has no event loop: importing toy-wsgi must not load asyncio or anyio (before the
    shared state moved to ``state.py`` it came in through ``_server``)."""
    code = ("import sys, toyservers.wsgi_server; "
            "print(sorted(m for m in ('asyncio', 'anyio', 'uvloop') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "[]"


def test_every_snippet_section_of_toyservers_is_on_a_page() -> None:
    """A ``--8<-- [start:NAME]`` marker promises a page shows that piece: one no page includes
    is dead weight in a module a student reads (CONVENTIONS.md, "What we do" 8)."""
    pages = " ".join(path.read_text() for path in (PACKAGE.parent / "lessons").glob("*.md"))
    unused = [f"{name}.py:{section}" for name, path in MODULES.items()
              for section in re.findall(r"--8<-- \[start:(\w+)\]", path.read_text())
              if f'"toyservers/{name}.py:{section}"' not in pages]
    assert unused == []
