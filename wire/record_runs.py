"""Events recorded compactly: fixed-size headers with their arguments already packed, in bytes, not Python objects.

The C recorder writes an instant whose name is text and whose arguments are text keys with flat values (None, a bool,
an int of 64 bits, a float, text or bytes up to ``MAX_ARG_TEXT``: what the stream encoder packs as they are), and a
message whose category is text and whose values are flat, as one record: ``HEADER`` (its size in bytes, its kind, the
index of its name in the recorder's table of labels, start and end in ns on the monotonic clock) followed by its
arguments as msgpack, exactly as the stream encoder packs that event's args: an instant's map (nil where there are
none), a message's array of values (its kind's converter leaves flat values as they are). A ``RecordRun`` is a
drained run of them with that table: what a listener that packs its own runs (the streamer) gets in place of a
track's flat records; the others get ``as_flat()``.

``as_flat`` is what defines a run's events: the ``RECORD_FIELDS`` values the Python recorder records for the same
calls (kind, name, start, end, and an instant's args map or None or a message's tuple of values), which the stream
encoder packs to the same bytes (``record_packing.py`` packs them in C, from the records).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any, Final

import msgpack

__all__ = ["HEADER", "RecordRun", "pack_record"]

#: One record's header: size (header and args) u32, kind u32, label index u32, start_ns i64, end_ns i64 (little
#: endian, 28 bytes); its packed args follow.
HEADER: Final = struct.Struct("<IIIqq")


class RecordRun:
    """A run of one thread's compact records: ``records`` (records back to back) and the ``labels`` they index.

    ``labels`` is the recorder's own list (shared, append only): a record's index is always below its length."""

    __slots__ = ("count", "labels", "records")

    def __init__(self, records: bytes, labels: Sequence[str], count: int | None = None) -> None:
        self.records = records
        self.labels = labels
        #: How many records: given by the recorder, which counted them; else counted here (which checks them).
        self.count = sum(1 for _ in self.spans()) if count is None else count

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"RecordRun({self.count} events)"

    def spans(self) -> Iterator[tuple[int, int, int, int, int, int]]:
        """Each record as (kind, label index, start, end, args offset, end offset), checked to lie within the run."""
        records, offset, size = self.records, 0, len(self.records)
        while offset < size:
            if size - offset < HEADER.size + 1:
                raise ValueError(f"records: {size - offset} bytes at {offset} are not a whole record")
            length, kind, label, start, end = HEADER.unpack_from(records, offset)
            if length < HEADER.size + 1 or length > size - offset:
                raise ValueError(f"records: a record of {length} bytes at {offset} of {size}")
            yield kind, label, start, end, offset + HEADER.size, offset + length
            offset += length

    def events(self) -> Iterator[tuple[int, str, int, int, bytes]]:
        """Each event as (kind, label, start_ns, end_ns, packed args), in the order recorded."""
        labels, records = self.labels, self.records
        for kind, label, start, end, args_at, end_at in self.spans():
            yield kind, labels[label], start, end, bytes(records[args_at:end_at])

    def as_flat(self) -> list[Any]:
        """The run as a track's flat records: ``kind, label, start, end, args`` per event (args a dict or None, or a
        message's tuple of values: an array unpacked as a tuple); an instant's end is its start (the same object, as
        the recorders record it)."""
        flat: list[Any] = []
        extend = flat.extend
        for kind, label, start, end, args in self.events():
            extend(
                (kind, label, start, start if end == start else end, msgpack.unpackb(args, raw=False, use_list=False))
            )
        return flat


def pack_record(kind: int, label: int, start: int, end: int, args: dict[str, Any] | tuple[Any, ...] | None) -> bytes:
    """One record, as the C recorder writes it (for tests and tools): ``args`` as the stream encoder packs a map of
    text keys and flat values, or a message's flat values."""
    packed: bytes = msgpack.packb(args, use_bin_type=True)
    return HEADER.pack(HEADER.size + len(packed), kind, label, start, end) + packed
