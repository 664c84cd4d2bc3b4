"""A run of compact records (``record_runs.RecordRun``: records in bytes) packed into EVENTS frames in C, with no
Python object per event: the same frames as the run's flat records (``RecordRun.as_flat()``) packed the Python way,
which defines the bytes (the stream encoder packs a run that way where the C packer is not in use).

What the C packer (``pack_records``) needs per event beside its record is its label's string id. ``RecordIds`` keeps
them per label index of the recorder's table of labels, interned here in Python for the indexes a run names that have
none yet, in the order first met (the order the Python path interns them in), and forgotten when the table they are
ids in changes (a new string epoch, a collector's lower limit). A lookup that overflows the table is counted per
event, as the Python path counts it.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence

import msgpack
from ringtrace.wire.event_packing import EncodedBatch, EventColumns
from ringtrace.wire.optional_c import load_optional
from ringtrace.wire.record_runs import RecordRun
from ringtrace.wire.string_table import StringTable

__all__ = ["RECORDS_ACCELERATED", "RecordIds"]

_c_packer = load_optional("ringtrace.wire._packer")
#: Whether runs of compact records can be packed in C here.
RECORDS_ACCELERATED = _c_packer is not None and hasattr(_c_packer, "pack_records")


class RecordIds:
    """Per label index: its string id in one stream's string table now."""

    def __init__(self) -> None:
        self.names = array("q")
        #: What the ids are ids in: the string epoch and limit, the recorder's labels.
        self._numbers: tuple[int, ...] = ()
        self._labels: object = None

    def _current(self, strings: StringTable, labels: Sequence[str]) -> None:
        """Forget every id if the table they are ids in, or the labels they are of, are not those any more; make room
        for every label known."""
        numbers = (strings.epoch, strings.max_strings)
        if self._numbers != numbers or self._labels is not labels:
            self.forget()
            self._numbers, self._labels = numbers, labels
        more = len(labels) - len(self.names)
        if more > 0:
            self.names.extend([-1] * more)

    def forget(self) -> None:
        self.names = array("q")
        self._numbers, self._labels = (), None

    def _intern(self, missing: list[int], strings: StringTable, labels: Sequence[str]) -> None:
        """Ids for the label indexes ``missing``, in that order; no overflow counted (``pack_records`` counts it per
        event)."""
        counted = strings.overflowed
        names = self.names
        try:
            for index in missing:
                names[index] = strings[labels[index]]
        except BaseException:
            self.forget()  # (indexes the packer marked are not left so)
            raise
        finally:
            strings.overflowed = counted

    def pack(
        self,
        batch: EncodedBatch,
        track_id: int,
        run: RecordRun,
        strings: StringTable,
        limits: tuple[int, int],
        encode_columns: Callable[[EncodedBatch, int, EventColumns], None],
    ) -> None:
        """Append the EVENTS frames of ``run`` to ``batch``: at most ``limits`` (events per frame, frame bytes) each;
        a frame past the bytes is packed by ``encode_columns``, which splits it as the Python path does."""
        assert _c_packer is not None
        per_frame, max_frame_bytes = limits
        labels = run.labels
        self._current(strings, labels)
        records, offset, size = bytes(run.records), 0, len(run.records)
        while offset < size:
            args = (records, offset, per_frame, self.names, strings.overflow_id, track_id, max_frame_bytes)
            packed = _c_packer.pack_records(*args)
            if type(packed) is list:  # labels with no ids yet: intern them, then pack
                self._intern(packed, strings, labels)
                packed = _c_packer.pack_records(*args)
            assert type(packed) is tuple
            frame, count, end, overflowed = packed
            strings.overflowed += overflowed
            if overflowed:
                strings.overflow_used = True
            if frame is not None:
                batch.events.append((frame, count))
            else:  # past max_frame_bytes: the Python path's columns, split as it splits them
                encode_columns(batch, track_id, self._columns(RecordRun(records[offset:end], labels, count)))
            offset = end

    def _columns(self, run: RecordRun) -> EventColumns:
        names = self.names
        kinds, name_ids, starts, ends, args = [], [], [], [], []
        for kind, label, start, end, args_at, end_at in run.spans():
            kinds.append(kind)
            name_ids.append(names[label])
            starts.append(start)
            ends.append(end)
            args.append(msgpack.unpackb(run.records[args_at:end_at], raw=False))
        return EventColumns(kinds, name_ids, starts, ends, args)
