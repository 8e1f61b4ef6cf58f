"""WSGI's header map: ``X_User`` and ``X-User`` are one ``environ`` key: one poses as the other.

Run: ``.venv/bin/python lessons/code/hardening/header_map.py``: it serves one app on wsgiref
(the standard library's server) and on toy-wsgi, each in a thread on a free port, sends each
the same request, and prints what the app read.

PEP 3333 hands request headers to the app as CGI variables: ``X-User: alice`` becomes
``environ["HTTP_X_USER"]``, the dashes turned into underscores. A header named ``X_User``
maps to the same key. A proxy that authenticates its clients and passes the user on in
``X-User`` removes any ``X-User`` a client sends; ``X_User`` is another name, and it goes
through. An app behind a server that maps both names alike cannot tell the client's header
from the proxy's. gunicorn has dropped names with an underscore since 22.0 (its
``--header-map`` setting, ``drop`` by default); toy-wsgi does the same
(``toyservers/wsgi.py``, ``build_environ``); wsgiref maps them.

Deliberately left out: a proxy (the request here is what it would pass on: no ``X-User`` of
the client's, the ``X_User`` it does not know).
Spec: PEP 3333 ("environ Variables": ``HTTP_`` variables); RFC 9110 §5.1 (field names are
tokens: ``_`` is allowed); gunicorn's ``header_map`` setting.
"""

from __future__ import annotations

import socket
import threading
import wsgiref.simple_server
from collections.abc import Iterable
from wsgiref.types import StartResponse, WSGIEnvironment

from toyservers import wsgi_server
from toyservers.config import Config

# --8<-- [start:request]
REQUEST = b"GET / HTTP/1.1\r\nHost: example.com\r\nX_User: admin\r\nConnection: close\r\n\r\n"


def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """Says which user the proxy vouched for: the app trusts ``HTTP_X_USER``."""
    user = environ.get("HTTP_X_USER", "(none: an anonymous client)")
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [f"HTTP_X_USER = {user}\n".encode()]
# --8<-- [end:request]


class QuietHandler(wsgiref.simple_server.WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # no access log on stderr
        pass


def ask(port: int) -> str:
    """Send REQUEST to 127.0.0.1:``port``; the body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(REQUEST)
        answer = b""
        while data := sock.recv(65536):
            answer += data
    return answer.partition(b"\r\n\r\n")[2].decode().strip()


def main() -> None:
    reference = wsgiref.simple_server.make_server("127.0.0.1", 0, app,
                                                  handler_class=QuietHandler)
    threading.Thread(target=reference.serve_forever, daemon=True).start()
    print(f"wsgiref:  {ask(reference.server_port)}")
    reference.shutdown()

    sock = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    config = Config(access_log=False, log_level="warning", worker_class="gthread", threads=1)
    toy = threading.Thread(target=wsgi_server.serve, args=(app, config),
                           kwargs={"sock": sock, "shutdown": stop})
    toy.start()
    print(f"toy-wsgi: {ask(sock.getsockname()[1])}")
    stop.set()
    toy.join()


if __name__ == "__main__":
    main()
