"""The native ceiling: build the axum app in ``bench/axum/`` once with cargo, then reuse it.

The app (``bench/axum/src/main.rs``) serves the layers experiment's endpoint with axum on a
``current_thread`` tokio runtime: one thread, so it is a one-core ceiling beside one-process
Python servers. The binary lands in ``bench/axum/target/release/axum-user`` and is rebuilt only
when a source file (``Cargo.toml``, ``Cargo.lock``, ``src/*.rs``) is newer than it.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

AXUM_DIR = Path(__file__).parent / "axum"
AXUM_BINARY = AXUM_DIR / "target" / "release" / "axum-user"


@dataclass(frozen=True)
class NativeBuild:
    """The outcome of :func:`ensure_axum`.

    Attributes:
        binary: the executable to run, or None when there is none (see ``note``).
        note: one line for the report: built, cached, or why the row is skipped.
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


def ensure_axum(*, timeout: float = 1800.0) -> NativeBuild:
    """Return the axum binary, building it with ``cargo build --release --locked`` if needed.

    Never raises for a missing toolchain or a failed build: the returned ``note`` says what
    happened and ``binary`` is None, so the caller skips the row.
    """
    cargo = find_cargo()
    if cargo is None:
        return NativeBuild(None, "axum row skipped: cargo not found (install Rust from "
                                 "https://rustup.rs to add the native ceiling)")
    rustc = _rustc_version(cargo)
    if is_fresh():
        return NativeBuild(AXUM_BINARY, f"axum: cached build {AXUM_BINARY}", None, rustc)
    argv = [cargo, "build", "--release", "--locked", "--manifest-path",
            str(AXUM_DIR / "Cargo.toml")]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return NativeBuild(None, f"axum row skipped: cargo build took over {timeout:g} s",
                           argv, rustc)
    except OSError as exc:
        return NativeBuild(None, f"axum row skipped: cannot run cargo ({exc})", argv, rustc)
    if out.returncode != 0 or not AXUM_BINARY.exists():
        tail = " | ".join(out.stderr.strip().splitlines()[-3:])
        return NativeBuild(None, f"axum row skipped: cargo build failed: {tail}", argv, rustc)
    return NativeBuild(AXUM_BINARY, f"axum: built {AXUM_BINARY}", argv, rustc)
