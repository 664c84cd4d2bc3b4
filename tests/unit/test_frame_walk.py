"""The frame walk's public output that the snapshot writers read: each segment's frames as stored
(``segment_frames``), and which events of a frame a selection takes (``taken_events``)."""

from __future__ import annotations

from ringtrace.collector.read.frame_walk import FrameWalk, ProcessView, Selection, SnapshotView, taken_events
from ringtrace.collector.read.query import EVERYTHING, EventFilter, Pattern
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.wire.decoder import Limits
from ringtrace.wire.frames import Events, Hello, Stats
from store_client import Client


def view_of(store: Store, owners: list[int]) -> SnapshotView:
    processes = {o: ProcessView(o, 100 + o, 100 + o, "host", f"proc-{o}", 0, Stats(0, 0), {}) for o in owners}
    return SnapshotView(store.snapshot(), processes, store.track_counts(), limits=Limits())


def test_segment_frames_give_each_segment_of_the_processes_selected_with_its_session_frames() -> None:
    store = Store(16 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    one, two = Client(store, 1, tracks=2), Client(store, 2, tracks=1)
    one.record(0, 100)
    one.record(1, 100)
    two.record(0, 50)
    view = view_of(store, [1, 2])
    walk = FrameWalk(view, EventFilter(process=Pattern("proc-1")), releases=True)
    segments = [(process.uid, [frame for _, frame in frames]) for process, frames in walk.segment_frames()]
    assert [uid for uid, _ in segments] == [1]  # the other process is not read
    frames = segments[0][1]
    assert isinstance(frames[0], Hello)
    events = [frame for frame in frames if isinstance(frame, Events)]
    assert sum(frame.count for frame in events) == 200
    assert {frame.track_id for frame in events} == {track.track_id for track in one.tracks}
    assert len(view.frames.segments) == 2
    view.frames.close()


def test_segment_frames_leave_out_events_frames_of_tracks_not_selected() -> None:
    store = Store(16 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Client(store, 1, tracks=2)
    client.record(0, 100)
    client.record(1, 30)
    view = view_of(store, [1])
    walk = FrameWalk(view, EventFilter(track=Pattern("t1")))
    ((_, frames),) = list(walk.segment_frames())
    events = [frame for _, frame in frames if isinstance(frame, Events)]
    assert {frame.track_id for frame in events} == {client.tracks[1].track_id}
    assert sum(frame.count for frame in events) == 30
    view.frames.close()


def test_taken_events_are_the_index_start_and_duration_of_the_events_a_selection_takes() -> None:
    store = Store(16 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Client(store, 1, tracks=1)
    client.record(0, 30)  # names tick0, tick1, tick2, tick0 ...
    view = view_of(store, [1])
    walk = FrameWalk(view, EVERYTHING)
    selection = Selection(EventFilter(name=Pattern("tick1")))
    taken = []
    for process, _, tables, frame in walk.frames():
        got = taken_events(process, tables, frame, selection)
        assert got is not None
        assert all(0 <= index < frame.count and dur == 0 for index, _, dur in got)
        taken += [start for _, start, _ in got]
    assert len(taken) == 10 and taken == sorted(taken)
    assert all((start - 10**15) // 1000 % 3 == 1 for start in taken)  # each event's ts is 1 us after the last
    view.frames.close()
