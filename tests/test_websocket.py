"""toyservers/websocket.py, websocket_handshake.py and websocket_deflate.py: RFC 6455 and RFC
7692, without sockets.

The handshake's checks (RFC 6455 §4.2.1, §4.4), the frame parser's events and its close codes
for bad input (§5, §7.4.1: 1002 protocol error, 1007 invalid data, 1009 too big), what we
send (§5.2, §5.5.1), and permessage-deflate's negotiation and its bounded inflating (RFC 7692
§7). The parser is also fuzzed against wsproto: test_websocket_differential.py.
"""

from __future__ import annotations

import os
import zlib

import pytest

from toyservers import websocket
from toyservers.websocket import (
    BINARY,
    CLOSE,
    CONTINUATION,
    PING,
    PONG,
    TEXT,
    Close,
    Connection,
    Message,
    Ping,
    Pong,
    ProtocolError,
)
from toyservers.websocket_deflate import PerMessageDeflate, negotiate
from toyservers.websocket_handshake import Handshake, HandshakeError, accept_key, check_handshake

KEY = b"dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 §1.3's example
HANDSHAKE = [(b"host", b"x"), (b"upgrade", b"websocket"), (b"connection", b"Upgrade"),
             (b"sec-websocket-key", KEY), (b"sec-websocket-version", b"13")]


def client_frame(opcode: int, payload: bytes = b"", *, fin: bool = True, rsv: int = 0,
                 masked: bool = True, length_bytes: int | None = None,
                 key: bytes = b"\x37\xfa\x21\x3d") -> bytes:
    """A frame as a client sends it (masked), its length in ``length_bytes`` extra bytes (0, 2
    or 8; by default the fewest)."""
    size = len(payload)
    if length_bytes is None:
        length_bytes = 0 if size < 126 else 2 if size < 65536 else 8
    marker = {0: size, 2: 126, 8: 127}[length_bytes]
    head = bytes([(0x80 if fin else 0) | rsv | opcode, (0x80 if masked else 0) | marker])
    head += size.to_bytes(length_bytes, "big") if length_bytes else b""
    if not masked:
        return head + payload
    return head + key + websocket.unmask(bytearray(payload), key)  # XOR both ways


def events(data: bytes, max_size: int = websocket.MAX_SIZE, deflate: PerMessageDeflate | None
           = None, step: int | None = None) -> list[object]:
    """Every event of ``data`` (fed ``step`` bytes at a time), then the ProtocolError's code
    if one ended it, as ``("error", code)``."""
    conn = Connection(Handshake(KEY, [], []), max_size)
    conn.deflate = deflate
    out: list[object] = []
    pieces = [data] if step is None else [data[i:i + step] for i in range(0, len(data), step)]
    try:
        for piece in pieces or [b""]:
            conn.receive_data(piece)
            while (event := conn.next_event()) is not None:
                out.append(event)
    except ProtocolError as exc:
        out.append(("error", exc.code))
    return out


# --- the opening handshake (§4.2) ----------------------------------------------------------------


def test_accept_key_is_the_rfc_example() -> None:
    assert accept_key(KEY) == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_a_valid_handshake_gives_its_key_subprotocols_and_offers_in_order() -> None:
    headers = [*HANDSHAKE, (b"sec-websocket-protocol", b"Chat, v2.json"),
               (b"sec-websocket-protocol", b"x"),
               (b"sec-websocket-extensions", b"permessage-deflate; client_max_window_bits, foo")]
    handshake = check_handshake("GET", headers)
    assert handshake == Handshake(KEY, ["Chat", "v2.json", "x"],
                                  [b"permessage-deflate; client_max_window_bits", b"foo"])


def test_a_request_without_upgrade_websocket_is_no_handshake() -> None:
    assert check_handshake("GET", HANDSHAKE[:1] + HANDSHAKE[2:]) is None
    assert check_handshake("GET", [(b"upgrade", b"h2c"), *HANDSHAKE[2:]]) is None
    assert check_handshake("GET", [(b"upgrade", b"foo, WebSocket"), *HANDSHAKE[2:]]) is not None


