"""The rules' verdicts on a run's candidates (``rule_verdicts.py``): the C twin against the Python twin that defines
them, on any tables, candidates, counters' last values, messages' values, glob and render programs and places left
(never a crash, the same verdicts and counters' values, the same places taken and firings counted); and what they
decide, on a few candidates."""

from __future__ import annotations

from array import array
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loose_args import LOOSE_ARGS
from ringtrace.collector.incidents.admission import MAX_AHEAD_NS, MAX_DURATION_NS
from ringtrace.collector.incidents.rule_verdicts import (
    ALWAYS,
    ASK,
    CROSSES,
    ERROR,
    JUDGE,
    LONG,
    MADE,
    TEXT,
    Judged,
    RuleTables,
    logged,
    rule_verdicts,
    rule_verdicts_py,
    verdicts,
)
from ringtrace.collector.incidents.text_match import add_glob, add_render
from ringtrace.wire.optional_c import load_optional
from ringtrace.wire.table_frames import KindSpec

_match = load_optional("ringtrace.collector.incidents._match")
needs_c = pytest.mark.skipif(_match is None, reason="the C twin is not built here (or RINGTRACE_PURE_PYTHON)")
NOW = 10**18

statuses = st.sampled_from(["error", "ok", b"error", 1, None])
numbers = st.one_of(st.integers(-3, 12), st.floats(-3, 12, width=32), st.floats(), st.booleans(), st.just(2**64 - 1))
#: A message's values: mostly ones both twins render, some not (floats, bytes, lists), some odd texts.
message_values = st.lists(
    st.none()
    | st.booleans()
    | st.sampled_from([0, -1, 2**64 - 1, -(2**63), 10**18])
    | st.text(alphabet="ab-*[]!\\$éß€𝄞\x00\n", max_size=6)
    | st.sampled_from([1.5, b"x", [1], {"a": 1}]),
    max_size=5,
)
args_values = st.one_of(
    message_values,
    message_values.filter(lambda values: all(type(v) is not float for v in values)),
    st.none(),
    st.integers(-5, 5),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["status", "x", "value"]), statuses | numbers, max_size=3),
    st.builds(lambda value: {"value": value}, numbers),
)
limits = st.floats(-2, 10) | st.sampled_from([float("nan"), float("inf"), 0.0])


def c_verdicts(
    found: bytes, buffer: bytes, tables: RuleTables, room: array[int], surplus: array[int], offset: int,
    known: tuple[array[int], array[float]], counters: bool,
) -> Any:  # fmt: skip
    made = _match.rule_verdicts(  # type: ignore[union-attr]
        found, buffer, tables.entries, tables.kinds, tables.names, tables.limits, tables.globs, tables.renders, room,
        surplus, NOW, offset, *known, counters,
    )  # fmt: skip
    return Judged(*made)


GLOBS = ["*a*", "a?b", "[!a-c]*", "*[]-]", "x", "*é*", "*[z-a]", "[!b-a]", "**ab*b", "*\\*", "[^-]?*"]
PLACEHOLDER_TEXTS = ["$what", "${what}", "$value2", "${value7}", "$nope", "é ", "$", "${", "a*b", "$what_"]


@st.composite
def programs(draw: st.DrawFn) -> tuple[array[int], list[int], array[int], list[int]]:
    """Glob and render programs (those of real globs and kinds, and any words), and where some start."""
    globs, renders = array("q"), array("q")
    glob_starts = [add_glob(globs, glob) for glob in draw(st.lists(st.sampled_from(GLOBS), max_size=3))]
    fields = draw(st.lists(st.sampled_from([("what", "any"), ("value2", "any"), ("x", "any")]), max_size=3))
    texts = st.lists(st.sampled_from(PLACEHOLDER_TEXTS), max_size=4).map("".join)
    render_starts = [add_render(renders, KindSpec(9, "m", "message", tuple(fields), draw(texts), "error"))]
    words = st.lists(st.sampled_from([-1, 0, 1, 2, 3, 4, 5, 6, 97, 0x10FFFF, 0x110000, 2**62]), max_size=12)
    for table, starts in ((globs, glob_starts), (renders, render_starts)):
        if draw(st.booleans()):  # (any words: a program cut short, of no known part, no code point)
            starts.append(len(table))
            table.extend(draw(words))
        starts += [-1, len(table), 2**62]
    return globs, glob_starts, renders, render_starts


