"""Every server the project knows, ours and the reference ones, under one name each.

The CLI, ``bench`` and the tests all start servers through this table, so adding a server is
one module plus one entry here. An entry is data: how its command line is built (an
:class:`Argv` of argument sections with ``{placeholders}``, not code), whether it can run
several worker processes, the protocols it speaks, which distribution's version to report,
and, for our own servers, the module holding ``serve()`` and ``run()``.

Names: ``toy-raw``, ``toy-h11``, ``toy-httptools``, ``toy-h2``, ``toy-anyio`` and
``toy-anyio-trio`` (ours, ASGI; the last two are one module on anyio, on asyncio and on trio);
``toy-wsgi`` and ``toy-wsgi-gthread`` (ours, WSGI: the sync and the gthread worker); ``uvicorn``
(httptools + uvloop), ``uvicorn-h11``, ``uvicorn-wsproto`` (WebSocket by wsproto, not
websockets), ``hypercorn``, ``daphne``, ``granian`` (reference ASGI servers); ``gunicorn``,
``gunicorn-gthread`` and ``waitress`` (reference WSGI: gunicorn's two workers, waitress).

Servers started through a program that is not part of this package (a launcher script, a
baseline) are added by whoever owns that program, with :func:`register`: this package names
no file outside itself.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import platform
import shutil
import string
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

Kind = Literal["toy", "reference", "baseline"]
Interface = Literal["asgi", "wsgi"]

#: Protocols a server may speak: HTTP/1.1, HTTP/2 over TLS (ALPN) and in clear text, WebSocket
#: (RFC 6455); HTTP/3 over QUIC (RFC 9114) only as :attr:`ServerSpec.optional_protocols`.
PROTOCOLS = frozenset({"http/1.1", "h2", "h2c", "websocket", "h3"})

def _script(name: str) -> str:
    """The console script ``name`` from this interpreter's environment, else from PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    return found if found else name


class _ArgvFormatter(string.Formatter):
    """``str.format`` plus one conversion: ``{x!t}`` escapes ``x`` for a Twisted endpoint
    string, where a backslash escapes ``:`` and itself in a value."""

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion == "t":
            return str(value).replace("\\", "\\\\").replace(":", "\\:")
        return super().convert_field(value, conversion)


_FORMATTER = _ArgvFormatter()


@dataclass(frozen=True)
class Argv:
    """A server's command line as data: sections of arguments holding ``{placeholders}``.

    :meth:`ServerSpec.command` joins, in this order: ``program``, ``head``, ``listen`` (or
    the ``listen_*`` section asked for in its place), ``options``, ``proxy_headers`` (when
    asked for), ``access_log`` or ``no_access_log``, ``workers``, ``threads`` (when a thread
    count is asked for), ``tail``; then fills the placeholders: ``{app}``
    (``"module:attr"``), ``{host}``, ``{port}``, ``{workers}`` (a count of processes),
    ``{threads}`` (a count of app threads per process), ``{certfile}`` and ``{keyfile}`` (PEM
    paths), ``{path}`` (a UNIX socket's), ``{fd}`` (an inherited socket's descriptor),
    ``{trusted}`` (the proxies' addresses, comma-separated), ``{python}`` (this interpreter).
    ``{x!t}`` escapes a value for a Twisted endpoint string. A literal brace is written twice.

    Attributes:
        program: a console script's name (found beside this interpreter, else on PATH), or
            ``"{python}"``.
        head: right after the program (the app, for servers that take it first).
        listen: where to listen, plain HTTP.
        listen_tls: where to listen with HTTPS, in place of ``listen``; None: no TLS.
        options: always (log level, loop, parser).
        access_log: to log one line per request; None: the server has no access log.
        no_access_log: to log none.
        workers: to run ``{workers}`` processes; None: one process only.
        threads: to run the app in a pool of ``{threads}`` threads per process (a WSGI
            server's thread model: gunicorn's ``gthread`` worker, waitress's ``--threads``);
            left out unless a count is asked for; None: the server has no such option.
        tail: last (the app, for servers that take it after their options).
        listen_uds, listen_fd: where to listen instead: the UNIX socket ``{path}``, the
            inherited socket ``{fd}``; None: no such option.
        listen_activated: where to listen when systemd passes the socket (``LISTEN_FDS``,
            at descriptor 3; often empty); None: the server does not read ``LISTEN_FDS``.
        listen_proxy_protocol: ``{host}:{port}``, reading a PROXY header (v1, v2) from the
            proxies ``{trusted}`` first; None: the server reads none.
        proxy_headers: to believe ``X-Forwarded-*`` (``Forwarded`` too where read) from
            ``{trusted}``; None: no such option.
    """

    program: str
    head: tuple[str, ...] = ()
    listen: tuple[str, ...] = ("--host", "{host}", "--port", "{port}")
    listen_tls: tuple[str, ...] | None = None
    options: tuple[str, ...] = ()
    access_log: tuple[str, ...] | None = ()
    no_access_log: tuple[str, ...] = ()
    workers: tuple[str, ...] | None = None
    threads: tuple[str, ...] | None = None
    tail: tuple[str, ...] = ()
    listen_uds: tuple[str, ...] | None = None
    listen_fd: tuple[str, ...] | None = None
    listen_activated: tuple[str, ...] | None = None
    listen_proxy_protocol: tuple[str, ...] | None = None
    proxy_headers: tuple[str, ...] | None = None

    def render(self, values: Mapping[str, object], *, tls: bool, access_log: bool,
               threads: bool = False, listen: str = "listen", proxy_headers: bool = False
               ) -> list[str]:
        """The argv with ``values`` in its placeholders, listening as section ``listen`` says
        (the caller checked what is offered)."""
        sections: list[Sequence[str]] = [
            self.head,
            getattr(self, "listen_tls" if tls and listen == "listen" else listen) or (),
            self.options,
            (self.proxy_headers or ()) if proxy_headers else (),
            (self.access_log or ()) if access_log else self.no_access_log,
            self.workers or (),
            (self.threads or ()) if threads else (),
            self.tail,
        ]
        program = _FORMATTER.format(self.program, **values)
        if "{" not in self.program:
            program = _script(program)
        return [program, *(_FORMATTER.format(arg, **values) for part in sections for arg in part)]


