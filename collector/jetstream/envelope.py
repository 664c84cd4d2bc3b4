"""A JetStream message of a ringtrace stream: one sealed segment's bytes (its session frames, then EVENTS frames: a
stream in the wire format, readable alone) and headers saying whose it is, what time it spans and what its process
received and lost so far.

Accounting across collectors: a collector cannot see what the stream's limits removed, nor the counts of processes
connected to other collectors. So each message carries, per track, its process's running counts *on the collector
that published it* (``Ringtrace-Counts``): events and bytes handed to the stream (received, less what is still in an
open segment), capped and discarded. Those counts start again when the collector forgets a process (idle past
``--forget-after``, nothing of it held there) and it connects again: its record there is a new one
(``Ringtrace-Record``). A reader takes, per (collector, record), the counts of the newest message it reads
(``Ringtrace-Seq``), sums them over collectors and records, and what the stream holds of the process is stored;
what it was handed but no longer holds was removed by the stream's limits (``max_bytes``, ``max_age``): overwritten.
So received = stored + overwritten + capped + discarded holds per track, per process and fleet-wide.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ringtrace.collector.store.accounts import Counts
from ringtrace.collector.store.segments import INDEX_ENTRY, Segment

__all__ = [
    "CLEARED",
    "COLLECTOR",
    "COUNTS",
    "EVENTS",
    "EVENT_BYTES",
    "FIRST_NS",
    "LAST_NS",
    "MSG_ID",
    "PROCESS",
    "RECORD",
    "SEQ",
    "Envelope",
    "cleared_header",
    "counts_header",
    "read_cleared",
    "segment_span",
]

MSG_ID: Final = "Nats-Msg-Id"
COLLECTOR: Final = "Ringtrace-Collector"
#: The process's record on that collector (its uid there): its counts there start from zero with a new one.
RECORD: Final = "Ringtrace-Record"
SEQ: Final = "Ringtrace-Seq"
PROCESS: Final = "Ringtrace-Process"
EVENTS: Final = "Ringtrace-Events"
#: Bytes of its EVENTS frames.
EVENT_BYTES: Final = "Ringtrace-Event-Bytes"
FIRST_NS: Final = "Ringtrace-First-Ns"
LAST_NS: Final = "Ringtrace-Last-Ns"
COUNTS: Final = "Ringtrace-Counts"
#: On a note (a message with no payload) left on a process's subject when what it held was purged on request: per
#: track, [events, bytes] removed so far, all purges together (``POST /clear``, ``POST /pop``).
CLEARED: Final = "Ringtrace-Cleared"


def segment_span(segment: Segment) -> tuple[int, int]:
    """The first and last timestamp (the client's monotonic ns) of the segment's EVENTS frames, by its index."""
    first, last = 2**64, 0
    with memoryview(segment.buffer) as view:
        top = segment.size - INDEX_ENTRY.size * segment.entries
        for _, _, _, _, first_ts, last_ts in INDEX_ENTRY.iter_unpack(view[top : segment.size]):
            first, last = min(first, first_ts), max(last, last_ts)
    return (first, last) if segment.entries else (0, 0)


def counts_header(handed: Mapping[int, Counts]) -> str:
    """Per track: [received events, bytes, capped events, bytes, discarded events, bytes] (received: as handed)."""
    return json.dumps(
        {
            str(track_id): [
                c.received_events,
                c.received_bytes,
                c.capped_events,
                c.capped_bytes,
                c.discarded_events,
                c.discarded_bytes,
            ]
            for track_id, c in handed.items()
        },
        separators=(",", ":"),
    )


def cleared_header(cleared: Mapping[int, tuple[int, int]]) -> str:
    return json.dumps({str(track_id): list(counts) for track_id, counts in cleared.items()}, separators=(",", ":"))


#: The largest count a header may give (anything may publish on the stream's subjects: a count is checked).
_MAX_COUNT: Final = 2**63 - 1


def _counts_of(raw: object, length: int) -> dict[int, list[int]]:
    """``raw`` (a header's JSON) as per track id, ``length`` counts, each an integer from 0 to _MAX_COUNT.

    Raises:
        ValueError: it is not that.
    """
    if not isinstance(raw, dict):
        raise ValueError("not an object")
    out = {}
    for track, values in raw.items():
        if not isinstance(values, list) or len(values) != length:
            raise ValueError(f"track {track}: not a list of {length} counts")
        if not all(type(value) is int and 0 <= value <= _MAX_COUNT for value in values):
            raise ValueError(f"track {track}: a count is not an integer from 0 to {_MAX_COUNT}")
        out[int(track)] = values
    return out


def read_cleared(headers: Mapping[str, str] | None) -> dict[int, tuple[int, int]] | None:
    """A note's counts of what was purged (``CLEARED``); None for any other message, {} for one that is not such."""
    if not headers or CLEARED not in headers:
        return None
    try:
        return {track: (v[0], v[1]) for track, v in _counts_of(json.loads(headers[CLEARED]), 2).items()}
    except ValueError:  # (json.JSONDecodeError too)
        return {}


@dataclass(frozen=True, slots=True)
class Envelope:
    """What a message's headers say (``read``)."""

    collector: str
    #: The process's record on that collector (``RECORD``; 0 from a collector that did not say).
    record: int
    seq: int
    #: Per track id: the process's running counts on that collector (``stored`` left for the reader to find).
    counts: dict[int, Counts]

    @classmethod
    def read(cls, headers: Mapping[str, str] | None) -> Envelope | None:
        """The headers of a message a collector published; None for one it did not (no ``Ringtrace-Seq``)."""
        if not headers or SEQ not in headers or COLLECTOR not in headers:
            return None
        try:
            seq = int(headers[SEQ])
            record = int(headers.get(RECORD, "0"))
            raw = _counts_of(json.loads(headers.get(COUNTS, "{}")), 6)
            counts = {track: Counts(v[0], v[1], 0, 0, v[2], v[3], v[4], v[5]) for track, v in raw.items()}
        except ValueError:
            return None
        return cls(headers[COLLECTOR], record, seq, counts)
