"""The C accelerator against its pure-Python twin: the same frames byte for byte, the same buffers, the same rules.

The rest of the suite runs on whichever recorder the process has (the accelerator where it is built); ``scripts/check``
runs the client's tests a second time with ``RINGTRACE_PURE_PYTHON=1``, so both recorders pass all of them. The tests
here compare the two directly, in one process.
"""

from __future__ import annotations

import contextlib
import enum
import gc
import itertools
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import weakref
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.client import Event, MemoryListener, Timeline, string, u16
from ringtrace.client.accelerator import speedups
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.recording.messages import message_kind
from ringtrace.collector.ingest.scan import _scan_events_py
from ringtrace.wire.arg_values import MAX_ARG_ITEMS, MAX_ARG_TEXT, normalise_values, safe_str
from ringtrace.wire.errors import FrameTooLarge
from ringtrace.wire.frame_types import FRAME_HEADER
from ringtrace.wire.frames import Events, encode
from ringtrace.wire.model import INCIDENT, INSTANT, SPAN, THREAD_TRACK, TrackInfo
from ringtrace.wire.optional_c import PURE_PYTHON_ENV, load_optional
from ringtrace.wire.stream_encoder import StreamEncoder
from ringtrace.wire.string_table import StringTable

TRACK = TrackInfo(3, THREAD_TRACK, "main", 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
needs_speedups = pytest.mark.skipif(speedups is None, reason="the C accelerator is not in use in this process")
#: The encoder's C packer (``wire/packer/``): the C recorder is in use only with it.
packer = load_optional("ringtrace.wire._packer")
#: The collector's C scan of EVENTS frames (``collector/ingest/_scan.c``).
scan_c = load_optional("ringtrace.collector.ingest._scan")
needs_scan_c = pytest.mark.skipif(scan_c is None, reason="the collector's C scan is not in use in this process")


def test_the_accelerator_is_in_use_wherever_it_can_be_built() -> None:
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        assert speedups is None and packer is None
        return
    compiler = str(sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) here: the install could not build the accelerator")
    assert speedups is not None, "a C compiler is here, yet ringtrace.client._speedups was not built or not importable"
    assert packer is not None, "a C compiler is here, yet ringtrace.wire._packer was not built or not importable"
    assert scan_c is not None, "a C compiler is here, yet ringtrace.collector.ingest._scan was not built"


# -- pack_columns: the integer columns of an EVENTS payload ---------------------------------------------------------


def reference_payload(records: list[Any], table: StringTable) -> tuple[bytes, int, int]:
    """What the pure-Python encoder packs for ``records``: msgpack-python's bytes for the five columns."""
    kinds, labels, starts, ends, args = (records[column::5] for column in range(5))
    names = [table[label] for label in labels]
    first = min(starts)
    columns = [kinds, names, [s - first for s in starts], [e - s for s, e in zip(starts, ends, strict=True)], args]
    return msgpack.packb(columns), first, max(ends)


events = st.tuples(
    st.integers(0, 300) | INT64,
    st.sampled_from(["op", "io", "", "ü" * 3]) | st.integers(-5, 5),
    INT64,
    INT64,
    st.none() | st.dictionaries(st.text(max_size=3), st.integers(0, 10), max_size=2),
)


@needs_speedups
@given(st.lists(events, min_size=1, max_size=200))
def test_pack_columns_writes_what_msgpack_python_writes(run: list[tuple[Any, ...]]) -> None:
    assert packer is not None
    records = [value for event in run for value in event]
    table = StringTable()
    try:
        expected, first, last = reference_payload(records, StringTable())
    except (OverflowError, ValueError):  # a difference past 64 bits: msgpack refuses it too
        with pytest.raises(OverflowError):
            packer.pack_columns(records, table)
        return
    try:
        head, c_first, c_last, args = packer.pack_columns(records, table)
    except OverflowError:
        differences = [d for s, e in zip(records[2::5], records[3::5], strict=True) for d in (e - s, s - first)]
        assert any(not -(2**63) <= d < 2**63 for d in differences)
        return
    payload = head if args is None else head + msgpack.packb(args)
    assert (payload, c_first, c_last) == (expected, first, last)
    assert (args is None) == all(a is None for a in records[4::5])


@needs_speedups
def test_pack_columns_assigns_string_ids_as_the_table_does() -> None:
    assert packer is not None
    table = StringTable(max_strings=3)
    records = [value for label in ["a", "b", "a", "c", "d"] for value in (SPAN, label, 5, 9, None)]
    head, *_ = packer.pack_columns(records, table)
    assert msgpack.unpackb(head + b"")[1] == [0, 1, 0, 2, 2]  # the last id is the overflow label's
    assert table.strings == ["a", "b"]
    assert table.overflowed == 2


@needs_speedups
@pytest.mark.parametrize(
    ("records", "error"),
    [
        ([SPAN, "op", 1, 2], ValueError),  # not whole events
        ([], ValueError),
        ([SPAN, ["unhashable"], 1, 2, None], TypeError),
        ([SPAN, "op", "1", 2, None], TypeError),
        ([SPAN, "op", 1, 2**64, None], OverflowError),
    ],
)
def test_pack_columns_refuses_what_it_cannot_pack(records: list[Any], error: type[Exception]) -> None:
    assert packer is not None
    with pytest.raises(error):
        packer.pack_columns(records, StringTable())


class Unhashable:
    __hash__ = None  # type: ignore[assignment]

    def __str__(self) -> str:
        return "unhashable label"


def nested(depth: int) -> list[Any]:
    value: list[Any] = ["deep"]
    for _ in range(depth):
        value = [value]
    return value


def encoder_frames(
    records: list[Any],
    accelerated: bool,
    max_strings: int = 100,
    max_frame_bytes: int = 70_000,
) -> tuple[Any, ...]:
    encoder = StreamEncoder(
        max_frame_bytes=max_frame_bytes, max_events_per_frame=50, max_strings=max_strings, accelerated=accelerated
    )
    batch = encoder.encode(TRACK, list(records))
    counters = (encoder.clipped_args, encoder.label_overflow_events, encoder.rejected_events)
    return (batch.control, batch.events, batch.dropped_events, *counters)


@needs_speedups
@pytest.mark.parametrize(
    "run",
    [
        [(SPAN, "op", 10 + i, 30 + 2 * i, None) for i in range(120)],
        [(INSTANT, f"tick {i % 7}", 10**13 + i, 10**13 + i, {"i": i} if i % 3 else None) for i in range(120)],
        [(SPAN, Unhashable(), 1, 2, None), (INSTANT, "op", 3, 3, {"odd": {(1, 2): "tuple key"}})],
        [(SPAN, "deep", 1, 2, {"v": nested(40)})],  # past MAX_ARG_DEPTH
        [(SPAN, "surrogate", 1, 2, {"text": "\udc80"}), (SPAN, "op", 2, 3, None)],
        [(SPAN, "big", 1, 2, {"pad": "x" * 30_000}) for _ in range(5)],  # frames split to fit
        [(SPAN, "huge", 1, 2, {"pad": "x" * 60_000}), (SPAN, "op", 2, 3, {"pad": b"y" * 80_000})],  # clipped
        [(INSTANT, label, 1, 1, None) for label in [f"l{i}" for i in range(120)] + ["l7"] * 5 + ["new"] * 5],
        [(INCIDENT, "payment declined", 5, 5, {"order": 7, "reason": "x"}), (INCIDENT, "bare", 6, 6, None)],
        [(SPAN, "checkout", 1, 9, None), (INCIDENT, Unhashable(), 5, 5, {"odd": {(1, 2): "tuple key"}})],
    ],
)
def test_the_encoder_writes_the_same_frames_with_and_without_the_accelerator(run: list[tuple[Any, ...]]) -> None:
    records = [value for event in run for value in event]
    assert encoder_frames(records, True) == encoder_frames(records, False)


# -- pack_args: the args column, normalised and packed as the Python path does ----------------------------------------


class Packet(Event):
    size: u16
    proto: string


class OddText(str):
    def __str__(self) -> str:
        return "not its own text"


class OddFloat(float):
    def __str__(self) -> str:
        return "not its own float"


class OddMap(dict[str, Any]):
    pass


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class BadEqKey:
    """A key that hashes and prints, and refuses to be compared."""

    def __hash__(self) -> int:
        return 7

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparison for you")

    def __str__(self) -> str:
        return "bad eq"


class Colour(enum.IntEnum):
    RED = 1


#: Where the packing of a length or a number changes form, and where the Python path starts to clip.
LENGTHS = [0, 1, 31, 32, 255, 256, 999, 1000, 1001, 65_535, 65_536, 65_537]
INT_EDGES = [
    *(
        sign * 2**bits + delta
        for bits in (5, 7, 8, 15, 16, 30, 31, 32, 60, 63, 64)
        for sign in (1, -1)
        for delta in (-1, 0, 1)
    ),
]


def huge_int() -> int:
    """Too long for str(): the Python path carries a mark (hypothesis cannot show it, so it is built)."""
    return 10**5_000


_texts = st.text(max_size=6) | st.sampled_from(["\udc80", "a\ud800b", "é", "\U0001f600", "\x00"])
_edge_texts = st.builds(lambda n, c: c * n, st.sampled_from(LENGTHS), st.sampled_from(["x", "é", "\U0001f600"]))
_flat = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(INT_EDGES),
    st.builds(huge_int),
    st.floats(allow_nan=True, allow_infinity=True),
    _texts,
    _edge_texts,
    st.binary(max_size=6),
    st.builds(lambda n: b"y" * n, st.sampled_from(LENGTHS)),
)
_odd = st.sampled_from(
    [OddText("odd"), OddFloat(1.5), Colour.RED, Unprintable(), bytearray(b"ab"), memoryview(b"cd"), object()]
) | st.builds(OddMap, a=st.integers())
_values = st.recursive(
    _flat | _odd,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(_texts, inner, max_size=3)
        | st.frozensets(st.integers(), max_size=3)
    ),
    max_leaves=8,
)
_keys = _texts | st.sampled_from([OddText("k"), 1, b"k", (1, 2), None, BadEqKey(), Unprintable(), "\udcff"])
_maps = st.one_of(
    st.dictionaries(st.text(max_size=4), _flat, max_size=4),  # the common shape
    st.dictionaries(_keys, _values, max_size=4),
    st.builds(lambda n, v: {f"k{i}": v for i in range(n)}, st.sampled_from([15, 16, 999, 1000, 1001]), _flat),
)
_message_values = st.one_of(
    st.lists(_flat, max_size=6).map(tuple),
    st.lists(_values, max_size=6).map(tuple),
    st.builds(lambda n: tuple(range(n)), st.sampled_from([15, 16, 1000, 1001, 10_001])),
)


