"""Samples in every export (Chrome JSON, Perfetto, pprof, the web view's flame graph document), from the event walk's
``Shown`` samples: ``("P", task name, wall ns, 0, {"stack": ((function, file, line), ...)}, "sample", "")``, stack
root first, on the sampled thread's track.

A recorded file's instants named ``as-sample`` are shown as such samples (the walk's ``_shown`` wrapped; the C writers,
which take instants, off), so each writer runs on real stored frames, threads and segments; the sampler's own wire is
tested where it is decoded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import orjson
import pytest
from perfetto_model import PerfettoTrace
from pprof_model import PprofProfile
from recorded_files import recorded_samples
from ringtrace.collector.export import flame_graph as flame_graph_module
from ringtrace.collector.export import perfetto_samples
from ringtrace.collector.export import pprof as pprof_module
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.flame_graph import flame_graph_chunks
from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.export.pprof import pprof_chunks
from ringtrace.collector.export.sample_stacks import StackNodes, sample_flags
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.event_walk import EventWalk
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.selection import EventFilter, Pattern
from ringtrace.wire.frames import Events, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import INSTANT, SAMPLE, SPAN, THREAD_TRACK, TrackInfo
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.stream_encoder import StreamEncoder

MAIN = ("main", "/app/main.py", 10)
WORK = ("work", "/app/jobs.py", 20)
HOT = ("hot", "/app/jobs.py", 31)
COLD = ("cold", "/app/jobs.py", 40)
STACKS = [(MAIN, WORK, HOT), (MAIN, WORK, HOT), (MAIN, WORK, COLD), (MAIN,), ()]


@pytest.fixture
def as_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk shows each instant named ``as-sample`` as a sample of stack ``STACKS[n]`` (its arg ``n``), named by
    its arg ``task``."""
    shown = EventWalk._shown

    def with_samples(self: EventWalk, *args: Any) -> tuple[list[Any], int]:
        events, skipped = shown(self, *args)
        return [_as_sample(event) for event in events], skipped

    monkeypatch.setattr(EventWalk, "_shown", with_samples)
    # The writers of samples alone read the kind column to skip frames of none: here every event may be one.
    every_event = lambda tables, frame: b"\x01" * frame.count  # noqa: E731
    monkeypatch.setattr(flame_graph_module, "sample_flags", every_event)
    monkeypatch.setattr(pprof_module, "sample_flags", every_event)


def _as_sample(event: Any) -> Any:
    phase, name, wall_ns, _, args, _, _ = event
    if phase != "i" or name != "as-sample":
        return event
    return ("P", args["task"], wall_ns, 0, {"stack": STACKS[args["n"] % len(STACKS)]}, "sample", "")


def chrome(view: SnapshotView, **filters: Any) -> dict[str, Any]:
    # (the C writer takes instants, which the Python walk here shows as samples: the sampler's own kind goes to it)
    document: dict[str, Any] = json.loads(
        b"".join(chrome_trace_chunks(view, EventFilter(**filters), accelerated=False))
    )
    return document


def unwound(frames: dict[str, Any], leaf: int | None) -> tuple[tuple[str, str, int], ...]:
    """A Chrome sample's stack, root first, from its leaf's id in ``stackFrames``."""
    stack = []
    node = None if leaf is None else str(leaf)
    while node is not None:
        entry = frames[node]
        file, line = entry["category"].rsplit(":", 1)
        stack.append((entry["name"], file, int(line)))
        node = entry.get("parent")
    return tuple(reversed(stack))


@pytest.mark.usefixtures("as_samples")
def test_chrome_json_has_sample_events_naming_their_stacks_in_stack_frames(tmp_path: Path) -> None:
    view = recorded_samples(tmp_path)
    document = chrome(view)
    events = document["traceEvents"]
    samples = [e for e in events if e["ph"] == "P"]
    threads = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert len(samples) == 20 and {threads[s["tid"]] for s in samples} == {"sampled (MainThread)", "sampled (second)"}
    frames = document["stackFrames"]
    assert len(frames) == 4  # main, main>work, main>work>hot, main>work>cold: each node once
    for sample in samples:
        n = next(
            e["args"]["n"]
            for e in events
            if e["ph"] == "X" and e["tid"] == sample["tid"] and e["ts"] <= sample["ts"] <= e["ts"] + e["dur"]
        )
        assert unwound(frames, sample.get("sf")) == STACKS[n % len(STACKS)]
        assert sample["name"] == ("sample" if n % 2 else "worker-task")
        assert sample["cat"] == "sample" and sample["weight"] == 1 and "args" not in sample
    assert document["otherData"]["capture"]["shown_events"] == len([e for e in events if e["ph"] != "M"])
    assert "cut_sample_stacks" not in document["otherData"]["capture"]


