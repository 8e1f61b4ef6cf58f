"""``toyserve module:app --server NAME``: run an ASGI or WSGI app on one of our servers.

Flags carry uvicorn's names and defaults where they mean the same thing, so
``toyserve main:app --port 8000 --loop uvloop --no-access-log`` reads like the uvicorn line;
the WSGI server's flags carry gunicorn's (``--worker-class gthread --threads 4``).
``--interface`` is uvicorn's (``asgi3``, ``wsgi``; ``asgi`` means ``asgi3``); ``auto`` takes the
server's interface, and ``--interface wsgi`` alone picks ``toy-wsgi``. An app of the other
interface than the server's is refused with one line.
``--workers N`` (uvicorn's name) above 1 pre-forks N worker processes under a master
(``toyservers.workers``, gunicorn's arbiter) with gunicorn's ``--timeout`` (worker silence
before SIGKILL; uvicorn's timeouts all carry a suffix, so the bare name is free),
``--max-requests``, ``--max-requests-jitter`` and ``--preload``, plus ``--reuse-port`` and
``--max-workers`` (the cap on SIGTTIN; gunicorn has none); there the master imports the app
only with ``--preload``, and a bad app ends in the workers (status 3, "Worker failed to
boot.", as gunicorn). ``--workers 1`` serves in this process.
Where to listen (``toyservers.listeners``): ``--host``/``--port``, or ``--uds PATH`` (a UNIX
socket, removed on exit; a live one is never replaced), or ``--fd N`` (an inherited socket), or
a socket systemd passed (``LISTEN_FDS``/``LISTEN_PID``, socket activation); the same with
``--workers``, where the master holds the socket and the workers inherit it.
User mistakes (a bad ``module:app``, a port in use, a failed lifespan startup) end with one
line on stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
from typing import Any

import click

from toyservers import workers as supervisor
from toyservers.config import Config
from toyservers.registry import SERVERS

TOY_SERVERS = [name for name, spec in SERVERS.items()
               if spec.kind == "toy" and spec.variant_of is None]  # a variant: its options
LOG_LEVELS = ["critical", "error", "warning", "info", "debug", "trace"]


class AppImportError(Exception):
    """``module:attr`` could not be turned into an app; the message is the one line to show."""


def import_from_string(target: str) -> Any:
    """Import ``"package.module:attr.sub"`` and return the object.

    Raises:
        AppImportError: the string has no colon, the module cannot be imported, or the
            attribute is missing.
    """
    module_name, _, attrs = target.partition(":")
    if not module_name or not attrs:
        raise AppImportError(f'app must look like "module:attribute", got "{target}"')
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise AppImportError(f'could not import module "{module_name}"') from exc
        raise
    for attr in attrs.split("."):
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            raise AppImportError(
                f'attribute "{attrs}" not found in module "{module_name}"'
            ) from None
    return obj


def app_interface(app: Any) -> str | None:
    """``"asgi"`` for an ``async`` callable (a coroutine function, or an object whose
    ``__call__`` is one: Starlette, FastAPI), ``"wsgi"`` for a plain callable taking exactly
    two arguments (``environ, start_response``: a function, Flask), else None: unknown, let it
    run (uvicorn's ``auto`` guesses from the same signs, and never guesses WSGI)."""
    call = getattr(app, "__call__", None)  # noqa: B004 (the method itself, not callable())
    if inspect.iscoroutinefunction(app) or inspect.iscoroutinefunction(call):
        return "asgi"
    try:
        signature = inspect.signature(app)
    except (TypeError, ValueError):
        return None

    def takes(count: int) -> bool:
        try:
            signature.bind(*range(count))
        except TypeError:
            return False
        return True

    return "wsgi" if takes(2) and not takes(3) else None


def configure_logging(level: str, access_log: bool) -> None:
    """Log lines like uvicorn's (``INFO:     message``) on stderr."""
    numeric = 5 if level == "trace" else getattr(logging, level.upper())
    logging.basicConfig(format="%(levelname)-9s %(message)s", level=numeric, stream=sys.stderr)
    logging.getLogger("toyservers.access").disabled = not access_log


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("app")
@click.option("--server", type=click.Choice(TOY_SERVERS), default="toy-httptools",
              show_default=True, help="Which toy server to run.")
@click.option("--interface", type=click.Choice(["auto", "asgi3", "asgi", "wsgi"]),
              default="auto", show_default=True,
              help="The app's interface; auto: the server's. wsgi alone picks toy-wsgi.")
@click.option("--worker-class", type=click.Choice(["sync", "gthread"]), default="sync",
              show_default=True, help="WSGI only (gunicorn's): sync or gthread.")
@click.option("--threads", default=1, show_default=True, type=click.IntRange(min=1),
              help="WSGI only (gunicorn's): gthread threads; above 1, sync becomes gthread.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind to this address.")
@click.option("--port", default=8000, show_default=True, type=int, help="Bind to this port.")
@click.option("--uds", default=None, help="Bind to this UNIX domain socket (removed on exit).")
@click.option("--fd", default=None, type=click.IntRange(min=0),
              help="Serve the inherited listening socket on this file descriptor.")
@click.option("--loop", type=click.Choice(["auto", "asyncio", "uvloop"]), default="auto",
              show_default=True, help="Event loop implementation.")
@click.option("--lifespan", type=click.Choice(["auto", "on", "off"]), default="auto",
              show_default=True, help="ASGI lifespan protocol.")
@click.option("--timeout-keep-alive", default=5.0, show_default=True, type=float,
              help="Close keep-alive connections idle this many seconds.")
@click.option("--timeout-graceful-shutdown", default=30.0, show_default=True, type=float,
              help="Seconds in-flight requests get to finish on shutdown.")
@click.option("--idle-close-on-response", is_flag=True,
              help="On shutdown, idle keep-alive connections stay open for one more request "
                   "(answered with Connection: close) or until --timeout-keep-alive (HAProxy's "
                   "option).")
@click.option("--limit-concurrency", default=None, type=int,
              help="Most connections at once; beyond it, 503.")
@click.option("--backlog", default=2048, show_default=True, type=int, help="listen() backlog.")
@click.option("--root-path", default="", help="ASGI root_path for an app mounted below a prefix.")
@click.option("--ssl-keyfile", default=None, type=click.Path(exists=True, dir_okay=False),
              help="PEM private key: serve HTTPS (with --ssl-certfile).")
@click.option("--ssl-certfile", default=None, type=click.Path(exists=True, dir_okay=False),
              help="PEM certificate chain: serve HTTPS (with --ssl-keyfile).")
@click.option("--proxy-headers/--no-proxy-headers", default=True, show_default=True,
              help="Believe X-Forwarded-* and Forwarded from --forwarded-allow-ips.")
@click.option("--forwarded-allow-ips", default=None,
              help="Trusted proxies: IPs and CIDRs, comma-separated, or '*' [default: "
                   "$FORWARDED_ALLOW_IPS, else 127.0.0.1].")
@click.option("--proxy-protocol", is_flag=True,
              help="Read a PROXY protocol header (v1/v2) from --forwarded-allow-ips first.")
@click.option("--ws", type=click.Choice(["auto", "none", "toyservers", "wsproto"]),
              default="auto", show_default=True,
              help="WebSocket implementation: the server's own (auto), none (plain HTTP), the "
                   "project's RFC 6455 module (toyservers), or wsproto.")
@click.option("--ws-max-size", default=16 * 1024 * 1024, show_default=True,
              type=click.IntRange(min=1), help="Largest WebSocket message, bytes.")
@click.option("--ws-max-queue", default=32, show_default=True, type=click.IntRange(min=1),
              help="Most WebSocket messages waiting for the app before reading pauses.")
@click.option("--ws-ping-interval", default=20.0, show_default=True, type=float,
              help="Seconds between WebSocket keepalive pings (0: none).")
@click.option("--ws-ping-timeout", default=20.0, show_default=True, type=float,
              help="Seconds a keepalive ping waits for its pong before closing with 1011.")
@click.option("--ws-per-message-deflate", default=True, show_default=True, type=bool,
              help="Offer WebSocket permessage-deflate compression.")
@click.option("--access-log/--no-access-log", default=True, show_default=True,
              help="Log one line per request.")
@click.option("--log-level", type=click.Choice(LOG_LEVELS), default="info", show_default=True)
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1),
              help="Worker processes to pre-fork (1: serve in this process).")