def without(name: bytes) -> list[tuple[bytes, bytes]]:
    return [field for field in HANDSHAKE if field[0] != name]


@pytest.mark.parametrize(("method", "headers", "status"), [
    ("POST", HANDSHAKE, 400),
    ("HEAD", HANDSHAKE, 400),
    ("GET", [*HANDSHAKE, (b"content-length", b"5")], 400),
    ("GET", [*HANDSHAKE, (b"transfer-encoding", b"chunked")], 400),
    ("GET", without(b"connection"), 400),
    ("GET", [*without(b"connection"), (b"connection", b"keep-alive")], 400),
    ("GET", without(b"sec-websocket-key"), 400),
    ("GET", [*without(b"sec-websocket-key"), (b"sec-websocket-key", b"short")], 400),
    ("GET", [*without(b"sec-websocket-key"), (b"sec-websocket-key", b"!" * 24)], 400),
    ("GET", [*HANDSHAKE, (b"sec-websocket-key", KEY)], 400),
    ("GET", without(b"sec-websocket-version"), 400),
    ("GET", [*without(b"sec-websocket-version"), (b"sec-websocket-version", b"8")], 426),
    ("GET", [*HANDSHAKE, (b"sec-websocket-version", b"13")], 400),
])
def test_a_bad_handshake_is_refused_with_its_status(method: str, headers: list[tuple[bytes, bytes]],
                                                   status: int) -> None:
    with pytest.raises(HandshakeError) as info:
        check_handshake(method, headers)
    assert info.value.status == status
    if status == 426:  # §4.4: say the version we speak
        assert info.value.fields == b"sec-websocket-version: 13\r\n"


def test_the_101_carries_the_accept_subprotocol_extension_and_headers() -> None:
    conn = Connection(Handshake(KEY, ["chat"], [b"permessage-deflate"]))
    response = conn.accept("chat", [(b"x-one", b"1")])
    assert response == (b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n"
                        b"connection: Upgrade\r\nsec-websocket-accept: "
                        b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nsec-websocket-protocol: chat\r\n"
                        b"sec-websocket-extensions: permessage-deflate; "
                        b"server_max_window_bits=12\r\nx-one: 1\r\n\r\n")
    assert Connection(Handshake(KEY, [], [b"permessage-deflate"]), deflate=False).accept(
        None, []).count(b"sec-websocket") == 1  # the accept only


# --- frames in (§5) ------------------------------------------------------------------------------


def test_unmask_is_its_own_inverse_at_any_offset_and_works_in_place() -> None:
    data, key = os.urandom(1001), b"\x01\x02\x03\x04"
    whole = websocket.unmask(bytearray(data), key)
    assert websocket.unmask(bytearray(whole), key) == data
    pieces = bytearray(data[:3]), bytearray(data[3:])
    assert websocket.unmask(pieces[0], key) + websocket.unmask(pieces[1], key, 3) == whole
    assert pieces[0] + pieces[1] == whole  # the bytearrays given were XORed in place


def test_unmask_is_the_rfc_xor_byte_by_byte() -> None:
    """§5.3's definition, byte ``i`` XOR key byte ``i % 4``, for every size up to 9 bytes and
    every offset into the payload, a bytearray as the parser hands it, and §5.7's example."""
    key = b"\x37\xfa\x21\x3d"
    data = os.urandom(9)
    for size in range(10):
        for offset in range(8):
            expected = bytes(b ^ key[(offset + i) % 4] for i, b in enumerate(data[:size]))
            assert websocket.unmask(bytearray(data[:size]), key, offset) == expected
    assert websocket.unmask(bytearray.fromhex("7f9f4d5158"), key) == b"Hello"


@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536, 70000])
def test_every_length_form_gives_the_message(size: int) -> None:
    payload = os.urandom(size)
    assert events(client_frame(BINARY, payload)) == [Message(payload)]


