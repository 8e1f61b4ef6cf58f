"""What a result was measured on: CPU, cores, Python, package and tool versions.

Every ``bench`` result file records these so a figure can be traced to its machine and
software, as the project's rule on numbers asks (no figure without machine, date, versions).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from pathlib import Path
from typing import Any

import psutil

from toyservers.registry import SERVERS

#: Distributions whose versions matter to a web benchmark besides the servers' own.
FRAMEWORKS = ("starlette", "fastapi", "pydantic", "msgspec", "flask", "uvloop", "httptools",
              "h11", "h2", "anyio", "psutil")


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo``, else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity mask), sorted; every CPU where the
    system has no affinity masks (``os.sched_getaffinity`` is Linux-only: not on macOS)."""
    if not hasattr(os, "sched_getaffinity"):
        return list(range(os.cpu_count() or 1))
    return sorted(os.sched_getaffinity(0))


def machine_info() -> dict[str, Any]:
    """``{"cpu_model", "cores", "usable_cpus", "memory_bytes", "platform", "hostname"}``."""
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "memory_bytes": int(psutil.virtual_memory().total),
        "platform": platform.platform(),
        "hostname": platform.node(),
    }


def python_info() -> dict[str, str]:
    """``{"version", "implementation", "executable"}`` of the running interpreter."""
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
    }


def package_versions() -> dict[str, str]:
    """Installed versions of every server package in the registry and of :data:`FRAMEWORKS`.

    A package that is not installed maps to ``"not installed"``.
    """
    versions = {spec.package: spec.version() for spec in SERVERS.values()}
    for name in FRAMEWORKS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return dict(sorted(versions.items()))
