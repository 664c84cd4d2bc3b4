"""Store: a listener told of each segment that leaves, before its buffer goes, may pin it and read it still."""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Removal, Store
from ringtrace.collector.store.segment_files import DataDir
from ringtrace.collector.store.segments import Segment
from ringtrace.collector.store.views import StoreSnapshot
from store_client import Client


def test_each_evicted_segment_is_told_once_before_its_buffer_goes_and_a_pin_keeps_it_readable() -> None:
    store = Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    told: list[tuple[int, Removal, bool, int]] = []
    kept: list[Segment] = []

    def evicted(segment: Segment, why: Removal) -> None:
        told.append((segment.seq, why, segment.evicted, segment.events))
        if len(kept) < 2:
            store.pin(segment)
            kept.append(segment)

    store.on_evicted(evicted)
    client = Client(store, 1)
    for _ in range(1000):
        client.record(0, 20)
    assert len(told) > 2, "the ring turned over"
    assert len({seq for seq, _, _, _ in told}) == len(told), "each segment told once"
    assert all(why == "overwritten" and gone for _, why, gone, _ in told)
    assert sum(events for _, _, _, events in told) == store.process_counts()[1].overwritten_events
    # The pinned ones still hold what they held, though the ring went on past them.
    with StoreSnapshot(store, kept, None) as frames:  # (it lets go of the pins when closed)
        for view, segment in zip(frames.segments, kept, strict=True):
            assert sum(count for _, _, _, count, _, _ in view.index()) == segment.events > 0
    store.on_evicted(None)


def test_a_segment_removed_on_request_is_told_as_cleared() -> None:
    store = Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    told: list[Removal] = []
    store.on_evicted(lambda segment, why: told.append(why))
    client = Client(store, 1)
    client.record(0, 20)
    store.close_stream(client.stream)
    assert store.clear([1]) == 20
    assert told == ["cleared"]


class SmallDisk(DataDir):
    """A data dir on a disk with room for ``room`` bytes of files in all (a file still mapped, renamed or pooled,
    takes its room until it is removed), as a full disk refuses a file past it."""

    def __init__(self, path: Path, room: int) -> None:
        super().__init__(path, "never")
        self.room = room

    def create_file(self, path: Path, size: int) -> mmap.mmap:
        with os.scandir(self.path) as entries:  # (closed here: a leaked iterator warns in whatever test runs next)
            used = sum(entry.stat().st_size for entry in entries if entry.name != "LOCK")
        if used + size > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().create_file(path, size)


def test_on_a_full_disk_the_ring_overwrites_no_segment_a_reader_holds_which_would_give_no_room_back(
    tmp_path: Path,
) -> None:
    disk = SmallDisk(tmp_path, 3 * MIN_SEGMENT_BYTES + MIN_SEGMENT_BYTES // 2)
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, buffers=disk)
    client = Client(store, 1)
    while len(list(tmp_path.glob("*.rtseg"))) < 3:
        client.record(0, 20)
    counts = store.totals
    with store.snapshot():  # a reader holds every segment: overwriting one would not give its room back now
        for _ in range(200):
            client.record(0, 20)
        assert counts().overwritten_events == 0 and counts().discarded_events > 0
        assert counts().stored_events == store.totals().stored_events > 0
    stored = counts().stored_events
    for _ in range(200):  # the reader gone, the ring turns over as on any full disk
        client.record(0, 20)
    assert counts().overwritten_events > 0 and counts().stored_events >= stored // 2
    assert counts().received_events == (
        counts().stored_events + counts().overwritten_events + counts().discarded_events
    )
    disk.close()
