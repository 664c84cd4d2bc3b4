"""The Perfetto writer on files (no collector): chunks that are whole packets, args of every kind as the Chrome export
shows them, and slices that share a timestamp nested as they were recorded."""

from __future__ import annotations

import json
import time
from pathlib import Path

from perfetto_model import PerfettoTrace, pb
from ringtrace.client import FileListener, Timeline
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.query import EventFilter
from ringtrace.wire.frames import Hello, encode, preamble
from ringtrace.wire.model import INSTANT, THREAD_TRACK, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder


def recorded(tmp_path: Path, record: object, name: str = "unit") -> Path:
    path = tmp_path / f"{name}.rttrace"
    tl = Timeline(name, [FileListener(path, process_name=name)])
    record(tl)  # type: ignore[operator]
    tl.close()
    return path


ARGS = {
    "text": "ü ✓",
    "small": 7,
    "negative": -(2**63),
    "big": 2**64 - 1,
    "float": -1.5e-300,
    "flag": False,
    "none": None,
    "raw": b"\x00\xff",
    "list": [1, "two", [3.0, None]],
    "map": {"inner": {"deep": [True]}, 5: "int key"},
    "empty map": {},
    "empty list": [],
}


def test_args_of_every_kind_are_as_the_chrome_export_shows_them(tmp_path: Path) -> None:
    view = load_file(recorded(tmp_path, lambda tl: tl.instant("all", **ARGS))).view
    (instant,) = PerfettoTrace(b"".join(perfetto_chunks(view))).instants
    (shown,) = [e for e in json.loads(b"".join(chrome_trace_chunks(view)))["traceEvents"] if e["ph"] == "i"]
    assert instant.args == shown["args"]
    assert instant.args["raw"] == "00ff" and instant.args["map"] == {"inner": {"deep": [True]}, "5": "int key"}


def test_each_chunk_is_whole_packets_and_each_segment_a_sequence_that_starts_cleared(tmp_path: Path) -> None:
    def record(tl: Timeline) -> None:
        for i in range(3000):
            with tl.scope(f"span {i % 7}", i=i):
                pass
            if i % 1000 == 999:
                tl.flush(timeout_s=30)

    snapshot = tmp_path / "two.rtsnap"  # two streams end to end: a segment each
    snapshot.write_bytes(b"".join(recorded(tmp_path, record, name).read_bytes() for name in ("one", "two")))
    view = load_file(snapshot).view
    chunks = list(perfetto_chunks(view))
    assert len(chunks) > 6
    packets = [packet for chunk in chunks for packet in pb.Trace.FromString(chunk).packet]
    whole = PerfettoTrace(b"".join(chunks))  # checks each use of an interned name
    assert len(packets) == len(whole.packets)
    assert sorted(s.args["i"] for s in whole.slices) == sorted([*range(3000)] * 2)
    assert all(s.name == f"span {s.args['i'] % 7}" for s in whole.slices)  # names resolved on each sequence
    sequences: dict[int, list[int]] = {}
    for p in packets:
        if p.HasField("track_event"):
            sequences.setdefault(p.trusted_packet_sequence_id, []).append(p.sequence_flags)
    cleared = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED | pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    assert len(sequences) == 2 and all(flags[0] == cleared for flags in sequences.values())
    assert all(f == pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE for flags in sequences.values() for f in flags[1:])
    interned = [p for p in packets if p.HasField("interned_data")]
    assert len(interned) == 2 and all(len(p.interned_data.event_names) == 7 for p in interned)  # once a segment
    selected = PerfettoTrace(b"".join(perfetto_chunks(view, EventFilter(limit=10))))
    assert sorted(s.args["i"] for s in selected.slices) == list(range(2990, 3000))  # the newest: all of "two"


def test_slices_sharing_a_timestamp_nest_as_recorded(tmp_path: Path) -> None:
    base = time.monotonic_ns()

    def record(tl: Timeline) -> None:
        def marker(name: str, phase: str, at: int) -> None:
            tl.marker(name, phase, ts_ns=base + at)

        marker("outer", "start", 0)
        marker("inner", "start", 0)  # starts with outer: inside it, since it ends first
        marker("inner", "end", 10)
        marker("outer", "end", 20)
        marker("later", "start", 40)  # recorded before the slice that ends when it starts
        marker("later", "end", 50)
        marker("earlier", "start", 30)
        marker("earlier", "end", 40)
        marker("span", "start", 60)
        marker("point", "start", 60)  # zero length, where span starts
        marker("point", "end", 60)
        marker("span", "end", 70)

    view = load_file(recorded(tmp_path, record)).view
    trace = PerfettoTrace(b"".join(perfetto_chunks(view)))
    origin = trace.slices and min(s.start_ns for s in trace.slices)
    shown = {s.name: (s.start_ns - origin, s.end_ns - origin if s.end_ns else None, s.depth) for s in trace.slices}
    assert shown == {
        "outer": (0, 20, 0),
        "inner": (0, 10, 1),
        "earlier": (30, 40, 0),
        "later": (40, 50, 0),
        "span": (60, 70, 0),
        "point": (60, 60, 1),
    }


def test_pids_past_int32_get_pids_of_their_own_within_it(tmp_path: Path) -> None:
    def stream(pid: int) -> bytes:
        encoder = StreamEncoder()
        track = TrackInfo(1, THREAD_TRACK, "main", 1)
        batch = encoder.encode(track, [INSTANT, "tick", 10**18, 10**18, None])
        frames = [preamble(), encode(Hello(pid, "host", f"p{pid}", f"i{pid}", "boot", 1, 2, "test")), *encoder.prefix()]
        return b"".join([*frames, *batch.control, *(frame for frame, _ in batch.events)])

    pids = [2**32 - 1, 2**31 - 1, 2**31, 2**31 + 5, 7]  # the wire protocol's pids are u32
    path = tmp_path / "pids.rtsnap"
    path.write_bytes(b"".join(stream(pid) for pid in pids))
    view = load_file(path).view
    trace = PerfettoTrace(b"".join(perfetto_chunks(view)))
    shown = {track.name: track.pid for track in trace.tracks.values() if track.kind == "process"}
    assert set(shown) == {f"p{pid}" for pid in pids}
    assert len(set(shown.values())) == len(pids)  # none shares another's
    assert all(0 <= pid < 2**31 for pid in shown.values())
    assert shown["p7"] == 7 and shown[f"p{2**31 - 1}"] == 2**31 - 1  # pids within int32 are kept


def test_a_counter_with_values_under_several_keys_has_a_track_per_key_named_as_chrome_viewers_name_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "counters.json"  # Chrome trace JSON: another tool's counter of two series
    counter = {"ph": "C", "name": "mem", "pid": 1, "tid": 1, "ts": 5, "args": {"rss": 5, "heap": 3}}
    path.write_text(json.dumps([counter]))
    trace = PerfettoTrace(b"".join(perfetto_chunks(load_file(path).view)))
    assert sorted((trace.label(c.track), c.value) for c in trace.counters) == [("mem heap", 3), ("mem rss", 5)]
