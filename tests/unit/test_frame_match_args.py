"""The first pass over frames whose args read structurally but not all strictly (``frame_match.py``: the C twin
checks only the structure of the args it does not read): the C twin against the Python twin on such frames, cut or
whole, alone and in a run (never a crash, the same candidates and counters' state, None only where the C reader
leaves a frame nested too deep to the Python twin); and what the first pass and the verdicts make of such args."""

from __future__ import annotations

from array import array
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loose_args import C_DEPTH, LOOSE_ARGS, raw_map, raw_str
from ringtrace.collector.incidents.frame_match import (
    ANY,
    COUNTER_SLOTS,
    CROSSING,
    NEVER,
    STATUS_ERROR,
    Criteria,
    candidates,
    match_frame,
    match_frame_py,
    match_run_py,
    run_candidates,
)
from ringtrace.collector.incidents.rule_verdicts import ERROR, MADE, RuleTables, rule_verdicts, rule_verdicts_py
from test_frame_match import ORDER, c_run, c_twin, copy, criteria, criteria_of, ints, needs_c, segment

NOW = 10**18
NO_VALUES = (array("q"), array("d"))


@st.composite
def loose_frames(draw: st.DrawFn) -> tuple[bytes, int]:
    """A payload in the columns' order whose args are any of ``LOOSE_ARGS`` or plain values."""
    count = draw(st.integers(1, 10))
    head = [
        draw(st.lists(st.integers(-2, 14), min_size=count, max_size=count)),
        draw(st.lists(st.integers(-2, 45), min_size=count, max_size=count)),
        draw(st.lists(ints, min_size=count, max_size=count)),
        draw(st.lists(ints | st.integers(0, 300), min_size=count, max_size=count)),
    ]
    plain = st.sampled_from([None, {"value": 995}, {"status": "error"}, ["a"]]).map(msgpack.packb)
    args = draw(st.lists(LOOSE_ARGS | plain, min_size=count, max_size=count))
    payload = b"\x95" + b"".join(msgpack.packb(column) for column in head)
    payload += bytes([0xDC]) + count.to_bytes(2, "big") + b"".join(args)
    return payload, count


def both(payload: bytes, count: int, wanted: Criteria, track: int = 1) -> tuple[Any, Any, Criteria, Criteria]:
    fast, slow = copy(wanted), copy(wanted)
    return c_twin(payload, count, ORDER, track, fast), match_frame_py(payload, count, ORDER, track, slow), fast, slow


