"""An incident's window kept from the ring: the stored segments it needs, pinned from the moment its rule fires until
it is written, within a budget of their own (``--incident-capacity``).

Theory of operation
-------------------
A ``Capture`` is one firing's window, ``[start - before, end + after]`` in wall-clock ns, over the processes of its
scope (each with its clock offset: a stored frame's index gives its events' first and last ``ts``, and ``ts`` plus the
offset is wall-clock time). At fire (``CapturePins.begin``), every stored segment of those processes that overlaps
the window is pinned. While ``after`` runs, the store tells ``CapturePins.evicted`` of each segment it lets go of
(``Store.on_evicted``), before its buffer is released: one that a collecting capture wants (its processes, its window)
is pinned too. When ``after`` has run (``CapturePins.end``), the segments of its processes stored then are pinned as
well: the capture now holds every stored frame of its window, and nothing the ring does can take it.

Budget: a pinned segment that is still in the ring costs nothing beside it; once the ring has let it go, its buffer
is memory of the incidents' own, charged to ``capacity_bytes`` (once, however many captures hold it) until the last
capture lets go of it. A segment that would pass the budget is not kept: its events of the window are counted in each
capture that wanted it (``lost["over_budget"]``), never silent. So are the window's events that the ring overwrote
before the rule fired (``lost["overwritten_before_fire"]``: the store's recent evictions are remembered, by segment, so
a segment partly in the window counts whole), and what a capture let go of when it failed. A capture being written
(``after`` has run) keeps what it holds, past the budget if need be: its worker reads it.

No asyncio, no threads: called on the store's thread (the event loop), as the store is.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from ringtrace.collector.store.ring import Removal, Store
from ringtrace.collector.store.segments import INDEX_ENTRY, Segment

__all__ = [
    "EVICTIONS_REMEMBERED",
    "OWNERS_REMEMBERED",
    "Capture",
    "CaptureHold",
    "CapturePins",
    "Window",
    "window_events",
]

#: How many recent evictions are remembered per process, to count what a window lost before its rule fired.
EVICTIONS_REMEMBERED: Final = 4096
#: Of how many processes (those evicted from most recently).
OWNERS_REMEMBERED: Final = 1024


@dataclass(frozen=True, slots=True)
class Window:
    """Wall-clock ns: an event is in the window when it starts in ``[since_ns, until_ns)``."""

    since_ns: int
    until_ns: int

    def as_dict(self) -> dict[str, int]:
        return {"since_ns": self.since_ns, "until_ns": self.until_ns}


def window_events(segment: Segment, offset_ns: int, window: Window) -> int:
    """Events of the segment's EVENTS frames whose times overlap ``window`` (by the index: whole frames), given its
    process's clock offset."""
    entries = segment.entries
    if not entries:
        return 0
    size, since, until = segment.size, window.since_ns - offset_ns, window.until_ns - offset_ns
    events = 0
    with memoryview(segment.buffer) as whole, whole[size - INDEX_ENTRY.size * entries : size] as index:
        for _, _, _, count, first_ts, last_ts in INDEX_ENTRY.iter_unpack(index):
            if first_ts < until and last_ts >= since:
                events += count
    return events


def _span(segment: Segment, offset_ns: int) -> tuple[int, int]:
    """The wall-clock ns of the first and last event the segment's frames hold."""
    first, last = 2**63, -(2**63)
    size = segment.size
    with memoryview(segment.buffer) as whole, whole[size - INDEX_ENTRY.size * segment.entries : size] as index:
        for _, _, _, _, first_ts, last_ts in INDEX_ENTRY.iter_unpack(index):
            first, last = min(first, first_ts), max(last, last_ts)
    return first + offset_ns, last + offset_ns


@dataclass(eq=False, slots=True)
class Capture:
    """One firing's window over the processes of its scope (uid -> clock offset), and the segments pinned for it.

    ``lost`` counts, by cause, the window's events it could not keep.
    """

    incident_id: str
    window: Window
    offsets: dict[int, int]
    #: By seq: the segments pinned for it (one pin each, its own).
    pinned: dict[int, Segment] = field(default_factory=dict)
    #: Still collecting (``after`` runs): a segment the ring lets go of may be kept.
    collecting: bool = True
    lost: dict[str, int] = field(default_factory=lambda: {"overwritten_before_fire": 0, "over_budget": 0})
    #: ``lost["overwritten_before_fire"]`` by process (a ``trace`` scope keeps only some at save).
    overwritten_by_owner: dict[int, int] = field(default_factory=dict)
    #: ``lost["over_budget"]`` by process, likewise.
    over_budget_by_owner: dict[int, int] = field(default_factory=dict)

    def wants(self, segment: Segment) -> int:
        """Events of ``segment`` in the window, if it is of one of its processes (0: it wants none of it)."""
        offset = self.offsets.get(segment.owner)
        return 0 if offset is None else window_events(segment, offset, self.window)

    def segments(self) -> list[Segment]:
        """What it holds, oldest first."""
        return [self.pinned[seq] for seq in sorted(self.pinned)]