def test_whole_frames_read_in_one_step_give_what_byte_by_byte_gives() -> None:
    """A message in one frame, all of it read (``_whole_message``, the common case), gives what
    the general path gives the same bytes one at a time, and leaves it the rest: fragments,
    control frames, and the frames it must fail (RFC 6455 §5.2, §8.1, §10.4)."""
    data = (client_frame(TEXT, "é".encode() * 100) + client_frame(BINARY, bytes(300))
            + client_frame(TEXT, b"a", fin=False) + client_frame(PING, b"p")
            + client_frame(CONTINUATION, b"b") + client_frame(TEXT))
    expected = [Message("é" * 100), Message(bytes(300)), Ping(b"p"), Message("ab"), Message("")]
    assert events(data) == expected
    assert events(data, step=1) == expected
    assert events(client_frame(TEXT, b"x" * 200), max_size=199) == [("error", 1009)]
    assert events(client_frame(TEXT, b"ok") + client_frame(TEXT, b"\xff")
                  + client_frame(TEXT, b"never read")) == [Message("ok"), ("error", 1007)]


def test_fragments_with_control_frames_between_them_give_one_message() -> None:
    data = (client_frame(TEXT, "καλη".encode()[:3], fin=False) + client_frame(PING, b"p")
            + client_frame(CONTINUATION, "καλη".encode()[3:7], fin=False)
            + client_frame(PONG, b"q") + client_frame(CONTINUATION, "καλη".encode()[7:]))
    expected = [Ping(b"p"), Pong(b"q"), Message("καλη")]
    assert events(data) == expected
    assert events(data, step=1) == expected  # one byte at a time: the same


def test_a_close_frame_ends_reading() -> None:
    data = client_frame(CLOSE, b"\x03\xe8bye") + client_frame(TEXT, b"after")
    assert events(data) == [Close(1000, "bye")]
    assert events(client_frame(CLOSE)) == [Close(websocket.NO_STATUS, "")]


BAD_INPUT = [
    (client_frame(TEXT, b"x", masked=False), 1002),  # §5.1: client frames are masked
    (client_frame(TEXT, b"x", rsv=0x40), 1002),  # RSV1 with no extension agreed
    (client_frame(TEXT, b"x", rsv=0x20), 1002),
    (client_frame(TEXT, b"x", rsv=0x10), 1002),
    (client_frame(0x3, b"x"), 1002),  # reserved opcodes
    (client_frame(0xB, b"x"), 1002),
    (client_frame(PING, b"x", fin=False), 1002),  # §5.5: control frames are whole
    (client_frame(PING, b"x" * 126), 1002),  # and at most 125 bytes
    (client_frame(CONTINUATION, b"x"), 1002),  # a continuation with no message
    (client_frame(TEXT, b"a", fin=False) + client_frame(BINARY, b"b"), 1002),
    (client_frame(BINARY, b"x" * 10, length_bytes=2), 1002),  # §5.2: the fewest bytes
    (client_frame(BINARY, b"x" * 200, length_bytes=8), 1002),
    (bytes([0x82, 0xFF]) + b"\x80" + bytes(7) + b"mask", 1002),  # 64-bit length, MSB set
    (client_frame(TEXT, b"\xff"), 1007),  # §8.1: invalid UTF-8
    (client_frame(TEXT, b"\xed\xa0\x80"), 1007),  # a surrogate
    (client_frame(TEXT, b"\xce"), 1007),  # a character cut at the message's end
    (client_frame(CLOSE, b"\x03"), 1002),  # a close payload of one byte
    (client_frame(CLOSE, (1005).to_bytes(2, "big")), 1002),  # codes never sent
    (client_frame(CLOSE, (999).to_bytes(2, "big")), 1002),
    (client_frame(CLOSE, (2000).to_bytes(2, "big")), 1002),
    (client_frame(CLOSE, (5000).to_bytes(2, "big")), 1002),
    (client_frame(CLOSE, b"\x03\xe8\xff"), 1007),  # a reason that is not UTF-8
]


