"""Corners of the recording model through a real collector: pairing across frames, odd values, wire frames."""

from __future__ import annotations

import subprocess
import sys

from collector_process import CollectorProcess, events

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
