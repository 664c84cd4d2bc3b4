"""The store's accounting: what each process holds, and what it received and lost, per track, per process and in
total (forgotten processes included), as ``ring.py``'s theory of operation states it:
received = stored + overwritten + capped + discarded + cleared.

The store moves segments and counts each frame where it is stored or lost; these are the counts and the questions
asked of them (``/stats``, ``/metrics``, ``/sources``, snapshots, live tails), answered without touching a segment.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Final

from ringtrace.collector.store.segments import Segment

__all__ = [
    "CLEARED_REMEMBERED",
    "EMPTIED_TRACKS_LISTED",
    "FOLDED_TRACK",
    "FORGOTTEN_KEPT_REMEMBERED",
    "Accounts",
    "Counts",
    "ProcessHolding",
    "TrackCounts",
]

#: Segments removed on request remembered (for live tails: ``cleared_segments``).
CLEARED_REMEMBERED: Final = 16384
#: Processes forgotten whose kept events are remembered (``kept_events``: the rules' watch counts what it did not read
#: of a process the store forgot since its last step).
FORGOTTEN_KEPT_REMEMBERED: Final = 16384
#: Tracks of a process that ended with nothing of them left stored counted one by one, the latest; past them, the
#: counts of the oldest go into ``FOLDED_TRACK``'s (an OTLP trace has tracks of its own: every trace ever received
#: would otherwise be kept, listed and summed).
EMPTIED_TRACKS_LISTED: Final = 1000
#: The key of a process's counts under which those of its tracks past ``EMPTIED_TRACKS_LISTED`` are summed (no track
#: id: those are 32-bit unsigned).
FOLDED_TRACK: Final = -1


@dataclass(slots=True)
class Counts:
    """Events and bytes (of EVENTS frames) of one track, process or total; ``stored`` is what is left."""

    received_events: int = 0
    received_bytes: int = 0
    overwritten_events: int = 0
    overwritten_bytes: int = 0
    capped_events: int = 0
    capped_bytes: int = 0
    discarded_events: int = 0
    discarded_bytes: int = 0
    #: Removed on request (``POST /clear``): not a loss, but no longer stored.
    cleared_events: int = 0
    cleared_bytes: int = 0

    @property
    def stored_events(self) -> int:
        lost = self.overwritten_events + self.capped_events + self.discarded_events + self.cleared_events
        return self.received_events - lost

    @property
    def stored_bytes(self) -> int:
        return (
            self.received_bytes - self.overwritten_bytes - self.capped_bytes - self.discarded_bytes - self.cleared_bytes
        )

    def add(self, other: Counts) -> None:
        for name in _COUNT_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict[str, int]:
        out = {name: getattr(self, name) for name in _COUNT_FIELDS}
        out["stored_events"], out["stored_bytes"] = self.stored_events, self.stored_bytes
        return out


_COUNT_FIELDS: Final = tuple(f.name for f in fields(Counts))


class TrackCounts(dict[int, Counts]):
    """A process's counts per track id, and their sum (``total``), kept as they change: what sums a process's counts
    (``/healthz``, ``/metrics``, the rates sampled every second) reads it, not every track's (an OTLP trace has tracks
    of its own: a store may hold millions). Counts change through ``received`` and ``lost`` only."""

    __slots__ = ("total",)

    def __init__(self, counts: Mapping[int, Counts] | None = None) -> None:
        super().__init__(counts or {})
        self.total = Counts()
        for each in self.values():
            self.total.add(each)

    def received(self, track_id: int, events: int, nbytes: int) -> Counts:
        """Events and bytes received on track ``track_id``; its counts."""
        counts = self.get(track_id)
        if counts is None:
            counts = self[track_id] = Counts()
        counts.received_events += events
        counts.received_bytes += nbytes
        total = self.total
        total.received_events += events
        total.received_bytes += nbytes
        return counts

    def lost(self, track_id: int, why: str, events: int, nbytes: int) -> None:
        """Events and bytes of track ``track_id`` no longer stored, ``why``: overwritten, capped, discarded, cleared."""
        events_name, bytes_name = f"{why}_events", f"{why}_bytes"
        for counts in (self[track_id], self.total):
            setattr(counts, events_name, getattr(counts, events_name) + events)
            setattr(counts, bytes_name, getattr(counts, bytes_name) + nbytes)


@dataclass(slots=True)
class ProcessHolding:
    """What one process holds: its segments, oldest first, and their bytes; its connections' tables."""

    segments: deque[Segment] = field(default_factory=deque)
    held_bytes: int = 0
    #: What its open connections' tables are charged (``Budget.charge_tables``).
    table_bytes: int = 0
    streams: int = 0
    #: Per track id (and ``FOLDED_TRACK``), and their sum.
    counts: TrackCounts = field(default_factory=TrackCounts)
    #: Tracks ended (a TRACK frame said so) with events still stored.
    ended: set[int] = field(default_factory=set)
    #: Tracks ended with nothing of them left stored, the latest last (``EMPTIED_TRACKS_LISTED`` at most).
    emptied: OrderedDict[int, None] = field(default_factory=OrderedDict)

    def track_ended(self, track_id: int) -> None:
        self.ended.add(track_id)
        self.emptied_if_gone(track_id)

    def emptied_if_gone(self, track_id: int) -> None:
        """If track ``track_id`` ended and nothing of it is left stored: among the emptied, past whose bound the
        oldest one's counts are folded into ``FOLDED_TRACK``'s."""
        if track_id not in self.ended:
            return
        counts = self.counts.get(track_id)
        if counts is not None and (counts.stored_events or counts.stored_bytes):
            return
        self.ended.discard(track_id)
        if counts is None:
            return
        self.emptied[track_id] = None
        if len(self.emptied) > EMPTIED_TRACKS_LISTED:
            oldest, _ = self.emptied.popitem(last=False)
            gone = self.counts[oldest]
            if not gone.stored_events and not gone.stored_bytes:  # (not declared again since, and stored into)
                self.counts.setdefault(FOLDED_TRACK, Counts()).add(self.counts.pop(oldest))


