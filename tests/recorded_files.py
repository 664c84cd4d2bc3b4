"""What a timeline records, written by a file listener and read back as a snapshot view: the store the snapshot
writers read, without a collector."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ringtrace.client import FileListener, Timeline
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.frame_walk import SnapshotView


def recorded(tmp_path: Path, record: Callable[[Timeline], object]) -> SnapshotView:
    """What ``record`` records on a timeline of process "unit", as a snapshot view."""
    path = tmp_path / "t.rttrace"
    tl = Timeline("unit", [FileListener(path, process_name="unit")])
    record(tl)
    tl.close()
    return load_file(path).view
