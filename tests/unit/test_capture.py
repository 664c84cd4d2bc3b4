"""Capture: a window's segments pinned at fire and as the ring lets go of them, within the incidents' budget; what the
budget cannot keep, and what the ring took before the fire, counted (real client streams into a real store)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ringtrace.collector.incidents import capture as capture_module
from ringtrace.collector.incidents.capture import Capture, CapturePins, Window, window_events
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.collector.store.segment_files import DataDir
from store_client import Client

START_TS = 10**15  # the first event's ts (``store_client``: one event every 1000 ns)
EVERYTHING = Window(0, 2**62)


def _store() -> tuple[Store, Client]:
    store = Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    return store, Client(store, 1)


def _kept(capture: Capture, window: Window) -> int:
    return sum(window_events(segment, 0, window) for segment in capture.segments())


def test_a_capture_keeps_its_window_while_the_ring_overwrites_it_and_lets_go_of_it_after() -> None:
    store, client = _store()
    pins = CapturePins(store, capacity_bytes=64 * MIN_SEGMENT_BYTES)
    pins.offsets = {1: 0}
    client.record(0, 500)
    capture = Capture("one", EVERYTHING, {1: 0})
    pins.begin(capture)
    for _ in range(300):  # the ring turns over several times
        client.record(0, 20)
    assert store.process_counts()[1].overwritten_events > 500
    segments = pins.end(capture)
    assert segments == sorted(segments, key=lambda s: s.seq)
    assert _kept(capture, EVERYTHING) == 500 + 300 * 20, "every event since the fire, and before it"
    assert capture.lost == {"overwritten_before_fire": 0, "over_budget": 0}
    assert 0 < pins.held_bytes <= pins.capacity_bytes
    pins.release(capture)
    assert pins.held_bytes == 0 and pins.captures == []
    assert all(segment.pins == 0 for segment in segments)
    pins.close()


def test_what_the_budget_cannot_keep_is_counted_and_only_the_window_is_pinned() -> None:
    store, client = _store()
    pins = CapturePins(store, capacity_bytes=MIN_SEGMENT_BYTES)  # room for one segment let go of, at most
    client.record(0, 200)
    window = Window(START_TS + 100 * 1000, START_TS + 10**12)  # from the 101st event on
    capture = Capture("tight", window, {1: 0})
    pins.begin(capture)
    for _ in range(300):
        client.record(0, 20)
    pins.end(capture)
    in_window = 100 + 300 * 20
    kept = _kept(capture, window)
    assert capture.lost["over_budget"] > 0
    assert capture.over_budget_by_owner == {1: capture.lost["over_budget"]}, "by process: a trace's narrowed at save"
    # By whole frames: a frame that straddles the window's start counts in full, on both sides alike.
    assert in_window <= kept + capture.lost["over_budget"] <= in_window + 64
    assert pins.held_bytes <= pins.capacity_bytes
    pins.release(capture)
    pins.close()


def test_what_the_ring_overwrote_of_a_window_before_the_fire_is_counted() -> None:
    store, client = _store()
    pins = CapturePins(store, capacity_bytes=64 * MIN_SEGMENT_BYTES)
    pins.offsets = {1: 0}
    for _ in range(300):
        client.record(0, 20)
    overwritten = store.process_counts()[1].overwritten_events
    assert overwritten > 0
    capture = Capture("late", EVERYTHING, {1: 0})
    pins.begin(capture)
    assert capture.lost["overwritten_before_fire"] == overwritten
    assert _kept(capture, EVERYTHING) + overwritten == 300 * 20
    pins.release(capture)
    pins.close()


def test_a_full_budget_lets_go_of_a_pinned_segment_once_and_its_buffer_is_reused_safely(tmp_path: Path) -> None:
    # A data dir unmaps a buffer released twice, though it went back for reuse: the next segment's writes failed.
    store = Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, buffers=DataDir(tmp_path, "never"))
    client = Client(store, 1)
    pins = CapturePins(store, capacity_bytes=0)  # nothing let go of by the ring can be kept
    client.record(0, 200)
    capture = Capture("full", EVERYTHING, {1: 0})
    pins.begin(capture)
    pinned = len(capture.pinned)
    assert pinned > 0
    for _ in range(300):  # the ring turns over, past the pinned segments, reusing their buffers
        client.record(0, 20)
    assert capture.lost["over_budget"] > 0
    assert len(capture.pinned) < pinned + 300
    pins.release(capture)
    pins.close()
    assert isinstance(store.buffers, DataDir)
    store.buffers.close()


def test_a_capture_being_written_keeps_its_segments_when_the_budget_is_full() -> None:
    store, client = _store()
    pins = CapturePins(store, capacity_bytes=0)
    client.record(0, 200)
    capture = Capture("saving", EVERYTHING, {1: 0})
    pins.begin(capture)
    segments = pins.end(capture)  # its worker reads these now
    fired = Window(0, START_TS + 200 * 1000)  # the events stored when it fired
    lost = dict(capture.lost)
    assert _kept(capture, fired) == 200
    for _ in range(300):  # the ring turns over, with no budget beside it
        client.record(0, 20)
    assert capture.segments() == segments and all(segment.pins > 0 for segment in segments)
    assert _kept(capture, fired) == 200, "its buffers are not reused while it is written"
    assert capture.lost == lost
    pins.release(capture)
    assert pins.held_bytes == 0
    pins.close()


def test_closing_leaves_a_capture_being_written_its_segments_until_its_reader_lets_go() -> None:
    store, client = _store()
    pins = CapturePins(store, capacity_bytes=MIN_SEGMENT_BYTES)
    client.record(0, 200)
    writing, collecting = Capture("writing", EVERYTHING, {1: 0}), Capture("collecting", EVERYTHING, {1: 0})
    pins.begin(writing)
    pins.begin(collecting)
    segments = pins.end(writing)  # its worker reads these now
    pins.close()  # the collector stops while it does
    assert all(segment.pins == 1 for segment in segments), "only the collecting capture's pins went"
    assert collecting.pinned == {} and pins.captures == [writing]
    pins.release(writing)  # its worker ended
    assert all(segment.pins == 0 for segment in segments)


def test_what_other_processes_lost_does_not_crowd_out_a_processs_own_evictions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture_module, "EVICTIONS_REMEMBERED", 32)
    store, client = _store()
    other = Client(store, 2)
    pins = CapturePins(store, capacity_bytes=64 * MIN_SEGMENT_BYTES)
    pins.offsets = {1: 0, 2: 0}
    for _ in range(40):
        client.record(0, 20)
    for _ in range(2000):  # many more segments of another process, evicted after
        other.record(0, 20)
    counts = store.process_counts()
    assert counts[2].overwritten_events > 32 * 20 * 4
    capture = Capture("one", EVERYTHING, {1: 0})
    pins.begin(capture)
    assert capture.lost["overwritten_before_fire"] == counts[1].overwritten_events > 0
    pins.release(capture)
    pins.close()


def test_with_the_stream_read_back_a_published_segment_is_neither_kept_nor_counted_lost() -> None:
    store, client = _store()
    pins = CapturePins(store, capacity_bytes=0, published_read_back=True)  # (--jetstream)
    while len(store.stored([1])) < 3:  # (within the ring: nothing overwritten)
        client.record(0, 20)
    capture = Capture("streamed", EVERYTHING, {1: 0})
    pins.begin(capture)
    sealed = [segment for segment in store.stored([1]) if segment.seq in capture.pinned][:-1]
    assert sealed, "the capture holds sealed segments"
    for segment in sealed:
        store.published(segment)  # stored in the stream now: the window is read from there
    assert capture.lost == {"overwritten_before_fire": 0, "over_budget": 0}
    assert pins.held_bytes == 0 and all(segment.pins == 0 for segment in sealed)
    assert not set(capture.pinned) & {segment.seq for segment in sealed}
    pins.release(capture)
    pins.close()