def _message_event(values: tuple[Any, ...]) -> tuple[Any, ...]:
    kind = message_kind("pack_args", "info", "sent $a $b $c")
    return (kind.id, kind.name, 5, 5, values)


def _packet_event(size: int, proto: str) -> tuple[Any, ...]:
    return (Packet.kind.id, "Packet", 6, 6, Packet(size=size, proto=proto))


_events = st.one_of(
    st.builds(lambda args: (INSTANT, "x", 3, 3, args), st.none() | _maps),
    st.builds(lambda args: (SPAN, "op", 3, 9, args), _maps),
    st.builds(_message_event, _message_values),
    st.builds(_packet_event, st.integers(0, 2**16 - 1), _texts),
    # Left out (rejected_events): a kind that takes a map given values, and values a message kind never got.
    st.builds(lambda args: (INSTANT, "x", 4, 4, args), st.sampled_from([(1, 2), [1, 2], OddMap(a=1)])),
    st.just((SPAN, "gone", 4, 4, (1,))),
)


@needs_speedups
@pytest.mark.timeout(900)  # bounded by its examples, not the clock: 10 s idle, past 120 s beside a busy suite
@settings(deadline=None, max_examples=300)
@given(st.lists(_events, min_size=1, max_size=12))
def test_arguments_of_any_shape_are_packed_to_the_same_bytes_with_and_without_the_accelerator(
    run: list[tuple[Any, ...]],
) -> None:
    records = [value for event in run for value in event]
    assert same_frames(records)