class Accounts:
    """The counts of every process the store knows (``processes``: the store's own table, read here), of those it
    forgot, and which segments were removed on request.

    Args:
        processes: per process uid, what it holds; the store adds and removes processes, this reads them.
    """

    def __init__(self, processes: dict[int, ProcessHolding]) -> None:
        self._processes = processes
        #: Counts of processes forgotten (``forget``).
        self.forgotten = Counts()
        #: Segments removed on request, oldest first: seq -> (owner, events) (``cleared_segments``).
        self._cleared: OrderedDict[int, tuple[int, int]] = OrderedDict()
        #: Processes forgotten, oldest first: uid -> events kept of it (``kept_events``).
        self._forgotten_kept: OrderedDict[int, int] = OrderedDict()

    def totals(self) -> Counts:
        total = Counts()
        total.add(self.forgotten)
        for process in self._processes.values():
            total.add(process.counts.total)
        return total

    def track_counts(self) -> dict[tuple[int, int], Counts]:
        """Counts per (process uid, track id), copied."""
        return {
            (owner, track_id): replace(counts)
            for owner, process in self._processes.items()
            for track_id, counts in process.counts.items()
        }

    def process_counts(self) -> dict[int, Counts]:
        """Counts per process uid (its tracks summed)."""
        return {owner: replace(process.counts.total) for owner, process in self._processes.items()}

    def process_received(self) -> dict[int, tuple[int, int]]:
        """(events, bytes) received per process uid: what rates are sampled from, every second, on the loop (so two
        fields, not every count)."""
        return {
            owner: (process.counts.total.received_events, process.counts.total.received_bytes)
            for owner, process in self._processes.items()
        }

    def process_held_bytes(self, owner: int) -> int:
        process = self._processes.get(owner)
        return process.held_bytes if process is not None else 0

    def kept_events(self, owners: Iterable[int]) -> dict[int, int]:
        """Per process: events it sent that the store kept, whether still stored or overwritten or cleared since (all
        but those refused: discarded, capped); of a process forgotten, as it was then (the latest
        ``FORGOTTEN_KEPT_REMEMBERED`` forgotten)."""
        kept = {}
        for owner in owners:
            process = self._processes.get(owner)
            if process is not None:
                kept[owner] = _kept(process)
            elif owner in self._forgotten_kept:
                kept[owner] = self._forgotten_kept[owner]
        return kept

    def forget(self, owner: int) -> None:
        """Fold the counts of process ``owner`` into ``forgotten``, and drop its bookkeeping."""
        process = self._processes.pop(owner, None)
        if process is not None:
            self._forgotten_kept[owner] = _kept(process)
            while len(self._forgotten_kept) > FORGOTTEN_KEPT_REMEMBERED:
                self._forgotten_kept.popitem(last=False)
            self.forgotten.add(process.counts.total)

    def cleared(self, seq: int, owner: int, events: int) -> None:
        """Segment ``seq`` of process ``owner``, holding ``events``, was removed on request."""
        self._cleared[seq] = (owner, events)
        while len(self._cleared) > CLEARED_REMEMBERED:
            self._cleared.popitem(last=False)

    def cleared_segments(self, owners: Container[int], after_seq: int) -> dict[int, tuple[int, int]]:
        """Segments of the processes ``owners`` removed on request (``Store.clear``), from the oldest one after
        ``after_seq`` on: (owner, events it held) per seq (the last CLEARED_REMEMBERED only)."""
        return {seq: cleared for seq, cleared in self._cleared.items() if seq > after_seq and cleared[0] in owners}


def _kept(process: ProcessHolding) -> int:
    total = process.counts.total
    return total.received_events - total.discarded_events - total.capped_events
