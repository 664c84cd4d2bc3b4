"""The C recorder's compact records: an instant with a text name and flat arguments, and a message with flat values,
is kept as bytes
(``wire/record_runs.py``), not objects, in a segment of its thread's buffer, and reaches listeners as the same events
in the same order as when it is recorded as objects (its pure-Python twin's way, held by the wire tests); memory is
bounded in bytes (what does not fit is kept as objects, within the buffer's bound), lost ones counted one by one.
"""

from __future__ import annotations

import threading
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from out_of_memory import drains_with_a_failure, run_alone
from ringtrace.client import Timeline
from ringtrace.client.accelerator import speedups
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.recording.events import Event
from ringtrace.client.recording.timeline_listeners import count_lost, held_events
from ringtrace.client.recording.timelines import RECORD_BYTES_PER_EVENT
from ringtrace.wire.call_records import event_count
from ringtrace.wire.model import INSTANT, RECORD_FIELDS
from ringtrace.wire.record_runs import RecordRun, pack_record

pytestmark = pytest.mark.skipif(speedups is None, reason="the C recorder is not in use in this process")


class Parked:
    """A listener that packs its own runs (as the streamer): it gets compact records as they are."""

    packs_keywords = True

    def receive(self, track: Any, records: Any) -> None:
        pass  # (the test drains: a close hands over nothing)

    def lost(self, events: int) -> None:
        pass

    def close(self, timeout_s: float = 2.0) -> bool:
        return True


def parked_timeline(compact: bool, max_buffered_events: int = 200_000) -> Timeline:
    tl = Timeline("compact", [Parked()], max_buffered_events=max_buffered_events)
    FLUSHER.unregister(tl)
    if not compact:
        tl._max_buffered_record_bytes = 0  # every instant as objects
    return tl


def flat_events(tl: Timeline) -> tuple[list[tuple[Any, ...]], list[Any], int]:
    """What a drain takes: each event as (track, kind, label, start, end, args), the runs' types, the events
    dropped."""
    drained = tl.drain()
    events: list[tuple[Any, ...]] = []
    for track, run in drained.runs:
        flat = run.as_flat() if isinstance(run, RecordRun) else run
        for i in range(0, len(flat), RECORD_FIELDS):
            kind, label, start, end, args = flat[i : i + RECORD_FIELDS]
            args = args.as_dict() if hasattr(args, "as_dict") else args
            events.append((track.track_id, kind, label, start, end, args))
    return events, [type(run) for _, run in drained.runs], drained.dropped


class Tick(Event):
    value: int


def record(tl: Timeline, calls: list[tuple[str, Any]]) -> None:
    for what, value in calls:
        if what == "instant":
            name, args = value
            tl.instant(name, **args)
        elif what == "scope":
            with tl.scope(value, depth=1):
                tl.instant("inside", n=value)
        elif what == "message":
            values, named = value
            tl.message("engine", "info", "got $a $b")(*values, **named)
        elif what == "counter":
            tl.counter("load", value)
        else:
            tl.push(Tick(value=value))


flat_value = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=20), st.binary(max_size=8)
)
odd_value = st.one_of(st.lists(st.integers(), max_size=2), st.text(min_size=600, max_size=700), st.just("\ud800"))
call_st = st.one_of(
    st.tuples(
        st.just("instant"),
        st.tuples(
            st.sampled_from(["x", "tick", "é", "y" * 30]),
            st.dictionaries(st.sampled_from(["a", "b", "ü", "task"]), st.one_of(flat_value, odd_value), max_size=3),
        ),
    ),
    st.tuples(
        st.just("message"),
        st.tuples(
            st.lists(st.one_of(flat_value, odd_value), max_size=4),
            st.dictionaries(st.sampled_from(["priority", "category", "x"]), flat_value, max_size=2),
        ),
    ),
    st.tuples(st.just("scope"), st.sampled_from(["s", "t"])),
    st.tuples(st.just("counter"), st.integers(0, 9)),
    st.tuples(st.just("push"), st.integers(0, 9)),
)


