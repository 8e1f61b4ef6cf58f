"""Every server the project knows, ours and the reference ones, under one name each.

The CLI, ``bench`` and the tests all start servers through this table, so adding a server is
one module plus one line here. An entry says how to start the server as a subprocess serving
``module:attr`` on a host and port, which distribution's version to report, and, for our own
servers, the module holding ``serve()`` and ``run()``.

Names: ``toy-raw``, ``toy-h11``, ``toy-httptools`` (ours); ``uvicorn`` (httptools + uvloop),
``uvicorn-h11``, ``hypercorn``, ``daphne``, ``granian`` (reference ASGI servers); ``gunicorn``
(reference WSGI server).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Literal

Kind = Literal["toy", "reference"]
Interface = Literal["asgi", "wsgi"]


def _script(name: str) -> str:
    """The console script ``name`` from this interpreter's environment, else from PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    return found if found else name


@dataclass(frozen=True)
class ServerSpec:
    """How to start one server.

    Attributes:
        name: registry key, e.g. ``"toy-h11"``.
        kind: ``"toy"`` (written here) or ``"reference"`` (a real server we compare with).
        interface: ``"asgi"`` or ``"wsgi"``: the kind of app it serves.
        package: the distribution whose version results report.
        description: one line for tables and ``--help``.
        module: for toy servers, the module with ``serve()`` and ``run()``.
    """

    name: str
    kind: Kind
    interface: Interface
    package: str
    description: str
    module: str | None = None

    def command(self, app: str, host: str, port: int, *, access_log: bool = False,
                tls: tuple[str, str] | None = None) -> list[str]:
        """The argv that serves ``app`` (``"module:attr"``) on ``host:port`` in one process.

        Logs go at warning level so a benchmark measures the server, not its logging; with
        ``access_log`` the server logs one line per request where it can. ``tls`` is a
        ``(certfile, keyfile)`` pair of PEM paths: serve HTTPS instead of plain HTTP.
        """
        n = self.name
        cert, key = tls if tls is not None else ("", "")
        if self.kind == "toy":
            return [
                _script("toyserve"), app, "--server", n, "--host", host, "--port", str(port),
                "--log-level", "warning",
                "--access-log" if access_log else "--no-access-log",
                *(["--ssl-certfile", cert, "--ssl-keyfile", key] if tls else []),
            ]
        if n in ("uvicorn", "uvicorn-h11"):
            http = "h11" if n == "uvicorn-h11" else "httptools"
            return [
                _script("uvicorn"), app, "--host", host, "--port", str(port),
                "--http", http, "--loop", "uvloop", "--log-level", "warning",
                "--access-log" if access_log else "--no-access-log",
                *(["--ssl-certfile", cert, "--ssl-keyfile", key] if tls else []),
            ]
        if n == "hypercorn":
            argv = [_script("hypercorn"), "--bind", f"{host}:{port}", "--log-level", "WARNING"]
            if tls:
                argv += ["--certfile", cert, "--keyfile", key]
            return [*argv, "--access-logfile", "-", app] if access_log else [*argv, app]
        if n == "daphne":
            if tls:  # a Twisted endpoint string: a backslash escapes ':' and itself in a value
                def esc(value: str) -> str:
                    return value.replace("\\", "\\\\").replace(":", "\\:")
                argv = [_script("daphne"), "-e", f"ssl:{port}:interface={esc(host)}:"
                        f"privateKey={esc(key)}:certKey={esc(cert)}", "-v", "0"]
            else:
                argv = [_script("daphne"), "-b", host, "-p", str(port), "-v", "0"]
            return [*argv, "--access-log", "-", app] if access_log else [*argv, app]
        if n == "granian":
            return [
                _script("granian"), "--interface", "asgi", "--host", host, "--port", str(port),
                "--workers", "1", "--loop", "uvloop", "--log-level", "warning",
                "--access-log" if access_log else "--no-access-log",
                *(["--ssl-certificate", cert, "--ssl-keyfile", key] if tls else []), app,
            ]
        if n == "gunicorn":
            return [
                _script("gunicorn"), "--bind", f"{host}:{port}", "--workers", "1",
                "--log-level", "warning", *(["--access-logfile", "-"] if access_log else []),
                *(["--certfile", cert, "--keyfile", key] if tls else []), app,
            ]
        raise ValueError(f"no command known for server {n!r}")

    def version(self) -> str:
        """The installed version of ``package``, or ``"not installed"``."""
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    def load(self) -> ModuleType:
        """Import a toy server's module (it has ``serve`` and ``run``); ValueError otherwise."""
        if self.module is None:
            raise ValueError(f"{self.name} is a reference server: start it with command()")
        return importlib.import_module(self.module)


def _entries() -> dict[str, ServerSpec]:
    specs = [
        ServerSpec("toy-raw", "toy", "asgi", "toyservers",
                   "ours: HTTP/1.1 parsed by hand on asyncio", "toyservers.raw_asyncio"),
        ServerSpec("toy-h11", "toy", "asgi", "toyservers",
                   "ours: sans-IO HTTP/1.1 with h11", "toyservers.h11_server"),
        ServerSpec("toy-httptools", "toy", "asgi", "toyservers",
                   "ours: llhttp callbacks through httptools", "toyservers.httptools_server"),
        ServerSpec("uvicorn", "reference", "asgi", "uvicorn", "uvicorn, httptools + uvloop"),
        ServerSpec("uvicorn-h11", "reference", "asgi", "uvicorn", "uvicorn, h11 + uvloop"),
        ServerSpec("hypercorn", "reference", "asgi", "hypercorn", "hypercorn, asyncio"),
        ServerSpec("daphne", "reference", "asgi", "daphne", "daphne, Twisted"),
        ServerSpec("granian", "reference", "asgi", "granian", "granian, Rust (hyper)"),
        ServerSpec("gunicorn", "reference", "wsgi", "gunicorn", "gunicorn, sync worker"),
    ]
    return {spec.name: spec for spec in specs}


SERVERS: dict[str, ServerSpec] = _entries()


def available(names: list[str] | None = None, *, interface: Interface = "asgi") -> list[str]:
    """Registered server names for ``interface`` whose module or package is importable."""
    chosen = names if names is not None else list(SERVERS)
    result = []
    for name in chosen:
        spec = SERVERS[name]
        if spec.interface != interface:
            continue
        if spec.module is not None:
            if importlib.util.find_spec(spec.module) is None:
                continue
        elif spec.version() == "not installed":
            continue
        result.append(name)
    return result


def get(name: str) -> ServerSpec:
    """The spec named ``name``; KeyError with the known names when there is none."""
    try:
        return SERVERS[name]
    except KeyError:
        known = ", ".join(SERVERS)
        raise KeyError(f"unknown server {name!r} (known: {known})") from None