def test_a_document_without_samples_has_no_stack_frames(tmp_path: Path) -> None:
    document = chrome(recorded_samples(tmp_path))
    assert "stackFrames" not in document and not [e for e in document["traceEvents"] if e["ph"] == "P"]


@pytest.mark.usefixtures("as_samples")
def test_chrome_json_samples_follow_the_filter(tmp_path: Path) -> None:
    view = recorded_samples(tmp_path)
    document = chrome(view, track=Pattern("*second*"))
    samples = [e for e in document["traceEvents"] if e["ph"] == "P"]
    assert len(samples) == 10 and len({s["tid"] for s in samples}) == 1


def test_stack_nodes_intern_each_prefix_once_and_cut_past_their_bound() -> None:
    nodes = StackNodes(max_nodes=3)
    assert nodes.leaf(()) == 0
    assert nodes.leaf((MAIN, WORK, HOT)) == 3 and nodes.leaf((MAIN, WORK, HOT)) == 3 and nodes.leaf((MAIN,)) == 1
    assert nodes.nodes == [(0, MAIN), (1, WORK), (2, HOT)]
    assert nodes.leaf((MAIN, WORK, COLD)) == 2  # the table full: named by its longest prefix, counted
    assert nodes.cut_stacks == 1 and len(nodes) == 3


@pytest.mark.usefixtures("as_samples")
def test_perfetto_has_perf_samples_with_stacks_interned_on_their_sequence(tmp_path: Path) -> None:
    view = recorded_samples(tmp_path)
    trace = PerfettoTrace(b"".join(perfetto_chunks(view, accelerated=False)))  # checks every interned id
    threads = {t.descriptor.thread.tid: t for t in trace.tracks.values() if t.kind == "thread"}
    assert len(trace.samples) == 20
    steps = sorted(trace.slices, key=lambda s: s.start_ns)
    for sample in trace.samples:
        thread = threads[sample.tid]
        assert thread.pid == sample.pid and thread.name in ("sampled (MainThread)", "sampled (second)")
        (step,) = [s for s in steps if s.track == thread.uuid and s.start_ns <= sample.ts_ns <= (s.end_ns or 0)]
        assert sample.stack == STACKS[step.args["n"] % len(STACKS)]
        assert sample.mappings == tuple(file for _, file, _ in sample.stack)
    interned = [p.interned_data for p in trace.packets if p.HasField("interned_data")]
    assert sum(len(d.frames) for d in interned) == 4 and sum(len(d.callstacks) for d in interned) == 3
    assert sum(len(d.function_names) for d in interned) == 4 and sum(len(d.mappings) for d in interned) == 2


@pytest.mark.usefixtures("as_samples")
def test_perfetto_starts_a_new_sequence_when_a_stack_table_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(perfetto_samples, "MAX_INTERNED", 2)
    view = recorded_samples(tmp_path, samples_per_thread=200)
    trace = PerfettoTrace(b"".join(perfetto_chunks(view, accelerated=False)))
    assert len(trace.samples) == 400
    assert {sample.stack for sample in trace.samples} == set(STACKS)
    sequences = {p.trusted_packet_sequence_id for p in trace.packets if p.HasField("perf_sample")}
    assert len(sequences) > 1


def flame_graph(view: SnapshotView, **filters: Any) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(b"".join(flame_graph_chunks(view, EventFilter(**filters))))
    return document


def paths(document: dict[str, Any]) -> Iterator[tuple[tuple[str, ...], int, int]]:
    """Each node's path of function names from the root, with its self and total counts."""
    nodes = document["nodes"]
    names: list[tuple[str, ...]] = [()]
    columns = (nodes["function"], nodes["parent"], nodes["self"], nodes["total"])
    for function, parent, own, total in zip(*columns, strict=True):
        names.append((*names[parent], function))
        yield names[-1], own, total


@pytest.mark.usefixtures("as_samples")
def test_the_flame_graph_document_counts_samples_per_stack_node(tmp_path: Path) -> None:
    view = recorded_samples(tmp_path)
    document = flame_graph(view)
    assert document["samples"] == 20 and document["cut_sample_stacks"] == 0
    # Per thread, n = 0..9: stacks hot, hot, cold, main, empty, twice over.
    counted = {path: (own, total) for path, own, total in paths(document)}
    assert counted == {
        ("main",): (4, 16),
        ("main", "work"): (0, 12),
        ("main", "work", "hot"): (8, 8),
        ("main", "work", "cold"): (4, 4),
    }
    assert document["nodes"]["file"][:2] == ["/app/main.py", "/app/jobs.py"] and document["nodes"]["line"][:1] == [10]
    assert flame_graph(view, track=Pattern("*second*"))["samples"] == 10
    assert flame_graph(view, since_ns=2**62)["samples"] == 0


