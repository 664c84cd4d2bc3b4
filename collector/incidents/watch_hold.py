"""Segments the store let go of, overwritten by the ring or acknowledged by a JetStream stream (``--jetstream``:
``published``), kept pinned until the rules' watch has read them, so that a busy collector's watch does not miss
what it had no step to read yet: under a flood the ring may turn over faster than the watch's steps come.

Theory of operation
-------------------
The store tells of each segment that leaves (``Store.on_evicted``): one overwritten or published that the watch has not
read whole (``Watch.unread_of``) is pinned here, within ``max_bytes`` (its buffer is neither reused nor unmapped), and
each watch step reads it among the stored ones (``segments``, oldest first). After each step, those the watch has read
whole are let go (``let_go``): their buffers are the store's spares, within what of ``max_bytes`` the hold does not use
(``_spare_room``), so that the ring reuses them rather than zeroing fresh ones. One that does not fit is not kept: its
unread events are counted here (``dropped_events``), and the watch counts them unread as it sees the segment gone
(``RuleWatch.unread_events``). A step reads on a worker thread while ingest goes on: one of the segments it reads
(``reading``, from its snapshot to its ``let_go``) that leaves meanwhile and does not fit is counted once the step ends,
what the step left of it unread (its snapshot pinned it: the step reads it whole or in part, and what it judged is not
lost). Segments that leave for another reason (capped, cleared, discarded: refused or removed on request) are not kept.
What it keeps of a process forgotten since (it ended and holds nothing stored) is let go of before the next step's
snapshot, its unread events counted dropped, and that step is told what the store had kept of the process
(``kept_of_gone``: the store remembers it), so that the watch counts them unread too. The hook before this one (the
captures' pins) is told first, of every segment, as before. ``stored_now`` is what a step reads; ``step_pinned`` runs
one as the engine does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container
from functools import partial
from typing import Final

from ringtrace.collector.incidents.engine_needs import Watch
from ringtrace.collector.incidents.firing import Firing
from ringtrace.collector.read.frame_walk import ProcessView
from ringtrace.collector.store.holdings import Removal
from ringtrace.collector.store.pinned_read import read_pinned
from ringtrace.collector.store.processes import Registry
from ringtrace.collector.store.ring import Store
from ringtrace.collector.store.segments import Segment
from ringtrace.collector.store.views import SegmentView, StoreSnapshot

__all__ = ["KEPT", "WatchHold", "step_pinned", "stored_now"]

#: Why a segment leaves that the hold keeps it for the watch.
KEPT: Final = ("overwritten", "published")


class WatchHold:
    """See the module docstring.

    Args:
        store: the store whose published segments are kept (its ``on_evicted`` is set to ``evicted``).
        max_bytes: what the kept segments may take at most, beside the ring.
        then: the hook ``evicted`` calls first (the captures' pins).
        watch_of: the rules' watch, if any (what it has not read of a segment is kept).
    """

    def __init__(
        self,
        store: Store,
        max_bytes: int,
        then: Callable[[Segment, Removal], None],
        watch_of: Callable[[], Watch | None],
    ) -> None:
        self._store, self.max_bytes, self._then, self._watch_of = store, max_bytes, then, watch_of
        self._held: dict[int, Segment] = {}
        self.held_bytes = 0
        #: Segments not kept (past ``max_bytes``) while the watch had not read them, and their events unread then.
        self.dropped_segments = 0
        self.dropped_events = 0
        #: The segments the step under way reads (``reading``), and those of them that left not kept: counted at
        #: ``let_go``, once the step ended.
        self._reading: Container[int] = ()
        self._leaving: list[tuple[int, int]] = []
        #: The processes a segment of which left while the watch was there (``kept_of_gone``), and those of them
        #: told to the step under way (told again to the next one if it raised: ``untold``).
        self._left: set[int] = set()
        self._telling: set[int] = set()
        store.on_evicted(self.evicted, self._spare_room)

    def evicted(self, segment: Segment, why: Removal) -> None:
        self._then(segment, why)
        if self._watch_of() is not None:
            self._left.add(segment.owner)
        if why not in KEPT or segment.seq in self._held:
            return
        unread = self._unread_of(segment.seq, segment.events)
        if unread <= 0:
            return
        if self.held_bytes + segment.size > self.max_bytes:
            if segment.seq in self._reading:  # (the step may judge some or all of it yet: counted once it ended)
                self._leaving.append((segment.seq, segment.events))
            else:
                self._drop(unread)
            return
        self._store.pin(segment)
        self._held[segment.seq] = segment
        self.held_bytes += segment.size

    def _spare_room(self) -> int:
        """What of ``max_bytes`` the store's spare buffers may take past its capacity, while a watch is there: what
        the hold does not use now. A segment evicted pinned takes its buffer out of the ring, which takes another for
        its next segment; once the watch read the kept one, its buffer is the ring's next spare, rather than freed
        while the ring zeroes a fresh one (page faults and zeroing a page each) for every segment kept. The stored,
        the spare and the kept bytes stay within the capacity and ``max_bytes`` together."""
        return self.max_bytes - self.held_bytes if self._watch_of() is not None else 0

    @property
    def watch(self) -> Watch | None:
        """The rules' watch it keeps segments for (None: no watch now)."""
        return self._watch_of()

    def reading(self, seqs: Container[int]) -> Container[int]:
        """A step begins that reads the segments ``seqs`` (its snapshot pins them); it ends at ``let_go``."""
        self._reading = seqs
        return seqs

    def kept_of_gone(self, present: Container[int]) -> dict[int, int]:
        """Per process no longer among ``present`` (forgotten: it ended and holds nothing stored) a segment of which
        left while the watch was there, the events the store had kept of it (``Store.kept_events`` remembers them): for
        the watch's next step to count what it did not read of them (``RuleWatch.unread_events``). Each is told once,
        to a step that ends (one that raises hands them to the next: ``untold``)."""
        gone = [owner for owner in self._left if owner not in present]
        self._left.difference_update(gone)
        self._telling = set(gone)
        return self._store.kept_events(gone)

    def untold(self) -> None:
        """The step told of the processes gone (``kept_of_gone``) raised: the next one is told of them instead (the
        store remembers what it kept of each; a step told twice counts the same)."""
        self._left |= self._telling
        self._telling = set()

    def _drop(self, unread: int) -> None:
        self.dropped_segments += 1
        self.dropped_events += unread

    def _unread_of(self, seq: int, events: int) -> int:
        watch = self._watch_of()
        return watch.unread_of(seq, events) if watch is not None else 0

    def segments(self) -> list[Segment]:
        """The segments kept, oldest first (a step's snapshot pins them again while it reads)."""
        return list(self._held.values())

    def let_go(self, owners: Container[int] | None = None) -> None:
        """A step ended (or none runs): count what it left unread of the segments that left while it read them
        and were not kept; unpin the segments the watch has read whole, and those of processes no longer among
        ``owners`` (the watch reads them no more: their unread events are counted dropped)."""
        leaving, self._leaving, self._reading = self._leaving, [], ()
        for seq, events in leaving:
            unread = self._unread_of(seq, events)
            if unread > 0:
                self._drop(unread)
        done = []
        for segment in self._held.values():
            unread = self._unread_of(segment.seq, segment.events)
            if unread > 0 and owners is not None and segment.owner not in owners:
                self._drop(unread)
                unread = 0
            if unread <= 0:
                done.append(segment)
        for segment in done:
            del self._held[segment.seq]
            self.held_bytes -= segment.size
        self._store.unpin(done)

    def close(self) -> None:
        """Let go of every segment kept (the collector stops)."""
        held, self._held, self.held_bytes = list(self._held.values()), {}, 0
        self._store.unpin(held)


def stored_now(
    registry: Registry, store: Store, hold: WatchHold | None = None
) -> tuple[StoreSnapshot, list[tuple[ProcessView, SegmentView]], dict[int, int]]:
    """Every stored segment (and those ``hold`` keeps), with its process; and the events the store kept of each
    process so far: what a watch step reads. With ``hold``, only the segments its watch's step reads are pinned
    (``RuleWatch.to_read``; the snapshot lets go of them): a step pinning every stored one would keep the ring from
    reusing the buffers of what it overwrites meanwhile. Without, every one is."""
    processes = {uid: ProcessView.of(p) for uid, p in registry.by_uid.items()}
    if hold is not None:  # (what it keeps of processes forgotten since: counted dropped while the watch can say)
        hold.let_go(processes)
    watch = hold.watch if hold is not None else None
    if hold is None or watch is None:
        frames = store.snapshot(owners=processes, also=hold.segments() if hold is not None else ())
    else:
        reads = partial(_step_reads, hold, watch)
        frames = store.snapshot(owners=processes, also=hold.segments(), reads=reads)
    kept = store.kept_events(processes)
    if hold is not None:  # (and of processes forgotten since the last step, as the store remembers them)
        kept = {**hold.kept_of_gone(processes), **kept}
    return frames, [(processes[segment.owner], segment) for segment in frames.segments], kept


async def step_pinned(
    watch: Watch, registry: Registry, store: Store, hold: WatchHold | None, spent: list[float] | None = None
) -> list[Firing]:
    """One step of ``watch`` on a worker thread, the stored segments it reads pinned meanwhile (``stored_now``);
    then ``hold`` counts what left while the step read it, and lets go of what the watch has read (``let_go``),
    even if the step failed; a step that raised hands what it was told of processes gone to the next (``untold``).
    (What it keeps of processes forgotten is let go of before the next step's snapshot: after a step that did not
    see them, the watch no longer knows what it read of them.) ``spent`` is given the wall time the step took: its
    snapshot, on the event loop, and its reading, on the worker; not the time it waited for the worker or for the loop
    to take it back, which on a busy collector is most of the await."""
    began = time.monotonic()
    frames, segments, kept = stored_now(registry, store, hold)
    taken = time.monotonic() - began

    def step() -> list[Firing]:
        began = time.monotonic()
        try:
            return watch.step(segments, kept)
        finally:
            if spent is not None:
                spent.append(taken + time.monotonic() - began)

    try:
        return await read_pinned(frames, step)
    except BaseException:
        if hold is not None:  # (what it was told of processes gone is the next step's to count)
            hold.untold()
        raise
    finally:
        if hold is not None:
            hold.let_go()


def _step_reads(hold: WatchHold, watch: Watch, segments: list[Segment]) -> Container[int]:
    """What the step is to read of ``segments`` (``RuleWatch.to_read``): the hold's ``reading`` until its ``let_go``."""
    return hold.reading(watch.to_read((s.seq, s.used) for s in segments))
