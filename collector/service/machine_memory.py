"""The memory this collector can have: the machine's, or less where a control group it is in (a container's limit,
systemd's ``MemoryMax=``) says so. An in-memory store whose ``--capacity`` is past it cannot hold what it promises: the
kernel ends the process once the ring fills, where a refusal at start says why."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

__all__ = ["memory_bytes"]

#: Where a group's limit is, under the hierarchy's mount: cgroup v2's file, v1's memory controller's.
_V2_LIMIT = "memory.max"
_V1_LIMIT = "memory.limit_in_bytes"


def memory_bytes(root: Path = Path("/")) -> int | None:
    """The least of the physical memory and the limits of the control groups this process is in and their parents
    (as ``/proc/self/cgroup`` under ``root`` names them), in bytes; None where none can be read."""
    known = [size for size in (_physical_bytes(), *_group_limits(root)) if size]
    return min(known) if known else None


def _physical_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # (no such name on this system)
        return None


def _group_limits(root: Path) -> list[int]:
    """The limits set on this process's groups and every parent of them (a child cannot have more than its parent)."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    limits = []
    for line in lines:
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if controllers == "":  # cgroup v2: "0::/path"
            mount, name = root / "sys/fs/cgroup", _V2_LIMIT
        elif "memory" in controllers.split(","):
            mount, name = root / "sys/fs/cgroup/memory", _V1_LIMIT
        else:
            continue
        group = PurePosixPath(path if path.startswith("/") else "/")
        for place in (group, *group.parents):
            limit = _limit_bytes(mount / place.relative_to("/") / name)
            if limit is not None:
                limits.append(limit)
    return limits


def _limit_bytes(path: Path) -> int | None:
    """A limit file's number ("max", or no such file: no limit)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
