"""Exercise 13, starter: reassemble fragmented WebSocket messages, control frames between.

A WebSocket message may come in fragments: a text or binary frame without FIN, then
continuation frames, the last one with FIN (RFC 6455 §5.4). Control frames (close, ping, pong)
are never fragmented, and may come between the fragments of a message: a ping is answered at
once, not after a 16 MiB message has all arrived. The frames here are already parsed and
unmasked (``Frame``); what is left is the rule for putting messages back together.

YOUR TASK: write ``Reassembler.feed`` below (look for "EXERCISE"). Check your work with
``make exercise N=13``: the checks give the same frames, masked, to wsproto (a WebSocket
library every check trusts) and expect what it reads. Run
``.venv/bin/python lessons/exercises/13-websocket/starter.py`` to see lesson 13's
conversation read: "Hel", a ping, "lo".

Spec: RFC 6455 §5.4 (fragmentation), §5.5 (control frames), §5.5.1 (the close frame's
status code), §8.1 (text is UTF-8: 1007 when it is not).
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
        # ---- EXERCISE: replace the line below with your code. ----------------------------
        # Hints: a control frame (opcode >= CLOSE) is handled whole, whatever the message in
        # progress, which it leaves as it is. A data frame: TEXT or BINARY starts a message
        # (only when none is in progress), CONTINUATION goes on with one (only when one is);
        # keep the payload; when FIN is set, join the parts and give the message. Decode the
        # text once the message is whole: a character's bytes may be split between frames.
        raise NotImplementedError("exercise 13: write Reassembler.feed()")
# --8<-- [end:exercise]


if __name__ == "__main__":
    reassembler = Reassembler()
    for frame in [Frame(False, TEXT, b"Hel"), Frame(True, PING, b"are you there?"),
                  Frame(True, CONTINUATION, b"lo"), Frame(True, CLOSE, b"\x03\xe8bye")]:
        print(f"{frame} -> {reassembler.feed(frame)}")
