"""toyservers/websocket_wsproto.py: wsproto behind the engine methods, on its own.

The same inputs as our module's tests (test_websocket.py) give the same events and close
codes through the adapter; and what the adapter adds to wsproto: messages joined from their
frames, 1009 from a frame header announcing too much, a bounded deflate bomb, the empty
fragment flood refused, bytes kept from before the 101, a close frame told apart from a parse
failure.
"""

from __future__ import annotations

import zlib

import pytest

from tests.test_websocket import (
    BAD_INPUT,
    EMPTY,
    EMPTY_FLOOD,
    HANDSHAKE,
    client_frame,
    deflated,
)
from toyservers import websocket
from toyservers.websocket import (
    BINARY,
    CLOSE,
    CONTINUATION,
    PING,
    PONG,
    TEXT,
    Close,
    Message,
    Ping,
    Pong,
    ProtocolError,
)
from toyservers.websocket_wsproto import WsprotoConnection


def accepted(max_size: int = websocket.MAX_SIZE, deflate: bool = False,
             offer: bytes | None = None, early: bytes = b"") -> tuple[WsprotoConnection, bytes]:
    """An adapter past its 101 (``early``: bytes received before it); the 101's bytes."""
    headers = HANDSHAKE + ([(b"sec-websocket-extensions", offer)] if offer else [])
    conn = WsprotoConnection(headers, b"/", max_size, deflate)
    conn.receive_data(early)
    return conn, conn.accept(None, [(b"server", b"toyservers")])


def events(conn: WsprotoConnection, data: bytes) -> list[object]:
    out: list[object] = []
    conn.receive_data(data)
    try:
        while (event := conn.next_event()) is not None:
            out.append(event)
    except ProtocolError as exc:
        out.append(("error", exc.code))
    return out


def test_the_101_is_wsprotos_with_our_headers() -> None:
    _, response = accepted(deflate=True, offer=b"permessage-deflate")
    head = response.lower()
    assert head.startswith(b"http/1.1 101 ")
    assert b"sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo=" in head
    assert b"permessage-deflate" in head and b"server: toyservers" in head


@pytest.mark.parametrize(("data", "code"), BAD_INPUT)
def test_bad_input_fails_with_the_same_code_as_ours(data: bytes, code: int) -> None:
    assert events(accepted()[0], data)[-1] == ("error", code)


def test_fragments_and_control_frames_come_out_as_ours_do() -> None:
    data = (client_frame(TEXT, b"he", fin=False) + client_frame(PING, b"p")
            + client_frame(CONTINUATION, b"llo") + client_frame(BINARY, b"\x00")
            + client_frame(PONG, b"q") + client_frame(CLOSE, b"\x03\xe8bye"))
    assert events(accepted()[0], data) == [Ping(b"p"), Message("hello"), Message(b"\x00"),
                                           Pong(b"q"), Close(1000, "bye")]


def test_a_flood_of_empty_fragments_is_1008_as_in_ours() -> None:
    fine = EMPTY_FLOOD[:-len(EMPTY)] + client_frame(CONTINUATION, b"end")
    assert events(accepted()[0], fine) == [Message("end")]
    assert events(accepted()[0], EMPTY_FLOOD) == [("error", 1008)]


def test_bytes_from_before_the_101_are_kept() -> None:
    conn, _ = accepted(early=client_frame(TEXT, b"early"))
    assert conn.next_event() == Message("early")


def test_a_frame_header_announcing_too_much_is_1009_before_its_payload() -> None:
    header = bytes([0x82, 0xFF]) + (2**40).to_bytes(8, "big") + b"mask"
    assert events(accepted(max_size=1 << 20)[0], header) == [("error", 1009)]
    conn, _ = accepted(max_size=1000)
    assert events(conn, client_frame(TEXT, b"a" * 600, fin=False)
                  + client_frame(CONTINUATION, b"a" * 600)[:14]) == [("error", 1009)]


def test_a_deflate_bomb_stops_at_max_size() -> None:
    conn, _ = accepted(max_size=1_000_000, deflate=True, offer=b"permessage-deflate")
    bomb = deflated(bytes(10_000_000), zlib.compressobj(wbits=-15))
    assert events(conn, client_frame(BINARY, bomb, rsv=0x40)) == [("error", 1009)]
    conn, _ = accepted(max_size=1_000_000, deflate=True, offer=b"permessage-deflate")
    small = deflated(b"x" * 500_000, zlib.compressobj(wbits=-15))
    assert events(conn, client_frame(BINARY, small, rsv=0x40) * 3) == [
        Message(b"x" * 500_000)] * 3


def test_sending_and_closing() -> None:
    conn, _ = accepted()
    assert conn.send_message("hi") == b"\x81\x02hi" and conn.send_ping(b"p") == b"\x89\x01p"
    with pytest.raises(ValueError):
        conn.send_close(1005)
    assert conn.send_close(None) == b"\x88\x00" and conn.close_sent