@st.composite
def rule_tables(draw: st.DrawFn, places: int) -> RuleTables:
    globs, glob_starts, renders, render_starts = draw(programs())
    entries = array("q")
    for _ in range(draw(st.integers(0, 10))):
        place = draw(st.integers(-1, places))
        test = draw(st.sampled_from([*range(8), TEXT, TEXT, TEXT]))  # (texts have the most ways to be)
        least = st.sampled_from(glob_starts) if test == TEXT else st.sampled_from([0, 1, 5, 100, 2**62, -(2**63)])
        entries.extend((place, draw(least), test))
    count = len(entries) // 3
    ranges = st.tuples(st.integers(-1, count + 1), st.integers(-1, count + 1))
    kinds = array("q")
    groups = draw(st.integers(0, 3))
    for _ in range(draw(st.integers(0, 6))):
        render = draw(st.sampled_from(render_starts))
        kinds.extend((*draw(ranges), draw(st.integers(-1, groups)), draw(st.integers(0, 2)), render))
    names = tuple(
        array("q", [v for _ in range(draw(st.integers(0, 6))) for v in (*draw(ranges), draw(st.integers(-1, 2)))])
        for _ in range(groups)
    )
    bounds = array("d")
    for _ in range(draw(st.integers(0, 6))):
        bounds.extend(
            (draw(st.sampled_from([0.0, 1.0, 2.0])), draw(limits), draw(st.sampled_from([0.0, 1.0])), draw(limits))
        )
    return RuleTables(entries, kinds, names, bounds, globs, renders)


