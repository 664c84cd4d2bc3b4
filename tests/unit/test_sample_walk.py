"""Samples read back at the collector: the event walk shows each as ``("P", task, wall_ns, 0, {"stack": ...},
"sample", "")`` with its stack root first (an unknown stack id: an empty stack, not counted as undecodable); the C
writers hand samples to the Python walk (the same bytes as without them); the dump prints one line, leaf first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgpack
from perfetto_model import PerfettoTrace
from ringtrace.collector.command.files import dump_line
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.chrome_frames import _PYTHON, kind_codes
from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.event_walk import EventWalk
from ringtrace.collector.read.rows import selected_rows
from ringtrace.wire.frames import Events, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import BUILTIN_KINDS, FIRST_SAMPLER_TRACK_ID, INSTANT, SAMPLE, SPAN, THREAD_TRACK, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder
from ringtrace.wire.stream_tables import StreamTables

HELLO = Hello(7, "host", "sampled", "instance", "boot", 0, 1_700_000_000_000_000_000, "0.0")
MAIN = ("main", "app.py", 1)
WORK = ("work", "app.py", 2)
TRACK = TrackInfo(3, THREAD_TRACK, "worker samples", 4242)


def _file(tmp_path: Path) -> Path:
    encoder = StreamEncoder()
    records = [SPAN, "step", 1_000, 5_000, None, SAMPLE, "task-1", 2_000, 2_000, (MAIN, WORK)]
    records += [SAMPLE, "", 3_000, 3_000, (MAIN,), INSTANT, "tick", 4_000, 4_000, None]
    data = preamble() + encode(HELLO) + b"".join(encoder.prefix())
    batch = encoder.encode(TRACK, records)
    data += b"".join(batch.control)
    data += b"".join(frame for frame, _ in batch.events)
    name = encoder.strings["task-1"]
    unknown = msgpack.packb([[SAMPLE], [name], [0], [0], [99]])  # stack id 99: never declared
    data += encode(Events(TRACK.track_id, 1, 6_000, 6_000, unknown))
    path = tmp_path / "samples.rttrace"
    path.write_bytes(data)
    return path


def test_the_walk_shows_samples_with_their_stacks_root_first_and_an_unknown_one_empty(tmp_path: Path) -> None:
    view = load_file(_file(tmp_path)).view
    walk = EventWalk(view)
    shown = []
    for (process, track, tables, frame), _ in walk.walked():
        shown += walk.shown(process, track, tables, frame) or []
    offset = view.processes[next(iter(view.processes))].clock_offset_ns
    samples = [event for event in shown if event[0] == "P"]
    assert samples == [
        ("P", "task-1", 2_000 + offset, 0, {"stack": (MAIN, WORK)}, "sample", ""),
        ("P", "", 3_000 + offset, 0, {"stack": (MAIN,)}, "sample", ""),
        ("P", "task-1", 6_000 + offset, 0, {"stack": ()}, "sample", ""),
    ]
    assert [event[0] for event in shown if event[0] != "P"] == ["X", "i"]
    assert walk.report()["undecodable_events"] == 0


def test_the_c_writers_hand_samples_to_the_python_walk(tmp_path: Path) -> None:
    tables = StreamTables()
    tables.kinds = {kind.id: kind for kind in BUILTIN_KINDS}
    codes = kind_codes(tables)
    assert codes is not None and codes[SAMPLE] == _PYTHON
    view = load_file(_file(tmp_path)).view
    fast, python = (json.loads(b"".join(chrome_trace_chunks(view, accelerated=a))) for a in (True, False))
    assert sorted(map(repr, fast["traceEvents"])) == sorted(map(repr, python["traceEvents"]))  # (C's first, then)
    assert fast["stackFrames"] == python["stackFrames"]
    stacks = [_unwound(fast["stackFrames"], e.get("sf")) for e in fast["traceEvents"] if e["ph"] == "P"]
    assert stacks == [[MAIN, WORK], [MAIN], []]  # not dropped: shown as the walk shows them
    assert b"".join(perfetto_chunks(view)) == b"".join(perfetto_chunks(view, accelerated=False))


def _unwound(frames: dict[str, Any], leaf: int | None) -> list[tuple[str, str, int]]:
    """A Chrome sample's stack, root first, from its leaf's id in ``stackFrames``."""
    stack = []
    node = None if leaf is None else str(leaf)
    while node is not None:
        file, line = frames[node]["category"].rsplit(":", 1)
        stack.append((frames[node]["name"], file, int(line)))
        node = frames[node].get("parent")
    return stack[::-1]


def test_the_dump_prints_a_sample_on_one_line_leaf_first(tmp_path: Path) -> None:
    rows = [row for row in selected_rows(load_file(_file(tmp_path)).view) if row.kind == "sample"]
    lines = [dump_line(row) for row in rows]
    assert len(lines) == 3 and all(line.count("\n") == 1 for line in lines)
    assert '"work (app.py:2) < main (app.py:1)"' in lines[0] and "task-1" in lines[0]
    assert "<stack unknown>" in lines[2]


def _sampled_first(tmp_path: Path) -> Path:
    """A file where a thread's samples track (a sampler's id) is declared and written before the thread's own."""
    encoder = StreamEncoder()
    samples = TrackInfo(FIRST_SAMPLER_TRACK_ID, THREAD_TRACK, "MainThread samples", 4242)
    own = TrackInfo(1, THREAD_TRACK, "MainThread", 4242)
    data = preamble() + encode(HELLO) + b"".join(encoder.prefix())
    for track, records in (
        (samples, [SAMPLE, "", 1_000, 1_000, (MAIN, WORK), SAMPLE, "", 2_000, 2_000, (MAIN,)]),
        (own, [SPAN, "step", 1_500, 3_000, None]),
        (samples, [SAMPLE, "", 3_000, 3_000, (MAIN,)]),
    ):
        batch = encoder.encode(track, records)
        data += b"".join(batch.control) + b"".join(frame for frame, _ in batch.events)
    path = tmp_path / "sampled-first.rttrace"
    path.write_bytes(data)
    return path


def test_a_thread_whose_samples_track_comes_first_is_shown_by_its_own_track(tmp_path: Path) -> None:
    path = _sampled_first(tmp_path)
    document = json.loads(b"".join(chrome_trace_chunks(load_file(path).view)))
    events = document["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    (span,) = [e for e in events if e["ph"] == "X"]
    samples = [e for e in events if e["ph"] == "P"]
    assert span["tid"] == 4242 and names[4242] == "MainThread"
    assert len(samples) == 3 and {s["tid"] for s in samples} != {4242} and len({s["tid"] for s in samples}) == 1
    assert names[samples[0]["tid"]] == "MainThread samples" and 4242 < samples[0]["tid"] < 2**32

    trace = PerfettoTrace(b"".join(perfetto_chunks(load_file(path).view)))
    threads = [t for t in trace.tracks.values() if t.kind == "thread"]
    assert "MainThread" in {t.name for t in threads} and "MainThread samples" not in {t.name for t in threads}
    (beside,) = [t for t in trace.tracks.values() if t.name == "MainThread samples"]
    assert trace.tracks[beside.parent].kind == "thread"
    assert len(trace.samples) == 3 and {s.tid for s in trace.samples} == {4242}
