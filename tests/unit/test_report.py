"""The loss report every snapshot carries (``otherData``; Perfetto's ``ringtrace.report``): tracks named even when
nothing of them is stored any more."""

from __future__ import annotations

import json

from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.read.frame_walk import ProcessView, SnapshotView
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.wire.frames import Stats
from ringtrace.wire.model import THREAD_TRACK, TrackInfo
from store_client import Client


def test_a_track_that_ended_and_whose_events_are_all_gone_is_named() -> None:
    store = Store(4 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Client(store, 1, tracks=1)
    client.record(0, 64)
    store.clear([1])  # nothing of it is stored: its frames cannot name the track
    track_id = client.tracks[0].track_id
    ended = {track_id: TrackInfo(track_id, THREAD_TRACK, "w0", 5)}
    process = ProcessView(1, 101, 101, "host", "proc-1", 0, Stats(0, 0), {}, ended)
    with store.snapshot() as frames:
        report = json.loads(b"".join(chrome_trace_chunks(SnapshotView(frames, {1: process}, store.track_counts()))))
    (shown,) = report["otherData"]["processes"]
    assert [(t["track"], t["name"], t["cleared_events"]) for t in shown["tracks"]] == [(track_id, "w0", 64)]
