"""The live tail's cursor over the store: what was stored after it began, once each, and a reader that falls behind
is told so rather than skipped ahead."""

from __future__ import annotations

import pytest
from ringtrace.collector.read.frame_walk import ProcessView
from ringtrace.collector.read.selection import EventFilter, Pattern
from ringtrace.collector.read.tail import Tail, TailBehind
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.wire.frames import Stats
from ringtrace.wire.model import INSTANT, MARKER_END, MARKER_START, SPAN
from ringtrace.wire.stream_limits import Limits
from store_client import Client


def process(owner: int) -> ProcessView:
    return ProcessView(owner, 100 + owner, 100 + owner, "host", f"proc-{owner}", 0, Stats(0, 0), {})


def step(tail: Tail, store: Store) -> list[int]:
    """One step of the tail; the ``i`` of each event it gives."""
    with store.snapshot() as pinned:
        segments = [(process(s.owner), s) for s in pinned.segments if tail.selected.selects_process(process(s.owner))]
        owners = [owner for owner in range(1, 4) if tail.selected.selects_process(process(owner))]
        kept = store.kept_events(owners)
        cleared = store.cleared_segments(owners, tail.cleared_floor)
        return [row.args["i"] for row in tail.step(segments, kept, cleared)]


def drain(tail: Tail, store: Store, expected: int) -> list[int]:
    """Steps until ``expected`` events came (a step reads a bounded number of bytes: session frames may fill one)."""
    given: list[int] = []
    for _ in range(10_000):
        if len(given) >= expected:
            break
        given += step(tail, store)
    assert step(tail, store) == []  # nothing more, nothing twice
    return given


def test_a_tail_gives_what_is_stored_after_it_began_once_each_across_segments() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Client(store, 1)
    client.record(0, 50)
    tail = Tail(EventFilter(), Limits())
    assert step(tail, store) == []  # where it begins: what was there is not given
    client.record(0, 30)
    assert step(tail, store) == list(range(50, 80))
    assert step(tail, store) == []
    sent = 80
    while store.segment_count < 3:  # on into new segments
        client.record(0, 500)
        sent += 500
    assert step(tail, store) == list(range(80, sent))


def test_a_tail_filters_by_process_and_track() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    one, two = Client(store, 1), Client(store, 2)
    tail = Tail(EventFilter(process=Pattern("proc-2"), track=Pattern("t1")), Limits())
    step(tail, store)
    one.record(1, 10)
    two.record(0, 10)
    two.record(1, 5)
    assert step(tail, store) == [0, 1, 2, 3, 4]


def test_a_reader_that_falls_behind_is_told_how_far() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Client(store, 1)
    tail = Tail(EventFilter(), Limits(), max_step_bytes=16 * 1024, max_lag_bytes=1024 * 1024)
    step(tail, store)
    client.record(0, 100)
    assert drain(tail, store, 100) == list(range(100))
    client.record(0, 3000)  # more than a step reads, less than the lag allowed: read over several steps
    assert drain(tail, store, 3000) == list(range(100, 3100))
    client.record(0, 20_000)
    with pytest.raises(TailBehind, match="max_lag_bytes=1048576"):
        step(tail, store)


def test_a_segment_overwritten_before_the_tail_read_it_ends_the_tail() -> None:
    store = Store(4 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Client(store, 1)
    tail = Tail(EventFilter(), Limits(), max_step_bytes=1024)
    step(tail, store)
    client.record(0, 50)
    step(tail, store)  # reads a little of it
    client.record(0, 5000)  # the ring goes round: that segment is overwritten
    with pytest.raises(TailBehind, match="overwritten"):
        for _ in range(100):
            step(tail, store)


def test_segments_written_and_overwritten_between_two_steps_end_the_tail() -> None:
    store = Store(4 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Client(store, 1)
    tail = Tail(EventFilter(), Limits())
    step(tail, store)
    client.record(0, 10)
    assert step(tail, store) == list(range(10))
    client.record(0, 8000)  # several segments, the first ones overwritten before the next step
    with pytest.raises(TailBehind, match=r"events of proc-1 \(pid 101\) were overwritten before"):
        step(tail, store)


def test_events_cleared_before_the_tail_read_them_are_told_and_the_tail_goes_on() -> None:
    store = Store(16 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client, other = Client(store, 1), Client(store, 2)
    other.record(0, 7)  # stored before the tail began: not its own, cleared or not
    tail = Tail(EventFilter(), Limits())
    step(tail, store)
    client.record(0, 20)
    assert step(tail, store) == list(range(20))
    store.clear([1, 2])  # all of it read (and the other's was there before): nothing to tell
    assert tail.take_cleared() == 0
    client.record(0, 5)
    assert step(tail, store) == list(range(20, 25))
    client.record(0, 5)
    store.clear([1])  # five not read, in a segment it had read from
    assert step(tail, store) == []
    assert tail.take_cleared() == 5
    for _ in range(3):  # whole segments stored and cleared between two steps, never seen
        client.record(0, 300)
    store.clear([1])
    client.record(0, 4)
    assert step(tail, store) == list(range(930, 934))
    assert (tail.take_cleared(), tail.take_cleared()) == (900, 0)
    client.record(0, 12000)  # overwritten before it is read still ends the tail
    with pytest.raises(TailBehind, match="overwritten before it read them"):
        step(tail, store)


@pytest.mark.parametrize("kept_by_another", [False, True])
def test_segments_cleared_before_the_tail_began_are_not_told(kept_by_another: bool) -> None:
    store = Store(16 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client, other = Client(store, 1), Client(store, 2)
    if kept_by_another:
        other.record(0, 3)  # an older segment stays: the tail begins at its end
    client.record(0, 600)
    store.clear([1])  # before the tail began (the store empty, or holding the other's older segment alone)
    tail = Tail(EventFilter(), Limits())
    step(tail, store)
    client.record(0, 5)
    assert step(tail, store) == list(range(600, 605))
    assert tail.take_cleared() == 0


def test_a_tail_takes_a_span_across_since_and_every_other_event_as_a_point() -> None:
    """``since``: a span that began before it and ends after it is taken; a marker's start before it is not (a tail
    does not pair), its end after it is."""
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Client(store, 1, tracks=1)
    tail = Tail(EventFilter(since_ns=10**15 + 100), Limits())
    assert step(tail, store) == []
    records = [SPAN, "across", 10**15, 10**15 + 200, {"i": 0}, SPAN, "before", 10**15, 10**15 + 100, {"i": 1}]
    records += [INSTANT, "on since", 10**15 + 100, 10**15 + 100, {"i": 2}, INSTANT, "early", 10**15 + 99, 10**15 + 99,
                {"i": 3}, MARKER_START, "m", 10**15, 10**15, {"i": 4}, MARKER_END, "m", 10**15 + 150, 10**15 + 150,
                {"i": 5}]  # fmt: skip
    batch = client.encoder.encode(client.tracks[0], records)
    for frame in [*batch.control, *(frame for frame, _ in batch.events)]:
        client.feed(frame)
    store.commit(client.stream)
    assert sorted(drain(tail, store, 3)) == [0, 2, 5]
