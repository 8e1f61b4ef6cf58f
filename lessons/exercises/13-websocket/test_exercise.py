"""Checks for exercise 13 (reassembling fragmented messages). Run: ``make exercise N=13``.

Tests ``starter.py`` by default; ``EXERCISE_IMPL=solution`` tests the reference solution.
Every stream of frames is also given to wsproto, masked as a client sends it, and each check
expects what wsproto reads: the messages, pings, pongs and close code, then the close code it
fails the connection with, if any. Streams whose text turns invalid before their last frame
are left out: wsproto checks UTF-8 as each frame comes (RFC 6455 §8.1's "fail fast"), the
exercise once the message is whole, so the two would fail at different frames.
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
from pathlib import Path
from types import ModuleType

from wsproto import events as wsevents
from wsproto.connection import Connection, ConnectionState, ConnectionType

IMPL = os.environ.get("EXERCISE_IMPL", "starter")
PATH = Path(__file__).with_name(f"{IMPL}.py")


def load() -> ModuleType:
    """Import ``starter.py`` (or ``solution.py``, ``wrong.py``) as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"exercise_13_{IMPL}", PATH)
    assert spec is not None and spec.loader is not None, f"cannot import {PATH}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ex = load()
Frame = ex.Frame
CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
Reading = list[tuple[str, object]]


def masked(frame: tuple[bool, int, bytes], key: bytes = b"\x37\xfa\x21\x3d") -> bytes:
    """The frame as a client sends it (RFC 6455 §5.2, §5.3); payloads under 126 bytes."""
    fin, opcode, payload = frame
    body = bytes(byte ^ key[i % 4] for i, byte in enumerate(payload))
    return bytes([(0x80 if fin else 0) | opcode, 0x80 | len(payload)]) + key + body


def read_exercise(frames: list[tuple[bool, int, bytes]]) -> Reading:
    """What the exercise's Reassembler reads of ``frames``, ending at a close or an error."""
    reassembler, out = ex.Reassembler(), []
    for fin, opcode, payload in frames:
        try:
            event = reassembler.feed(Frame(fin, opcode, payload))
        except ex.ProtocolError as exc:
            return [*out, ("error", exc.code)]
        if event is not None:
            out.append(tuple(event))
            if event[0] == "close":
                break
    return out


def read_wsproto(frames: list[tuple[bool, int, bytes]]) -> Reading:
    """What wsproto reads of the same frames, masked, in the same vocabulary."""
    conn, out, parts = Connection(ConnectionType.SERVER), [], []
    for frame in frames:
        conn.receive_data(masked(frame))
        for event in conn.events():
            if isinstance(event, wsevents.CloseConnection):
                failed = conn.state is ConnectionState.OPEN  # a parse failure, not a frame
                return [*out, ("error" if failed else "close", event.code)]
            if isinstance(event, wsevents.Ping):
                out.append(("ping", bytes(event.payload)))
            elif isinstance(event, wsevents.Pong):
                out.append(("pong", bytes(event.payload)))
            elif isinstance(event, wsevents.Message):
                parts.append(event.data)
                if event.message_finished:
                    text = isinstance(event.data, str)
                    out.append(("text", "".join(parts)) if text else
                               ("binary", b"".join(bytes(p) for p in parts)))
                    parts = []
    return out


def check(frames: list[tuple[bool, int, bytes]], expected: Reading, hint: str) -> None:
    assert read_wsproto(frames) == expected, "the check itself is wrong: wsproto disagrees"
    got = read_exercise(frames)
    assert got == expected, f"{hint}: read {got}, expected {expected}"


def test_a_whole_text_message() -> None:
    check([(True, TEXT, b"Hello")], [("text", "Hello")],
          "one frame with FIN is a whole message")


def test_a_binary_message_in_fragments() -> None:
    check([(False, BINARY, b"\x00\x01"), (False, CONT, b""), (True, CONT, b"\xff")],
          [("binary", b"\x00\x01\xff")],
          "join every fragment's payload, empty ones too, and give the message at FIN")