def test_the_flame_graph_document_of_no_samples_is_empty(tmp_path: Path) -> None:
    document = flame_graph(recorded_samples(tmp_path))
    assert document["samples"] == 0 and document["nodes"]["function"] == []


def wire_samples(tmp_path: Path) -> SnapshotView:
    """A stream as a client sends it: its stack table (STACKS), then on one thread spans and samples in the same
    EVENTS frames (a sample's args: a stack id of ``WIRE_STACKS``, one never declared), and a sample alone on another
    thread."""
    encoder = StreamEncoder()
    main, other = TrackInfo(1, THREAD_TRACK, "main", 11), TrackInfo(2, THREAD_TRACK, "other", 12)
    ts = 10**18
    # Declares the tracks and the names (the samples' EVENTS frames are packed here, as the sampler packs them).
    declared = [encoder.encode(track, [INSTANT, name, ts, ts, None]) for track, name in ((main, "step"), (other, ""))]
    encoder.encode(main, [INSTANT, "task-a", ts, ts, None])
    names = encoder.strings
    stacks = Stacks(0, (MAIN, WORK, HOT, COLD), 0, ((None, 0), (0, 1), (1, 2), (1, 3)))  # stack ids 0..3
    rows: list[tuple[int, int, int, int, Any]] = []
    for n in range(8):
        start = 1000 * (n + 1)
        rows.append((SPAN, names["step"], start, 900, {"n": n}))
        rows.append((SAMPLE, names["task-a" if n % 2 else ""], start + 100, 0, n % 5))
    hello = encode(Hello(42, "host", "wired", "i42", "boot", 1, 2, "test"))
    frames = [preamble(), hello, *encoder.prefix(), encode(stacks)]
    for made in declared:
        frames += made.control
    frames.append(_events(main.track_id, ts, rows))
    frames.append(_events(other.track_id, ts, [(SAMPLE, names[""], 9000, 0, 3)]))
    path = tmp_path / "wired.rttrace"
    path.write_bytes(b"".join(frames))
    return load_file(path).view


def _events(track_id: int, first_ts: int, rows: list[tuple[int, int, int, int, Any]]) -> bytes:
    """An EVENTS frame of ``rows`` (kind, name id, ns after ``first_ts``, dur, args)."""
    payload = msgpack.packb([list(column) for column in zip(*rows, strict=True)])
    last_ts = first_ts + max(row[2] + row[3] for row in rows)
    return encode(Events(track_id, len(rows), first_ts, last_ts, payload))


#: The stack of stack id 0..4 of ``wire_samples`` (4: never declared, shown empty).
WIRE_STACKS = [(MAIN,), (MAIN, WORK), (MAIN, WORK, HOT), (MAIN, WORK, COLD), ()]


@pytest.mark.parametrize("accelerated", [True, False])
def test_samples_from_the_wire_in_chrome_json_beside_the_c_writers_spans(tmp_path: Path, accelerated: bool) -> None:
    document = json.loads(b"".join(chrome_trace_chunks(wire_samples(tmp_path), accelerated=accelerated)))
    events = document["traceEvents"]
    samples = sorted((e for e in events if e["ph"] == "P"), key=lambda e: e["ts"])
    assert len([e for e in events if e["ph"] == "X"]) == 8 and len(samples) == 9
    assert [unwound(document["stackFrames"], s.get("sf")) for s in samples] == [
        *(WIRE_STACKS[n % 5] for n in range(8)),
        WIRE_STACKS[3],
    ]
    assert [s["name"] for s in samples[:2]] == ["sample", "task-a"]
    assert len({s["tid"] for s in samples}) == 2


@pytest.mark.parametrize("accelerated", [True, False])
def test_samples_from_the_wire_in_perfetto(tmp_path: Path, accelerated: bool) -> None:
    trace = PerfettoTrace(b"".join(perfetto_chunks(wire_samples(tmp_path), accelerated=accelerated)))
    samples = sorted(trace.samples, key=lambda s: s.ts_ns)
    assert [s.stack for s in samples] == [*(WIRE_STACKS[n % 5] for n in range(8)), WIRE_STACKS[3]]
    assert {(s.pid, s.tid) for s in samples} == {(42, 11), (42, 12)} and len(trace.slices) == 8