@dataclass(frozen=True)
class ServerSpec:
    """How to start one server, and what it offers.

    Attributes:
        name: registry key, e.g. ``"toy-h11"``.
        kind: ``"toy"`` (written here), ``"reference"`` (a real server we compare with) or
            ``"baseline"`` (a measuring stick for benchmarks, not a server anyone should use).
        interface: ``"asgi"`` or ``"wsgi"``: the kind of app it serves.
        package: the distribution whose version results report; ``"python"``: the standard
            library's (the interpreter's version).
        description: one line for tables and ``--help``.
        argv: its command line as data (see :class:`Argv`).
        protocols: what it speaks, out of :data:`PROTOCOLS`.
        module: for toy servers, the module with ``serve()`` and ``run()``.
        one_process: when ``argv.workers`` is None, why it runs one process only.
        variant_of: the entry this one runs with other options (its own row in results, the
            same program: ``uvicorn-h11`` is ``uvicorn`` with ``--http h11``), or None.
        threads: the app threads it runs with when ``command`` is given no count (the gthread
            variants: :data:`WSGI_THREADS`); None: the program's own default.
        extra: the project's optional extra that installs it (``pip install -e '.[NAME]'``),
            or None; :func:`available` offers such a server only when it is named.
        optional_protocols: protocols it speaks only once another distribution is
            installed, as ``(protocol, distribution)`` pairs (hypercorn's HTTP/3 needs
            aioquic); a feature table reads them.
        script: a program file its argv runs by path (neither a module nor a console
            script), or None; :func:`available` offers the entry only while it exists.
    """

    name: str
    kind: Kind
    interface: Interface
    package: str
    description: str
    argv: Argv
    protocols: frozenset[str] = frozenset({"http/1.1"})
    module: str | None = None
    one_process: str | None = None
    variant_of: str | None = None
    threads: int | None = None
    extra: str | None = None
    optional_protocols: tuple[tuple[str, str], ...] = ()
    script: Path | None = None

    def command(self, app: str, host: str, port: int, *, access_log: bool = False,
                tls: tuple[str, str] | None = None, workers: int = 1,
                threads: int | None = None, listen: str = "listen", path: str = "",
                fd: int = -1, trusted: str = "", proxy_headers: bool = False) -> list[str]:
        """The argv that serves ``app`` (``"module:attr"``) on ``host:port``.

        Logs go at warning level so a benchmark measures the server, not its logging; with
        ``access_log`` the server logs one line per request. ``tls`` is a ``(certfile,
        keyfile)`` pair of PEM paths: serve HTTPS instead of plain HTTP. ``workers`` is the
        number of worker processes (a server with a workers option is always given it).
        ``threads`` runs the app in that many threads per process (toy-wsgi and gunicorn then
        use their ``gthread`` worker); None: the entry's own ``threads`` (the gthread
        variants), else the program's default (the ``sync`` worker, waitress's 4 threads).
        ``listen`` names the :class:`Argv` section it listens with (``listen_uds`` with
        ``path``, ``listen_fd`` with ``fd``, ...); ``proxy_headers`` believes forwarding
        headers from ``trusted``, as does ``listen_proxy_protocol`` its PROXY headers.

        Raises:
            ValueError: the server cannot do what is asked (TLS, an access log, more than
                one worker process, a thread count, that listen section or proxy headers),
                or ``workers`` or ``threads`` is below 1.
        """
        if workers < 1:
            raise ValueError(f"workers must be 1 or more, not {workers}")
        if threads is None:
            threads = self.threads
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be 1 or more, not {threads}")
        if threads is not None and self.argv.threads is None:
            raise ValueError(f"{self.name} takes no thread count")
        if workers > 1 and self.argv.workers is None:
            raise ValueError(f"{self.name} runs one process only: {self.one_process}")
        if tls is not None and self.argv.listen_tls is None:
            raise ValueError(f"{self.name} does not serve HTTPS")
        if access_log and self.argv.access_log is None:
            raise ValueError(f"{self.name} writes no access log")
        for section, asked in ((listen, listen != "listen"), ("proxy_headers", proxy_headers)):
            if asked and getattr(self.argv, section) is None:
                raise ValueError(f"{self.name} has no {section.replace('_', ' ')} option")
        cert, key = tls if tls is not None else ("", "")
        values = {"app": app, "host": host, "port": port, "workers": workers, "threads": threads,
                  "certfile": cert, "keyfile": key, "path": path, "fd": fd, "trusted": trusted,
                  "python": sys.executable}
        return self.argv.render(values, tls=tls is not None, access_log=access_log,
                                threads=threads is not None, listen=listen,
                                proxy_headers=proxy_headers)

    @property
    def multiprocess(self) -> bool:
        """True when ``command(..., workers=N)`` can start N worker processes."""
        return self.argv.workers is not None

    @property
    def threaded(self) -> bool:
        """True when ``command(..., threads=N)`` can run the app in N threads."""
        return self.argv.threads is not None

    def version(self) -> str:
        """The installed version of ``package``, or ``"not installed"``."""
        if self.package == "python":
            return platform.python_version()
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    def load(self) -> ModuleType:
        """Import a toy server's module (it has ``serve`` and ``run``); ValueError otherwise."""
        if self.module is None:
            raise ValueError(f"{self.name} is a {self.kind} server: start it with command()")
        return importlib.import_module(self.module)