@pytest.mark.parametrize(("data", "code"), BAD_INPUT)
def test_bad_input_fails_with_its_close_code(data: bytes, code: int) -> None:
    assert events(data)[-1] == ("error", code)


def test_invalid_utf8_fails_before_the_message_ends() -> None:
    """Autobahn's "fail fast" (cases 6.4.x): the frame that makes the text invalid fails the
    connection, though the message's last frame has not come."""
    data = client_frame(TEXT, "κ".encode(), fin=False) + client_frame(
        CONTINUATION, b"\xf4\x90\x80\x80", fin=False)
    assert events(data) == [("error", 1007)]
    partial = client_frame(TEXT, b"ok \xed\xa0\x80 more", fin=False)[:-6]  # the frame half here
    assert events(partial) == [("error", 1007)]


def test_a_64_bit_length_over_max_size_fails_from_the_header_alone() -> None:
    header = bytes([0x82, 0xFF]) + (2**62).to_bytes(8, "big") + b"mask"
    assert events(header, max_size=1 << 20) == [("error", 1009)]
    fragments = client_frame(BINARY, b"x" * 600, fin=False) + client_frame(
        CONTINUATION, b"x" * 600)[:14]
    assert events(fragments, max_size=1000) == [("error", 1009)]  # the message's total counts


EMPTY_START = client_frame(TEXT, b"", fin=False)
EMPTY = client_frame(CONTINUATION, b"", fin=False)
EMPTY_FLOOD = EMPTY_START + EMPTY * websocket.MAX_EMPTY_FRAGMENTS


def test_a_flood_of_empty_fragments_is_1008() -> None:
    """Each costs a parse and carries nothing: past MAX_EMPTY_FRAGMENTS in one message, 1008."""
    fine = EMPTY_FLOOD[:-len(EMPTY)] + client_frame(CONTINUATION, b"end")
    assert events(fine) == [Message("end")]
    assert events(EMPTY_FLOOD) == [("error", 1008)]


@pytest.mark.parametrize("code", [1000, 1001, 1002, 1003, 1007, 1011, 1012, 1013, 1014, 3000,
                                  4999])
def test_valid_close_codes_are_accepted(code: int) -> None:
    assert events(client_frame(CLOSE, code.to_bytes(2, "big"))) == [Close(code, "")]


# --- frames out ----------------------------------------------------------------------------------


def test_what_the_server_sends_is_unmasked_whole_frames() -> None:
    conn = Connection(Handshake(KEY, [], []))
    assert conn.send_message("hi") == b"\x81\x02hi"
    assert conn.send_message(b"\x00" * 200)[:4] == b"\x82\x7e\x00\xc8"
    assert conn.send_message(b"\x00" * 70000)[:10] == b"\x82\x7f" + (70000).to_bytes(8, "big")
    assert conn.send_ping(b"p") == b"\x89\x01p" and conn.send_pong(b"q") == b"\x8a\x01q"
    assert conn.send_close(None) == b"\x88\x00" and conn.close_sent


def test_a_close_reason_is_cut_to_125_bytes_at_a_character() -> None:
    frame = Connection(Handshake(KEY, [], [])).send_close(1000, "é" * 100)
    assert frame[1] == 2 + 122 and frame[4:].decode() == "é" * 61


@pytest.mark.parametrize("code", [999, 1004, 1005, 1006, 1015, 2000, 5000])
def test_a_close_code_no_frame_may_carry_is_refused(code: int) -> None:
    with pytest.raises(ValueError):
        Connection(Handshake(KEY, [], [])).send_close(code)


# --- permessage-deflate (RFC 7692) ---------------------------------------------------------------


