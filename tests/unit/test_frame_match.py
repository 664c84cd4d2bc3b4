"""The rules' first pass over a stored frame (``frame_match.py``): the C twin against the Python twin that defines
it, on valid payloads with any criteria and on payloads that are not what they should be (never a crash)."""

from __future__ import annotations

from array import array
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.collector.incidents.frame_match import (
    ANY,
    KIND_SLOTS,
    NAME_SLOTS,
    NEVER,
    STATUS_ERROR,
    Criteria,
    candidates,
    match_frame,
    match_frame_py,
)
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
args = st.one_of(
    st.none(),
    values,
    st.dictionaries(st.sampled_from(["status", "trace_id", "x", "value"]), statuses | values, max_size=4),
)
criterion = st.tuples(st.sampled_from([NEVER, ANY, 0, 5, 100, 2**62]), st.sampled_from([0, STATUS_ERROR]))


@st.composite
def criteria(draw: st.DrawFn) -> Criteria:
    groups = draw(st.integers(0, 3))
    kinds = array("q")
    for _ in range(draw(st.integers(0, 12))):
        kinds.extend((*draw(criterion), draw(st.integers(-1, groups))))
    names = tuple(
        array("q", [v for _ in range(draw(st.integers(0, 40))) for v in draw(criterion)]) for _ in range(groups)
    )
    return Criteria(kinds, names)


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
@settings(max_examples=600)
@given(frames(), criteria())
def test_the_twins_find_the_same_candidates(frame: tuple[bytes, int, tuple[int, ...]], wanted: Criteria) -> None:
    payload, count, order = frame
    fast = _match.match_frame(payload, count, order, wanted.kinds, wanted.names)  # type: ignore[union-attr]
    assert fast == match_frame_py(payload, count, order, wanted)
    # Criteria given as bytes (no alignment promised) are read alike.
    names = tuple(table.tobytes() for table in wanted.names)
    assert _match.match_frame(payload, count, order, wanted.kinds.tobytes(), names) == fast  # type: ignore[union-attr]


@needs_c
@settings(max_examples=600)
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
        fast = _match.match_frame(broken, count, order, wanted.kinds, wanted.names)  # type: ignore[union-attr]
        slow = match_frame_py(broken, count, order, wanted)
        # None from C leaves the payload to the Python twin (what it reads deeper than the C reader goes).
        assert fast is None or fast == slow
        assert match_frame(broken, count, order, wanted) == slow


def criteria_of(kinds: dict[int, tuple[int, int, int]], *groups: dict[int, tuple[int, int]]) -> Criteria:
    table = array("q", [NEVER, 0, -1] * (max(kinds, default=-1) + 1))
    for kind, entry in kinds.items():
        table[kind * KIND_SLOTS : (kind + 1) * KIND_SLOTS] = array("q", entry)
    names = []
    for group in groups:
        names_of = array("q", [NEVER, 0] * (max(group, default=-1) + 1))
        for name, entry in group.items():
            names_of[name * NAME_SLOTS : (name + 1) * NAME_SLOTS] = array("q", entry)
        names.append(names_of)
    return Criteria(table, tuple(names))


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
    found = match_frame(payload, len(events), ORDER, wanted)
    assert found is not None
    assert list(candidates(found)) == [(1, 0, 1, 20, 150), (2, 0, 2, 30, 5), (5, 2, 9, 50, 0)]
    assert match_frame_py(payload, len(events), ORDER, wanted) == found


@pytest.mark.parametrize(
    "payload",
    [b"", b"\xc1", msgpack.packb([[0], [0], [0], [0]]), msgpack.packb([[0], [0], [0], [True], [None]])],
    ids=["empty", "never-used byte", "four columns", "a bool for a duration"],
)
def test_a_payload_that_is_not_a_frame_gives_none(payload: bytes) -> None:
    assert match_frame(payload, 1, ORDER, criteria_of({0: (ANY, 0, -1)})) is None


def test_a_payload_nested_deeper_than_the_c_reader_goes_is_read_by_the_python_twin() -> None:
    deep: Any = {"status": "error"}
    for _ in range(40):
        deep = [deep]
    payload = msgpack.packb([[0], [0], [0], [7], [deep]])
    found = match_frame(payload, 1, ORDER, criteria_of({0: (5, 0, -1)}))
    assert found is not None and list(candidates(found)) == [(0, 0, 0, 0, 7)]
