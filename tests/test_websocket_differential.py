"""Differential fuzzing: our RFC 6455 frame parser and wsproto's read the same bytes alike.

Streams of client frames come from hypothesis: messages in fragments (text cut anywhere, even
inside a character, sometimes corrupted), control frames between them, close frames with
valid and invalid codes and reasons, and frames with random header bits (FIN, RSV, reserved
opcodes, no mask, lengths in more bytes than needed). Both parsers get the same bytes in the
same pieces; what each read (whole messages, pings, pongs, the close, the close code it failed
with) must be the same, unless a declared difference (``DIFFERENCES``) explains it.

The run is short and fixed (a seed: the same cases on every machine, in a few seconds).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from wsproto import events as wsevents
from wsproto.connection import Connection as WsprotoConnection
from wsproto.connection import ConnectionState, ConnectionType

from tests.test_websocket import KEY, client_frame
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
from toyservers.websocket_handshake import Handshake

SHORT_RUN = settings(max_examples=300, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.too_slow])
Reading = list[object]  # events, then ("error", code) or ("incomplete",) or nothing

# The differences we keep on purpose, each with an input showing it (tested below).
DIFFERENCES = {
    # IANA's registry has 1014 (Bad Gateway); wsproto knows codes up to 1013 (and 1015).
    "close code 1014": client_frame(CLOSE, (1014).to_bytes(2, "big")),
    # RFC 6455 §8.1 fails a connection once its text cannot be UTF-8: ED A0-BF starts a
    # surrogate, which no continuation makes valid; CPython's decoder (wsproto's) waits for
    # the third byte, so wsproto fails it only when more of the message comes.
    "a surrogate's first two bytes": client_frame(TEXT, b"\xed\xa0", fin=False),
}


def read_ours(chunks: list[bytes]) -> Reading:
    conn = Connection(Handshake(KEY, [], []), max_size=2**63)
    out: Reading = []
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            while (event := conn.next_event()) is not None:
                out.append(event)
    except ProtocolError as exc:
        out.append(("error", exc.code))
    return out


def read_wsproto(chunks: list[bytes]) -> Reading:
    conn = WsprotoConnection(ConnectionType.SERVER)
    out: Reading = []
    parts: list[str | bytes] = []
    for chunk in chunks:
        if conn.state is not ConnectionState.OPEN:
            break
        conn.receive_data(chunk)
        for event in conn.events():
            if isinstance(event, wsevents.CloseConnection):
                if conn.state is ConnectionState.OPEN:  # a parse failure, not a close frame
                    return [*out, ("error", event.code)]
                out.append(Close(event.code, event.reason or ""))
            elif isinstance(event, wsevents.Ping):
                out.append(Ping(bytes(event.payload)))
            elif isinstance(event, wsevents.Pong):
                out.append(Pong(bytes(event.payload)))
            elif isinstance(event, wsevents.Message):
                parts.append(event.data if isinstance(event.data, str) else bytes(event.data))
                if event.message_finished:
                    joined = "".join(parts) if isinstance(event.data, str) else \
                        b"".join(parts)  # type: ignore[arg-type]
                    out.append(Message(joined))
                    parts = []
    return out


# --- the streams ---------------------------------------------------------------------------------

KEYS = st.binary(min_size=4, max_size=4)
CODES = st.sampled_from([1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013,
                         3000, 3999, 4000, 4999, 0, 999, 1004, 1005, 1006, 1015, 1016, 2000,
                         2999, 5000, 65535])


@st.composite
def close_payload(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["empty", "one", "code", "code", "reason", "bad reason"]))
    if kind == "empty":
        return b""
    if kind == "one":
        return draw(st.binary(min_size=1, max_size=1))
    code = draw(CODES).to_bytes(2, "big")
    if kind == "code":
        return code
    if kind == "reason":
        return code + draw(st.text(max_size=30)).encode()[:123]
    return code + draw(st.binary(max_size=20))


@st.composite
def control_frame(draw: st.DrawFn) -> bytes:
    opcode = draw(st.sampled_from([PING, PONG, PING, PONG, CLOSE]))
    payload = draw(close_payload()) if opcode == CLOSE else draw(st.binary(max_size=125))
    return client_frame(opcode, payload, key=draw(KEYS))


@st.composite
def message(draw: st.DrawFn) -> bytes:
    """One message in fragments, control frames maybe between them; text sometimes bad."""
    text = draw(st.booleans())
    data = draw(st.text(max_size=60)).encode() if text else draw(st.binary(max_size=300))
    if text and data and draw(st.integers(0, 4)) == 0:  # corrupt one byte
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([draw(st.integers(0x80, 0xFF))]) + data[at + 1:]
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=4)))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    out = b""
    for i, piece in enumerate(pieces):
        opcode = (TEXT if text else BINARY) if i == 0 else CONTINUATION
        out += client_frame(opcode, piece, fin=i == len(pieces) - 1, key=draw(KEYS))
        if draw(st.integers(0, 3)) == 0:
            out += draw(control_frame())
    return out


@st.composite
def odd_frame(draw: st.DrawFn) -> bytes:
    """A frame with header bits drawn at random: most are wrong somewhere."""
    opcode = draw(st.sampled_from([CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG, 0x3, 0x7,
                                   0xB, 0xF]))
    payload = draw(st.binary(max_size=300))
    if opcode >= CLOSE:
        payload = payload[:draw(st.sampled_from([125, 125, 125, 300]))]
    size = len(payload)
    forms = [None, 2, 8] if size < 126 else [None, 8] if size < 65536 else [None]
    return client_frame(
        opcode, payload, fin=draw(st.booleans()), rsv=draw(st.sampled_from([0, 0, 0, 0x40,
                                                                           0x20, 0x10])),
        masked=draw(st.sampled_from([True, True, True, False])),
        length_bytes=draw(st.sampled_from(forms)), key=draw(KEYS))


@st.composite
def stream(draw: st.DrawFn) -> list[bytes]:
    """Frames, then the bytes cut into pieces (both parsers get the same pieces)."""
    data = b"".join(draw(st.lists(st.one_of(message(), message(), control_frame(),
                                            odd_frame()), min_size=1, max_size=6)))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=5)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def explained(data: bytes, ours: Reading, theirs: Reading) -> bool:
    """Is the disagreement a declared one? ``ours`` failed 1007 on a surrogate's start that
    wsproto has not seen the end of (it does, once the message ends), or 1014 was read."""
    if ours[:-1] == theirs and ours[-1:] == [("error", 1007)]:
        return read_wsproto([data, client_frame(CONTINUATION, b"")])[-1] == ("error", 1007)
    last = ours[-1] if ours else None
    return ours[:-1] == theirs[:-1] and isinstance(last, Close) and last.code == 1014 and \
        theirs[-1] == ("error", 1002)


@seed(20261127)
@SHORT_RUN
@given(stream())
def test_our_parser_reads_as_wsproto_does(chunks: list[bytes]) -> None:
    ours, theirs = read_ours(chunks), read_wsproto(chunks)
    if ours != theirs:
        assert explained(b"".join(chunks), ours, theirs), \
            f"input: {b''.join(chunks)!r}\nours: {ours}\nwsproto: {theirs}"


@pytest.mark.parametrize("name", list(DIFFERENCES))
def test_each_declared_difference_is_real(name: str) -> None:
    data = DIFFERENCES[name]
    ours, theirs = read_ours([data]), read_wsproto([data])
    assert ours != theirs and explained(data, ours, theirs)
