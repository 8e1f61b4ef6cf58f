"""Where a server listens: a TCP address, a UNIX socket, an inherited descriptor, or a socket
systemd passed on. Every toy server, toy-wsgi and the ``--workers`` master get their listening
socket here, so each way of listening is written once.

Which one, first match wins (uvicorn: ``--fd`` over ``--uds`` over ``--host``/``--port``):

1. ``config.fd``: a socket this process inherited as descriptor ``N`` (a supervisor bound
   it, e.g. ``circusd`` or a shell's ``exec 3<>``). uvicorn's ``--fd``.
2. systemd socket activation (``sd_listen_fds(3)``): ``LISTEN_PID`` is this process's pid
   and ``LISTEN_FDS`` says how many sockets start at descriptor 3 (``SD_LISTEN_FDS_START``).
   The first is served; the variables are then removed, so a child (a worker) never takes
   them for its own, as ``sd_listen_fds(unset_environment=1)`` does.
3. ``config.uds``: a UNIX domain socket at that path (uvicorn's ``--uds``), made readable and
   writable by everyone (mode 0o666, uvicorn's ``uds_perms``) so a proxy running as another
   user can connect. A file already there is replaced only when it is a socket nobody
   listens on (a crashed server's leftover); a live socket, or any other kind of file, is
   refused (OSError ``EADDRINUSE`` or ``EEXIST``), never clobbered. :func:`release` removes
   the file on exit, if it is still the one this server made.
4. ``config.host``/``config.port``: TCP, with ``SO_REUSEADDR`` (``socket.create_server``).

Nothing here does asyncio: the asyncio servers pass the socket to ``loop.create_server(sock=)``,
toy-anyio to ``SocketListener.from_socket``, toy-wsgi to its selector.

Compare with: uvicorn/config.py (``Config.bind_socket``), gunicorn/sock.py
(``create_sockets``, ``UnixSocket``) and gunicorn/systemd.py (``listen_fds``).
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from typing import Any

from toyservers.config import Config

#: The first descriptor systemd passes (``SD_LISTEN_FDS_START``, sd_listen_fds(3)).
LISTEN_FDS_START = 3
#: Permissions of a UNIX socket this server creates (uvicorn's ``uds_perms``).
UDS_MODE = 0o666
#: The UNIX socket files this process made: path -> (st_dev, st_ino), so :func:`release`
#: removes only its own (another server may have replaced the file since).
MADE: dict[str, tuple[int, int]] = {}


def systemd_fds(environ: dict[str, str] | None = None) -> int:
    """How many sockets systemd passed to this process (0: none, or meant for another pid).

    Reads ``LISTEN_PID`` and ``LISTEN_FDS`` from ``environ`` (default ``os.environ``); when
    they are for this process, removes both, so children do not read them again.
    """
    env = os.environ if environ is None else environ
    try:
        pid, count = int(env.get("LISTEN_PID", "")), int(env.get("LISTEN_FDS", ""))
    except ValueError:
        return 0
    if pid != os.getpid() or count < 1:
        return 0
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        env.pop(name, None)
    return count


def inherited(fd: int, backlog: int) -> socket.socket:
    """The listening socket on inherited descriptor ``fd`` (``listen()`` is called again,
    which a listening socket accepts and a bound one needs).

    Raises:
        OSError: ``fd`` is not an open stream socket.
    """
    sock = socket.socket(fileno=fd)
    if sock.type != socket.SOCK_STREAM:
        sock.detach()
        raise OSError(errno.ENOTSOCK, f"descriptor {fd} is not a stream socket")
    sock.listen(backlog)
    return sock


def unix_socket(path: str, backlog: int) -> socket.socket:
    """A UNIX socket listening at ``path``, mode :data:`UDS_MODE` (module docstring).

    Raises:
        OSError: ``EADDRINUSE`` when a server already listens there, ``EEXIST`` when ``path``
            is a file that is not a socket, or the bind failed.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(mode):
            raise OSError(errno.EEXIST, f"{path} exists and is not a socket")
        with socket.socket(socket.AF_UNIX) as probe:
            if probe.connect_ex(path) == 0:
                raise OSError(errno.EADDRINUSE, f"a server already listens on {path}")
        os.unlink(path)  # a socket nobody listens on: a crashed server's leftover
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, UDS_MODE)
        sock.listen(backlog)
        made = os.stat(path)
        MADE[path] = (made.st_dev, made.st_ino)
    except OSError:
        sock.close()
        raise
    return sock


def listening_socket(config: Config) -> socket.socket:
    """The socket ``config`` says to serve on, bound and listening (module docstring).

    Raises:
        OSError: it cannot be bound or used (the port is taken, the path is live...).
    """
    if config.fd is not None:
        return inherited(config.fd, config.backlog)
    if systemd_fds():
        return inherited(LISTEN_FDS_START, config.backlog)
    if config.uds is not None:
        return unix_socket(config.uds, config.backlog)
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    return socket.create_server((config.host, config.port), family=family,
                                backlog=config.backlog)


def describe(sock: socket.socket, scheme: str = "http") -> str:
    """Where ``sock`` listens, for the start-up log line: ``http://127.0.0.1:8000`` or
    ``http://unix:/run/app.sock`` (the form uvicorn logs)."""
    name = sock.getsockname()
    if sock.family == socket.AF_UNIX:
        return f"{scheme}://unix:{name}"
    host = f"[{name[0]}]" if sock.family == socket.AF_INET6 else name[0]
    return f"{scheme}://{host}:{name[1]}"


def where(config: Config) -> str:
    """What ``config`` asks to listen on, for an error line: ``127.0.0.1:8000``, ``unix socket
    /run/app.sock`` or ``descriptor 3``."""
    if config.fd is not None:
        return f"descriptor {config.fd}"
    if config.uds is not None:
        return f"unix socket {config.uds}"
    return f"{config.host}:{config.port}"


def address(info: Any) -> tuple[str, int] | None:
    """``(host, port)`` from a socket address (a peer's or our own); None for a UNIX socket
    or an unknown one."""
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None


def peer(info: Any) -> tuple[str, int]:
    """A peer's ``(host, port)`` where one is always needed (WSGI's ``REMOTE_ADDR`` and
    ``REMOTE_PORT``): ``("", 0)`` for a UNIX socket's peer, which has no address."""
    return address(info) or ("", 0)


def bound_address(sock: socket.socket) -> tuple[str, int]:
    """``(host, port)`` of a TCP socket; ``(path, 0)`` of a UNIX one (what ``ready`` gets)."""
    name = sock.getsockname()
    return (name, 0) if sock.family == socket.AF_UNIX else (name[0], name[1])


def release(path: str | None) -> None:
    """Remove the UNIX socket file at ``path`` if this process made it and it is still that
    file (:data:`MADE`); else do nothing (None: nothing to do)."""
    if path is None or path not in MADE:
        return
    try:
        now = os.stat(path)
        if (now.st_dev, now.st_ino) == MADE.pop(path):
            os.unlink(path)
    except OSError:
        pass