# --- the entries ----------------------------------------------------------------------------------

_TOY_TLS = ("--host", "{host}", "--port", "{port}",
            "--ssl-certfile", "{certfile}", "--ssl-keyfile", "{keyfile}")
#: Where a toy server can listen (``toyservers.listeners``), and its proxy options (``proxy.py``).
_TOY_LISTENERS: dict[str, tuple[str, ...]] = {
    "listen_uds": ("--uds", "{path}"), "listen_fd": ("--fd", "{fd}"), "listen_activated": (),
    "listen_proxy_protocol": (*_TOY_TLS[:4], "--proxy-protocol", "--forwarded-allow-ips",
                              "{trusted}"),
    "proxy_headers": ("--proxy-headers", "--forwarded-allow-ips", "{trusted}"),
}
#: gunicorn's flags, which toyserve's WSGI options copy: a pool of threads per worker process.
_GTHREAD = ("--worker-class", "gthread", "--threads", "{threads}")

#: Threads of the thread-pool WSGI variants (toy-wsgi-gthread, gunicorn-gthread), as waitress's
#: default pool; ``command(..., threads=N)`` asks for another count.
WSGI_THREADS = 4

#: Why toy-anyio-trio takes no ``--workers``: the pre-fork supervisor's workers run asyncio.
TRIO_ONE_PROCESS = "the pre-fork workers run asyncio: use toy-anyio for --workers"


def _toy(name: str, module: str, description: str, interface: Interface = "asgi",
         threads: int | None = None, variant_of: str | None = None,
         protocols: frozenset[str] | None = None) -> ServerSpec:
    """A toy's entry; by default an ASGI toy speaks HTTP/1.1 and WebSocket, a WSGI one HTTP/1.1."""
    if protocols is None:
        protocols = frozenset({"http/1.1", "websocket"} if interface == "asgi" else {"http/1.1"})
    argv = Argv("toyserve", head=("{app}", "--server", variant_of or name),
                listen_tls=_TOY_TLS if interface == "asgi" else None,  # toy-wsgi has no TLS
                options=("--log-level", "warning"), access_log=("--access-log",),
                no_access_log=("--no-access-log",), workers=("--workers", "{workers}"),
                threads=_GTHREAD if interface == "wsgi" else None, **_TOY_LISTENERS)
    return ServerSpec(name, "toy", interface, "toyservers", description, argv,
                      protocols, module, variant_of=variant_of, threads=threads)


