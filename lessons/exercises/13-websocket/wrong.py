"""Exercise 13, a plausible wrong answer: each text fragment decoded as it comes.

Decoding each fragment on its own looks like the way to fail invalid UTF-8 early, and every
message whose fragments end between characters reads well. But a fragment may end in the
middle of a character (a client cuts by bytes, not characters): "é" is C3 A9, and "caf" C3 +
A9 is a valid message that this answer refuses with 1007. (Failing early is right, RFC 6455
§8.1 asks for it; the tool is an incremental decoder, ``codecs.getincrementaldecoder``, as
toy-raw uses.) ``EXERCISE_IMPL=wrong make exercise N=13`` shows what a student who wrote it
reads; ``tests/test_exercises.py`` checks that it fails with this hint:

Fails: test_a_character_split_between_fragments: AssertionError: decode the text once the
"""

from __future__ import annotations

from typing import NamedTuple

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA  # §5.2
PROTOCOL_ERROR, INVALID_DATA, NO_STATUS = 1002, 1007, 1005  # close codes, §7.4.1


class Frame(NamedTuple):
    """One frame from the client: FIN, its opcode, its payload (unmasked)."""

    fin: bool
    opcode: int
    payload: bytes


class ProtocolError(Exception):
    """The client broke a rule: the connection fails with close code ``code`` (§7.1.7)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code


# --8<-- [start:exercise]
class Reassembler:
    """Frames in, events out: ``feed(frame)`` gives the event the frame completes, or None.

    Events: ``("text", str)`` or ``("binary", bytes)`` when a message's last frame arrives;
    ``("ping", payload)`` and ``("pong", payload)`` at once; ``("close", code)`` for a close
    frame (its first two bytes, big-endian; ``NO_STATUS`` when it has none).
    Raises ProtocolError with ``PROTOCOL_ERROR`` for a continuation frame outside a message,
    a text or binary frame inside one, or a control frame without FIN; with ``INVALID_DATA``
    for a text message that is not UTF-8.
    """

    def __init__(self) -> None:
        self.opcode: int | None = None  # TEXT or BINARY while a message is in fragments
        self.parts: list[bytes] = []  # its payloads so far

    def feed(self, frame: Frame) -> tuple[str, object] | None:
        if frame.opcode >= CLOSE:  # a control frame: whole, between fragments or not
            if not frame.fin:
                raise ProtocolError(PROTOCOL_ERROR, "a fragmented control frame")
            if frame.opcode == PING:
                return ("ping", frame.payload)
            if frame.opcode == PONG:
                return ("pong", frame.payload)
            code = int.from_bytes(frame.payload[:2], "big") if frame.payload else NO_STATUS
            return ("close", code)
        if frame.opcode == CONTINUATION:
            if self.opcode is None:
                raise ProtocolError(PROTOCOL_ERROR, "a continuation outside a message")
        elif self.opcode is not None:
            raise ProtocolError(PROTOCOL_ERROR, "a message inside a message")
        else:
            self.opcode, self.parts = frame.opcode, []
        if self.opcode == TEXT:  # each fragment decoded as it comes
            try:
                self.parts.append(frame.payload.decode("utf-8").encode("utf-8"))
            except UnicodeDecodeError:
                raise ProtocolError(INVALID_DATA, "text that is not UTF-8") from None
        else:
            self.parts.append(frame.payload)
        if not frame.fin:
            return None
        data, opcode = b"".join(self.parts), self.opcode
        self.opcode, self.parts = None, []
        return ("text", data.decode("utf-8")) if opcode == TEXT else ("binary", data)
# --8<-- [end:exercise]


if __name__ == "__main__":
    reassembler = Reassembler()
    for frame in [Frame(False, TEXT, b"Hel"), Frame(True, PING, b"are you there?"),
                  Frame(True, CONTINUATION, b"lo"), Frame(True, CLOSE, b"\x03\xe8bye")]:
        print(f"{frame} -> {reassembler.feed(frame)}")