@st.composite
def candidates(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """Candidate rows as ``match_run`` gives them, their args in a buffer (some spans out of it, some that read only
    as the first pass reads them)."""
    buffer, rows = bytearray(b"\x00\x01"), array("q")
    for _ in range(draw(st.integers(0, 8))):
        packed = draw(args_values.map(msgpack.packb) | LOOSE_ARGS)  # (some do not read strictly: none to the twins)
        start = len(buffer)
        buffer += packed
        end = start + len(packed)
        if draw(st.booleans()):
            start, end = draw(st.sampled_from([(end, start), (start, end + 1), (-1, end), (start, 2**40)]))
        ts = draw(st.sampled_from([0, 10, -NOW, NOW, MAX_AHEAD_NS, 2**62]))
        dur = draw(st.sampled_from([0, 5, 100, -1, MAX_DURATION_NS + 1, 2**62]))
        first = draw(st.sampled_from([0, NOW, 2**63 - 1]))
        track = draw(st.sampled_from([7, 8]))
        rows.extend((draw(st.integers(-1, 6)), draw(st.integers(-1, 6)), ts, dur, start, end, track, first))
    return rows.tobytes(), bytes(buffer)


@needs_c
@settings(max_examples=400, deadline=None)
@given(st.data())
def test_the_twins_give_the_same_verdicts_and_take_the_same_places(data: st.DataObject) -> None:
    places = data.draw(st.integers(0, 4))
    tables = data.draw(rule_tables(places))
    found, buffer = data.draw(candidates())
    room = array("q", data.draw(st.lists(st.integers(-1, 3), min_size=places, max_size=places)))
    surplus = array("q", [0] * data.draw(st.sampled_from([places, max(0, places - 1)])))
    offset = data.draw(st.sampled_from([0, -NOW, NOW, 2**63 - 1, -(2**63)]))
    pairs = data.draw(st.lists(st.tuples(st.sampled_from([7, 8, 9]), st.integers(-1, 2), limits), max_size=5))
    known = (array("q", [v for track, key, _ in pairs for v in (track, key)]), array("d", [v for *_, v in pairs]))
    counters = data.draw(st.booleans())
    found += data.draw(st.sampled_from([b"", b"\x01", bytes(15)]))  # (a part of a row: not read)
    c_room, c_surplus = room[:], surplus[:]
    expected = rule_verdicts_py(found, buffer, tables, room, surplus, NOW, offset, *known, counters)
    got = c_verdicts(found, buffer, tables, c_room, c_surplus, offset, known, counters)
    assert got.verdicts == expected.verdicts and got.log == expected.log
    assert str(list(logged(got))) == str(list(logged(expected)))  # (NaN as NaN)
    assert (c_room, c_surplus) == (room, surplus)


@needs_c
@settings(max_examples=400, deadline=None)
@given(st.data())
def test_the_twins_render_and_glob_messages_alike(data: st.DataObject) -> None:
    # Every candidate a message of kind 0, whose entries are text globs (some programs any words, some not there).
    globs, glob_starts, renders, render_starts = data.draw(programs())
    tests = st.sampled_from([TEXT, TEXT, TEXT, ALWAYS, ASK])
    rules = data.draw(st.lists(st.tuples(st.sampled_from(glob_starts), tests), min_size=1, max_size=4))
    entries = array("q", [v for place, (glob, test) in enumerate(rules) for v in (place, glob, test)])
    kinds = array("q", [0, len(rules), -1, 0, data.draw(st.sampled_from(render_starts))])
    tables = RuleTables(entries, kinds, (), array("d"), globs, renders)
    buffer, rows = bytearray(), array("q")
    for values in data.draw(st.lists(message_values | args_values, max_size=6)):
        packed = msgpack.packb(values)
        if data.draw(st.integers(0, 9)) == 0:  # (a value cut short, or bytes that are none)
            packed = data.draw(st.sampled_from([packed[:-1], b"\x91\xa2\xc3\x28", b"\xc1", packed + b"\x00"]))
        rows.extend((0, 0, 0, 0, len(buffer), len(buffer) + len(packed), 7, NOW))
        buffer += packed
    room = array("q", data.draw(st.lists(st.integers(0, 3), min_size=len(rules), max_size=len(rules))))
    surplus = array("q", [0] * len(rules))
    c_room, c_surplus = room[:], surplus[:]
    known = (array("q"), array("d"))
    expected = rule_verdicts_py(rows.tobytes(), bytes(buffer), tables, room, surplus, NOW, 0, *known, True)
    got = c_verdicts(rows.tobytes(), bytes(buffer), tables, c_room, c_surplus, 0, known, True)
    assert got.verdicts == expected.verdicts
    assert (c_room, c_surplus) == (room, surplus)


def judge(
    found: bytes, buffer: bytes, tables: RuleTables, room: array[int], surplus: array[int],
    known: tuple[array[int], array[float]] = (array("q"), array("d")), counters: bool = True,
) -> Judged:  # fmt: skip
    return rule_verdicts(found, buffer, tables, room, surplus, NOW, 0, *known, counters)


def one(kind: int, name: int, ts: int, dur: int, args: Any, first: int = NOW) -> tuple[bytes, bytes]:
    packed = msgpack.packb(args)
    return array("q", (kind, name, ts, dur, 0, len(packed), 7, first)).tobytes(), packed


def test_each_rule_is_judged_by_its_test_and_takes_its_place_or_is_counted() -> None:
    # Kind 0 (a span, name group 0): rule 0 long spans >= 100, rule 1 error spans; name 3: rule 2 (Python's).
    tables = RuleTables(
        array("q", [0, 100, LONG, 1, 0, ERROR, 2, 0, ASK, 3, 0, ALWAYS]),
        array("q", [0, 2, 0, 1, -1, 3, 1, -1, 0, -1]),
        (array("q", [0, 0, -1] * 3 + [2, 1, -1]),),
    )
    room, surplus = array("q", [1, 1, 1, 0]), array("q", [0, 0, 0, 0])
    rows, buffer = [], b""
    for kind, name, dur, args in [(0, 3, 150, {"status": "error"}), (0, 1, 150, None), (0, 1, 50, None), (1, 0, 0, 1)]:
        row, packed = one(kind, name, 0, dur, args)
        shifted = array("q", row)
        shifted[4] += len(buffer)
        shifted[5] += len(buffer)
        rows.append(shifted.tobytes())
        buffer += packed
    found = b"".join(rows)
    decided = list(verdicts(judge(found, buffer, tables, room, surplus).verdicts))
    assert decided == [(0, 0, MADE), (0, 1, MADE), (0, 2, JUDGE)]
    assert list(room) == [0, 0, 1, 0] and list(surplus) == [1, 0, 0, 1]
    # (the second long span found no place left: counted; the short one met no rule; rule 3 had no room: counted)


def test_a_candidate_whose_times_cannot_be_is_no_ones_and_one_the_engine_refuses_takes_no_place() -> None:
    tables = RuleTables(array("q", [0, 0, ALWAYS]), array("q", [0, 1, -1, 1, -1]), ())
    room, surplus = array("q", [1]), array("q", [0])
    never, buffer = one(0, 0, -NOW - 1, 0, None)
    assert judge(never, buffer, tables, room, surplus).verdicts == b""
    ahead, buffer = one(0, 0, MAX_AHEAD_NS + 1, 0, None)
    decided = judge(ahead * 2, buffer, tables, room, surplus).verdicts
    assert list(verdicts(decided)) == [(0, 0, MADE), (1, 0, MADE)]
    assert list(room) == [1] and list(surplus) == [0]


def test_a_counter_rule_fires_where_its_value_crosses_from_the_last_one_of_its_track_and_each_value_is_logged() -> None:
    # Kind 0 (counters, group 0), name 0 keyed 5: rule 0 above 10, rule 1 below 0.
    tables = RuleTables(
        array("q", [0, 0, CROSSES, 1, 1, CROSSES]),
        array("q", [0, 0, 0, 0, -1]),
        (array("q", [0, 2, 5]),),
        array("d", [1, 10, 0, 0, 0, 0, 1, 0]),
    )
    rows, buffer = [], b""
    for track, value in [(7, 11), (7, 12), (8, 12), (7, 5), (7, 11.5), (7, -1), (7, True)]:
        packed = msgpack.packb({"value": value})
        rows.append(array("q", (0, 0, 0, 0, len(buffer), len(buffer) + len(packed), track, NOW)).tobytes())
        buffer += packed
    room, surplus = array("q", [2, 5]), array("q", [0, 0])
    known = (array("q", [8, 5]), array("d", [20.0]))  # track 8 was above already
    judged = judge(b"".join(rows), buffer, tables, room, surplus, known)
    assert list(verdicts(judged.verdicts)) == [(0, 0, MADE), (4, 0, MADE), (5, 1, MADE)]
    assert list(logged(judged)) == [(0, 7, 5, 11.0), (1, 7, 5, 12.0), (2, 8, 5, 12.0), (3, 7, 5, 5.0), (4, 7, 5, 11.5),
                                    (5, 7, 5, -1.0)]  # fmt: skip
    assert list(room) == [0, 4] and list(surplus) == [0, 0]
    # Without counters judged here (or a name with no key), Python is asked, and nothing is logged.
    room = array("q", [2, 5])
    judged = judge(b"".join(rows), buffer, tables, room, surplus, known, counters=False)
    assert [v for v in verdicts(judged.verdicts)][:2] == [(0, 0, JUDGE), (0, 1, JUDGE)] and judged.log == b""


def test_a_message_rule_with_a_text_glob_is_judged_on_the_rendered_text_or_left_to_python() -> None:
    # Kind 0 (a message kind "took $what for ${who}"): rule 0 "*timeout*", rule 1 "took what(5) for é*".
    globs, renders = array("q"), array("q")
    timeout, took = add_glob(globs, "*timeout*"), add_glob(globs, "took what(5) for é*")
    kind = KindSpec(0, "db", "message", (("what", "any"), ("who", "any")), "took $what for ${who}", "error")
    tables = RuleTables(
        array("q", [0, timeout, TEXT, 1, took, TEXT]),
        array("q", [0, 2, -1, 0, add_render(renders, kind)]),
        (),
        array("d"),
        globs,
        renders,
    )
    rows, buffer = [], b""
    for values in [[5, "éa"], ["a timeout", "x"], [5, "b"], [5.0, "é"], {"what": 5}, [5, "é", "extra"]]:
        row, packed = one(0, 0, 0, 0, values)
        shifted = array("q", row)
        shifted[4] += len(buffer)
        shifted[5] += len(buffer)
        rows.append(shifted.tobytes())
        buffer += packed
    room, surplus = array("q", [5, 5]), array("q", [0, 0])
    decided = list(verdicts(judge(b"".join(rows), buffer, tables, room, surplus).verdicts))
    assert decided == [(0, 1, MADE), (1, 0, MADE), (3, 0, JUDGE), (3, 1, JUDGE), (4, 0, JUDGE), (4, 1, JUDGE),
                       (5, 1, MADE)]  # fmt: skip
    # (a float is Python's to render, and args that are no list its to show: it judges them)
    assert list(room) == [4, 3] and list(surplus) == [0, 0]