def _one_process(spec: ServerSpec, why: str) -> ServerSpec:
    """``spec`` without a workers option, and why."""
    return replace(spec, argv=replace(spec.argv, workers=None), one_process=why)


def _uvicorn(name: str, http: str, description: str, variant_of: str | None = None,
             ws: tuple[str, ...] = ()) -> ServerSpec:
    argv = Argv("uvicorn", head=("{app}",), listen_tls=_TOY_TLS,
                options=("--http", http, *ws, "--loop", "uvloop", "--log-level", "warning"),
                access_log=("--access-log",), no_access_log=("--no-access-log",),
                workers=("--workers", "{workers}"), listen_uds=("--uds", "{path}"),
                listen_fd=("--fd", "{fd}"),
                proxy_headers=("--proxy-headers", "--forwarded-allow-ips", "{trusted}"))
    return ServerSpec(name, "reference", "asgi", "uvicorn", description, argv,
                      frozenset({"http/1.1", "websocket"}), variant_of=variant_of)


def _entries() -> dict[str, ServerSpec]:
    hypercorn = Argv(
        "hypercorn", listen=("--bind", "{host}:{port}"),
        listen_tls=("--bind", "{host}:{port}", "--certfile", "{certfile}", "--keyfile",
                    "{keyfile}"),
        options=("--log-level", "WARNING"), access_log=("--access-logfile", "-"),
        workers=("--workers", "{workers}"), tail=("{app}",),
        listen_uds=("--bind", "unix:{path}"), listen_fd=("--bind", "fd://{fd}"))
    # daphne: Twisted's haproxy: endpoint reads PROXY headers; --proxy-headers takes no proxies.
    daphne = Argv(
        "daphne", listen=("-b", "{host}", "-p", "{port}"),
        listen_tls=("-e", "ssl:{port}:interface={host!t}:privateKey={keyfile!t}:"
                          "certKey={certfile!t}"),
        options=("-v", "0"), access_log=("--access-log", "-"), tail=("{app}",),
        listen_uds=("-u", "{path}"), listen_fd=("--fd", "{fd}"),
        listen_proxy_protocol=("-e", "haproxy:tcp:{port}:interface={host!t}"),
        proxy_headers=("--proxy-headers",))
    granian = Argv(
        "granian", head=("--interface", "asgi"),
        listen_tls=("--host", "{host}", "--port", "{port}", "--ssl-certificate", "{certfile}",
                    "--ssl-keyfile", "{keyfile}"),
        options=("--loop", "uvloop", "--log-level", "warning"),
        access_log=("--access-log",), no_access_log=("--no-access-log",),
        workers=("--workers", "{workers}"), tail=("{app}",), listen_uds=("--uds", "{path}"))
    gunicorn = Argv(
        "gunicorn", listen=("--bind", "{host}:{port}"),
        listen_tls=("--bind", "{host}:{port}", "--certfile", "{certfile}", "--keyfile",
                    "{keyfile}"),
        options=("--log-level", "warning"), access_log=("--access-logfile", "-"),
        workers=("--workers", "{workers}"), threads=_GTHREAD, tail=("{app}",),
        listen_uds=("--bind", "unix:{path}"), listen_fd=("--bind", "fd://{fd}"),
        listen_activated=(),  # gunicorn/systemd.py: no --bind, then LISTEN_FDS
        listen_proxy_protocol=("--bind", "{host}:{port}", "--proxy-protocol", "auto",
                               "--proxy-allow-from", "{trusted}"),
        proxy_headers=("--forwarded-allow-ips", "{trusted}"))
    # waitress: one process; its main thread does all the socket I/O (asyncore-style) and
    # hands each request to a pool of --threads threads (4 by default). No access log.
    # X-Forwarded-* only: waitress refuses Forwarded together with them (adjustments.py).
    waitress = Argv("waitress-serve", listen=("--listen={host}:{port}",),
                    access_log=None, threads=("--threads={threads}",), tail=("{app}",),
                    listen_uds=("--unix-socket={path}",),
                    proxy_headers=("--trusted-proxy={trusted}", "--trusted-proxy-headers="
                                   "x-forwarded-for x-forwarded-proto x-forwarded-host "
                                   "x-forwarded-port"))
    specs = [
        _toy("toy-raw", "toyservers.raw_asyncio", "ours: HTTP/1.1 parsed by hand on asyncio"),
        _toy("toy-h11", "toyservers.h11_server", "ours: sans-IO HTTP/1.1 with h11"),
        _toy("toy-httptools", "toyservers.httptools_server",
             "ours: llhttp callbacks through httptools"),
        _toy("toy-h2", "toyservers.h2_server",
             "ours: HTTP/2 with h2 (TLS+ALPN, prior knowledge, h2c), HTTP/1.1 by toy-httptools",
             protocols=frozenset({"http/1.1", "h2", "h2c", "websocket"})),
        _toy("toy-anyio", "toyservers.anyio_server",
             "ours: h11 on anyio streams, task groups and cancel scopes (asyncio)"),
        _one_process(_toy("toy-anyio-trio", "toyservers.anyio_trio", "ours: toy-anyio on trio"),
                     TRIO_ONE_PROCESS),
        _toy("toy-wsgi", "toyservers.wsgi_server",
             "ours: WSGI on sockets and threads, sync worker (gthread with a thread count)",
             "wsgi"),
        _toy("toy-wsgi-gthread", "toyservers.wsgi_server",
             f"ours: WSGI on sockets and threads, gthread worker ({WSGI_THREADS} threads)",
             "wsgi", WSGI_THREADS, "toy-wsgi"),
        _uvicorn("uvicorn", "httptools", "uvicorn, httptools + uvloop"),
        _uvicorn("uvicorn-h11", "h11", "uvicorn, h11 + uvloop", "uvicorn"),
        # uvicorn's --ws auto is the websockets library; wsproto is what toy-h11 and toy-anyio use
        _uvicorn("uvicorn-wsproto", "httptools", "uvicorn, httptools + uvloop, WebSocket by "
                 "wsproto", "uvicorn", ws=("--ws", "wsproto")),
        ServerSpec("hypercorn", "reference", "asgi", "hypercorn", "hypercorn, asyncio",
                   hypercorn, frozenset({"http/1.1", "h2", "h2c", "websocket"}),
                   optional_protocols=(("h3", "aioquic"),)),
        ServerSpec("daphne", "reference", "asgi", "daphne", "daphne, Twisted", daphne,
                   frozenset({"http/1.1", "h2", "websocket"}),
                   one_process="daphne has no --workers: run several processes behind a "
                               "load balancer (or one socket passed with --fd)"),
        ServerSpec("granian", "reference", "asgi", "granian", "granian, Rust (hyper)",
                   granian, frozenset({"http/1.1", "h2", "h2c", "websocket"})),
        ServerSpec("gunicorn", "reference", "wsgi", "gunicorn",
                   "gunicorn, sync worker (gthread with a thread count)", gunicorn,
                   frozenset({"http/1.1"})),
        ServerSpec("gunicorn-gthread", "reference", "wsgi", "gunicorn",
                   f"gunicorn, gthread worker ({WSGI_THREADS} threads)", gunicorn,
                   frozenset({"http/1.1"}), variant_of="gunicorn", threads=WSGI_THREADS),
        ServerSpec("waitress", "reference", "wsgi", "waitress",
                   "waitress, one I/O thread and a pool of app threads", waitress,
                   frozenset({"http/1.1"}),
                   one_process="waitress runs one process: its threads serve the app (run "
                               "several behind a load balancer for more)"),
    ]
    return {spec.name: spec for spec in specs}