class CapturePins:
    """The captures under way, the segments they pin and the budget those take beside the ring.

    Args:
        store: the store whose segments are pinned (its ``on_evicted`` is set to ``evicted``).
        capacity_bytes: what segments let go of by the ring, kept for incidents, may take (``--incident-capacity``).
    """

    def __init__(
        self,
        store: Store,
        capacity_bytes: int,
        offset_of: Callable[[int], int | None] | None = None,
        *,
        published_read_back: bool = False,
    ) -> None:
        self._store = store
        #: ``--jetstream``: a window is read back from the stream, so a segment leaving as published is not kept,
        #: charged or counted lost.
        self.published_read_back = published_read_back
        self.capacity_bytes = capacity_bytes
        self.captures: list[Capture] = []
        #: Bytes of the segments kept for incidents that the ring let go of (charged to ``capacity_bytes``).
        self.held_bytes = 0
        #: Most held at once, since start.
        self.peak_bytes = 0
        #: By seq: segments out of the ring that captures keep, and how many captures keep each.
        self._charged: dict[int, int] = {}
        #: Recent evictions by owner: (first wall ns, last wall ns, events), oldest first (a firing reads only its
        #: processes', on the event loop).
        self._evictions: dict[int, deque[tuple[int, int, int]]] = {}
        #: Each process's clock offset, for the evictions' times, unless ``offset_of`` looks it up (the engine's, in
        #: the registry at each eviction: however long since the watch last stepped, if it steps at all).
        self.offsets: dict[int, int] = {}
        self._offset_of = offset_of if offset_of is not None else lambda owner: self.offsets.get(owner)
        store.on_evicted(self.evicted)

    def close(self) -> None:
        """Let go of the store, and of the captures still collecting; one being written keeps its segments until its
        reader lets go of them (``release``): its worker may read on after the collector stopped waiting for it."""
        for capture in [c for c in self.captures if c.collecting]:
            self.release(capture)
        self._store.on_evicted(None)

    def begin(self, capture: Capture) -> None:
        """Pin the stored segments of the capture's processes that overlap its window, and count what of the window
        the ring overwrote before (by the evictions remembered)."""
        self.captures.append(capture)
        for segment in self._store.stored(capture.offsets):
            if capture.wants(segment):
                self._pin(capture, segment)
        window, by_owner = capture.window, capture.overwritten_by_owner
        for owner in capture.offsets:
            for first, last, events in self._evictions.get(owner, ()):
                if first < window.until_ns and last >= window.since_ns:
                    by_owner[owner] = by_owner.get(owner, 0) + events
        capture.lost["overwritten_before_fire"] = sum(by_owner.values())

    def end(self, capture: Capture) -> list[Segment]:
        """``after`` has run: pin what its processes store now of the window too; returns every segment it holds,
        oldest first."""
        capture.collecting = False
        for segment in self._store.stored(capture.offsets):
            if segment.seq not in capture.pinned and capture.wants(segment):
                self._pin(capture, segment)
        return capture.segments()

    def release(self, capture: Capture, segments: Iterable[Segment] | None = None) -> None:
        """The capture lets go of ``segments``; of all it holds by default, and then it is done."""
        pinned = capture.pinned
        for segment in list(pinned.values()) if segments is None else list(segments):
            if pinned.pop(segment.seq, None) is None:
                continue
            if segment.seq in self._charged:
                self._charged[segment.seq] -= 1
                if self._charged[segment.seq] == 0:
                    del self._charged[segment.seq]
                    self.held_bytes -= segment.size
            self._store.unpin([segment])
        if segments is None and capture in self.captures:
            self.captures.remove(capture)

    def evicted(self, segment: Segment, why: Removal) -> None:
        """The store lets go of ``segment`` (``Store.on_evicted``): the captures that hold or want it keep it, within
        the budget; what the budget cannot keep is counted lost by each of them."""
        if why != "published":  # (a segment published to a stream is stored there still)
            offset = self._offset_of(segment.owner)
            if offset is not None and segment.entries:
                first, last = _span(segment, offset)
                remembered = self._evictions.get(segment.owner)
                if remembered is None:
                    if len(self._evictions) >= OWNERS_REMEMBERED:  # (the process evicted from longest ago goes)
                        del self._evictions[next(iter(self._evictions))]
                    remembered = self._evictions[segment.owner] = deque(maxlen=EVICTIONS_REMEMBERED)
                else:
                    self._evictions[segment.owner] = self._evictions.pop(segment.owner)  # (newest last)
                remembered.append((first, last, segment.events))
        holders = [c for c in self.captures if segment.seq in c.pinned]
        if why == "published" and self.published_read_back:
            for capture in holders:  # (the store releases the buffer after this hook, once no pin is left)
                del capture.pinned[segment.seq]
                segment.pins -= 1
            return
        takers = [c for c in self.captures if c.collecting and segment.seq not in c.pinned and c.wants(segment)]
        if not holders and not takers:
            return
        # A capture that has stopped collecting is being written (its worker reads the segment): it keeps it, past
        # the budget if need be, and the others may as well, since its buffer stays anyway.
        saving = any(not c.collecting for c in holders)
        if not saving and self.held_bytes + segment.size > self.capacity_bytes:
            for capture in itertools.chain(holders, takers):
                wanted, by_owner = capture.wants(segment), capture.over_budget_by_owner
                capture.lost["over_budget"] += wanted
                by_owner[segment.owner] = by_owner.get(segment.owner, 0) + wanted
            for capture in holders:  # (the store releases the buffer after this hook, once no pin is left)
                del capture.pinned[segment.seq]
                segment.pins -= 1
            return
        self.held_bytes += segment.size
        self.peak_bytes = max(self.peak_bytes, self.held_bytes)
        self._charged[segment.seq] = len(holders)
        for capture in takers:
            self._pin(capture, segment)

    def _pin(self, capture: Capture, segment: Segment) -> None:
        self._store.pin(segment)
        capture.pinned[segment.seq] = segment
        if segment.seq in self._charged:
            self._charged[segment.seq] += 1


class CaptureHold:
    """A capture's segments as a snapshot's pins: closing the snapshot lets the capture go (``StoreSnapshot``)."""

    def __init__(self, pins: CapturePins, capture: Capture) -> None:
        self._pins, self._capture = pins, capture

    def unpin(self, segments: list[Segment]) -> None:
        self._pins.release(self._capture)