def recorded_arguments(args: dict[str, Any]) -> Any:
    """What the C recorder keeps as the arguments of ``tl.instant(name, **args)`` recorded as objects (with compact
    records off: flat ones are otherwise kept as bytes, ``test_compact_records.py``; others as objects always)."""
    tl = Timeline("keywords", [MemoryListener()])
    tl._max_buffered_record_bytes = 0
    with FLUSHER.sweeping():  # the flusher thread takes nothing meanwhile
        tl.instant("k", **args)
        ((_, run),) = tl.drain().runs
    tl.close()
    return run[4]


_keyword_maps = st.one_of(
    st.dictionaries(st.text(max_size=4), _flat, min_size=1, max_size=4),  # the common shape
    st.dictionaries(_texts | st.just(OddText("k")), _values, min_size=1, max_size=4),
    st.builds(lambda n, v: {f"k{i}": v for i in range(n)}, st.sampled_from([15, 16, 1000, 1001]), _flat),
)


@needs_speedups
@pytest.mark.timeout(900)  # bounded by its examples, not the clock (maps of 1,000 keys), like the one above
@settings(deadline=None, max_examples=200)
@given(st.lists(_keyword_maps | st.none(), min_size=1, max_size=6), st.lists(_events, max_size=4))
def test_instant_arguments_as_the_c_recorder_keeps_them_pack_as_the_python_path_packs_their_maps(
    maps: list[dict[str, Any] | None], others: list[tuple[Any, ...]]
) -> None:
    kept = [None if args is None else recorded_arguments(args) for args in maps]
    assert [None if args is None else args.as_dict() for args in kept] == maps  # in the call's order
    events = [(INSTANT, "x", 3 + i, 3 + i, args) for i, args in enumerate(kept)] + others
    as_maps = [(INSTANT, "x", 3 + i, 3 + i, args) for i, args in enumerate(maps)] + others
    fast = encoder_frames([v for event in events for v in event], True, max_frame_bytes=BIG_FRAMES)
    python = [v for event in as_maps for v in event]
    assert fast == encoder_frames(python, False, max_frame_bytes=BIG_FRAMES)
    # Without C packing (a run of another shape, say), the encoder reads the maps they stand for
    assert fast == encoder_frames([v for event in events for v in event], False, max_frame_bytes=BIG_FRAMES)


@needs_speedups
@settings(deadline=None, max_examples=100)
@given(st.lists(st.tuples(_values, _flat), min_size=1, max_size=8))
def test_instants_of_one_call_site_pack_as_the_python_path_packs_their_maps(values: list[tuple[Any, Any]]) -> None:
    """One call site passes one names tuple each time: the C packer packs its keys once a run (compact records off:
    ``test_compact_records.py``)."""
    tl = Timeline("call site", [MemoryListener()])
    tl._max_buffered_record_bytes = 0
    with FLUSHER.sweeping():  # the flusher thread takes nothing meanwhile
        for a, b in values:
            tl.instant("x", a=a, b=b)
        ((_, run),) = tl.drain().runs
    tl.close()
    as_maps = [value.as_dict() if i % 5 == 4 and value is not None else value for i, value in enumerate(run)]
    fast = encoder_frames(run, True, max_frame_bytes=BIG_FRAMES)
    assert fast == encoder_frames(as_maps, False, max_frame_bytes=BIG_FRAMES)


class Holder:
    """Something that may lead back to the arguments that hold it."""

    arguments: Any = None


@needs_speedups
def test_instant_arguments_are_visited_by_the_cyclic_collector_only_where_they_may_be_in_a_cycle() -> None:
    flat = recorded_arguments({"a": 1, "b": "s"})
    assert not gc.is_tracked(flat)
    assert repr(flat) == "Keywords({'a': 1, 'b': 's'})"
    holder = Holder()
    holder.arguments = recorded_arguments({"holder": holder})
    assert gc.is_tracked(holder.arguments)
    ref = weakref.ref(holder)
    del holder
    gc.collect()
    assert ref() is None


class Keeping:
    """A listener of its own that keeps every record list it is handed, as a store of events would."""

    packs_keywords: Any = None  # (not True: it reads records, so it gets maps; see the mock test below)

    def __init__(self) -> None:
        self.kept: list[list[Any]] = []

    def receive(self, track: TrackInfo, records: list[Any]) -> None:
        self.kept.append(records)

    def lost(self, events: int) -> None:
        pass

    def retire(self, track: TrackInfo) -> None:
        pass

    def flush(self, timeout_s: float) -> bool:
        return True

    def close(self, timeout_s: float) -> bool:
        return True

    def after_fork(self) -> Keeping:
        return self


def test_a_listener_that_does_not_pack_keywords_receives_instant_arguments_as_maps() -> None:
    keeper = Keeping()  # a listener of its own, that reads the records it is handed
    tl = Timeline("maps", [keeper])
    tl.instant("x", a=1, b=[2])
    tl.instant("y")
    assert tl.flush(timeout_s=30)
    tl.close()
    received = [args for records in keeper.kept for args in records[4::5]]
    assert received == [{"a": 1, "b": [2]}, None]
    assert type(received[0]) is dict


def test_a_cycle_through_the_records_a_listener_keeps_is_collected() -> None:
    """The C drain's run lists are untracked by the cyclic collector while the flusher holds them; a listener that may
    keep them gets them tracked, as the pure-Python drain's are, so a span whose args lead back to that listener does
    not keep it alive for good."""
    keeper = Keeping()
    tl = Timeline("kept", [keeper])
    with tl.scope("s", owner=keeper):
        pass
    assert tl.flush(timeout_s=30)
    tl.close()
    assert keeper.kept and all(gc.is_tracked(records) for records in keeper.kept)
    ref = weakref.ref(keeper)
    del keeper, tl
    gc.collect()
    assert ref() is None


