"""How one ``bench h2`` row talks to its server: the check request and the load generator.

The check is one real request over the row's protocol before it is measured: HTTP/1.1
through :func:`bench.harness.fetch`, HTTP/2 through :func:`h2_fetch` (clear text with prior
knowledge, RFC 9113 §3.3, or TLS with ALPN's ``h2``, §3.2). The load generator is wrk for
HTTP/1.1 rows and h2load for HTTP/2 ones, aimed at the row's scheme and path (:class:`Routed`).
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, replace
from urllib.parse import urlsplit, urlunsplit

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from bench.h2_plan import CHECK_TIMEOUT, GET_SCRIPT, WORKLOADS, RowPlan
from bench.h2load import H2Load
from bench.harness import fetch
from bench.loadgen import Load, LoadGenerator, RunSummary
from bench.wrk import POST_JSON, Wrk


def h2_fetch(host: str, port: int, *, method: str = "GET", path: str = "/", body: bytes = b"",
             context: ssl.SSLContext | None = None, timeout: float = CHECK_TIMEOUT
             ) -> tuple[int, bytes]:
    """One HTTP/2 request on a fresh connection: ``(status, response body)``.

    Clear text with prior knowledge when ``context`` is None (RFC 9113 §3.3), else TLS with
    ALPN offering only ``h2`` (§3.2). Request bodies of this size fit the initial window.

    Raises:
        OSError: the connection failed or timed out (``timeout`` seconds per operation).
        ValueError: TLS chose no ``h2``, or the server ended the connection or reset the
            stream first.
    """
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    raw = socket.create_connection((host, port), timeout=timeout)
    sock: socket.socket = raw
    try:
        if context is not None:
            sock = context.wrap_socket(raw, server_hostname=host)
            if sock.selected_alpn_protocol() != "h2":
                raise ValueError(f"ALPN chose {sock.selected_alpn_protocol()!r}, not 'h2'")
        conn.initiate_connection()
        headers = [(":method", method), (":path", path),
                   (":scheme", "https" if context else "http"), (":authority", f"{host}:{port}")]
        if body:
            headers += [("content-type", "application/json"),
                        ("content-length", str(len(body)))]
        conn.send_headers(1, headers, end_stream=not body)
        if body:
            conn.send_data(1, body, end_stream=True)
        sock.sendall(conn.data_to_send())
        status, data = 0, bytearray()
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise ValueError("the server closed the connection before the response ended")
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers or []).get(b":status", b"0"))
                elif isinstance(event, h2.events.DataReceived):
                    data += event.data or b""
                    conn.acknowledge_received_data(event.flow_controlled_length or 0, 1)
                elif isinstance(event, h2.events.StreamEnded):
                    return status, bytes(data)
                elif isinstance(event, h2.events.StreamReset | h2.events.ConnectionTerminated):
                    raise ValueError(f"the server ended the request: {event}")
            sock.sendall(conn.data_to_send())
    finally:
        sock.close()


def check_row(plan: RowPlan, context: ssl.SSLContext | None) -> Callable[[str, int], str | None]:
    """The harness's check for ``plan``: None when one request over its protocol answers 200
    with the expected body, else the problem in one line."""
    workload = WORKLOADS[plan.workload]

    def check(host: str, port: int) -> str | None:
        try:
            if plan.protocol == "http/1.1":
                status, _, body = fetch(host, port, workload.path, method=workload.method,
                                        body=workload.body)
            else:
                status, body = h2_fetch(host, port, method=workload.method, path=workload.path,
                                        body=workload.body,
                                        context=context if plan.protocol == "h2" else None)
        except (OSError, ValueError, http.client.HTTPException, h2.exceptions.H2Error) as exc:
            return f"check request over {plan.protocol} failed: {exc!r}"
        if status != 200:
            return f"check request over {plan.protocol} got status {status}: {body[:200]!r}"
        if workload.expect is None:
            try:
                same = json.loads(body) == json.loads(workload.body)
            except ValueError:
                same = False
            if not same:
                return f"check request got {body[:200]!r}, not the echoed user"
        elif body != workload.expect:
            return (f"check request got {len(body)} bytes, not the {len(workload.expect)}-byte "
                    f"{workload.path} body")
        return None

    return check


# --- the load generator of a row ---------------------------------------------------------------


@dataclass(frozen=True)
class Routed:
    """A load generator aimed at the row's scheme and path: the harness gives every generator
    ``http://host:port/``, and this rewrites it (``https`` for TLS rows, ``/short``...)."""

    inner: LoadGenerator
    scheme: str
    target: str

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def path(self) -> str:
        return self.inner.path

    def version(self) -> str:
        return self.inner.version()

    def url(self, url: str) -> str:
        """``url`` with this scheme and path."""
        parts = urlsplit(url)
        return urlunsplit((self.scheme, parts.netloc, self.target, "", ""))

    def command(self, url: str, load: Load, *, cpu: int | None = None) -> list[str]:
        return self.inner.command(self.url(url), load, cpu=cpu)

    def run(self, url: str, load: Load, *, cpu: int | None = None) -> RunSummary:
        return self.inner.run(self.url(url), load, cpu=cpu)


def row_generator(plan: RowPlan, wrk: Wrk | None, h2load: H2Load) -> LoadGenerator:
    """wrk for HTTP/1.1 rows (the POST or the GET script), h2load with ``-m streams`` else."""
    workload = WORKLOADS[plan.workload]
    scheme = "https" if plan.protocol == "h2" else "http"
    if plan.protocol == "http/1.1":
        assert wrk is not None
        script = POST_JSON if workload.method == "POST" else GET_SCRIPT
        return Routed(replace(wrk, script=script), scheme, workload.path)
    return Routed(replace(h2load, streams=plan.streams, method=workload.method), scheme,
                  workload.path)
