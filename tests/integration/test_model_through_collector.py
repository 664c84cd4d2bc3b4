"""Corners of the recording model through a real collector: pairing across frames, odd values, wire frames."""

from __future__ import annotations

import subprocess
import sys

from collector_process import CollectorProcess, events
from perfetto_model import PerfettoTrace

ACROSS_FRAMES = """
import sys, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="markers")
t0 = time.monotonic_ns()
tl.marker("Load", "start")
tl.flush(5)                                          # the start goes in one frame ...
tl.marker("Paint", "instant", ts_ns=t0 - 1_000_000)  # ... the next frame starts earlier than it
tl.marker("Load", "end")
gpu = tl.source("GPU")
gpu.open()
tl.flush(5)
gpu.close()
print(tl.flush(5))
"""


def test_markers_and_sources_pair_across_frames_in_recorded_order(collector: CollectorProcess) -> None:
    done = subprocess.run(
        [sys.executable, "-c", ACROSS_FRAMES, collector.tcp_address], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
    trace = collector.snapshot()
    assert sorted(e["name"] for e in events(trace, "X")) == ["GPU", "Load"]
    assert events(trace, "B") == []
    assert [e["name"] for e in events(trace, "i")] == ["Paint"]
    assert trace["otherData"]["unmatched_marker_ends"] == 0 and trace["otherData"]["source_anomalies"] == 0


TWO_TIMELINES = """
import sys, threading, ringtrace.client
from ringtrace.client import Timeline
tl = ringtrace.client.connect(sys.argv[1], process_name="app")
disk = Timeline("disk", [tl.listeners[0]])
with tl.scope("main-work"):
    pass
with disk.scope("fsync"):
    pass
def only_disk():
    with disk.scope("write"):
        pass
worker = threading.Thread(target=only_disk, name="writer")
worker.start()
worker.join()
print(tl.flush(5) and disk.flush(5))
"""


def test_a_timeline_s_tracks_are_named_after_it_and_never_share_a_thread_s_metadata(
    collector: CollectorProcess,
) -> None:
    done = subprocess.run([sys.executable, "-c", TWO_TIMELINES, collector.tcp_address], capture_output=True, text=True)
    assert done.stdout.strip() == "True", done.stderr
    trace = collector.snapshot()
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events(trace, "M") if e["name"] == "thread_name"}
    assert len([e for e in events(trace, "M") if e["name"] == "thread_name"]) == len(names) == 3  # a record per tid
    on = {e["name"]: names[(e["pid"], e["tid"])] for e in events(trace, "X")}
    assert on == {"main-work": "MainThread", "fsync": "disk (MainThread)", "write": "disk (writer)"}
    status, body = collector.get("/snapshot?format=perfetto")
    assert status == 200
    perfetto = PerfettoTrace(body)
    tracks = perfetto.tracks
    on_track = {s.name: tracks[s.track] for s in perfetto.slices}
    assert (on_track["main-work"].kind, on_track["main-work"].name) == ("thread", "MainThread")
    assert (on_track["write"].kind, on_track["write"].name) == ("thread", "disk (writer)")
    beside = on_track["fsync"]  # a track of its own under the thread's, not a second thread of that tid
    assert (beside.kind, beside.name, beside.parent) == ("track", "disk (MainThread)", on_track["main-work"].uuid)
    assert len([t for t in tracks.values() if t.kind == "thread"]) == 2