def test_a_listener_that_answers_any_attribute_gets_maps() -> None:
    """``packs_keywords`` counts only when it is True: a listener whose attributes are all truthy (a mock) reads
    records, and gets an instant's arguments as a dict."""
    keeper = Keeping()
    keeper.packs_keywords = SimpleNamespace()  # truthy, not True
    tl = Timeline("mocked", [keeper])
    tl.instant("x", a=1)
    assert tl.flush(timeout_s=30)
    tl.close()
    assert [type(records[4]) for records in keeper.kept] == [dict]


#: Frames that hold any run of the tests below whole: the C path packs it all (a run too large for one frame goes
#: the Python way).
BIG_FRAMES = 8 << 20


def same_frames(records: list[Any]) -> bool:
    """Whether the encoder writes the same frames and counts the same with and without the accelerator."""
    fast = encoder_frames(records, True, max_frame_bytes=BIG_FRAMES)
    return fast == encoder_frames(records, False, max_frame_bytes=BIG_FRAMES)


#: One value of each shape that packs with a header of its own size, around each edge.
_EDGE_VALUES = [
    *INT_EDGES,
    huge_int(),
    *("x" * n for n in LENGTHS),
    *("é" * n for n in LENGTHS),
    *(b"y" * n for n in LENGTHS),
    0.0,
    -0.0,
    float("nan"),
    float("-inf"),
    1e308,
    True,
    False,
    None,
    "a\ud800b",
]


def edge_id(value: object) -> str:
    if isinstance(value, str | bytes):
        return f"{type(value).__name__}-{value[:1]!r}x{len(value)}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"int-{'-' if value < 0 else ''}{abs(value).bit_length()}bits"
    return repr(value)


@needs_speedups
@pytest.mark.parametrize("value", _EDGE_VALUES, ids=lambda value: edge_id(value))
def test_every_packing_edge_and_clipping_edge_packs_as_the_python_path_does(value: object) -> None:
    run = [
        (INSTANT, "map", 1, 1, {"v": value, "n": 1}),
        (INSTANT, "key", 2, 2, {safe_str(value): 1}),
        _message_event((value, 1, value)),
        (INSTANT, "sized", 3, 3, {f"k{i}": value for i in range(17)}),
    ]
    records = [v for event in run for v in event]
    assert same_frames(records)


@needs_speedups
@pytest.mark.parametrize("value", _EDGE_VALUES, ids=lambda value: edge_id(value))
def test_a_map_of_flat_values_within_the_arguments_packs_as_the_python_path_does(value: object) -> None:
    run = [
        (SPAN, "GET /users/{id}", 1, 2, {"method": "GET", "response": {"status": 200, "v": value}, "kind": "server"}),
        (SPAN, "within", 3, 4, {"m": {safe_str(value): value}, "empty": {}}),
        (SPAN, "deeper", 5, 6, {"m": {"n": {"v": value}}}),  # a map in a map in the map: Python's
        (SPAN, "sized", 7, 8, {f"m{i}": {f"k{j}": value for j in range(17)} for i in range(3)}),
    ]
    records = [v for event in run for v in event]
    assert same_frames(records)


@needs_speedups
@pytest.mark.parametrize("shape", [(1, 999), (1, 1000), (2, 500), (10, 200), (1001, 0)])
def test_maps_within_of_every_total_size_pack_as_the_python_path_does(shape: tuple[int, int]) -> None:
    maps, items = shape
    args = {f"m{i}": {f"k{j}": j for j in range(items)} for i in range(maps)}
    assert same_frames([SPAN, "op", 1, 2, args])


@needs_speedups
@pytest.mark.parametrize("items", [15, 16, 65_535, 65_536, 70_000])
def test_maps_and_message_values_of_every_size_pack_as_the_python_path_does(items: int) -> None:
    run = [(INSTANT, "big", 1, 1, {f"k{i}": i for i in range(items)}), _message_event(tuple(range(items)))]
    records = [v for event in run for v in event]
    assert same_frames(records)


def test_the_limits_of_the_c_packer_are_the_models() -> None:
    if packer is None:
        pytest.skip("the C packer is not in use in this process")
    assert (packer.MAX_ARG_ITEMS, packer.MAX_ARG_TEXT) == (MAX_ARG_ITEMS, MAX_ARG_TEXT)


@needs_speedups
@pytest.mark.parametrize(
    "event",
    [
        (INSTANT, "x", 1, 1, {"a": 1, "b": "s"}),
        (INSTANT, "x", 1, 1, {"i": -5, "f": 0.5, "t": True, "n": None, "b": b"\x00", "s": "é" * 40}),
        (SPAN, "op", 1, 2, None),
        _message_event((10, 20, 3)),
        _message_event(("text", 2.5, None)),
        (SPAN, "GET /", 1, 2, {"method": "GET", "response": {"status": 200, "error": "e"}, "kind": "server"}),
    ],
    ids=["two-args", "each-flat-type", "no-args", "message", "message-of-each-type", "server-span"],
)
def test_flat_arguments_cost_the_flusher_no_python_call_per_event(event: tuple[Any, ...]) -> None:
    """The common shapes are normalised and packed in C: encoding ten times the events makes no more Python calls
    (of functions or builtins) on the encoding thread."""
    calls = [python_calls_to_encode(event, n) for n in (100, 1000)]
    assert calls[1] == calls[0], calls


@needs_speedups
def test_instant_arguments_as_the_c_recorder_keeps_them_cost_the_flusher_no_python_call_per_event() -> None:
    event = (INSTANT, "x", 1, 1, recorded_arguments({"a": 1, "b": "s"}))
    calls = [python_calls_to_encode(event, n) for n in (100, 1000)]
    assert calls[1] == calls[0], calls


