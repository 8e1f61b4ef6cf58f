"""The Hardening page's tables: every limit and deadline the toy servers keep, from the code.

Run: ``.venv/bin/python lessons/code/hardening/limits_table.py`` rewrites
``lessons/diagrams/hardening-limits.md``; with ``--check`` it exits 1 when that file differs
from what the code gives (``tests/test_page_hardening.py`` runs the check, so the page cannot
drift from the servers).

Two tables. The settings: every field of ``toyservers.config.Config`` whose name says it
bounds something (``timeout_*``, ``max_*``, ``limit_*``, ``backlog``), with its default, what
``Config``'s docstring says of it, and its ``toyserve`` flag when the command line has one
(read from the click command). The constants: every module-level number in ``toyservers/``
whose name says it bounds something (``MAX_*``, ``*_LIMIT``, ``*TIMEOUT*``, ``*SECONDS*``,
``*INTERVAL*``, ``LINGER*``, ``DRAIN``), with its value and the comment beside it (or above it).

Deliberately left out: per-server differences (toy-wsgi has no ``limit_concurrency``; each
server module's docstring says what it leaves out).
Spec: none; the rules each bound enforces are cited where it is used.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
import sys
from pathlib import Path

from toyservers import cli
from toyservers.config import Config

ROOT = Path(__file__).resolve().parents[3]
OUTPUT = ROOT / "lessons" / "diagrams" / "hardening-limits.md"
PACKAGE = ROOT / "toyservers"

# --8<-- [start:rules]
BOUNDS = re.compile(r"timeout_|max_|limit_|backlog$")  # a Config field that bounds a client
CONSTANT = re.compile(r"MAX_\w+|\w+_LIMIT|\w*(TIMEOUT|SECONDS|INTERVAL)\w*|LINGER\w*|DRAIN")
# --8<-- [end:rules]


def attribute_docs(doc: str) -> dict[str, str]:
    """``{field: text}`` from the ``Attributes:`` section of a Google-style docstring; an entry
    naming several fields (``host, port: ...``) gives each the same text."""
    docs: dict[str, str] = {}
    names: list[str] = []
    for line in doc.split("Attributes:", 1)[1].splitlines():
        entry = re.fullmatch(r" {8}([\w, ]+): (.*)", line)
        if entry:
            names = [name.strip() for name in entry.group(1).split(",")]
            docs.update(dict.fromkeys(names, entry.group(2)))
        elif line.startswith(" " * 12) and names:
            for name in names:
                docs[name] += " " + line.strip()
    return docs


def default_text(value: object, doc: str) -> str:
    """A default as the table shows it: ``10 s``, ``8,192 bytes (8 KiB)``, ``100``, ``none``."""
    if value is None:
        return "none"
    if "seconds" in doc:
        return f"{value:g} s"
    if "bytes" in doc and isinstance(value, int):
        return f"{value:,} bytes ({value // 1024} KiB)" if value % 1024 == 0 else f"{value:,} bytes"
    return f"{value:,}" if isinstance(value, int) else str(value)


def settings() -> list[tuple[str, str, str, str]]:
    """``(field, default, what it bounds, toyserve flag)`` for each bounding Config field."""
    docs = attribute_docs(Config.__doc__ or "")
    flags = {param.name: param.opts[0] for param in cli.main.params}
    return [(field.name, default_text(field.default, docs[field.name]), docs[field.name],
             flags.get(field.name, ""))
            for field in dataclasses.fields(Config) if BOUNDS.match(field.name)]


def comment_for(lines: list[str], number: int) -> str:
    """The comment beside line ``number`` (1-based) and the comment lines that go on from it,
    else the first sentence of the comment block just above it. Comment lines after a
    comment beside go on from it only when no statement follows them at once: a block just
    above a statement is that statement's (``MAX_SIZE``'s comment is not the one of
    ``MAX_CONTROL_PAYLOAD``, above it)."""
    line = lines[number - 1]
    if "  # " in line:
        beside = [line.split("  # ", 1)[1].strip()]
        rest = lines[number:] + [""]
        block = 0
        while rest[block].startswith("# ") and not rest[block].startswith("# ---"):
            block += 1
        if not rest[block].strip():  # a blank line ends it: it goes on from this comment
            beside += [following[2:].strip() for following in rest[:block]]
        return " ".join(beside)
    above = []
    for previous in reversed(lines[:number - 1]):
        if not previous.startswith("# ") or previous.startswith("# ---"):
            break
        above.insert(0, previous[2:].strip())
    return " ".join(above).split(". ")[0].rstrip(".")


def constants() -> list[tuple[str, str, str]]:
    """``(module.NAME, value, comment)`` for each bounding module-level number, by module; a
    computed value shows its expression too (``65,536 (`64 * 1024`)``)."""
    rows = []
    for path in sorted(PACKAGE.glob("[!_]*.py")) + sorted(PACKAGE.glob("_[!_]*.py")):
        lines = path.read_text().splitlines()
        module = importlib.import_module(f"toyservers.{path.stem}")
        for node in ast.parse("\n".join(lines)).body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(
                node, "target", None)
            if not isinstance(target, ast.Name) or not CONSTANT.fullmatch(target.id):
                continue
            value = getattr(module, target.id)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
            source = ast.get_source_segment("\n".join(lines), node.value)
            if source is not None and not re.fullmatch(r"[\d.]+", source):
                shown += f" (`{source}`)"  # computed: how
            rows.append((f"{path.stem}.{target.id}", shown, comment_for(lines, node.lineno)))
    return rows


# --8<-- [start:render]
def render() -> str:
    """The Markdown file: where it comes from, then the two tables."""
    out = ["<!-- Generated from toyservers/ by lessons/code/hardening/limits_table.py;"
           " do not edit. -->", "",
           "| Setting (`Config`) | Default | What it bounds | `toyserve` flag |",
           "|---|---|---|---|"]
    for name, default, doc, flag in settings():
        out.append(f"| `{name}` | {default} | {doc} | {f'`{flag}`' if flag else '(Config only)'} |")
    out += ["", "| Constant (`toyservers.`) | Value | What it bounds |", "|---|---:|---|"]
    out += [f"| `{name}` | {value} | {comment} |" for name, value, comment in constants()]
    return "\n".join(out) + "\n"
# --8<-- [end:render]


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv[1:]:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT.name} is stale: run "
                  ".venv/bin/python lessons/code/hardening/limits_table.py", file=sys.stderr)
            sys.exit(1)
        print(f"{OUTPUT.name} matches toyservers' Config and constants")
    else:
        OUTPUT.write_text(text)
        print(f"wrote {OUTPUT.relative_to(ROOT)}")