SERVERS: dict[str, ServerSpec] = _entries()


def register(spec: ServerSpec) -> ServerSpec:
    """Add ``spec`` to :data:`SERVERS` under its name, after the entries already there; a
    second registration of the same spec changes nothing.

    Raises:
        ValueError: another spec already holds the name.
    """
    held = SERVERS.setdefault(spec.name, spec)
    if held != spec:
        raise ValueError(f"{spec.name!r} is already registered as another server")
    return spec


def available(names: list[str] | None = None, *, interface: Interface = "asgi",
              kinds: Collection[str] = ("toy", "reference")) -> list[str]:
    """Registered server names for ``interface`` and ``kinds`` that can run here: a toy
    server's module is importable, a reference server's package installed (and its
    ``script``, if any, present). Baselines are left out unless ``kinds`` names them, and a
    server from an optional extra unless ``names`` does: what the suites run by default is
    then the same on every machine."""
    chosen = names if names is not None else list(SERVERS)
    result = []
    for name in chosen:
        spec = SERVERS[name]
        if spec.interface != interface or spec.kind not in kinds:
            continue
        if spec.extra is not None and names is None:
            continue
        if spec.module is not None:
            if importlib.util.find_spec(spec.module) is None:
                continue
        elif spec.version() == "not installed":
            continue
        elif spec.script is not None and not spec.script.is_file():
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
