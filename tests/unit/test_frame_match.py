"""The rules' first pass over a stored frame (``frame_match.py``): the C twin against the Python twin that defines
it, on valid payloads with any criteria and on payloads that are not what they should be (never a crash); and over a
run of a segment's frames (``match_run``), with gaps of session bytes between them and an index as the store writes
it."""

from __future__ import annotations

from array import array
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.collector.incidents.frame_match import (
    ANY,
    COUNTER_SLOTS,
    CROSSING,
    KIND_SLOTS,
    NAME_SLOTS,
    NEVER,
    STATE_SLOTS,
    STATUS_ERROR,
    Criteria,
    candidates,
    match_frame,
    match_frame_py,
    match_run,
    match_run_py,
    run_candidates,
)
from ringtrace.collector.store.segments import INDEX_ENTRY
from ringtrace.wire.frame_types import EVENTS_HEADER, FRAME_HEADER, FrameType
from ringtrace.wire.optional_c import load_optional

_match = load_optional("ringtrace.collector.incidents._match")
needs_c = pytest.mark.skipif(_match is None, reason="the C twin is not built here (or RINGTRACE_PURE_PYTHON)")
ORDER = (0, 1, 2, 3, 4)

ints = st.one_of(
    st.integers(-3, 40),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([2**63, 2**64 - 1]),  # msgpack holds them, int64 does not
)
leaf = st.one_of(st.none(), st.booleans(), ints, st.floats(allow_nan=False), st.text(max_size=8), st.binary(max_size=4))
values = st.recursive(
    leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
statuses = st.sampled_from(["error", "ok", "", b"error", 1, None])
numbers = st.one_of(st.integers(-5, 20), st.floats(-5, 20, width=32), st.floats(), ints, st.booleans())
args = st.one_of(
    st.none(),
    values,
    st.dictionaries(st.sampled_from(["status", "trace_id", "x", "value"]), statuses | numbers | values, max_size=4),
    st.builds(lambda value: {"value": value}, numbers),
)
flags = st.sampled_from([0, STATUS_ERROR, CROSSING, CROSSING | STATUS_ERROR])
criterion = st.tuples(st.sampled_from([NEVER, ANY, 0, 5, 100, 2**62]), flags)


@st.composite
def criteria(draw: st.DrawFn) -> Criteria:
    groups = draw(st.integers(0, 3))
    kinds = array("q")
    for _ in range(draw(st.integers(0, 12))):
        kinds.extend((*draw(criterion), draw(st.integers(-1, groups))))
    names = tuple(
        array("q", [v for _ in range(draw(st.integers(0, 40))) for v in draw(criterion)]) for _ in range(groups)
    )
    thresholds = array("d", draw(st.lists(st.floats(-10, 30) | st.floats(), max_size=12)))
    counters = array("q")
    for _ in range(draw(st.integers(0, 40))):  # (some out of the thresholds' bounds: ignored alike)
        counters.extend(draw(st.tuples(st.integers(-1, 13), st.integers(-1, 4), st.integers(-1, 4))))
    state = array(
        "q", [v for _ in range(draw(st.integers(0, 40))) for v in draw(st.tuples(st.integers(0, 3), st.integers(0, 9)))]
    )
    return Criteria(kinds, names, counters, thresholds, state)


def c_twin(payload: bytes, count: int, order: tuple[int, ...], track: int, wanted: Criteria) -> bytes | None:
    """The C twin's candidates, its state in ``wanted`` as ``match_frame`` keeps it."""
    return _match.match_frame(  # type: ignore[union-attr,no-any-return]
        payload, count, order, track, wanted.kinds, wanted.names, wanted.counters, wanted.thresholds, wanted.state
    )


def copy(wanted: Criteria) -> Criteria:
    return Criteria(wanted.kinds, wanted.names, wanted.counters, wanted.thresholds, array("q", wanted.state))


@st.composite
def frames(draw: st.DrawFn) -> tuple[bytes, int, tuple[int, ...]]:
    """A payload of valid msgpack, its columns in any order: mostly well-formed, some with values of the wrong
    type where integers belong, or a count that does not match."""
    count = draw(st.integers(1, 12))
    small = st.integers(-2, 14)
    columns: list[list[Any]] = [
        draw(st.lists(small, min_size=count, max_size=count)),
        draw(st.lists(st.integers(-2, 45), min_size=count, max_size=count)),
        draw(st.lists(ints, min_size=count, max_size=count)),
        draw(st.lists(ints, min_size=count, max_size=count)),
        draw(st.lists(args, min_size=count, max_size=count)),
    ]
    if draw(st.integers(0, 9)) == 0:  # a value that is not an integer where one belongs
        columns[draw(st.integers(0, 3))][draw(st.integers(0, count - 1))] = draw(leaf)
    order = tuple(draw(st.permutations(range(5))))
    payload = [columns[order.index(i)] for i in range(5)]
    told = count if draw(st.integers(0, 9)) else count + draw(st.integers(-1, 1))
    return msgpack.packb(payload), told, order


@needs_c
@pytest.mark.timeout(900)  # bounded by its examples, not the clock: past 50 s beside a busy suite, not a hang
@settings(max_examples=500, deadline=None)
@given(st.lists(frames(), min_size=1, max_size=3), criteria(), st.integers(0, 3))
def test_the_twins_find_the_same_candidates_and_keep_the_same_state(
    run: list[tuple[bytes, int, tuple[int, ...]]], wanted: Criteria, track: int
) -> None:
    fast, slow = copy(wanted), copy(wanted)
    for payload, count, order in run:  # one after another: the counters' state carries over
        found = c_twin(payload, count, order, track, fast)
        assert found == match_frame_py(payload, count, order, track, slow)
        assert fast.state == slow.state
    # Criteria given as bytes (no alignment promised) are read alike.
    payload, count, order = run[0]
    unaligned, again = copy(wanted), copy(wanted)
    names = tuple(table.tobytes() for table in wanted.names)
    found = _match.match_frame(  # type: ignore[union-attr]
        payload, count, order, track, wanted.kinds.tobytes(), names, wanted.counters.tobytes(),
        wanted.thresholds.tobytes(), unaligned.state,
    )  # fmt: skip
    assert found == c_twin(payload, count, order, track, again) and unaligned.state == again.state


@needs_c
@pytest.mark.timeout(900)  # bounded by its examples, not the clock, like the one above
@settings(max_examples=400, deadline=None)
@given(st.data(), frames(), criteria())
def test_payloads_cut_or_changed_are_refused_alike_or_read_alike(
    data: st.DataObject, frame: tuple[bytes, int, tuple[int, ...]], wanted: Criteria
) -> None:
    payload, count, order = frame
    at = data.draw(st.integers(0, len(payload)))
    for broken in (
        payload[:at],
        payload[:at] + bytes([data.draw(st.integers(0, 255))]) + payload[at + 1 :],
        payload + data.draw(st.binary(min_size=1, max_size=3)),
        data.draw(st.binary(max_size=64)),
    ):
        fast, slow, either = copy(wanted), copy(wanted), copy(wanted)
        found = c_twin(broken, count, order, 1, fast)
        expected = match_frame_py(broken, count, order, 1, slow)
        # None from C leaves the payload to the Python twin (what it reads deeper than the C reader goes).
        assert found is None or (found == expected and fast.state == slow.state)
        assert match_frame(broken, count, order, 1, either) == expected and either.state == slow.state


def criteria_of(
    kinds: dict[int, tuple[int, int, int]], *groups: dict[int, tuple[int, int]], counters: int = 0
) -> Criteria:
    table = array("q", [NEVER, 0, -1] * (max(kinds, default=-1) + 1))
    for kind, entry in kinds.items():
        table[kind * KIND_SLOTS : (kind + 1) * KIND_SLOTS] = array("q", entry)
    names = []
    for group in groups:
        names_of = array("q", [NEVER, 0] * (max(group, default=-1) + 1))
        for name, entry in group.items():
            names_of[name * NAME_SLOTS : (name + 1) * NAME_SLOTS] = array("q", entry)
        names.append(names_of)
    state = array("q", [0] * (STATE_SLOTS * counters))
    return Criteria(table, tuple(names), array("q", [0] * (COUNTER_SLOTS * counters)), array("d"), state)


def test_candidates_by_kind_by_name_by_duration_and_by_status() -> None:
    events = [
        (0, 1, 10, 50, None),  # span "1", too short for its name's 100
        (0, 1, 20, 150, None),  # long enough
        (0, 2, 30, 5, {"status": "error"}),  # name 2: error status wanted
        (0, 2, 40, 5, {"status": "ok"}),
        (0, 3, 45, 10**9, None),  # no criterion for name 3
        (2, 9, 50, 0, {"value": 3}),  # kind 2: any event
        (5, 1, 60, 10**9, None),  # kind 5: never
        (99, 1, 70, 10**9, None),  # past the kinds' table
    ]
    payload = msgpack.packb([list(column) for column in zip(*events, strict=True)])
    wanted = criteria_of({0: (NEVER, 0, 0), 2: (ANY, 0, -1)}, {1: (100, 0), 2: (NEVER, STATUS_ERROR)})
    found = match_frame(payload, len(events), ORDER, 0, wanted)
    assert found is not None
    assert [row[:5] for row in candidates(found)] == [(1, 0, 1, 20, 150), (2, 0, 2, 30, 5), (5, 2, 9, 50, 0)]
    assert match_frame_py(payload, len(events), ORDER, 0, wanted) == found
    for *_, start, end in candidates(found):  # where each one's args are
        assert msgpack.unpackb(payload[start:end]) in ({"status": "error"}, {"value": 3}, None)


def test_a_counter_is_a_candidate_when_its_value_passes_other_thresholds_than_before() -> None:
    values = [5, 995, 1500, 2500, 2600, 1, 0.5, 1200]
    payload = msgpack.packb([[2] * 8, [3] * 8, list(range(8)), [0] * 8, [{"value": v} for v in values]])
    wanted = criteria_of({2: (NEVER, 0, 0)}, {3: (NEVER, CROSSING)}, counters=4)
    wanted.counters[3 * COUNTER_SLOTS : 4 * COUNTER_SLOTS] = array("q", [0, 2, 1])
    wanted.thresholds.extend([990, 2000, 1])  # above 990, above 2000; below 1
    found = match_frame(payload, 8, ORDER, 7, wanted)
    assert found is not None and [row[0] for row in candidates(found)] == [0, 1, 3, 5, 6, 7]
    again = match_frame(payload, 8, ORDER, 7, wanted)  # 1200 then 5: the state carried over
    assert again is not None and [row[0] for row in candidates(again)] == [0, 1, 3, 5, 6, 7]
    other_track = match_frame(payload[:], 8, ORDER, 8, wanted)
    assert other_track is not None and [row[0] for row in candidates(other_track)][:1] == [0]


@pytest.mark.parametrize(
    "payload",
    [b"", b"\xc1", msgpack.packb([[0], [0], [0], [0]]), msgpack.packb([[0], [0], [0], [True], [None]])],
    ids=["empty", "never-used byte", "four columns", "a bool for a duration"],
)
def test_a_payload_that_is_not_a_frame_gives_none(payload: bytes) -> None:
    assert match_frame(payload, 1, ORDER, 0, criteria_of({0: (ANY, 0, -1)})) is None


def test_a_payload_nested_deeper_than_the_c_reader_goes_is_read_by_the_python_twin() -> None:
    deep: Any = {"status": "error"}
    for _ in range(40):
        deep = [deep]
    payload = msgpack.packb([[0], [0], [0], [7], [deep]])
    found = match_frame(payload, 1, ORDER, 0, criteria_of({0: (5, 0, -1)}))
    assert found is not None and [row[:5] for row in candidates(found)] == [(0, 0, 0, 0, 7)]


# -- a run of a segment's frames ---------------------------------------------------------------------------------


def segment(parts: list[tuple[bytes, int, int, int, int, bytes]]) -> tuple[bytearray, int]:
    """A segment's buffer of EVENTS frames (payload, count, track, first ts, last ts), each after its gap of other
    bytes, and its index at the end; and the buffer's size."""
    data, index = bytearray(), []
    for payload, count, track, first, last, gap in parts:
        data += gap
        body = EVENTS_HEADER.pack(EVENTS_HEADER.size, 0, track, count, first, last) + payload
        index.append((len(data), FRAME_HEADER.size + len(body), track, count, first, last))
        data += FRAME_HEADER.pack(FRAME_HEADER.size + len(body), FrameType.EVENTS) + body
    data += bytes(INDEX_ENTRY.size * len(index))
    for i, entry in enumerate(index):  # (entry i is the (i + 1)-th from the end)
        INDEX_ENTRY.pack_into(data, len(data) - INDEX_ENTRY.size * (i + 1), *entry)
    return data, len(data)


def c_run(buffer: bytearray, size: int, entries: int, entry: int, position: int, end: int, wanted: Criteria) -> Any:
    return _match.match_run(  # type: ignore[union-attr]
        buffer, size, entries, entry, position, end, ORDER, wanted.kinds, wanted.names, wanted.counters,
        wanted.thresholds, wanted.state,
    )  # fmt: skip


parts = st.tuples(
    frames(),
    st.integers(0, 2**32 - 1),
    st.sampled_from([0, 5, 2**63 - 1, 2**63, 2**64 - 1]),
    st.sampled_from([0, 5, 2**63, 2**64 - 1]),
    st.sampled_from([b"", b"", b"", b"x"]),
)


@needs_c
@pytest.mark.timeout(900)  # bounded by its examples, not the clock, like the one above
@settings(max_examples=400, deadline=None)
@given(st.lists(parts, min_size=1, max_size=4), criteria(), st.data())
def test_the_twins_read_the_same_run_and_keep_the_same_state(
    drawn: list[tuple[tuple[bytes, int, tuple[int, ...]], int, int, int, bytes]], wanted: Criteria, data: st.DataObject
) -> None:
    built = [
        (payload, count % 2**32, track, first, last, gap) for (payload, count, _), track, first, last, gap in drawn
    ]
    buffer, size = segment(built)
    entry = data.draw(st.integers(0, len(built)))
    position = data.draw(st.sampled_from([0, 1, len(buffer)]))
    end = data.draw(st.sampled_from([size, size // 2, 0]))
    fast, slow = copy(wanted), copy(wanted)
    found = c_run(buffer, size, len(built), entry, position, end, fast)
    assert found == match_run_py(buffer, size, len(built), entry, position, end, ORDER, slow)
    assert fast.state == slow.state


def test_a_run_stops_at_a_gap_and_before_a_frame_it_does_not_take() -> None:
    take = criteria_of({0: (ANY, 0, -1)})
    ok = msgpack.packb([[0, 0], [0, 0], [10, 20], [0, 0], [None, {"a": 1}]])
    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    too_deep = msgpack.packb([[0], [0], [0], [0], [deep]])
    buffer, size = segment([(ok, 2, 7, 100, 200, b""), (ok, 2, 8, 300, 400, b""), (too_deep, 1, 7, 500, 500, b"")])
    found, entries, events, position = match_run(buffer, size, 3, 0, 0, size, ORDER, take)
    assert (entries, events) == (2, 4)
    rows = list(run_candidates(found))
    assert [(row[2], row[6], row[7]) for row in rows] == [(10, 7, 100), (20, 7, 100), (10, 8, 300), (20, 8, 300)]
    assert msgpack.unpackb(buffer[rows[1][4] : rows[1][5]]) == {"a": 1}
    # The frame nested too deep is the caller's, which match_frame reads (the Python twin where C cannot).
    assert match_run(buffer, size, 3, 2, position, size, ORDER, take)[1:] == (0, 0, position)
    assert match_frame(too_deep, 1, ORDER, 7, take)
    gap, size = segment([(ok, 2, 7, 100, 200, b""), (ok, 2, 7, 300, 400, b"strings")])
    assert match_run(gap, size, 2, 0, 0, size, ORDER, take)[1] == 1
    assert match_run_py(gap, size, 2, 0, 0, size, ORDER, copy(take))[1] == 1
