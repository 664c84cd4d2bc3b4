"""A run of traced calls (``call_records.CallRun``: records in bytes) packed into EVENTS frames in C, with no Python
object per call: the same frames as the run's flat records (``CallRun.as_flat()``) packed the Python way, which
defines the bytes (the stream encoder packs a run that way where the C packer is not in use).

What the C packer (``pack_calls``) needs per call beside its record is two ids of its code location: its qualified
name's string id and its one-frame stack's id. ``CallIds`` keeps them per location index of the tracer's table,
interned here in Python for the indexes a run names that have none yet, in the order first met (the order the
Python path interns them in), and forgotten when the tables they are ids of change (a new string epoch, a collector's
lower limits). A lookup that overflows a table is counted per call, as the Python path counts it.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import Any

from ringtrace.wire.call_records import RECORD, CallRun
from ringtrace.wire.event_packing import EncodedBatch, EventColumns
from ringtrace.wire.optional_c import load_optional
from ringtrace.wire.stack_frames import CodeLocation
from ringtrace.wire.stack_table import StackTable
from ringtrace.wire.string_table import StringTable

__all__ = ["CALLS_ACCELERATED", "CallIds", "NotPackable"]

_c_packer = load_optional("ringtrace.wire._packer")
#: Whether runs of calls can be packed in C here.
CALLS_ACCELERATED = _c_packer is not None and hasattr(_c_packer, "pack_calls")

#: A stack id for a location whose stack got none: the table was full (counted per call), or it is no code location.
_NO_STACK_COUNTED = -1
_NO_STACK = -2


class NotPackable(Exception):
    """A run the C packer leaves to the Python path: a location whose name is not text (its text stands for it)."""


class CallIds:
    """Per location index: its name's string id and its one-frame stack's id in one stream's tables now."""

    def __init__(self) -> None:
        self.names = array("q")
        self.stacks = array("q")
        #: What the ids are ids in: the string epoch and limits, the stack table's nodes (a new list when it starts
        #: again) and limits, the tracer's locations.
        self._numbers: tuple[int, ...] = ()
        self._nodes: object = None
        self._locations: object = None

    def _current(self, strings: StringTable, stacks: StackTable, locations: Sequence[CodeLocation]) -> None:
        """Forget every id if the tables they are ids of, or the locations they are of, are not those any more; make
        room for every location known."""
        numbers = (strings.epoch, strings.max_strings, stacks.max_stacks, stacks.max_frames)
        if self._numbers != numbers or self._nodes is not stacks.nodes or self._locations is not locations:
            self.forget()
            self._numbers, self._nodes, self._locations = numbers, stacks.nodes, locations
        more = len(locations) - len(self.names)
        if more > 0:
            self.names.extend([-1] * more)
            self.stacks.extend([-1] * more)

    def forget(self) -> None:
        self.names = array("q")
        self.stacks = array("q")
        self._numbers, self._nodes, self._locations = (), None, None

    def _intern(self, missing: list[int], strings: StringTable, stacks: StackTable, locations: Any) -> None:
        """Ids for the location indexes ``missing``, in that order; no overflow counted (``pack_calls`` counts it per
        call)."""
        counted = strings.overflowed, stacks.overflowed
        names, stack_ids = self.names, self.stacks
        try:
            for index in missing:
                location = locations[index]
                if type(location) is not tuple or len(location) != 3 or type(location[0]) is not str:
                    raise NotPackable(f"location {index} is not (qualified name, file, line): {location!r:.80}")
                name = strings[location[0]]
                overflowed = stacks.overflowed
                stack = stacks.id_of((location,))
                if stack is None:
                    stack = _NO_STACK_COUNTED if stacks.overflowed > overflowed else _NO_STACK
                names[index], stack_ids[index] = name, stack
        except BaseException:
            self.forget()  # (indexes the packer marked are not left so)
            raise
        finally:
            strings.overflowed, stacks.overflowed = counted

    def pack(
        self,
        batch: EncodedBatch,
        track_id: int,
        run: CallRun,
        tables: tuple[StringTable, StackTable],
        limits: tuple[int, int],
        encode_columns: Callable[[EncodedBatch, int, EventColumns], None],
    ) -> None:
        """Append the EVENTS frames of ``run`` to ``batch``: at most ``limits`` (events per frame, frame bytes) each;
        a frame past the bytes is packed by ``encode_columns``, which splits it as the Python path does."""
        assert _c_packer is not None
        strings, stacks = tables
        per_frame, max_frame_bytes = limits
        locations = run.locations
        self._current(strings, stacks, locations)
        records, calls = run.records, len(run)
        for first in range(0, calls, per_frame):
            count = min(per_frame, calls - first)
            args = (records, first, count, self.names, self.stacks, strings.overflow_id, track_id, max_frame_bytes)
            packed = _c_packer.pack_calls(*args)
            if type(packed) is list:  # locations with no ids yet: intern them, then pack
                self._intern(packed, strings, stacks, locations)
                packed = _c_packer.pack_calls(*args)
            assert type(packed) is tuple
            frame, overflowed, stackless = packed
            strings.overflowed += overflowed
            stacks.overflowed += stackless
            if overflowed:
                strings.overflow_used = True
            if frame is not None:
                batch.events.append((frame, count))
            else:  # past max_frame_bytes: the Python path's columns, split as it splits them
                encode_columns(batch, track_id, self._columns(records, first, count))

    def _columns(self, records: bytes, first: int, count: int) -> EventColumns:
        names, stack_ids = self.names, self.stacks
        kinds, name_ids, starts, ends, args = [], [], [], [], []
        for start, end, index, kind in RECORD.iter_unpack(records[first * RECORD.size : (first + count) * RECORD.size]):
            kinds.append(kind)
            name_ids.append(names[index])
            starts.append(start)
            ends.append(end)
            stack = stack_ids[index]
            args.append(stack if stack >= 0 else None)
        return EventColumns(kinds, name_ids, starts, ends, args)