def without_times(events: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [(kind, label, args) for _, kind, label, _, _, args in events]


@settings(deadline=None, max_examples=80)
@given(calls=st.lists(call_st, max_size=40))
def test_compact_instants_and_messages_reach_listeners_as_the_same_events_in_the_same_order_as_objects(
    calls: list[tuple[str, Any]],
) -> None:
    made = []
    for compact in (True, False):
        tl = parked_timeline(compact)
        try:
            record(tl, calls)
            events, _, dropped = flat_events(tl)
        finally:
            tl.close()
        assert dropped == 0
        starts = [
            start for _, kind, _, start, end, _ in events if kind == INSTANT or (type(end) is int and start == end)
        ]
        assert starts == sorted(starts)  # the order recorded
        made.append(without_times(events))
    assert repr(made[0]) == repr(made[1])  # (repr: a NaN is not equal to itself)


def test_instants_with_flat_arguments_are_drained_as_runs_of_records_in_order_with_other_events() -> None:
    tl = parked_timeline(True)
    try:
        tl.instant("a", n=1, s="text", f=1.5, b=True, none=None)
        tl.instant("b")
        with tl.scope("s"):
            tl.instant("c", n=2)
        tl.instant("d", nested={"not": "flat"})  # as objects
        tl.instant("e", n=3)  # as objects too, after them (no run of a few records between runs of objects)
        events, types, dropped = flat_events(tl)
    finally:
        tl.close()
    assert dropped == 0
    assert [(label, args) for _, _, label, _, _, args in events] == [
        ("a", {"n": 1, "s": "text", "f": 1.5, "b": True, "none": None}),
        ("b", None),
        ("c", {"n": 2}),
        ("s", None),
        ("d", {"nested": {"not": "flat"}}),
        ("e", {"n": 3}),
    ]
    assert types == [RecordRun, list]
    assert all(start == end for _, kind, _, start, end, _ in events if kind == INSTANT)


def test_a_thread_holds_compact_records_within_its_bytes_and_counts_what_it_refuses() -> None:
    tl = parked_timeline(True, max_buffered_events=50)
    try:
        for i in range(1_000):
            tl.instant("x", i=i)
        buffer = tl._tracks.buffers[0]
        assert buffer.records is not None
        assert 0 < buffer.records.held_bytes <= 50 * RECORD_BYTES_PER_EVENT
        events, _, dropped = flat_events(tl)
        assert len(events) + dropped == 1_000 and dropped > 0
        assert [args["i"] for *_, args in events] == list(range(len(events)))  # the first ones, none lost between
        assert buffer.records.held_bytes == 0  # taken: room again
        tl.instant("x", i=-1)
        events, _, dropped = flat_events(tl)
        assert (len(events), dropped) == (1, 0)
    finally:
        tl.close()


def test_the_memory_a_threads_segments_allocate_is_within_its_bytes() -> None:
    # What a segment allocates (its room, grown by doubling) is charged, not the bytes written into it, which may be
    # half as much: a bound just past a doubling (520 events: 33,280 bytes, 32,768 a room) is where the two differ most.
    # As many instants of 502 bytes as the bound holds written: charged as written they would all be kept, in a room
    # of 65,536 bytes; charged as allocated, those past the room of 32,768 are kept as objects.
    events_bound, record_bytes = 520, 502
    bound = events_bound * RECORD_BYTES_PER_EVENT
    instants = bound // record_bytes
    body = "b" * 460
    tl = parked_timeline(True, max_buffered_events=events_bound)
    tracing = tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        tl.instant("sized", i=0, body=body)  # (the label, the thread's buffer and account made, then taken)
        warmed, _, _ = flat_events(tl)
        assert len(warmed) == 1
        before = tracemalloc.get_traced_memory()[0]
        for i in range(instants):
            tl.instant("sized", i=1_000 + i, body=body)
        held = tracemalloc.get_traced_memory()[0] - before
        drained = tl.drain()
    finally:
        if not tracing:
            tracemalloc.stop()
        tl.close()
    compact = [run for _, run in drained.runs if isinstance(run, RecordRun)]
    as_objects = sum(len(run) // RECORD_FIELDS for _, run in drained.runs if not isinstance(run, RecordRun))
    assert drained.dropped == 0 and sum(len(run) for run in compact) + as_objects == instants
    assert len(compact[0].records) == record_bytes * len(compact[0])
    # Within the bytes, with an allowance for each instant kept as objects and for the segment's and list's own.
    assert held <= bound + 2048 * as_objects + 8192, (held, bound, as_objects)


def test_a_buffers_bound_counts_every_compact_record_as_an_event() -> None:
    tl = parked_timeline(True, max_buffered_events=50)
    try:
        for i in range(1_000):  # (small: 50 of them are far within the thread's bytes)
            tl.instant("x", i=i)
        buffer = tl._tracks.buffers[0]
        assert buffer.records is not None
        assert (len(buffer.events), buffer.records.extra_events, held_events(buffer)) == (RECORD_FIELDS, 49, 50)
        events, _, dropped = flat_events(tl)
        assert [args["i"] for *_, args in events] == list(range(50)) and dropped == 950
        assert (buffer.records.extra_events, held_events(buffer)) == (0, 0)  # taken: room again
    finally:
        tl.close()


@pytest.mark.parametrize("compact", [True, False], ids=["compact", "objects"])
def test_events_of_every_shape_after_compact_records_find_the_bound_where_objects_do(compact: bool) -> None:
    tl = parked_timeline(compact, max_buffered_events=50)
    try:
        for i in range(30):
            tl.instant("x", i=i)
        for i in range(10):
            with tl.scope("s", i=i):  # (appended in C, after the records)
                pass
        for i in range(5):
            tl.counter("c", i)  # (appended in Python, given the buffer by _events_with_room)
        for i in range(10):
            tl.push(Tick(value=i))  # 5 fit
        for i in range(5):
            tl.instant("x", i=i)  # none fits
        assert held_events(tl._tracks.buffers[0]) == 50
        events, types, dropped = flat_events(tl)
    finally:
        tl.close()
    assert (len(events), dropped) == (50, 10)
    assert types[0] is (RecordRun if compact else list)


def test_a_long_burst_is_drained_in_runs_of_at_most_8192_records() -> None:
    tl = parked_timeline(True)
    try:
        for i in range(20_000):
            tl.instant("x", i=i)
        drained = tl.drain()
    finally:
        tl.close()
    sizes = [event_count(run) for _, run in drained.runs]
    assert sum(sizes) == 20_000 and max(sizes) <= 8192
    assert all(type(run) is RecordRun for _, run in drained.runs)


def test_threads_taking_turns_keep_their_own_records_in_order() -> None:
    tl = parked_timeline(True)
    turns = [threading.Event(), threading.Event()]

    def worker(me: int) -> None:
        for i in range(200):
            assert turns[me].wait(30)
            turns[me].clear()
            tl.instant("w", me=me, i=i)
            turns[1 - me].set()

    threads = [threading.Thread(target=worker, args=(me,)) for me in (0, 1)]
    try:
        for thread in threads:
            thread.start()
        turns[0].set()
        for thread in threads:
            thread.join(60)
        events, _, dropped = flat_events(tl)
    finally:
        tl.close()
    assert dropped == 0
    for me in (0, 1):
        mine = [args for _, _, _, _, _, args in events if args["me"] == me]
        assert [args["i"] for args in mine] == list(range(200))
    assert len({track for track, *_ in events}) == 2


def test_the_table_of_labels_holds_each_label_once() -> None:
    tl = parked_timeline(True)
    labels = speedups.record_labels()
    try:
        tl.instant("a label of its own", n=1)
        before = len(labels)
        for _ in range(100):
            tl.instant("a label of its own", n=1)
            tl.instant("".join(["a label ", "of its own"]), n=1)  # equal text, another object
        assert len(labels) == before and labels.count("a label of its own") == 1
        events, _, _ = flat_events(tl)
        assert len(events) == 201
    finally:
        tl.close()


def test_take_runs_makes_a_segment_a_run_of_its_own_in_its_place() -> None:
    assert speedups is not None
    tl = parked_timeline(True)
    try:
        tl.instant("a", n=1)
        tl.instant("b", n=2)
        tl.counter("c", 1)
        tl.counter("c", 2)
        tl.instant("d", n=3)  # (as objects: after others)
        buffer = tl._tracks.buffers[0]
        values = buffer.events[RECORD_FIELDS:]
        runs = speedups.take_runs(buffer.events, len(buffer.events), 7)
        assert buffer.events == [] and buffer.records is not None and buffer.records.held_bytes == 0
        assert [type(run).__name__ for run in runs] == ["Segment", "list", "list", "list"]
        assert runs[1] + runs[2] + runs[3] == values and [len(run) for run in runs[1:]] == [7, 7, 1]
        records, count = runs[0].take()
        run = RecordRun(records, speedups.record_labels(), count)
        assert run.as_flat()[1::RECORD_FIELDS] == ["a", "b"] and len(run) == 2
    finally:
        tl.close()


def test_a_burst_of_large_instants_within_the_buffers_bound_is_kept_whole() -> None:
    # Past the thread's bytes of compact records, instants are kept as objects, within the buffer's bound in events.
    text = "x" * 400
    kept = []
    for compact in (True, False):
        tl = parked_timeline(compact, max_buffered_events=2_000)
        try:
            for i in range(2_000):
                tl.instant("request", i=i, body=text)
            events, _, dropped = flat_events(tl)
            assert dropped == 0 and [args["i"] for *_, args in events] == list(range(2_000))
            kept.append([(kind, label, args) for _, kind, label, _, _, args in events])
        finally:
            tl.close()
    assert kept[0] == kept[1]


def test_events_left_in_compact_records_are_counted_lost_one_by_one() -> None:
    class Counting(Parked):
        counted = 0

        def lost(self, events: int) -> None:
            self.counted += events

    tl = parked_timeline(True)
    try:
        for i in range(1_000):
            tl.instant("tick", i=i)
        tl.push(Tick(value=1))  # (and one of objects after them)
        listener = Counting()
        count_lost([listener], tl._tracks.take_all())
        assert listener.counted == 1_001
    finally:
        tl.close()


def test_a_drain_that_runs_out_of_memory_counts_what_it_took_as_dropped() -> None:
    # Each allocation of a drain made to fail in turn (CPython's own fault injection), the copy of a segment's records
    # among them: every event is handed over, left for the next drain, or counted as dropped by it, never lost unseen.
    # In a process of its own (out_of_memory.py says why).
    pytest.importorskip("_testcapi", reason="this Python has no _testcapi to make an allocation fail")
    run_alone(__file__, "drain_out_of_memory")


def drain_out_of_memory() -> None:
    """The test above, in its own process (``run_alone``)."""
    failed_holding = 0
    for n in range(200):
        tl = parked_timeline(True)
        try:
            for i in range(300):
                tl.instant("x", i=i)
            tl.push(Tick(value=1))  # (a run of objects after the segment)
            handed, dropped, failed = drains_with_a_failure(tl, n)
        finally:
            tl.close()
        assert handed + dropped == 301, (n, handed, dropped)
        failed_holding += failed and dropped == 301
        if not failed and dropped == 0:
            break  # (past the drain's allocations)
    assert failed_holding > 0 and not failed


def test_a_long_name_is_kept_as_objects_not_in_the_table_of_labels() -> None:
    tl = parked_timeline(True)
    labels = speedups.record_labels()
    try:
        long_name = "n" * 65
        tl.instant(long_name, n=1)
        tl.instant("short", n=2)
        assert long_name not in labels
        events, runs, _ = flat_events(tl)
        assert [(label, args) for _, _, label, _, _, args in events] == [(long_name, {"n": 1}), ("short", {"n": 2})]
        assert RecordRun not in runs  # (an object first: the instant after it goes as objects too, until the drain)
    finally:
        tl.close()


def test_instants_and_messages_kept_as_objects_after_other_events_take_no_place_in_the_table_of_labels() -> None:
    # The table is the process's, for its life, and bounded: a thread that mixes shapes (a scope around each of its
    # messages) and names them after ever new text must not fill it with names no record uses.
    tl = parked_timeline(True)
    labels = speedups.record_labels()
    name, category = f"after a scope {id(tl)}", f"category after a scope {id(tl)}"
    try:
        with tl.scope("work"):  # (recorded as it ends: an event of objects)
            pass
        tl.instant(name, n=1)
        tl.message(category, "info", "got $n")(2)
        events, runs, dropped = flat_events(tl)
    finally:
        tl.close()
    assert runs == [list] and dropped == 0
    assert [(label, args) for _, _, label, _, _, args in events][1:] == [(name, {"n": 1}), (category, (2,))]
    assert name not in labels and category not in labels


# -- messages --------------------------------------------------------------------------------------------------------


def test_messages_with_flat_values_are_kept_as_records_among_instants_with_their_values_as_recorded() -> None:
    tl = parked_timeline(True)
    log = tl.message("engine", "info", "processed $tcp, $udp, and $other")
    try:
        log(10, 20, 3)
        tl.instant("x", a=1)
        log("text", b"\x00", 1.5, priority=None, category=True)  # named values kept after the positional ones
        log()
        events, types, dropped = flat_events(tl)
    finally:
        tl.close()
    assert dropped == 0 and types == [RecordRun]
    assert [(kind, label, args) for _, kind, label, _, _, args in events] == [
        (log.kind.id, "engine", (10, 20, 3)),
        (INSTANT, "x", {"a": 1}),
        (log.kind.id, "engine", ("text", b"\x00", 1.5, None, True)),
        (log.kind.id, "engine", ()),
    ]


def test_a_burst_of_messages_keeps_exactly_the_buffers_bound_and_counts_the_rest() -> None:
    tl = parked_timeline(True, max_buffered_events=50)
    log = tl.message("engine", "info", "processed $n")
    try:
        for i in range(1_000):
            log(i)
        buffer = tl._tracks.buffers[0]
        assert buffer.records is not None
        assert (len(buffer.events), buffer.records.extra_events, held_events(buffer)) == (RECORD_FIELDS, 49, 50)
        events, types, dropped = flat_events(tl)
        assert types == [RecordRun]
        assert [args for *_, args in events] == [(i,) for i in range(50)] and dropped == 950
        assert (buffer.records.extra_events, buffer.records.held_bytes, held_events(buffer)) == (0, 0, 0)
        log(-1)
        events, _, dropped = flat_events(tl)
        assert ([args for *_, args in events], dropped) == ([(-1,)], 0)
    finally:
        tl.close()


def test_messages_of_other_shapes_go_as_objects_and_so_do_the_records_after_them() -> None:
    tl = parked_timeline(True)
    log = tl.message("engine", "info", "got $a")
    try:
        log(1)
        log([1, 2])  # not flat: as objects
        log(2)  # after them: as objects too, until the drain
        events, types, dropped = flat_events(tl)
        log(3)
        again, types_again, _ = flat_events(tl)
    finally:
        tl.close()
    assert dropped == 0 and types == [RecordRun, list] and types_again == [RecordRun]
    assert [args for *_, args in events + again] == [(1,), ([1, 2],), (2,), (3,)]


def test_the_priority_gate_holds_for_compact_messages() -> None:
    tl = parked_timeline(True)
    debug = tl.message("engine", "debug", "detail $n")
    try:
        debug(1)
        tl.set_priority("debug")
        debug(2)
        tl.set_priority("warning")
        debug(3)
        events, types, dropped = flat_events(tl)
    finally:
        tl.close()
    assert dropped == 0 and types == [RecordRun]
    assert [args for *_, args in events] == [(2,)]


message_values = st.lists(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(),
        st.text(max_size=30),
        st.binary(max_size=30),
    ),
    max_size=8,
)


@settings(deadline=None, max_examples=80)
@given(calls=st.lists(st.tuples(st.sampled_from(["a", "b", "ü" * 3]), message_values), min_size=1, max_size=30))
def test_a_compact_message_is_the_bytes_its_twin_packs_for_its_values(calls: list[tuple[str, list[Any]]]) -> None:
    tl = parked_timeline(True)
    labels = speedups.record_labels()
    try:
        for category, values in calls:
            tl.message(category, "info", "v $a")(*values)
        drained = tl.drain()
    finally:
        tl.close()
    assert drained.dropped == 0 and [type(run) for _, run in drained.runs] == [RecordRun]
    run = drained.runs[0][1]
    flat = run.as_flat()
    twin = b"".join(
        pack_record(kind, labels.index(label), start, end, values)
        for kind, label, start, end, values in zip(*[iter(flat)] * RECORD_FIELDS, strict=True)
    )
    assert run.records == twin
    recorded = [(label, values) for _, label, _, _, values in zip(*[iter(flat)] * RECORD_FIELDS, strict=True)]
    assert repr(recorded) == repr([(category, tuple(values)) for category, values in calls])  # (repr: NaN)


def test_a_message_sampling_turns_on_is_kept_compactly_and_one_of_a_long_category_as_objects() -> None:
    tl = parked_timeline(True)
    debug = tl.message("engine", "debug", "detail $n")
    long = tl.message("c" * 65, "info", "value $n")  # past the table of labels' longest name
    try:
        tl.sample("debug", fraction=1.0, window_s=60.0)  # (every window on)
        debug(1)
        sampled, sampled_types, _ = flat_events(tl)
        long(2)
        debug(3)  # (after objects: as objects)
        events, types, dropped = flat_events(tl)
    finally:
        tl.close()
    assert sampled_types == [RecordRun] and [args for *_, args in sampled] == [(1,)]
    assert types == [list] and dropped == 0
    assert [(label, args) for _, _, label, _, _, args in events] == [("c" * 65, (2,)), ("engine", (3,))]
