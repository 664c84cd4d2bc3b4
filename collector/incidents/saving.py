"""What a capture's pinned window becomes on disk: the processes it keeps (a ``trace`` scope narrowed to those with a
span of the trace in the window), the native snapshot file of their events in the window, and the record completed.

Blocking (file IO, decoding): the engine runs ``save_window`` on a worker thread, the segments pinned meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from ringtrace.collector.export.native import native_chunks
from ringtrace.collector.read.frame_walk import ProcessView, SnapshotView, trace_spans
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.store.segments import frame_spans
from ringtrace.wire.frame_types import EVENTS_HEADER, FRAME_HEADER, FrameType
from ringtrace.wire.frames import preamble

__all__ = ["IncidentWriter", "WindowSave", "process_facts", "save_window"]

_PREAMBLE_BYTES: Final = len(preamble())


class IncidentWriter(Protocol):
    """What saving needs of the incidents on disk (``IncidentFiles.save``)."""

    def save(self, record: dict[str, Any], chunks: Iterable[bytes]) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class WindowSave:
    """What to keep of a pinned view: the window (wall ns), the processes (uids) of the scope, and the trace that
    narrows them, if the scope is ``trace``."""

    since_ns: int
    until_ns: int
    owners: frozenset[int]
    trace_id: str | None = None
    #: The process whose event fired: kept even when a trace names none.
    trigger_owner: int | None = None
    #: What the ring overwrote of the window before the fire, by process (``Capture.overwritten_by_owner``).
    overwritten_by_owner: Mapping[int, int] = field(default_factory=dict)
    #: What the incidents' budget could not keep of the window, by process (``Capture.over_budget_by_owner``).
    over_budget_by_owner: Mapping[int, int] | None = None


def process_facts(process: ProcessView) -> dict[str, Any]:
    """A process as an incident's record names it."""
    return {"pid": process.pid, "name": process.name, "host": process.host}


def save_window(files: IncidentWriter, view: SnapshotView, record: dict[str, Any], keep: WindowSave) -> dict[str, Any]:
    """Write the incident of ``record`` from ``view``: the events of ``keep``'s processes in its window, as a native
    snapshot file; returns the record as written (with ``processes`` and ``events`` filled in)."""
    owners = set(keep.owners)
    if keep.trace_id is not None:
        spans = trace_spans(view, EventFilter(trace_id=keep.trace_id))
        owners &= spans.processes_during(keep.since_ns, keep.until_ns)
        if keep.trigger_owner is not None:
            owners.add(keep.trigger_owner)
    processes = [view.processes[uid] for uid in sorted(owners) if uid in view.processes]
    selected = EventFilter(
        since_ns=keep.since_ns, until_ns=keep.until_ns, pids=frozenset(p.trace_pid for p in processes)
    )
    record = {**record, "processes": [process_facts(p) for p in processes], "events": 0}
    if keep.trace_id is not None:  # (what the processes left out lost is none of this incident's; a pending record
        # settled after a restart has only the totals, kept as they are)
        lost = dict(record.get("lost", {}))
        if keep.overwritten_by_owner:
            lost["overwritten_before_fire"] = sum(keep.overwritten_by_owner.get(uid, 0) for uid in owners)
        if keep.over_budget_by_owner is not None:
            lost["over_budget"] = sum(keep.over_budget_by_owner.get(uid, 0) for uid in owners)
        record["lost"] = lost
    # (The snapshot file is written before the record: the events are counted by then.)
    return files.save(record, _counted(native_chunks(view, selected), record))


def _counted(chunks: Iterator[bytes], record: dict[str, Any]) -> Iterator[bytes]:
    """The chunks of a snapshot file as they are, their EVENTS frames' events counted into ``record["events"]``."""
    for chunk in chunks:
        for frame_type, start, _ in frame_spans(chunk, _PREAMBLE_BYTES, len(chunk)):
            if frame_type == FrameType.EVENTS:
                record["events"] += EVENTS_HEADER.unpack_from(chunk, start + FRAME_HEADER.size)[3]
        yield chunk