def test_samples_from_the_wire_in_the_flame_graph(tmp_path: Path) -> None:
    counted = {path: (own, total) for path, own, total in paths(flame_graph(wire_samples(tmp_path)))}
    assert counted == {
        ("main",): (2, 8),
        ("main", "work"): (2, 6),
        ("main", "work", "hot"): (2, 2),
        ("main", "work", "cold"): (2, 2),
    }


def test_samples_from_the_wire_in_a_pprof_profile(tmp_path: Path) -> None:
    chunks = list(pprof_chunks(wire_samples(tmp_path)))
    profile = PprofProfile(b"".join(chunks))
    assert profile.sample_types == [("samples", "count")]
    by_key = {(s.stack, s.labels["thread"], s.labels.get("task", "")): s.values[0] for s in profile.samples}
    main = "main"
    assert by_key == {
        (WIRE_STACKS[0], main, ""): 1,  # n = 0, 5 (task-a when n is odd)
        (WIRE_STACKS[0], main, "task-a"): 1,
        (WIRE_STACKS[1], main, "task-a"): 1,  # n = 1, 6
        (WIRE_STACKS[1], main, ""): 1,
        (WIRE_STACKS[2], main, ""): 1,  # n = 2, 7
        (WIRE_STACKS[2], main, "task-a"): 1,
        (WIRE_STACKS[3], main, "task-a"): 1,  # n = 3
        (WIRE_STACKS[4], main, ""): 1,  # n = 4: a stack id never declared
        (WIRE_STACKS[3], "other", ""): 1,
    }
    assert all(s.labels["pid"] == 42 and s.labels["process"] == "wired" for s in profile.samples)
    # From the first sample to the last, wall clock (HELLO says wall = monotonic + 1).
    assert profile.time_nanos == 10**18 + 1100 + 1 and profile.duration_nanos == 9000 - 1100


def test_a_pprof_profile_of_no_samples_is_empty(tmp_path: Path) -> None:
    profile = PprofProfile(b"".join(pprof_chunks(recorded_samples(tmp_path))))
    assert profile.samples == [] and profile.sample_types == [("samples", "count")]


def test_sample_flags_name_the_samples_of_a_frame_from_its_kind_column(tmp_path: Path) -> None:
    walk = EventWalk(wire_samples(tmp_path))
    flags = [sample_flags(tables, frame) for (_, _, tables, frame), _ in walk.walked()]
    assert flags == [b"\x00\x01" * 8, b"\x01"]  # spans and samples in turn; one sample alone
    walk = EventWalk(recorded_samples(tmp_path))  # spans and instants
    assert {sample_flags(tables, frame) for (_, _, tables, frame), _ in walk.walked()} == {None}


def test_chrome_json_with_samples_read_back_keeps_them_and_their_stacks(tmp_path: Path) -> None:
    first = json.loads(b"".join(chrome_trace_chunks(wire_samples(tmp_path))))
    path = tmp_path / "snapshot.json"
    path.write_bytes(orjson.dumps(first))
    again = json.loads(b"".join(chrome_trace_chunks(load_file(path).view)))

    def samples(document: dict[str, Any]) -> list[tuple[float, str, tuple[Any, ...]]]:
        shown = [e for e in document["traceEvents"] if e["ph"] == "P"]
        return sorted((e["ts"], e["name"], unwound(document["stackFrames"], e.get("sf"))) for e in shown)

    assert samples(again) == samples(first) and len(samples(first)) == 9
    # Another tool's frames: a category that is no file:line is the file; a parent cycle ends the stack.
    other = {
        "traceEvents": [{"ph": "P", "name": "Trace Event Sample", "ts": 5, "pid": 1, "tid": 2, "sf": 3}],
        "stackFrames": {"1": {"name": "a", "category": "libfoo", "parent": 3}, "3": {"name": "b", "parent": 1}},
    }
    path.write_bytes(orjson.dumps(other))
    trace = PerfettoTrace(b"".join(perfetto_chunks(load_file(path).view)))
    ((sample,),) = [trace.samples]
    assert sample.stack[-2:] == (("a", "libfoo", 0), ("b", "", 0)) and len(sample.stack) == 1024


def test_perfetto_s_callstacks_on_one_sequence_hold_a_bounded_number_of_frames() -> None:
    # Each callstack interned is kept whole (its key): deep stacks, each another, fill a sequence by their frames
    # long before their count does.
    sequence = perfetto_samples.SequenceStacks()
    inner = tuple((f"f{i}", "deep.py", i + 1) for i in range(1023))
    roots = 0
    while not sequence.full:
        sequence.sample(1, 1, ((f"root{roots}", "app.py", 1), *inner), [])
        roots += 1
    assert roots * 1024 <= perfetto_samples.MAX_CALLSTACK_FRAMES + 1024
    assert roots < perfetto_samples.MAX_INTERNED