@pytest.mark.parametrize(("offers", "response"), [
    ([b"permessage-deflate"], b"permessage-deflate; server_max_window_bits=12"),
    ([b"permessage-deflate; client_max_window_bits"],
     b"permessage-deflate; server_max_window_bits=12; client_max_window_bits=12"),
    ([b"permessage-deflate; client_max_window_bits=9; server_max_window_bits=10"],
     b"permessage-deflate; server_max_window_bits=10; client_max_window_bits=9"),
    ([b"permessage-deflate; server_no_context_takeover; client_no_context_takeover"],
     b"permessage-deflate; server_no_context_takeover; client_no_context_takeover; "
     b"server_max_window_bits=12"),
    ([b"permessage-deflate; server_max_window_bits=8; client_max_window_bits=8"],
     b"permessage-deflate; server_max_window_bits=8; client_max_window_bits=8"),
    ([b"permessage-deflate; unknown=1", b"permessage-deflate"],
     b"permessage-deflate; server_max_window_bits=12"),  # the first declined: the next one
    ([b"x-webkit-deflate-frame", b"permessage-deflate; unknown=1"], None),
    ([b"permessage-deflate; server_max_window_bits=16"], None),
    ([b"permessage-deflate; server_max_window_bits=09"], None),
    ([b"permessage-deflate; server_max_window_bits"], None),
    ([b"permessage-deflate; client_no_context_takeover=1"], None),
    ([b"permessage-deflate; server_no_context_takeover; server_no_context_takeover"], None),
])
def test_negotiation_answers_as_uvicorn_does(offers: list[bytes], response: bytes | None
                                             ) -> None:
    agreed = negotiate(offers)
    assert (agreed and agreed.response()) == response


def deflated(data: bytes, compressor: zlib._Compress) -> bytes:
    return (compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH))[:-4]


@pytest.mark.parametrize("no_context_takeover", [False, True])
def test_compressed_messages_inflate_across_fragments(no_context_takeover: bool) -> None:
    offer = b"permessage-deflate" + b"; client_no_context_takeover" * no_context_takeover
    deflate = negotiate([offer])
    compressor = zlib.compressobj(wbits=-15)
    first = deflated(b"hello hello hello", compressor)
    if no_context_takeover:
        compressor = zlib.compressobj(wbits=-15)
    second = deflated(b"hello hello hello", compressor)
    data = (client_frame(TEXT, first[:4], fin=False, rsv=0x40)
            + client_frame(CONTINUATION, first[4:]) + client_frame(BINARY, second, rsv=0x40))
    assert events(data, deflate=deflate) == [Message("hello hello hello"),
                                             Message(b"hello hello hello")]
    assert events(client_frame(CONTINUATION, b"x", rsv=0x40), deflate=deflate) == [
        ("error", 1002)]  # RSV1 on the first frame only


def test_a_deflate_bomb_stops_at_max_size() -> None:
    """10 MB of zeros deflate to 10 KB; with a 1 MB limit inflating stops past 1 MB: 1009."""
    bomb = deflated(bytes(10_000_000), zlib.compressobj(wbits=-15))
    assert len(bomb) < 20_000
    assert events(client_frame(BINARY, bomb, rsv=0x40), max_size=1_000_000,
                  deflate=negotiate([b"permessage-deflate"])) == [("error", 1009)]


def test_invalid_deflate_data_is_1007() -> None:
    assert events(client_frame(BINARY, b"\xff\xff\xff", rsv=0x40),
                  deflate=negotiate([b"permessage-deflate"])) == [("error", 1007)]


@pytest.mark.parametrize("bits", [8, 10])
def test_what_we_compress_inflates_with_the_agreed_window(bits: int) -> None:
    """Even a 256-byte window (8 bits, which zlib cannot deflate with: Huffman coding only)."""
    deflate = negotiate([b"permessage-deflate; server_max_window_bits=%d" % bits])
    assert deflate is not None
    conn = Connection(Handshake(KEY, [], []))
    conn.deflate = deflate
    inflater = zlib.decompressobj(wbits=-bits)
    for text in ["a" * 5000, "b" * 3000, "", "the window is small " * 50]:
        frame = conn.send_message(text)
        assert frame[0] == 0x80 | 0x40 | TEXT
        payload = frame[4:] if frame[1] == 126 else frame[2:]
        assert inflater.decompress(payload + b"\x00\x00\xff\xff") == text.encode()