def python_calls_to_encode(event: tuple[Any, ...], n: int) -> int:
    """Python calls (of functions or builtins) a stream encoder makes on this thread to encode ``n`` of ``event``."""
    encoder = StreamEncoder()
    records = [value for _ in range(n) for value in event]
    made = [0]

    def count(frame: Any, what: str, arg: Any) -> None:
        made[0] += what in ("call", "c_call")

    gc.disable()  # no collection (and no callback or finalizer it runs) in the count
    sys.setprofile(count)
    try:
        encoder.encode(TRACK, records)
    finally:
        sys.setprofile(None)
        gc.enable()
    return made[0]


@needs_speedups
@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (([], {}, None), TypeError),  # too few
        (([SPAN, "op", 1, 2], {}, None, bytes), ValueError),  # not whole events
        (((SPAN, "op", 1, 2, None), {}, None, bytes), TypeError),  # not a list
        (([SPAN, "op", 1, 2, {"a": [1]}], [], None, bytes), TypeError),  # converters not a dict
        (([SPAN, "op", 1, 2, {"a": [1]}], {}, None, "not callable"), TypeError),
        (([SPAN, "op", 1, 2, {"a": [1]}], {}, None, lambda kind, args: "text"), TypeError),  # not bytes
        (([SPAN, "op", 1, 2, {"a": [1]}], {}, None, lambda kind, args: 1 / 0), ZeroDivisionError),
    ],
)
def test_pack_args_refuses_what_it_cannot_pack(arguments: tuple[Any, ...], error: type[Exception]) -> None:
    assert packer is not None
    with pytest.raises(error):
        packer.pack_args(*arguments)


@needs_speedups
def test_pack_args_stops_when_python_code_it_runs_takes_the_records() -> None:
    assert packer is not None
    records = [value for _ in range(4) for value in (SPAN, "op", 1, 2, {"nested": [1]})]

    def take_all(kind: object, args: object) -> bytes:
        records.clear()
        return b"\xc0"

    with pytest.raises(RuntimeError, match="records changed"):
        packer.pack_args(records, {}, None, take_all)


@needs_speedups
def test_pack_args_keeps_the_values_alive_while_python_code_it_runs_drops_them() -> None:
    assert packer is not None
    args = OddMap(nested=[1])  # a map C leaves to Python, that a weak reference can watch
    dropped = weakref.ref(args)
    records: list[Any] = [SPAN, "op", 1, 2, args]
    del args

    def drop(kind: object, args: object) -> bytes:
        records[4] = None  # the list's reference is gone; pack_args still holds one
        return msgpack.packb(args)

    column, rejected = packer.pack_args(records, {}, None, drop)
    assert (column, rejected) == (msgpack.packb([{"nested": [1]}]), [])
    assert dropped() is None


@needs_speedups
def test_an_encoder_whose_packing_fails_midway_counts_nothing_twice() -> None:
    """An unhashable label found after some events were converted: the Python path starts again from the counts of
    before."""
    run = [
        (INSTANT, "a", 1, 1, {"deep": nested(40)}),  # clipped
        (INSTANT, "b", 2, 2, (1, 2)),  # left out
        (INSTANT, Unhashable(), 3, 3, None),
    ]
    records = [value for event in run for value in event]
    accelerated = encoder_frames(records, True)
    assert accelerated == encoder_frames(records, False)
    assert accelerated[3:] == (1, 0, 1)  # clipped, overflowed, rejected


# -- pack_events: a whole EVENTS frame of the common shapes in one pass -----------------------------------------------

_common_events = st.one_of(
    st.builds(
        lambda args: (INSTANT, "x", 3, 3, args), st.none() | st.dictionaries(st.text(max_size=4), _flat, max_size=4)
    ),
    st.builds(
        lambda label, start, length: (SPAN, label, start, start + length, None),
        st.sampled_from(["op", "other", "é", "x" * 40]),
        st.integers(0, 2**62),
        st.integers(0, 2**33),
    ),
    st.builds(_message_event, st.lists(_flat, max_size=6).map(tuple)),
)


def pack_events(records: list[Any], max_frame_bytes: int = BIG_FRAMES, table: StringTable | None = None) -> Any:
    assert packer is not None
    converters = StreamEncoder().registry.converters
    table = StringTable(100) if table is None else table  # an empty table is falsy
    return packer.pack_events(records, table, converters, normalise_values, 3, max_frame_bytes)


@needs_speedups
@settings(deadline=None, max_examples=300)
@given(st.lists(_common_events, min_size=1, max_size=50))
def test_a_run_of_the_common_shapes_is_packed_in_one_pass_to_the_frame_the_python_path_writes(
    run: list[tuple[Any, ...]],
) -> None:
    records = [value for event in run for value in event]
    frame = pack_events(records)
    python = encoder_frames(records, False, max_frame_bytes=BIG_FRAMES)
    assert same_frames(records)
    if frame is not None:  # not given up on (a value past the limits, text UTF-8 cannot encode)
        assert python[1] == [(frame, len(run))]
    plain = [v for event in run if not isinstance(event[4], tuple | dict) for v in event]
    assert not plain or pack_events(plain) is not None


@needs_speedups
@pytest.mark.parametrize(
    "odd",
    [
        (INSTANT, Unhashable(), 1, 1, None),  # a label that is not text
        (INSTANT, OddText("odd"), 1, 1, None),
        (INSTANT, "x", 1, 1, {"deep": nested(2)}),  # arguments of another shape
        (INSTANT, "x", 1, 1, OddMap(a=1)),
        (INSTANT, "x", 1, 1, {"big": huge_int()}),
        (INSTANT, "x", 1, 1, {"text": "\udc80"}),
        (INSTANT, "x", 1, 1, (1, 2)),  # values for a kind that takes a map
        (Packet.kind.id, "Packet", 6, 6, Packet(size=1, proto="udp")),
        _message_event(([1], 2)),
    ],
    ids=[
        "object-label",
        "text-subclass-label",
        "nested",
        "map-subclass",
        "huge-int",
        "surrogate",
        "values",
        "typed",
        "nested-values",
    ],
)
def test_pack_events_leaves_a_run_with_another_shape_to_the_two_pass_path(odd: tuple[Any, ...]) -> None:
    records = [*(INSTANT, "before", 1, 1, {"a": 1}), *odd, *(INSTANT, "after", 2, 2, None)]
    assert pack_events(list(records)) is None
    assert same_frames(records)


