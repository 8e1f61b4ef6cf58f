"""Lesson 4: draw h11's server-side state machine from h11's own transition tables.

Run: ``.venv/bin/python lessons/code/04-sans-io/state_diagram.py`` rewrites
``lessons/diagrams/h11-server-states.md``;
``.venv/bin/python lessons/code/04-sans-io/state_diagram.py --check`` exits 1 when that file differs
from what h11's tables give (``tests/test_lessons_sansio.py`` runs the check, so the page cannot
drift from h11).

h11 keeps its state machine as data in ``h11/_state.py``: ``EVENT_TRIGGERED_TRANSITIONS``
(role -> state -> event type -> next state) and ``STATE_TRIGGERED_TRANSITIONS`` ((client state,
server state) -> the role that moves and where to). A few moves are code, not table: listed
in ``CODE_TRANSITIONS`` below and checked against a live ``h11.Connection`` by the test.

Deliberately left out: the client's machine (the same tables, ``role=CLIENT``).
Spec: h11's documentation, "The state machine"; RFC 9112 §9.3 (persistence), §9.6 (tear-down).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import h11
from h11 import _state

OUTPUT = Path(__file__).resolve().parents[2] / "diagrams" / "h11-server-states.md"

# --8<-- [start:tables]
ROLE = h11.SERVER

CODE_TRANSITIONS = [
    # (from, to, label): moves h11 makes in code (ConnectionState), not in the two tables
    (h11.DONE, h11.IDLE, "start_next_cycle(), both DONE"),
    (h11.DONE, h11.MUST_CLOSE, "keep-alive off"),
]

# What the annotations on some event keys mean: the switch proposal the response accepts.
QUALIFIERS = {h11.CLIENT: "from the client", _state._SWITCH_UPGRADE: "accepting Upgrade",
              _state._SWITCH_CONNECT: "accepting CONNECT"}


def event_label(key: object) -> str:
    """``Response`` -> ``"Response"``; ``(Request, CLIENT)`` -> ``"Request from the client"``."""
    if isinstance(key, tuple):
        event, qualifier = key
        return f"{event.__name__} {QUALIFIERS.get(qualifier, qualifier.__name__)}"
    assert isinstance(key, type)
    return key.__name__


def transitions() -> dict[tuple[str, str], list[str]]:
    """Every move of ``ROLE``: ``{(from state, to state): [labels]}``, in table order."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for state, moves in _state.EVENT_TRIGGERED_TRANSITIONS[ROLE].items():
        for key, target in moves.items():
            edges[state.__name__, target.__name__].append(event_label(key))
    for (client, server), changes in _state.STATE_TRIGGERED_TRANSITIONS.items():
        if ROLE in changes:  # the server moves because of where the client is
            edges[server.__name__, changes[ROLE].__name__].append(f"client is {client.__name__}")
    for source, target, label in CODE_TRANSITIONS:
        edges[source.__name__, target.__name__].append(label)
    return edges
# --8<-- [end:tables]


# --8<-- [start:render]
def render() -> str:
    """The Markdown file: a comment saying where it comes from, then a mermaid stateDiagram."""
    states = [state.__name__ for state in _state.EVENT_TRIGGERED_TRANSITIONS[ROLE]]
    lines = [
        "<!-- Generated from h11's h11/_state.py by lessons/code/04-sans-io/state_diagram.py;"
        " do not edit. -->",
        "```mermaid",
        "stateDiagram-v2",
        "    [*] --> IDLE",
    ]
    for (source, target), labels in transitions().items():
        lines.append(f"    {source} --> {target}: {', '.join(labels)}")
    for name in states:
        if not any(name in pair for pair in transitions()):
            lines.append(f"    {name}")  # a state with no move in or out (ERROR: any error)
    lines.append("```")
    return "\n".join(lines) + "\n"
# --8<-- [end:render]


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv[1:]:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT} is stale: run "
                  ".venv/bin/python lessons/code/04-sans-io/state_diagram.py", file=sys.stderr)
            sys.exit(1)
        print(f"{OUTPUT.name} matches h11's tables")
    else:
        OUTPUT.write_text(text)
        print(f"wrote {OUTPUT}")
