"""The memory this collector can have: the machine's, or less where its control group (a container's limit) says so.
An in-memory store whose ``--capacity`` is past it cannot hold what it promises: the kernel ends the process once the
ring fills, where a refusal at start says why."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["memory_bytes"]

#: Where the control group's limit is read (cgroup v2, then v1's memory controller), under ``root``.
_LIMITS = ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes")


def memory_bytes(root: Path = Path("/")) -> int | None:
    """The least of the physical memory and the control group's limit, in bytes; None where neither can be read."""
    known = [size for size in (_physical_bytes(), *(_limit_bytes(root / path) for path in _LIMITS)) if size]
    return min(known) if known else None


def _physical_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # (no such name on this system)
        return None


def _limit_bytes(path: Path) -> int | None:
    """A limit file's number ("max", or no file: no limit)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