@needs_speedups
@pytest.mark.parametrize(
    ("records", "frame_bytes", "error"),
    [
        ([SPAN, "op", 1, 2], BIG_FRAMES, ValueError),  # not whole events
        ([], BIG_FRAMES, ValueError),  # no events
        ([SPAN, "op", "1", 2, None], BIG_FRAMES, TypeError),  # a start that is not an int
        ([True, "op", 1, 2, None], BIG_FRAMES, TypeError),  # a kind that is a bool
        ([SPAN, "op", 1, 2**64, None], BIG_FRAMES, OverflowError),  # past 64 bits
        ([SPAN, "op", -5, 2, None], BIG_FRAMES, OverflowError),  # the header's timestamps are unsigned
        ([SPAN, "op", 2**63 - 1, 2**63 - 1, None, SPAN, "op", -(2**63), 0, None], BIG_FRAMES, OverflowError),
        ([SPAN, "op", 1, 2, {"pad": "x" * 100}], 100, FrameTooLarge),  # past max_frame_bytes: the run is split
    ],
)
def test_pack_events_refuses_what_the_python_path_refuses_or_splits(
    records: list[Any], frame_bytes: int, error: type[Exception]
) -> None:
    with pytest.raises(error):
        pack_events(records, frame_bytes)


@needs_speedups
def test_pack_events_refuses_bad_arguments() -> None:
    assert packer is not None
    with pytest.raises(TypeError):
        packer.pack_events([SPAN, "op", 1, 2, None], StringTable(), {}, None, 3)
    with pytest.raises(ValueError, match="track id"):
        packer.pack_events([SPAN, "op", 1, 2, None], StringTable(), {}, None, 2**32, BIG_FRAMES)


@needs_speedups
def test_pack_events_stops_when_the_string_table_takes_the_records() -> None:
    records = [value for i in range(4) for value in (SPAN, f"op {i}", 1, 2, None)]

    class Taking(StringTable):
        def __missing__(self, label: object) -> int:
            records.clear()  # Python code runs on a miss: another thread could take the run meanwhile
            return super().__missing__(label)

    with pytest.raises(RuntimeError, match="records changed"):
        pack_events(records, table=Taking(100))


# -- take_runs: a buffer's first values, moved into runs --------------------------------------------------------------


@needs_speedups
@given(st.integers(0, 60), st.data())
def test_take_runs_is_slicing_then_deleting(size: int, data: st.DataObject) -> None:
    assert speedups is not None
    count = data.draw(st.integers(0, size))
    run_values = data.draw(st.integers(1, 25))
    values = [object() for _ in range(size)]
    buffer = list(values)
    before = [sys.getrefcount(value) for value in values]
    runs = speedups.take_runs(buffer, count, run_values)
    assert runs == [values[start : min(start + run_values, count)] for start in range(0, count, run_values)]
    assert buffer == values[count:]
    assert [sys.getrefcount(value) for value in values] == before  # moved, neither leaked nor freed
    buffer.append("appended after")
    assert buffer[-1] == "appended after"


@needs_speedups
def test_take_runs_takes_at_most_what_the_buffer_holds() -> None:
    assert speedups is not None
    buffer = [1, 2, 3]
    assert speedups.take_runs(buffer, 4, 2) == [[1, 2], [3]]  # a finalizer that flushed took the rest meanwhile
    assert buffer == []
    assert speedups.take_runs(buffer, 0, 2) == []  # an empty buffer (its items pointer is NULL) stays as it is
    assert buffer == []
    with pytest.raises(ValueError, match="count -1"):
        speedups.take_runs([1], -1, 2)


@needs_speedups
def test_take_runs_in_runs_longer_than_any_buffer_takes_every_value_into_one() -> None:
    assert speedups is not None
    values = [object() for _ in range(3)]
    buffer = list(values)
    before = [sys.getrefcount(value) for value in values]
    runs = speedups.take_runs(buffer, 3, sys.maxsize)  # count + run_values - 1 is past 64 bits
    assert runs == [values]
    assert buffer == []
    assert [sys.getrefcount(value) for value in values] == before


@needs_speedups
def test_take_runs_hands_over_runs_the_cyclic_collector_does_not_visit() -> None:
    assert speedups is not None
    values = [object(), {"a": [1]}, [2], 3, "s"]
    (run,) = speedups.take_runs(list(values), 5, 8)
    assert run == values
    assert not gc.is_tracked(run)  # else each collection until the hand-over visits every value of every run


@needs_speedups
def test_take_runs_names_its_first_bad_argument() -> None:
    assert speedups is not None
    with pytest.raises(TypeError):
        speedups.take_runs([], "3", 2**80)  # not the OverflowError of the second


# -- scan_events: the collector's index of a run of EVENTS frames ------------------------------------------------------

MAX_FRAME = 1 << 20


def events_frames(tracks: list[int]) -> tuple[bytearray, list[int]]:
    """EVENTS frames on ``tracks``, one each, end to end, and where each starts."""
    frames = [encode(Events(track, 2, 10 + i, 20 + i, b"payload %d" % i)) for i, track in enumerate(tracks)]
    starts = [sum(map(len, frames[:i])) for i in range(len(frames))]
    return bytearray(b"".join(frames)), starts


def scan_both(buffer: bytearray, tracks: Callable[[bytearray], Any], top: int | None = None) -> tuple[Any, Any]:
    """scan_events on a copy of ``buffer`` in C and in Python, each with the ``tracks`` made for its copy."""
    assert scan_c is not None
    results = []
    for scan in (scan_c.scan_events, _scan_events_py):
        copy = bytearray(buffer)
        results.append(scan(copy, 0, len(copy), MAX_FRAME, tracks(copy), len(copy) * 2 if top is None else top))
    return results[0], results[1]


