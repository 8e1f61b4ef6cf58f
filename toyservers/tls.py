"""TLS for every toy server: the server's ``SSLContext`` and the ASGI ``tls`` extension.

``ssl_context`` builds the context from ``ssl_certfile``/``ssl_keyfile`` (with ALPN for
toy-h2); ``load_tls`` reads, once per server, what the extension reports of it (the
certificate, the cipher suites' IANA numbers); ``tls_extension`` makes each connection's
``scope["extensions"]["tls"]`` from its ``SSLObject``. asyncio servers pass the context to
``loop.create_server``; toy-anyio wraps its listener with it. Nothing here does I/O but read
the certificate file.

Spec: ASGI TLS extension (https://asgi.readthedocs.io/en/latest/specs/tls.html); RFC 7301
(ALPN); RFC 8446 §B.4 (cipher suite numbers).

Compare with: uvicorn/config.py (``create_ssl_context``).
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from toyservers.config import Config
from toyservers.state import ServerState


def _first_certificate(pem: str) -> str | None:
    """The first ``CERTIFICATE`` block of a PEM file (the server's own, before its chain)."""
    begin, end = pem.find("-----BEGIN CERTIFICATE-----"), pem.find("-----END CERTIFICATE-----")
    if begin < 0 or end < begin:
        return None
    return pem[begin:end + len("-----END CERTIFICATE-----")] + "\n"


TLS_VERSIONS = {"TLSv1": 0x0301, "TLSv1.1": 0x0302, "TLSv1.2": 0x0303, "TLSv1.3": 0x0304}


def tls_extension(ssl_object: ssl.SSLObject | None, state: ServerState
                  ) -> dict[str, Any] | None:
    """The ``tls`` entry of ``scope["extensions"]`` for a connection over TLS (its
    ``ssl_object``, from the transport or the stream), else None.

    Shape: ``server_cert`` (PEM str), ``client_cert_chain`` ([]: no client certificates are
    requested), ``client_cert_name`` and ``client_cert_error`` (None), ``tls_version`` (e.g.
    0x0304 for TLS 1.3) and ``cipher_suite`` (its IANA number). Computed once per connection,
    after the handshake. Spec: ASGI TLS extension
    (https://asgi.readthedocs.io/en/latest/specs/tls.html).
    """
    if ssl_object is None:
        return None
    cipher = ssl_object.cipher()
    return {
        "server_cert": state.server_cert,
        "client_cert_chain": [],
        "client_cert_name": None,
        "client_cert_error": None,
        "tls_version": TLS_VERSIONS.get(ssl_object.version() or ""),
        "cipher_suite": state.cipher_ids.get(cipher[0]) if cipher else None,
    }


def ssl_context(config: Config, alpn_protocols: list[str] | None = None
                ) -> ssl.SSLContext | None:
    """The server's TLS context when ``ssl_certfile`` and ``ssl_keyfile`` are set, else None.
    ``alpn_protocols``: the protocols offered by ALPN, preferred first (RFC 7301).
    Raises ssl.SSLError for files that hold no usable certificate and key (or none at all)."""
    if not (config.ssl_certfile and config.ssl_keyfile):
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    if alpn_protocols:
        context.set_alpn_protocols(alpn_protocols)  # RFC 7301: the client's pick comes first
    try:
        context.load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
    except ssl.SSLError:
        raise
    except OSError as exc:  # unreadable file: not a failure to listen, say so
        raise ssl.SSLError(f"cannot read {exc.filename or 'the files'}: {exc.strerror}") from exc
    return context


def load_tls(state: ServerState, config: Config, context: ssl.SSLContext | None) -> None:
    """Fill ``state.server_cert`` and ``state.cipher_ids`` for the ASGI tls extension."""
    if context is not None and config.ssl_certfile:
        state.server_cert = _first_certificate(Path(config.ssl_certfile).read_text())
        # the low 16 bits of OpenSSL's id are the suite's number in the IANA registry
        state.cipher_ids = {c["name"]: c["id"] & 0xFFFF for c in context.get_ciphers()}
