"""Flow arrows between the spans of a trace (``export/flows.py``): the caller's end and the callee's, recorded apart,
meet by their flow id; the C writers (Chrome JSON, Perfetto) write them as the Python writers do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace
from ringtrace.client import FileListener, Timeline
from ringtrace.collector.export import chrome_frames, perfetto_frames
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.flows import flow_id, span_flows
from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.frame_walk import SnapshotView, segment_stream
from ringtrace.wire.frames import Events

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = "00f067aa0ba902b7"
ACCELERATED = chrome_frames.ACCELERATED and perfetto_frames.ACCELERATED
needs_c = pytest.mark.skipif(not ACCELERATED, reason="the C writers are not built here (or RINGTRACE_PURE_PYTHON)")


def recorded(tmp_path: Path, spans: list[dict[str, Any]], name: str = "t") -> SnapshotView:
    path = tmp_path / f"{name}.rttrace"
    tl = Timeline("unit", [FileListener(path, process_name=name)])
    for i, args in enumerate(spans):
        with tl.scope(f"span {i}", **args):
            tl.instant("inside", i=i)
    tl.close()
    return load_file(path).view


def chrome(view: SnapshotView, accelerated: bool = True) -> list[dict[str, Any]]:
    """The slices of a Chrome JSON snapshot, sorted (within a frame, the C writer's events come first)."""
    document = json.loads(b"".join(chrome_trace_chunks(view, accelerated=accelerated)))
    slices = [event for event in document["traceEvents"] if event["ph"] == "X"]
    return sorted(slices, key=lambda event: json.dumps(event, sort_keys=True))


def perfetto_flows(trace: bytes) -> list[tuple[str, list[int], list[int]]]:
    """(name, flow_ids, terminating_flow_ids) of each slice begun."""
    parsed = Trace.FromString(trace)
    names: dict[int, str] = {}
    out = []
    for packet in parsed.packet:
        for entry in packet.interned_data.event_names:
            names[entry.iid] = entry.name
        event = packet.track_event
        if packet.HasField("track_event") and event.type == event.TYPE_SLICE_BEGIN:
            name = event.name or names.get(event.name_iid, "")
            out.append((name, list(event.flow_ids), list(event.terminating_flow_ids)))
    return out


def test_the_flow_id_is_fnv1a_of_the_ids_bytes() -> None:
    h = 0xCBF29CE484222325
    for byte in bytes.fromhex(TRACE + CALLER):
        h = ((h ^ byte) * 0x100000001B3) % 2**64
    assert flow_id(TRACE, CALLER) == h
    assert flow_id(TRACE, "00f067aa0ba902b8") != h


def test_a_caller_and_its_callee_meet_whatever_else_their_spans_hold() -> None:
    caller = {"trace_id": TRACE, "span_id": CALLER, "kind": "client", "url": "/x"}
    callee = {"parent_span_id": CALLER, "kind": "server", "trace_id": TRACE, "span_id": "1111111111111111"}
    leaving, _ = span_flows(caller)
    assert leaving is not None and span_flows(callee) == (None, [leaving])
    producer = {**caller, "kind": "producer"}
    consumer = {"trace_id": "a" * 32, "span_id": "b" * 16, "kind": "consumer", "links": [f"{TRACE}/{CALLER}"]}
    assert span_flows(consumer) == (None, [leaving]) and span_flows(producer) == (leaving, [])
    for no_flow in (
        {**caller, "kind": "internal"},
        {**caller, "trace_id": TRACE.upper()},
        {**caller, "span_id": "0" * 15},
        {**callee, "parent_span_id": 5},
        {"kind": "server", "parent_span_id": CALLER},
        {"links": ["x/y"], "trace_id": TRACE},
    ):
        assert span_flows(no_flow) == (None, []), no_flow


#: Args of spans: the keys that make flows, with values that do and do not.
flow_args = st.dictionaries(
    st.sampled_from(["kind", "trace_id", "span_id", "parent_span_id", "url", "links"]),
    st.one_of(
        st.sampled_from(["client", "server", "producer", "consumer", "internal", TRACE, CALLER, TRACE.upper(), ""]),
        st.integers(-1, 2**64 - 1),
        st.none(),
        st.lists(st.sampled_from([f"{TRACE}/{CALLER}", "x/y", 3]), max_size=3),
    ),
    max_size=6,
)


def flow_spans() -> list[dict[str, Any]]:
    spans = []
    for kind in ("client", "server", "producer", "consumer", "internal"):
        spans.append({"kind": kind, "trace_id": TRACE, "span_id": "1234567890abcdef", "parent_span_id": CALLER})
    spans.append({"kind": "server", "trace_id": TRACE, "span_id": CALLER})  # no parent: no arrow
    spans.append({"kind": "client", "trace_id": "z" * 32, "span_id": CALLER})
    return spans


@needs_c
def test_the_c_writers_write_the_flows_the_python_writers_do(tmp_path: Path) -> None:
    view = recorded(tmp_path, flow_spans() * 3)
    fast, slow = chrome(view), chrome(view, accelerated=False)
    assert fast == slow
    assert sum("bind_id" in event for event in fast) == 3 * 4
    perfetto = b"".join(perfetto_chunks(view))
    assert perfetto == b"".join(perfetto_chunks(view, accelerated=False))
    flows = [flows for flows in perfetto_flows(perfetto) if flows[1] or flows[2]]
    assert len(flows) == 3 * 4
    # The C writers take these frames themselves: nothing is left to Python.
    json_writer, packets = chrome_frames.FrameJson(0), perfetto_frames.FramePackets()
    naming = perfetto_frames.Naming(lambda: (b"X", b"T"), lambda _: b"N", lambda _: b"A", lambda _, __: b"C")
    for segment in view.frames.segments:
        for decoder, frame in segment_stream(segment, view.limits):
            if isinstance(frame, Events):
                made = json_writer.events(decoder.tables, frame, 0, 1, 1)
                assert made is not None and made.deferred is None
                assert packets.packets(decoder.tables, frame, 0, naming) is not None


@needs_c
@settings(max_examples=60, deadline=None)
@given(st.lists(flow_args, max_size=8))
def test_the_c_writers_agree_on_any_args(spans: list[dict[str, Any]]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        view = recorded(Path(directory), spans)
        assert chrome(view) == chrome(view, accelerated=False)
        assert b"".join(perfetto_chunks(view)) == b"".join(perfetto_chunks(view, accelerated=False))


def test_caller_and_callee_recorded_apart_meet_in_both_formats(tmp_path: Path) -> None:
    """Two processes' recordings (a file each), read into one store: the client span's arrow ends at the server's."""
    caller = {"kind": "client", "trace_id": TRACE, "span_id": CALLER}
    callee = {"kind": "server", "trace_id": TRACE, "span_id": "1111111111111111", "parent_span_id": CALLER}
    recorded(tmp_path, [caller], "caller")
    recorded(tmp_path, [callee], "callee")
    both = tmp_path / "both.rttrace"  # streams end to end, as a snapshot file holds them
    both.write_bytes((tmp_path / "caller.rttrace").read_bytes() + (tmp_path / "callee.rttrace").read_bytes())
    view = load_file(both).view
    bound = [event for event in chrome(view) if "bind_id" in event]
    assert {(event.get("flow_out"), event.get("flow_in")) for event in bound} == {(True, None), (None, True)}
    assert len({event["bind_id"] for event in bound}) == 1
    flows = [flows for flows in perfetto_flows(b"".join(perfetto_chunks(view))) if flows[1] or flows[2]]
    flow = flow_id(TRACE, CALLER)
    assert sorted(flows) == [("span 0", [], [flow]), ("span 0", [flow], [])]


@needs_c
def test_a_kind_given_twice_counts_with_its_last_value_in_both_writers(tmp_path: Path) -> None:
    """msgpack-python keeps a repeated key's last value: the C writers read the same span the Python ones do."""
    from ringtrace.wire.model import SPAN, THREAD_TRACK, TrackInfo
    from ringtrace.wire.stream_encoder import StreamEncoder
    from test_chrome_frames import columns, good_payload, stream_with

    batch = StreamEncoder().encode(TrackInfo(7, THREAD_TRACK, "main", 1), [SPAN, "a", 10**18, 10**18 + 5, {"k": 1}])
    span_kind, name_id = good_payload(batch.events[0][0])[0][0], good_payload(batch.events[0][0])[1][0]
    pairs = [("trace_id", TRACE), ("span_id", CALLER), ("kind", "internal"), ("kind", "client")]
    twice = b"\x84" + b"".join(msgpack.packb(key) + msgpack.packb(value) for key, value in pairs)
    once_more = [("kind", "client"), ("trace_id", TRACE), ("span_id", 5), ("span_id", CALLER)]
    again = b"\x84" + b"".join(msgpack.packb(key) + msgpack.packb(value) for key, value in once_more)
    payloads = [columns([span_kind], [name_id], [0], [5], [None])[:-1] + args for args in (twice, again)]
    view = stream_with(tmp_path, [(1, payload) for payload in payloads])
    fast, slow = chrome(view), chrome(view, accelerated=False)
    assert fast == slow
    assert sum(event.get("flow_out") is True for event in fast) == 2
    assert b"".join(perfetto_chunks(view)) == b"".join(perfetto_chunks(view, accelerated=False))
