"""The lanes of a process's OTLP traces in C (``_lanes.c``) against ``TraceLanes``, the Python twin that defines them:
for any spans, in any order, the same lanes, the same names, the same traces forgotten and lanes live."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.collector.ingest.otlp import trace_lanes
from ringtrace.collector.ingest.otlp.trace_lanes import TraceLane, TraceLanes, TraceSpan

needs_c = pytest.mark.skipif(not trace_lanes.ACCELERATED, reason="the C lanes are not built (or pure Python is set)")

ids = st.integers(0, 12) | st.sampled_from([2**64 - 1, 2**63])
times = st.integers(0, 80) | st.sampled_from([2**64 - 1, 10**18])


@st.composite
def spans(draw: st.DrawFn) -> list[TraceSpan]:
    """Spans of a few traces: ids repeated, parents placed or not, inside their parents or across them."""
    traces = draw(st.lists(st.binary(max_size=17), min_size=1, max_size=4, unique=True))
    out = []
    for _ in range(draw(st.integers(1, 60))):
        start = draw(times)
        end = draw(st.sampled_from([start, min(start + 5, 2**64 - 1)]) | st.integers(start, min(start + 90, 2**64 - 1)))
        out.append(TraceSpan(draw(st.sampled_from(traces)), draw(ids), draw(ids), start, end, []))
    return out


@needs_c
@settings(deadline=None, max_examples=400)
@given(spans(), st.integers(1, 8), st.integers(1, 30))
def test_the_c_lanes_place_every_span_where_the_python_twin_does(
    made: list[TraceSpan], max_lanes: int, max_kept_spans: int
) -> None:
    python = TraceLanes(max_lanes, max_kept_spans)
    c = trace_lanes.trace_lanes(max_lanes, max_kept_spans, accelerated=True)
    same: dict[int, TraceLane] = {}  # a C lane's key (by id) -> the Python lane it is

    def matched(c_lane: Any, python_lane: TraceLane) -> None:
        assert isinstance(c_lane, TraceLane) and c_lane.name == python_lane.name
        assert same.setdefault(id(c_lane), python_lane) is python_lane
        kept.append(c_lane)  # (alive: an id is not reused)

    kept: list[Any] = []
    for span in made:
        matched(c.place(span), python.place(span))
        c_retired, python_retired = c.take_retired(), python.take_retired()
        assert len(c_retired) == len(python_retired)
        for c_lane, python_lane in zip(c_retired, python_retired, strict=True):
            matched(c_lane, python_lane)
        assert c.live == python.live


@needs_c
def test_the_c_lanes_take_only_spans_of_64_bit_ids_and_times() -> None:
    c = trace_lanes.trace_lanes(accelerated=True)
    with pytest.raises(OverflowError):
        c.place(TraceSpan(b"t" * 16, -1, 0, 0, 1, []))
    with pytest.raises(TypeError):
        c.place(("not bytes", 1, 0, 0, 1))  # type: ignore[arg-type]
    assert c.live == 0 and c.take_retired() == []


def test_lanes_are_made_in_python_when_asked() -> None:
    assert isinstance(trace_lanes.trace_lanes(accelerated=False), TraceLanes)