@click.option("--reuse-port", is_flag=True,
              help="Workers only: each worker binds its own socket with SO_REUSEPORT.")
@click.option("--timeout", default=30.0, show_default=True, type=click.FloatRange(min=0),
              help="Workers only (gunicorn's): kill a worker silent this many seconds; 0: never.")
@click.option("--max-requests", default=0, show_default=True, type=click.IntRange(min=0),
              help="Workers only (gunicorn's): restart a worker after this many requests.")
@click.option("--max-requests-jitter", default=0, show_default=True,
              type=click.IntRange(min=0), help="Workers only: add randint(0, this) to it.")
@click.option("--preload", is_flag=True,
              help="Workers only (gunicorn's): import the app in the master, before forking.")
@click.option("--max-workers", default=None, type=click.IntRange(min=1),
              help="Workers only: SIGTTIN adds no worker past this many (default: no cap).")
@click.option("--app-dir", default=".", show_default=True,
              help="Look for APP in this directory (put on sys.path).")
@click.pass_context
def main(ctx: click.Context, app: str, server: str, interface: str, worker_class: str,
         threads: int, host: str, port: int, uds: str | None, fd: int | None, loop: str,
         lifespan: str,
         timeout_keep_alive: float, timeout_graceful_shutdown: float,
         idle_close_on_response: bool,
         limit_concurrency: int | None, backlog: int, root_path: str,
         ssl_keyfile: str | None, ssl_certfile: str | None, proxy_headers: bool,
         forwarded_allow_ips: str | None, proxy_protocol: bool, ws: str, ws_max_size: int,
         ws_max_queue: int, ws_ping_interval: float, ws_ping_timeout: float,
         ws_per_message_deflate: bool, access_log: bool,
         log_level: str, workers: int, reuse_port: bool, timeout: float, max_requests: int,
         max_requests_jitter: int, preload: bool, max_workers: int | None,
         app_dir: str) -> None:
    """Serve the ASGI or WSGI app APP ("module:attribute") with one of the toy servers."""
    if (ssl_keyfile is None) != (ssl_certfile is None):
        raise click.UsageError("--ssl-keyfile and --ssl-certfile go together")
    if proxy_protocol and ssl_certfile is not None:  # the bytes after the header would be
        # the ClientHello's, and asyncio's start_tls() cannot be handed bytes already read
        raise click.UsageError("--proxy-protocol and TLS: the PROXY header comes before the TLS "
                               "handshake, which these servers start on accept; not supported")
    if interface == "wsgi" and ctx.get_parameter_source("server") is not \
            click.core.ParameterSource.COMMANDLINE:
        server = "toy-wsgi"
    served = SERVERS[server].interface
    wanted = served if interface == "auto" else "wsgi" if interface == "wsgi" else "asgi"
    if wanted != served:
        raise click.ClickException(f"{server} serves {served.upper()} apps, not --interface "
                                   f"{interface}")
    configure_logging(log_level, access_log)
    sys.path.insert(0, os.path.abspath(app_dir))

    def load_app() -> Any:
        try:
            app_object = import_from_string(app)
        except AppImportError as exc:
            raise click.ClickException(str(exc)) from None
        if app_interface(app_object) not in (served, None):
            kind = "a WSGI" if served == "asgi" else "an ASGI"
            raise click.ClickException(f"{app} is {kind} app; {server} serves "
                                       f"{served.upper()} apps")
        return app_object

    if worker_class == "sync" and threads > 1:
        worker_class = "gthread"  # gunicorn: sync with --threads above 1 runs gthread
    config = Config(
        host=host, port=port, uds=uds, fd=fd, loop=loop,  # type: ignore[arg-type]
        lifespan=lifespan,  # type: ignore[arg-type]
        timeout_keep_alive=timeout_keep_alive,
        timeout_graceful_shutdown=timeout_graceful_shutdown,
        idle_close_on_response=idle_close_on_response,
        limit_concurrency=limit_concurrency, backlog=backlog, root_path=root_path,
        ssl_keyfile=ssl_keyfile, ssl_certfile=ssl_certfile, proxy_headers=proxy_headers,
        forwarded_allow_ips=forwarded_allow_ips, proxy_protocol=proxy_protocol,
        access_log=access_log, log_level=log_level,
        worker_class=worker_class, threads=threads,  # type: ignore[arg-type]
        workers=workers, ws=ws,  # type: ignore[arg-type]
        ws_max_size=ws_max_size, ws_max_queue=ws_max_queue, ws_ping_interval=ws_ping_interval,
        ws_ping_timeout=ws_ping_timeout, ws_per_message_deflate=ws_per_message_deflate,
    )
    if workers > 1 and not SERVERS[server].multiprocess:
        raise click.UsageError(f"{server} runs one process only: {SERVERS[server].one_process}")
    if reuse_port and (uds is not None or fd is not None):
        raise click.UsageError("--reuse-port binds a TCP port per worker: not with --uds or --fd")
    if max_workers is not None and workers > max_workers:
        raise click.UsageError(f"--workers {workers} is above --max-workers {max_workers}")
    if workers > 1:  # the master imports the app only with --preload (gunicorn's rule)
        settings = supervisor.Settings(
            reuse_port=reuse_port, timeout=timeout, max_requests=max_requests,
            max_requests_jitter=max_requests_jitter, preload=preload, max_workers=max_workers)
        supervisor.run(SERVERS[server].load(), served, load_app, config, settings)
    else:
        SERVERS[server].load().run(load_app(), config)


if __name__ == "__main__":
    main()