@needs_c
@pytest.mark.timeout(900)  # bounded by its examples, not the clock: past 50 s beside a busy suite, not a hang
@settings(max_examples=500, deadline=None)
@given(st.lists(loose_frames(), min_size=1, max_size=3), criteria(), st.data())
def test_the_twins_read_loose_args_alike_whole_or_cut(
    run: list[tuple[bytes, int]], wanted: Criteria, data: st.DataObject
) -> None:
    fast, slow = copy(wanted), copy(wanted)
    for payload, count in run:  # one after another: the counters' state carries over
        at = data.draw(st.integers(len(payload) // 2, len(payload)))
        for read in (payload, payload[:at]):
            found = c_twin(read, count, ORDER, 1, fast)
            expected = match_frame_py(read, count, ORDER, 1, slow)
            # None from C leaves the payload to the Python twin (nested deeper than the C reader goes)
            assert found == expected or (found is None and match_frame(read, count, ORDER, 1, copy(fast)) == expected)
            if found is None:
                fast = copy(slow)
            assert fast.state == slow.state


@needs_c
@pytest.mark.timeout(900)  # bounded by its examples, like the one above
@settings(max_examples=300, deadline=None)
@given(st.lists(loose_frames(), min_size=1, max_size=3), criteria(), st.data())
def test_the_twins_read_a_run_of_loose_args_alike(
    frames: list[tuple[bytes, int]], wanted: Criteria, data: st.DataObject
) -> None:
    buffer, size = segment([(payload, count, 7, 100, 200, b"") for payload, count in frames])
    fast, slow = copy(wanted), copy(wanted)
    found = c_run(buffer, size, len(frames), 0, 0, size, fast)
    assert found == match_run_py(buffer, size, len(frames), 0, 0, size, ORDER, slow)
    assert fast.state == slow.state


def frame_of(args: list[bytes], kinds: list[int], names: list[int], durations: list[int]) -> bytes:
    head = [kinds, names, list(range(len(args))), durations]
    return b"\x95" + b"".join(msgpack.packb(column) for column in head) + bytes([0x90 | len(args)]) + b"".join(args)


@needs_c
def test_a_frame_whose_args_are_not_all_utf8_is_read_and_its_other_events_judged() -> None:
    not_utf8 = raw_map([(msgpack.packb("trace_id"), raw_str(b"\xff\xfe"))])
    unhashable = raw_map([(msgpack.packb([1]), msgpack.packb(2))])
    payload = frame_of([not_utf8, unhashable, msgpack.packb(None)], [0, 0, 0], [1, 1, 1], [500, 5, 500])
    wanted = criteria_of({0: (100, 0, -1)})
    found, expected, _, _ = both(payload, 3, wanted)
    assert found is not None and found == expected
    assert [row[0] for row in candidates(found)] == [0, 2]
    with pytest.raises(UnicodeDecodeError):  # (what the first pass refused whole before)
        msgpack.unpackb(payload)


@needs_c
def test_a_status_is_found_in_args_that_do_not_read_strictly_and_the_verdicts_find_none() -> None:
    status = [(msgpack.packb("status"), msgpack.packb("error"))]
    args = [
        raw_map([(msgpack.packb("x"), raw_str(b"\xff")), *status]),  # a candidate; its args say nothing strictly
        raw_map([*status, (msgpack.packb("status"), raw_str(b"error\xff"))]),  # the last status is not "error"
        raw_map([(msgpack.packb("status"), msgpack.packb(b"error"))]),  # bytes, not a str
        raw_map(status),
    ]
    payload = frame_of(args, [0] * 4, [2] * 4, [5] * 4)
    wanted = criteria_of({0: (NEVER, 0, 0)}, {2: (NEVER, STATUS_ERROR)})
    found, expected, _, _ = both(payload, 4, wanted)
    assert found is not None and found == expected
    assert [row[0] for row in candidates(found)] == [0, 3]
    buffer, size = segment([(payload, 4, 7, NOW, NOW, b"")])
    rows, *_ = c_run(buffer, size, 1, 0, 0, size, copy(wanted))
    tables = RuleTables(array("q", [0, 0, ERROR]), array("q", [0, 1, -1, 1, -1]), (), array("d"), array("q"))
    for verdicts in (rule_verdicts, rule_verdicts_py):  # (the first one's args do not read: no status, no firing)
        judged = verdicts(rows, bytes(buffer), tables, array("q", [9]), array("q", [0]), NOW, 0, *NO_VALUES, True)
        assert array("q", judged.verdicts).tolist() == [1, 0, MADE]


@needs_c
def test_a_counters_value_in_args_that_do_not_read_strictly_leaves_its_state_alone() -> None:
    value = (msgpack.packb("value"), msgpack.packb(995))
    args = [raw_map([value]), raw_map([value, (raw_str(b"\xff"), msgpack.packb(1))]), raw_map([value])]
    payload = frame_of(args, [2] * 3, [3] * 3, [0] * 3)
    wanted = criteria_of({2: (NEVER, 0, 0)}, {3: (NEVER, CROSSING)}, counters=4)
    wanted.counters[3 * COUNTER_SLOTS : 4 * COUNTER_SLOTS] = array("q", [0, 1, 0])
    wanted.thresholds.append(990)
    found, expected, fast, slow = both(payload, 3, wanted)
    assert found is not None and found == expected and fast.state == slow.state
    assert [row[0] for row in candidates(found)] == [0]  # the third passes what the first did


@needs_c
@pytest.mark.parametrize("depth", [C_DEPTH - 1, C_DEPTH, C_DEPTH + 1])
def test_args_nested_about_as_deep_as_the_c_reader_goes_are_read_by_one_twin_or_the_other(depth: int) -> None:
    args = b"\x91" * depth + raw_map([(msgpack.packb("k"), raw_str(b"\xff"))])  # (its items one deeper)
    payload = frame_of([args], [0], [0], [7])
    wanted = criteria_of({0: (ANY, 0, -1)})
    found, expected, _, _ = both(payload, 1, wanted)
    assert expected is not None and len(list(candidates(expected))) == 1
    assert found == (expected if depth + 1 <= C_DEPTH else None)
    assert match_frame(payload, 1, ORDER, 1, copy(wanted)) == expected
    buffer, size = segment([(payload, 1, 7, 100, 100, b"")])
    rows, entries, _, _ = c_run(buffer, size, 1, 0, 0, size, copy(wanted))
    assert entries == (1 if depth + 1 <= C_DEPTH else 0) and len(list(run_candidates(rows))) == entries