class RewritingTracks:
    """Tracks 1 and 2, whose membership test rewrites the length of every frame in the buffer, as any Python code
    that runs between two frames may (a finalizer, a thread)."""

    def __init__(self, buffer: bytearray, starts: list[int], rewrite: Callable[[int], int]) -> None:
        self.buffer, self.starts, self.rewrite = buffer, starts, rewrite
        self.lengths = [FRAME_HEADER.unpack_from(buffer, start)[0] for start in starts]

    def __contains__(self, track: object) -> bool:
        for start, length in zip(self.starts, self.lengths, strict=True):
            self.buffer[start : start + 4] = self.rewrite(length).to_bytes(4, "little")
        return track in (1, 2)


@needs_scan_c
@pytest.mark.parametrize("rewrite", [lambda n: n - 1, lambda n: 0xFFFF_FFF0], ids=["shorter", "past the buffer"])
def test_scan_events_indexes_each_frame_as_it_read_it_while_python_code_rewrites_the_buffer(
    rewrite: Callable[[int], int],
) -> None:
    buffer, starts = events_frames([1, 1, 2, 2, 1])
    fast, slow = scan_both(buffer, lambda copy: RewritingTracks(copy, starts, rewrite))
    assert fast == slow
    assert slow is not None and slow[1] > 0


@needs_scan_c
@pytest.mark.parametrize("top", [-(2**63), -1, 0, 100, 2**63 - 1])
def test_scan_events_fits_its_entries_below_any_top_as_its_twin_does(top: int) -> None:
    buffer, _ = events_frames([1, 2])
    fast, slow = scan_both(buffer, lambda _: {1, 2}, top)
    assert fast == slow


@needs_scan_c
@pytest.mark.parametrize(
    ("position", "end", "max_frame_bytes", "top"),
    [("0", 2**80, 100, 100), (0, "1", 2**80, 100), (0, "the end", "100", 2**80)],
)
def test_scan_events_refuses_an_argument_that_is_not_an_int_as_its_twin_does(
    position: Any, end: Any, max_frame_bytes: Any, top: Any
) -> None:
    assert scan_c is not None
    buffer, _ = events_frames([1])
    end = len(buffer) if end == "the end" else end
    for scan in (scan_c.scan_events, _scan_events_py):
        with pytest.raises(TypeError):  # not the OverflowError of a later argument
            scan(buffer, position, end, max_frame_bytes, {1}, top)


# -- messages ----------------------------------------------------------------------------------------------------------


@needs_speedups
def test_a_message_level_that_is_not_an_int_of_c_is_refused_by_name() -> None:
    assert speedups is not None
    tl = Timeline("levels", [MemoryListener()])
    with pytest.raises(OverflowError, match="level 1099511627776"):
        speedups.Message(message_kind("levels", "info", "text"), tl, True, 2**40)
    assert speedups.Message(message_kind("levels", "info", "text"), tl, True, 2**31 - 1).level == 2**31 - 1
    tl.close()


class Label:
    """A message's category that refers back to the message."""

    message: Any = None

    def __str__(self) -> str:
        return "label"


@needs_speedups
def test_a_message_held_only_by_a_cycle_through_its_label_is_collected() -> None:
    assert speedups is not None
    tl = Timeline("cycle", [MemoryListener()])
    label = Label()
    kind = SimpleNamespace(id=1234, name=label)
    label.message = speedups.Message(kind, tl, True, 3)
    kind.name = None  # the cycle goes through the message's own reference to its label only
    collected = weakref.ref(label)
    del label
    gc.collect()
    assert collected() is None
    tl.close()


# -- the recorder ------------------------------------------------------------------------------------------------------


def test_threads_taking_turns_event_by_event_each_record_on_their_own_track() -> None:
    listener = MemoryListener()
    tl = Timeline("turns", [listener])
    turns = [threading.Semaphore(0), threading.Semaphore(0)]

    def take_turns(me: int) -> None:
        for i in range(200):
            turns[me].acquire()
            tl.instant("turn", who=me, i=i)
            with tl.scope("span", who=me):
                pass
            turns[1 - me].release()

    threads = [threading.Thread(target=take_turns, args=(me,)) for me in (0, 1)]
    for thread in threads:
        thread.start()
    turns[0].release()
    for thread in threads:
        thread.join(30)
    assert tl.flush(timeout_s=30)
    tracks: dict[int, set[int]] = {}
    for event in listener.events:
        tracks.setdefault(event.track.track_id, set()).add(event.args["who"])
    assert sorted(tracks.values(), key=min) == [{0}, {1}]
    assert len(listener.events) == 800
    tl.close()


def test_wrong_calls_are_type_errors_as_for_any_function() -> None:
    tl = Timeline("calls", [MemoryListener()])
    recorder: Any = tl
    with pytest.raises(TypeError):
        recorder.instant()
    with pytest.raises(TypeError):
        recorder.scope("a", "b")
    tl.close()


def test_a_scope_can_be_entered_again_and_records_each_time() -> None:
    listener = MemoryListener()
    tl = Timeline("again", [listener])
    scope = tl.scope("twice", n=1)
    for _ in range(2):
        with scope:
            pass
    assert tl.flush(timeout_s=30)
    assert [(event.name, event.args) for event in listener.events] == [("twice", {"n": 1})] * 2
    tl.close()


def test_an_exception_name_is_added_to_a_copy_of_the_scope_args() -> None:
    listener = MemoryListener()
    tl = Timeline("exceptions", [listener])
    scope = tl.scope("failing", n=1)
    for _ in range(2):
        with pytest.raises(KeyError), scope:
            raise KeyError("x")
    with scope:
        pass
    assert tl.flush(timeout_s=30)
    assert [event.args for event in listener.events] == [{"n": 1, "exception": "KeyError"}] * 2 + [{"n": 1}]
    tl.close()


