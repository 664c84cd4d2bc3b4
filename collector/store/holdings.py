"""What the store holds: every stored segment, oldest first, the stream writing into each open one, and each process's
segments and bytes.

Segments come in (``add``) and leave here: evicted or cleared with their events counted where they went
(``remove``), or dropped when they hold no events (``remove_empty``). What becomes of a segment's buffer is the
budget's to say (``budget.py``).
"""

from __future__ import annotations

from typing import Literal

from ringtrace.collector.store.accounts import ProcessHolding
from ringtrace.collector.store.segments import Segment
from ringtrace.collector.store.streams import Stream

__all__ = ["Holdings", "Removal"]

#: Why a segment that holds events leaves: its events are counted so, per track; but ``published``: its events are
#: stored elsewhere now (a JetStream stream acknowledged them), and stay counted stored.
Removal = Literal["overwritten", "capped", "cleared", "discarded", "published"]


class Holdings:
    """The stored segments and who holds them; see the module docstring."""

    __slots__ = ("connected", "held_bytes", "processes", "segments", "streams", "writers")

    def __init__(self) -> None:
        self.segments: dict[int, Segment] = {}  # oldest first
        self.writers: dict[int, Stream] = {}  # segment seq -> the stream writing into it
        self.processes: dict[int, ProcessHolding] = {}
        #: Bytes of all stored segments (prefix, frames, index and unused tail alike).
        self.held_bytes = 0
        #: Connections open, and the processes they are of.
        self.streams = 0
        self.connected = 0

    def add(self, segment: Segment, writer: Stream | None = None) -> None:
        """Hold ``segment``, the newest of its process (written into by ``writer``, if any)."""
        self.segments[segment.seq] = segment
        if writer is not None:
            self.writers[segment.seq] = writer
        process = self.processes[segment.owner]
        process.segments.append(segment)
        process.held_bytes += segment.size
        self.held_bytes += segment.size

    def seal(self, segment: Segment) -> None:
        """Its stream writes into ``segment`` no more."""
        self.writers.pop(segment.seq, None)

    def oldest(self) -> Segment:
        """The segment the ring overwrites next: the oldest sealed one, or the oldest of all when every segment is
        open (a connection's open segment holds its newest events, and is read into as they arrive)."""
        writers = self.writers
        for segment in self.segments.values():
            if segment.seq not in writers:
                return segment
        return next(iter(self.segments.values()))

    def remove(self, segment: Segment, why: Removal) -> None:
        """``segment`` leaves (its process's oldest, but for an open one kept); its events are counted ``why`` per
        track."""
        del self.segments[segment.seq]
        writer = self.writers.pop(segment.seq, None)
        if writer is not None:
            writer.detach()
        process = self.processes[segment.owner]
        if process.segments[0] is segment:
            process.segments.popleft()
        else:  # a process on two connections: the ring takes its sealed segment ahead of its older, open one
            process.segments.remove(segment)
        process.held_bytes -= segment.size
        self.held_bytes -= segment.size
        segment.evicted = True
        if why == "published":
            return
        lost = process.counts.lost
        for track_id, (events, size) in segment.tracks.items():
            lost(track_id, why, events, size)
            process.emptied_if_gone(track_id)

    def remove_empty(self, segment: Segment) -> None:
        """An open segment that holds no events leaves (nothing to count): session frames replayed for a frame that
        never came."""
        del self.segments[segment.seq]
        self.writers.pop(segment.seq).detach()
        process = self.processes[segment.owner]
        process.segments.remove(segment)
        process.held_bytes -= segment.size
        self.held_bytes -= segment.size
        segment.evicted = True
