"""Traced function calls as a function tracer hands them over: fixed-size records in bytes, not Python objects.

A tracer (``ringtrace.client.functions``) writes each call of a thread, when it ends, as one record of
``RECORD.size`` bytes: start and end (ns on the monotonic clock, as every event), the index of the call's code location
in the tracer's table of locations (append only, process-wide), and the kind (``CALL``, or ``CALL_RAISED`` when an
exception left the function). A ``CallRun`` is a drained run of them with that table: what a listener gets in place
of a track's flat records, so that millions of calls cost no Python object each on their way to the wire.

``as_flat`` is what defines a run's events: the same ``RECORD_FIELDS`` values a span recorded by hand has (kind, name,
start, end, args), the name the function's qualified name, the args its one-frame stack ``(location,)``, which the
stream encoder turns into a stack id as it does a sample's stack (``stack_table.py``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any, Final

from ringtrace.wire.model import CALL, CALL_KINDS, CALL_RAISED, RECORD_FIELDS
from ringtrace.wire.record_runs import RecordRun
from ringtrace.wire.stack_frames import CodeLocation
from ringtrace.wire.table_frames import KindSpec

__all__ = ["CALL", "CALL_RAISED", "RECORD", "CallRun", "call_args", "event_count", "is_call", "pack_records"]

#: One call: start_ns i64, end_ns i64, location index u32, kind u32 (little endian, 24 bytes).
RECORD: Final = struct.Struct("<qqII")


class CallRun:
    """A run of one thread's calls: ``records`` (``RECORD``s back to back) and the tracer's ``locations`` they index.

    ``locations`` is the tracer's own list (shared, append only): a record's index is always below its length."""

    __slots__ = ("locations", "records")

    def __init__(self, records: bytes, locations: Sequence[CodeLocation]) -> None:
        if len(records) % RECORD.size:
            raise ValueError(f"call records: {len(records)} bytes is not a whole number of {RECORD.size}-byte records")
        self.records = records
        self.locations = locations

    def __len__(self) -> int:
        return len(self.records) // RECORD.size

    def __repr__(self) -> str:
        return f"CallRun({len(self)} calls)"

    def calls(self) -> Iterator[tuple[int, int, CodeLocation, int]]:
        """Each call as (start_ns, end_ns, location, kind), in the order written (a call after the calls it made)."""
        locations = self.locations
        for start, end, index, kind in RECORD.iter_unpack(self.records):
            if kind not in CALL_KINDS:
                raise ValueError(f"call records: kind {kind} is not a call kind ({sorted(CALL_KINDS)})")
            yield start, end, locations[index], kind

    def as_flat(self) -> list[Any]:
        """The run as a track's flat records: ``kind, qualified name, start, end, (location,)`` per call."""
        flat: list[Any] = []
        extend = flat.extend
        for start, end, location, kind in self.calls():
            extend((kind, location[0], start, end, (location,)))
        return flat


def pack_records(calls: Sequence[tuple[int, int, int, int]]) -> bytes:
    """``(start_ns, end_ns, location index, kind)`` tuples as records (what a tracer writes; for tests and tools)."""
    return b"".join(RECORD.pack(*call) for call in calls)


def event_count(run: Sequence[Any] | CallRun | RecordRun) -> int:
    """The events in a drained run: a track's flat records (``RECORD_FIELDS`` values each), a ``CallRun`` or a
    ``RecordRun``."""
    return len(run) // RECORD_FIELDS if type(run) is list else len(run)


def is_call(kind: KindSpec) -> bool:
    """Whether a stream's declared ``kind`` is a traced call's (``call``, ``call_raised``): one of those built-in ids,
    declared as spans (a stream is not trusted to declare them so)."""
    return kind.id in CALL_KINDS and kind.shape == "span"


def call_args(location: object) -> dict[str, Any] | None:
    """A traced call's args as readers show them: its code location's ``{"file": ..., "line": ...}``; None where the
    location is not known (its stack id never declared, or past the stream's stack table)."""
    if type(location) is not tuple or len(location) != 3:
        return None
    return {"file": location[1], "line": location[2]}