def test_a_timeline_held_only_by_a_cycle_through_its_own_events_is_collected() -> None:
    tl = Timeline("cycle", [MemoryListener()])
    tl.instant("me", timeline=tl)
    scope = tl.scope("me too", timeline=tl)
    with scope:
        pass
    tl.close()
    ref = weakref.ref(tl)
    del tl, scope
    gc.collect()
    assert ref() is None


@needs_speedups
def test_a_message_of_flat_values_records_a_tuple_the_cyclic_collector_does_not_visit() -> None:
    tl = Timeline("untracked", [MemoryListener()])
    log = tl.message("gc", "info", "$a $b $c $d")
    log(1, [2], "three", None)  # a value that may lead back to the event: visited, so that a cycle is collected
    log(1, 2.5, "three", None)  # (as objects too after objects: not a compact record)
    with FLUSHER.sweeping():  # the flusher thread takes nothing meanwhile
        (run,) = tl.drain().runs
    held, flat = run[1][4], run[1][9]
    assert flat == (1, 2.5, "three", None) and not gc.is_tracked(flat)
    assert held == (1, [2], "three", None) and gc.is_tracked(held)
    tl.close()


def test_a_keyboard_interrupt_during_the_slow_path_reaches_the_program(monkeypatch: pytest.MonkeyPatch) -> None:
    listener = MemoryListener()
    tl = Timeline("interrupted", [listener])
    real_start = FLUSHER.start

    def interrupted() -> bool:  # Ctrl-C lands while this thread takes the slow path
        monkeypatch.setattr(FLUSHER, "start", real_start)
        raise KeyboardInterrupt

    monkeypatch.setattr(FLUSHER, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tl.instant("first")
    tl.instant("second")
    assert tl.flush(timeout_s=30)
    assert [event.name for event in listener.events][-1] == "second"
    tl.close()


def test_a_scope_that_keeps_nothing_behaves_as_a_scope_that_records() -> None:
    """No listener yet: what ``scope()`` gives records nothing, even when a listener comes before it exits (as in
    pure Python), binds itself with ``as``, and lets exceptions through; called by hand too."""
    tl = Timeline("unobserved")
    with tl.scope("before") as scope:
        listener = MemoryListener()
        tl.add_listener(listener)
    with pytest.raises(KeyError), tl.scope("after"):
        raise KeyError("x")
    assert scope.__enter__() is scope and not scope.__exit__(KeyError, KeyError("y"), None)
    assert tl.flush(timeout_s=30)
    assert [(event.name, event.args) for event in listener.events] == [("after", {"exception": "KeyError"})]
    tl.close()


@needs_speedups
def test_a_with_statement_on_a_scope_that_keeps_nothing_makes_no_object() -> None:
    """Its ``__enter__`` and ``__exit__`` are functions of its own, not methods bound at each ``with``: an empty
    function call's cost or about, where binding two methods made it cost 3x."""
    import tracemalloc

    scope = Timeline("unobserved").scope

    def scopes() -> None:
        for _ in itertools.repeat(None, 100):
            with scope("work"):
                pass

    def empty() -> None:  # what the loop itself makes (its iterator)
        for _ in itertools.repeat(None, 100):
            pass

    def made(loop: Callable[[], None]) -> int:
        loop()  # anything made once (caches) is made before the count
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            current, _ = tracemalloc.get_traced_memory()
            loop()
            return tracemalloc.get_traced_memory()[1] - current
        finally:
            tracemalloc.stop()

    assert made(scopes) == made(empty)


def test_a_scope_exited_without_being_entered_records_nothing() -> None:
    listener = MemoryListener()
    tl = Timeline("exit only", [listener])
    with contextlib.ExitStack() as stack:
        stack.push(tl.scope("never entered"))
    with tl.scope("entered"):
        pass
    assert tl.flush(timeout_s=30)
    assert [event.name for event in listener.events] == ["entered"]
    tl.close()


GREEN_THREADS = """
from gevent import monkey; monkey.patch_all()
import threading
from ringtrace.client import Event, MemoryListener, Timeline, string, u16
listener = MemoryListener()
tl = Timeline("green", [listener])
def work(i):
    for j in range(3):
        tl.instant("tick", g=i, j=j)
for i in range(3):
    thread = threading.Thread(target=work, args=(i,), name=f"green-{i}")  # a greenlet
    thread.start(); thread.join()
    tl.flush(timeout_s=30)  # the greenlet ended: its buffer is drained and forgotten
assert tl.flush(timeout_s=30)
print(sorted({(e.track.name, e.args["g"]) for e in listener.events}), len(listener.events))
"""


def test_gevent_greenlets_each_record_on_a_track_of_their_own() -> None:
    pytest.importorskip("gevent")
    done = subprocess.run([sys.executable, "-c", GREEN_THREADS], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[('green (green-0)', 0), ('green (green-1)', 1), ('green (green-2)', 2)] 9"


SUB_INTERPRETER = """
import _testcapi
from ringtrace.client import Event, MemoryListener, Timeline, string, u16
# Without the C module _asyncio, the sub-interpreter's asyncio is pure Python: its _get_running_loop is a function
# of that interpreter, which stops working when the interpreter ends.
code = "import sys; sys.modules['_asyncio'] = None; import ringtrace.client.recording.timelines"
assert _testcapi.run_in_subinterp(code) == 0
listener = MemoryListener()
tl = Timeline("main", [listener])
tl.instant("one")
with tl.scope("two"):
    pass
assert tl.flush(timeout_s=30)
print(sorted(event.name for event in listener.events))
"""


def test_a_sub_interpreter_that_imports_ringtrace_leaves_the_main_interpreters_recorder_as_it_was() -> None:
    testcapi = pytest.importorskip("_testcapi", reason="this Python has no _testcapi to start a sub-interpreter")
    if not hasattr(testcapi, "run_in_subinterp"):
        pytest.skip("this Python's _testcapi has no run_in_subinterp")
    done = subprocess.run([sys.executable, "-c", SUB_INTERPRETER], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['one', 'two']"