def test_a_ping_between_fragments_is_answered_at_once() -> None:
    check([(False, TEXT, b"Hel"), (True, PING, b"are you there?"), (True, CONT, b"lo")],
          [("ping", b"are you there?"), ("text", "Hello")],
          "a control frame between fragments comes out at once, and the message goes on")


def test_pings_and_pongs_between_many_fragments() -> None:
    check([(False, TEXT, b"a"), (True, PONG, b""), (False, CONT, b"b"), (True, PING, b"1"),
           (True, PING, b"2"), (True, CONT, b"c"), (True, TEXT, b"d")],
          [("pong", b""), ("ping", b"1"), ("ping", b"2"), ("text", "abc"), ("text", "d")],
          "control frames leave the message in progress as it is")


def test_a_character_split_between_fragments() -> None:
    check([(False, TEXT, b"caf\xc3"), (True, CONT, b"\xa9")], [("text", "café")],
          "decode the text once the message is whole: a fragment may end inside a character")


def test_a_continuation_outside_a_message_is_a_protocol_error() -> None:
    check([(True, TEXT, b"a"), (True, CONT, b"b")], [("text", "a"), ("error", 1002)],
          "a continuation frame with no message in progress: PROTOCOL_ERROR")


def test_a_new_message_inside_a_message_is_a_protocol_error() -> None:
    check([(False, TEXT, b"a"), (True, BINARY, b"b")], [("error", 1002)],
          "a text or binary frame while a message is in fragments: PROTOCOL_ERROR")


def test_a_fragmented_control_frame_is_a_protocol_error() -> None:
    check([(False, PING, b"x"), (True, CONT, b"y")], [("error", 1002)],
          "a control frame without FIN: PROTOCOL_ERROR (§5.5: never fragmented)")


def test_text_that_is_not_utf8_is_invalid_data() -> None:
    check([(False, TEXT, b"ok "), (True, CONT, b"\xff")], [("error", 1007)],
          "a text message that is not UTF-8: INVALID_DATA")


def test_a_close_frame_between_fragments() -> None:
    check([(False, TEXT, b"half"), (True, CLOSE, b"\x03\xe8bye")], [("close", 1000)],
          "a close frame is read at once, even in the middle of a message")
    check([(True, CLOSE, b"")], [("close", 1005)], "an empty close frame: NO_STATUS")


def random_stream(rng: random.Random) -> list[tuple[bool, int, bytes]]:
    """Messages cut into fragments anywhere (even inside a character), control frames
    between them, now and then a rule broken, and sometimes a close at the end."""
    frames: list[tuple[bool, int, bytes]] = []
    for _ in range(rng.randint(1, 4)):
        text = rng.random() < 0.5
        data = "".join(rng.choice("aé€😀") for _ in range(rng.randint(0, 12))).encode() \
            if text else rng.randbytes(rng.randint(0, 20))
        cuts = sorted(rng.sample(range(len(data) + 1), k=min(rng.randint(0, 3), len(data))))
        pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        for i, piece in enumerate(pieces):
            frames.append((i == len(pieces) - 1, (TEXT if text else BINARY) if i == 0 else CONT,
                           piece))
            if rng.random() < 0.3:
                frames.append((True, rng.choice([PING, PONG]), rng.randbytes(rng.randint(0, 5))))
    if rng.random() < 0.2:  # a rule broken somewhere
        frames.insert(rng.randrange(len(frames) + 1),
                      rng.choice([(True, CONT, b"x"), (False, PING, b""), (True, TEXT, b"y")]))
    if rng.random() < 0.3:
        frames.append((True, CLOSE, rng.choice([b"", b"\x03\xe8", b"\x0f\xa0app"])))
    return frames


def test_random_streams_read_as_wsproto_reads_them() -> None:
    rng = random.Random(13)
    for _ in range(300):
        frames = random_stream(rng)
        expected = read_wsproto(frames)
        got = read_exercise(frames)
        assert got == expected, f"for the frames {frames}: read {got}, wsproto read {expected}"
