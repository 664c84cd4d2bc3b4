"""How far a segment's frames reach past their start times (``read/reach.py``): spans' durations, pairs matched
within the segment counted for both their frames, a pair with an end elsewhere making the segment unpaired, and the
measure kept with the segment until it holds more frames."""

from __future__ import annotations

from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.collector.read.reach import UNBOUNDED, SegmentReach, measure, segment_reach
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.collector.store.views import SegmentView
from ringtrace.wire.frames import Events, encode
from ringtrace.wire.model import ASYNC_BEGIN, ASYNC_END, INSTANT, MARKER_END, MARKER_START, SPAN
from ringtrace.wire.stream_limits import Limits
from store_client import Client

T0 = 10**18


def segment_of(store: Store, client: Client, frames: list[list[Any]]) -> SegmentView:
    """The client's one segment after it stored these frames (each a flat list of records)."""
    for records in frames:
        batch = client.encoder.encode(client.tracks[0], records)
        for frame in [*batch.control, *(frame for frame, _ in batch.events)]:
            client.feed(frame)
        store.commit(client.stream)
    (segment,) = store.snapshot().segments
    return segment


def measured(frames: list[list[Any]]) -> SegmentReach:
    store = Store(2**26, MIN_SEGMENT_BYTES)
    return segment_reach(segment_of(store, Client(store, 1, tracks=1), frames), Limits())


def test_a_frame_reaches_as_far_as_its_longest_span() -> None:
    reach = measured([[SPAN, "a", T0, T0 + 50, None, SPAN, "b", T0 + 1, T0 + 7, None], [INSTANT, "i", T0, T0, None]])
    assert list(reach.ahead) == [50, 0] and list(reach.back) == [0, 0]
    assert reach.paired == b"\0\0" and not reach.unpaired


def test_a_pair_within_the_segment_counts_for_the_frames_of_both_its_ends() -> None:
    reach = measured(
        [
            [MARKER_START, "m", T0, T0, None],
            [SPAN, "s", T0 + 5, T0 + 6, None],
            [MARKER_END, "m", T0 + 900, T0 + 900, None, ASYNC_BEGIN, "a", T0 + 900, T0 + 900, {"id": 3}],
            [ASYNC_END, "a", T0 + 1000, T0 + 1000, {"id": 3}],
        ]
    )
    assert list(reach.ahead) == [900, 1, 900, 100] and list(reach.back) == [900, 0, 900, 100]
    assert reach.paired == b"\1\0\1\1" and not reach.unpaired
    assert reach.holds_pairs(0) and not reach.holds_pairs(1) and reach.holds_pairs(9)  # (an unknown frame may)
    assert reach.of_frame(9) == (UNBOUNDED, UNBOUNDED)


def test_a_start_never_ended_or_an_end_never_started_here_makes_the_segment_unpaired() -> None:
    assert measured([[MARKER_START, "m", T0, T0, None]]).unpaired
    assert measured([[ASYNC_END, "a", T0, T0, {"id": 1}]]).unpaired
    assert not measured([[ASYNC_BEGIN, "a", T0, T0, {"id": 1}, ASYNC_END, "a", T0 + 1, T0 + 1, {"id": 1}]]).unpaired
    # Async slices pair by id: one of another id ends nothing.
    assert measured([[ASYNC_BEGIN, "a", T0, T0, {"id": 1}, ASYNC_END, "a", T0 + 1, T0 + 1, {"id": 2}]]).unpaired


def test_the_measure_is_kept_with_the_segment_and_taken_again_once_it_holds_more_frames() -> None:
    store = Store(2**26, MIN_SEGMENT_BYTES)
    client = Client(store, 1, tracks=1)
    segment = segment_of(store, client, [[SPAN, "a", T0, T0 + 5, None]])
    first = segment_reach(segment, Limits())
    assert segment.reach.value == (1, first)
    assert segment_reach(segment, Limits()) is first  # not measured again
    grown = segment_of(store, client, [[SPAN, "b", T0 + 10, T0 + 99, None]])
    assert grown.reach is segment.reach  # (the segment's own, shared by every view of it)
    again = segment_reach(grown, Limits())
    assert list(again.ahead) == [5, 89] and segment.reach.value == (2, again)
    assert segment_reach(segment, Limits()) == first  # an older view's is measured, not kept
    assert segment.reach.value == (2, again)


#: Kind ids of the built-in kinds the stream of ``odd_payloads`` declares, and ones it never declares or that are not
#: ids at all; durations and times of every sort msgpack carries.
KIND_VALUES = st.sampled_from([SPAN, INSTANT, MARKER_START, MARKER_END, ASYNC_BEGIN, ASYNC_END, 77, -1, True, "x", 2.0])
INT_VALUES = st.one_of(
    st.integers(-(2**63), 2**64 - 1), st.sampled_from([None, True, 1.5, "t", [1], {"id": 1}]), st.integers(0, 2000)
)
ARG_VALUES = st.one_of(
    st.none(), st.fixed_dictionaries({"id": st.integers(0, 3)}), st.integers(0, 9), st.text(max_size=3)
)


@st.composite
def odd_payloads(draw: st.DrawFn) -> tuple[int, list[Any]]:
    count = draw(st.integers(0, 12))
    columns = [
        draw(st.lists(KIND_VALUES, min_size=count, max_size=count)),
        draw(st.lists(st.integers(0, 3), min_size=count, max_size=count)),
        draw(st.lists(INT_VALUES, min_size=count, max_size=count)),
        draw(st.lists(INT_VALUES, min_size=count, max_size=count)),
        draw(st.lists(ARG_VALUES, min_size=count, max_size=count)),
    ]
    if draw(st.booleans()) and count:  # a column of another length than the header's count
        columns[draw(st.integers(0, 4))].pop()
    return count, columns


@settings(max_examples=300, deadline=None)
@given(st.lists(odd_payloads(), min_size=1, max_size=4))
def test_the_c_twin_measures_every_payload_as_the_python_side_does(payloads: list[tuple[int, list[Any]]]) -> None:
    store = Store(2**26, MIN_SEGMENT_BYTES)
    client = Client(store, 1, tracks=1)
    declared = [MARKER_START, "m", T0, T0, None, MARKER_END, "m", T0, T0, None, SPAN, "s", T0, T0 + 1, None]
    declared += [ASYNC_BEGIN, "a", T0, T0, {"id": 1}, ASYNC_END, "a", T0, T0, {"id": 1}]
    segment_of(store, client, [declared])
    for count, columns in payloads:
        frame = encode(Events(client.tracks[0].track_id, count, T0, T0 + 5, msgpack.packb(columns)), 2**24)
        client.feed(frame)
    (segment,) = store.snapshot().segments
    assert measure(segment, Limits()) == measure(segment, Limits(), accelerated=False)
