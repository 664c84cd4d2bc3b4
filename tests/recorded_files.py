"""What a timeline records, written by a file listener and read back as a snapshot view: the store the snapshot
writers read, without a collector."""

from __future__ import annotations

import threading
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


def recorded_samples(tmp_path: Path, samples_per_thread: int = 10, name: str = "sampled") -> SnapshotView:
    """Spans ``step`` holding an instant ``as-sample`` each (args ``n``, and ``task``: "worker-task" or "" in turn) on
    the main thread and on a second one, of process ``name``: what a test shows as samples (their args as stacks)."""
    path = tmp_path / f"{name}.rttrace"
    tl = Timeline(name, [FileListener(path, process_name=name)])

    def record() -> None:
        for n in range(samples_per_thread):
            with tl.scope("step", n=n):
                tl.instant("as-sample", n=n, task="" if n % 2 else "worker-task")

    record()
    thread = threading.Thread(target=record, name="second")
    thread.start()
    thread.join()
    tl.close()
    return load_file(path).view
