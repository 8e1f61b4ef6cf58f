"""The Rust programs ``bench`` runs: built once with cargo, then reused.

Two crates live beside this module, each a :class:`Crate`:

- ``bench/axum/`` (:data:`AXUM`): the layers experiment's endpoint with axum on a
  ``current_thread`` tokio runtime: one thread, so it is a one-core ceiling beside one-process
  Python servers (``bench layers``' axum row);
- ``bench/ws-load/`` (:data:`WSLOAD`): ``ws-load``, ``bench ws``'s WebSocket load generator
  (tokio + tokio-tungstenite, one thread), so the client is never a Python loop.

A binary lands in ``<crate>/target/release/<name>`` and is rebuilt only when a source file
(``Cargo.toml``, ``Cargo.lock``, ``src/*.rs``) is newer than it. Without cargo, or when a build
fails, :func:`ensure_built` says so in one line and the caller skips what needed it.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Crate:
    """A cargo project under ``bench/`` and what it is for.

    Attributes:
        root: the folder holding ``Cargo.toml``.
        binary_name: the executable cargo builds (``target/release/<binary_name>``).
        label: what it is, for the report's one line (``"axum"``, ``"ws-load"``).
        skipped: what a missing binary leaves out (``"axum row skipped"``).
    """

    root: Path
    binary_name: str
    label: str
    skipped: str

    @property
    def binary(self) -> Path:
        """Where ``cargo build --release`` puts the executable."""
        return self.root / "target" / "release" / self.binary_name


AXUM = Crate(HERE / "axum", "axum-user", "axum", "axum row skipped")
WSLOAD = Crate(HERE / "ws-load", "ws-load", "ws-load", "bench ws skipped")
AXUM_DIR = AXUM.root
AXUM_BINARY = AXUM.binary


@dataclass(frozen=True)
class NativeBuild:
    """The outcome of :func:`ensure_built`.

    Attributes:
        binary: the executable to run, or None when there is none (see ``note``).
        note: one line for the report: built, cached, or why it is skipped.
        command: the cargo argv that was run, or None when nothing was built.
        rustc: ``rustc --version`` when cargo was found, else None.
    """

    binary: Path | None
    note: str
    command: list[str] | None = None
    rustc: str | None = None


def find_cargo() -> str | None:
    """cargo on PATH, else rustup's default ``~/.cargo/bin/cargo``, else None."""
    found = shutil.which("cargo")
    if found:
        return found
    home = Path.home() / ".cargo" / "bin" / "cargo"
    return str(home) if home.exists() else None


def sources(root: Path = AXUM_DIR) -> list[Path]:
    """The files the binary is built from."""
    return [root / "Cargo.toml", root / "Cargo.lock", *sorted((root / "src").glob("*.rs"))]


def is_fresh(binary: Path = AXUM_BINARY, root: Path = AXUM_DIR) -> bool:
    """True when ``binary`` exists and is newer than every source file."""
    if not binary.exists():
        return False
    built = binary.stat().st_mtime
    return all(path.stat().st_mtime <= built for path in sources(root) if path.exists())


def _rustc_version(cargo: str) -> str | None:
    rustc = Path(cargo).with_name("rustc")
    argv = [str(rustc) if rustc.exists() else "rustc", "--version"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def ensure_built(crate: Crate, *, timeout: float = 1800.0) -> NativeBuild:
    """Return ``crate``'s binary, building it with ``cargo build --release --locked`` if
    needed.

    Never raises for a missing toolchain or a failed build: the returned ``note`` says what
    happened and ``binary`` is None, so the caller skips what needed it.
    """
    cargo = find_cargo()
    if cargo is None:
        return NativeBuild(None, f"{crate.skipped}: cargo not found (install Rust from "
                                 "https://rustup.rs to build it)")
    rustc = _rustc_version(cargo)
    if is_fresh(crate.binary, crate.root):
        return NativeBuild(crate.binary, f"{crate.label}: cached build {crate.binary}", None,
                           rustc)
    argv = [cargo, "build", "--release", "--locked", "--manifest-path",
            str(crate.root / "Cargo.toml")]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return NativeBuild(None, f"{crate.skipped}: cargo build took over {timeout:g} s",
                           argv, rustc)
    except OSError as exc:
        return NativeBuild(None, f"{crate.skipped}: cannot run cargo ({exc})", argv, rustc)
    if out.returncode != 0 or not crate.binary.exists():
        tail = " | ".join(out.stderr.strip().splitlines()[-3:])
        return NativeBuild(None, f"{crate.skipped}: cargo build failed: {tail}", argv, rustc)
    return NativeBuild(crate.binary, f"{crate.label}: built {crate.binary}", argv, rustc)


def ensure_axum(*, timeout: float = 1800.0) -> NativeBuild:
    """The axum ceiling's binary (:func:`ensure_built` of :data:`AXUM`)."""
    return ensure_built(AXUM, timeout=timeout)


def ensure_wsload(*, timeout: float = 1800.0) -> NativeBuild:
    """``bench ws``'s load generator (:func:`ensure_built` of :data:`WSLOAD`)."""
    return ensure_built(WSLOAD, timeout=timeout)
