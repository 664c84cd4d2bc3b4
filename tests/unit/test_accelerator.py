"""The C accelerator against its pure-Python twin: the same frames byte for byte, the same buffers, the same rules.

The rest of the suite runs on whichever recorder the process has (the accelerator where it is built); ``scripts/check``
runs the client's tests a second time with ``RINGTRACE_PURE_PYTHON=1``, so both recorders pass all of them. The tests
here compare the two directly, in one process.
"""

from __future__ import annotations

import contextlib
import gc
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
from hypothesis import given
from hypothesis import strategies as st
from ringtrace.client import MemoryListener, Timeline
from ringtrace.client import encoder as encoder_module
from ringtrace.client.accelerator import PURE_PYTHON_ENV, load_optional, speedups
from ringtrace.client.encoder import StreamEncoder
from ringtrace.client.flusher import FLUSHER
from ringtrace.client.messages import message_kind
from ringtrace.client.wire.frames import FRAME_HEADER, Events, encode
from ringtrace.client.wire.model import INSTANT, SPAN, THREAD_TRACK, StringTable, TrackInfo
from ringtrace.collector.ingest.scan import _scan_events_py

TRACK = TrackInfo(3, THREAD_TRACK, "main", 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
needs_speedups = pytest.mark.skipif(speedups is None, reason="the C accelerator is not in use in this process")
#: The collector's C scan of EVENTS frames (``collector/ingest/_scan.c``).
scan_c = load_optional("ringtrace.collector.ingest._scan")
needs_scan_c = pytest.mark.skipif(scan_c is None, reason="the collector's C scan is not in use in this process")


def test_the_accelerator_is_in_use_wherever_it_can_be_built() -> None:
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        assert speedups is None
        return
    compiler = str(sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) here: the install could not build the accelerator")
    assert speedups is not None, "a C compiler is here, yet ringtrace.client._speedups was not built or not importable"
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
    assert speedups is not None
    records = [value for event in run for value in event]
    table = StringTable()
    try:
        expected, first, last = reference_payload(records, StringTable())
    except (OverflowError, ValueError):  # a difference past 64 bits: msgpack refuses it too
        with pytest.raises(OverflowError):
            speedups.pack_columns(records, table)
        return
    try:
        head, c_first, c_last, args = speedups.pack_columns(records, table)
    except OverflowError:
        differences = [d for s, e in zip(records[2::5], records[3::5], strict=True) for d in (e - s, s - first)]
        assert any(not -(2**63) <= d < 2**63 for d in differences)
        return
    payload = head if args is None else head + msgpack.packb(args)
    assert (payload, c_first, c_last) == (expected, first, last)
    assert (args is None) == all(a is None for a in records[4::5])


@needs_speedups
def test_pack_columns_assigns_string_ids_as_the_table_does() -> None:
    assert speedups is not None
    table = StringTable(max_strings=3)
    records = [value for label in ["a", "b", "a", "c", "d"] for value in (SPAN, label, 5, 9, None)]
    head, *_ = speedups.pack_columns(records, table)
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
    assert speedups is not None
    with pytest.raises(error):
        speedups.pack_columns(records, StringTable())


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
    records: list[Any], accelerated: bool, monkeypatch: pytest.MonkeyPatch, max_strings: int = 100
) -> tuple[Any, ...]:
    with monkeypatch.context() as patch:
        if not accelerated:
            patch.setattr(encoder_module, "_pack_columns", None)
        encoder = StreamEncoder(max_frame_bytes=70_000, max_events_per_frame=50, max_strings=max_strings)
        batch = encoder.encode(TRACK, list(records))
        return (batch.control, batch.events, batch.dropped_events, encoder.clipped_args, encoder.label_overflow_events)


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
    ],
)
def test_the_encoder_writes_the_same_frames_with_and_without_the_accelerator(
    run: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [value for event in run for value in event]
    assert encoder_frames(records, True, monkeypatch) == encoder_frames(records, False, monkeypatch)


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
    assert tl.flush()
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
    assert tl.flush()
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
    assert tl.flush()
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
    assert tl.flush()
    assert [event.name for event in listener.events][-1] == "second"
    tl.close()


def test_a_scope_exited_without_being_entered_records_nothing() -> None:
    listener = MemoryListener()
    tl = Timeline("exit only", [listener])
    with contextlib.ExitStack() as stack:
        stack.push(tl.scope("never entered"))
    with tl.scope("entered"):
        pass
    assert tl.flush()
    assert [event.name for event in listener.events] == ["entered"]
    tl.close()


GREEN_THREADS = """
from gevent import monkey; monkey.patch_all()
import threading
from ringtrace.client import MemoryListener, Timeline
listener = MemoryListener()
tl = Timeline("green", [listener])
def work(i):
    for j in range(3):
        tl.instant("tick", g=i, j=j)
for i in range(3):
    thread = threading.Thread(target=work, args=(i,), name=f"green-{i}")  # a greenlet
    thread.start(); thread.join()
    tl.flush()  # the greenlet ended: its buffer is drained and forgotten
assert tl.flush()
print(sorted({(e.track.name, e.args["g"]) for e in listener.events}), len(listener.events))
"""


def test_gevent_greenlets_each_record_on_a_track_of_their_own() -> None:
    pytest.importorskip("gevent")
    done = subprocess.run([sys.executable, "-c", GREEN_THREADS], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[('green (green-0)', 0), ('green (green-1)', 1), ('green (green-2)', 2)] 9"


SUB_INTERPRETER = """
import _testcapi
from ringtrace.client import MemoryListener, Timeline
# Without the C module _asyncio, the sub-interpreter's asyncio is pure Python: its _get_running_loop is a function
# of that interpreter, which stops working when the interpreter ends.
code = "import sys; sys.modules['_asyncio'] = None; import ringtrace.client.timelines"
assert _testcapi.run_in_subinterp(code) == 0
listener = MemoryListener()
tl = Timeline("main", [listener])
tl.instant("one")
with tl.scope("two"):
    pass
assert tl.flush()
print(sorted(event.name for event in listener.events))
"""


def test_a_sub_interpreter_that_imports_ringtrace_leaves_the_main_interpreters_recorder_as_it_was() -> None:
    testcapi = pytest.importorskip("_testcapi", reason="this Python has no _testcapi to start a sub-interpreter")
    if not hasattr(testcapi, "run_in_subinterp"):
        pytest.skip("this Python's _testcapi has no run_in_subinterp")
    done = subprocess.run([sys.executable, "-c", SUB_INTERPRETER], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['one', 'two']"
