"""RingStore: a byte-bounded ring of segments that keeps the newest payloads and counts what it lost."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.client.errors import ConfigError
from ringtrace.collector.store import Loss, RingStore, StoreSnapshot

SEGMENT = 100


@dataclass(frozen=True)
class Appended:
    """One ``append`` call, kept to compare with what the store gives back."""

    key: str
    count: int
    payload: bytes
    context: object = None
    first_ts_ns: int = 0
    last_ts_ns: int = 0


def payload(tag: int, size: int) -> bytes:
    """``size`` bytes that differ from one tag to the next."""
    return bytes((tag + i) % 256 for i in range(size))


def append(store: RingStore, item: Appended) -> None:
    store.append(item.key, item.context, item.count, item.first_ts_ns, item.last_ts_ns, item.payload)


def append_all(store: RingStore, items: list[Appended]) -> None:
    for item in items:
        append(store, item)


def contents(snapshot: StoreSnapshot) -> list[Appended]:
    return [
        Appended(frame.key, frame.count, bytes(frame.payload), frame.context, frame.first_ts_ns, frame.last_ts_ns)
        for frame in snapshot
    ]


def ring(segments: int = 3) -> RingStore:
    return RingStore(capacity_bytes=segments * SEGMENT, segment_bytes=SEGMENT, entry_overhead_bytes=0)


# -- storing -------------------------------------------------------------------------------------------------------


def test_snapshot_returns_payloads_in_order_and_byte_identical() -> None:
    store = ring()
    items = [
        Appended("a", 1, b"\x00\xff" * 10, context={"strings": 1}, first_ts_ns=5, last_ts_ns=9),
        Appended("b", 7, bytes(range(60)), context="ctx", first_ts_ns=10, last_ts_ns=2**63 - 1),
        Appended("a", 2, b"", first_ts_ns=11, last_ts_ns=11),
        Appended(("host", 42), 3, payload(3, SEGMENT)),  # exactly one segment
        Appended("c", 4, payload(4, 1)),
    ]
    append_all(store, items)
    snapshot = store.snapshot()
    assert len(snapshot) == len(items)
    assert contents(snapshot) == items
    assert (store.stored_frames, store.stored_events, store.lost) == (5, 17, {})
    assert store.used_bytes == sum(len(item.payload) for item in items)


def test_empty_store_has_an_empty_snapshot() -> None:
    snapshot = ring().snapshot()
    assert len(snapshot) == 0
    assert list(snapshot) == []


def test_capacity_is_whole_segments() -> None:
    store = RingStore(capacity_bytes=2 * SEGMENT + 99, segment_bytes=SEGMENT, entry_overhead_bytes=0)
    assert (store.segment_count, store.capacity_bytes) == (2, 2 * SEGMENT)


# -- eviction ------------------------------------------------------------------------------------------------------


def test_full_ring_drops_its_oldest_segment_and_counts_the_loss_per_key() -> None:
    store = ring(segments=3)
    # Two 50-byte payloads fill a segment: segments [a1 b2] [a3 a4] [b5 c6].
    items = [Appended(key, count, payload(count, 50)) for key, count in zip("abaabc", range(1, 7), strict=True)]
    append_all(store, items)
    assert store.lost == {}

    append(store, Appended("c", 7, payload(7, 50)))  # needs a fourth segment: [a1 b2] goes
    assert store.lost == {"a": Loss(events=1, frames=1), "b": Loss(events=2, frames=1)}
    assert contents(store.snapshot()) == [*items[2:], Appended("c", 7, payload(7, 50))]
    assert (store.stored_frames, store.stored_events) == (5, 3 + 4 + 5 + 6 + 7)

    append(store, Appended("b", 8, payload(8, 50)))  # fits beside c7: nothing goes
    append(store, Appended("b", 9, payload(9, 50)))  # [a3 a4] goes
    assert store.lost == {"a": Loss(events=1 + 3 + 4, frames=3), "b": Loss(events=2, frames=1)}
    assert [item.count for item in contents(store.snapshot())] == [5, 6, 7, 8, 9]
    assert (store.stored_frames, store.stored_events) == (5, 5 + 6 + 7 + 8 + 9)


def test_payload_that_does_not_fit_the_newest_segment_opens_another() -> None:
    store = ring(segments=2)
    append_all(store, [Appended("k", 1, payload(1, 60)), Appended("k", 1, payload(2, 60))])
    assert store.used_bytes == 120
    append(store, Appended("k", 1, payload(3, 60)))  # a third segment: the first (60 bytes, 1 frame) goes
    assert store.lost == {"k": Loss(events=1, frames=1)}
    assert [item.payload for item in contents(store.snapshot())] == [payload(2, 60), payload(3, 60)]


appends = st.lists(
    st.builds(
        Appended,
        key=st.sampled_from("abc"),
        count=st.integers(1, 1000),
        payload=st.integers(0, SEGMENT).map(lambda size: payload(size, size)),
    ),
    max_size=60,
)


@settings(deadline=None)
@given(items=appends, segments=st.integers(2, 5))
def test_every_event_is_either_stored_or_counted_lost(items: list[Appended], segments: int) -> None:
    store = ring(segments)
    append_all(store, items)
    kept = contents(store.snapshot())

    # The ring keeps the newest appends, in order: what it dropped is a prefix.
    assert kept == items[len(items) - len(kept) :]
    if items:
        assert kept[-1] == items[-1]
    assert store.stored_frames == len(kept)
    assert store.stored_events == sum(item.count for item in kept)
    assert store.used_bytes == sum(len(item.payload) for item in kept) <= store.capacity_bytes

    for key in "abc":
        sent = [item for item in items if item.key == key]
        stored = [item for item in kept if item.key == key]
        loss = store.lost.get(key, Loss())
        assert loss.frames == len(sent) - len(stored)
        assert loss.events == sum(item.count for item in sent) - sum(item.count for item in stored)


@settings(deadline=None)
@given(sizes=st.lists(st.integers(1, SEGMENT), min_size=1, max_size=60))
def test_ring_drops_nothing_while_the_payloads_fit(sizes: list[int]) -> None:
    # Two consecutive segments always hold more than one segment's worth (the second was opened because the first
    # could not take its first payload), so four segments hold any run of payloads of up to two segments' worth.
    store = ring(segments=4)
    items = [Appended("k", 1, payload(i, size)) for i, size in enumerate(sizes)]
    fitting = [item for item, total in zip(items, accumulate(sizes), strict=True) if total <= 2 * SEGMENT]
    append_all(store, fitting)
    assert store.lost == {}
    assert contents(store.snapshot()) == fitting


# -- snapshots -----------------------------------------------------------------------------------------------------


def test_snapshot_keeps_its_bytes_after_the_ring_wrapped_many_times() -> None:
    store = ring(segments=3)
    before = [Appended("old", 1, payload(i, 30)) for i in range(4)]  # segments [30 30 30] [30 . .]
    append_all(store, before)
    snapshot = store.snapshot()

    for i in range(100):  # the first ones land in the same segment as the last snapshotted payload
        append(store, Appended("new", 1, payload(100 + i, 30)))

    assert contents(snapshot) == before
    assert store.lost["old"] == Loss(events=4, frames=4)
    assert all(item.key == "new" for item in contents(store.snapshot()))


def test_snapshot_does_not_see_later_appends_into_its_newest_segment() -> None:
    store = ring()
    append(store, Appended("k", 1, payload(1, 10)))
    snapshot = store.snapshot()
    append(store, Appended("k", 2, payload(2, 10)))
    assert [item.count for item in contents(snapshot)] == [1]
    assert [item.count for item in contents(store.snapshot())] == [1, 2]


# -- limits --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capacity", "segment"),
    [(0, SEGMENT), (SEGMENT, SEGMENT), (2 * SEGMENT - 1, SEGMENT), (10, 0), (10, -5)],
)
def test_capacity_below_two_segments_is_a_config_error(capacity: int, segment: int) -> None:
    with pytest.raises(ConfigError, match=str(capacity)):
        RingStore(capacity, segment)


def test_capacity_of_two_segments_is_enough() -> None:
    store = RingStore(2 * SEGMENT, SEGMENT, entry_overhead_bytes=0)
    assert store.segment_count == 2


def test_payload_larger_than_a_segment_is_refused() -> None:
    store = ring()
    append(store, Appended("k", 1, payload(0, SEGMENT)))
    with pytest.raises(ValueError, match=rf"{SEGMENT + 1}.*{SEGMENT}") as info:
        append(store, Appended("k", 5, payload(1, SEGMENT + 1)))
    assert not isinstance(info.value, ConfigError)
    assert contents(store.snapshot()) == [Appended("k", 1, payload(0, SEGMENT))]
    assert (store.stored_frames, store.stored_events, store.lost) == (1, 1, {})


def test_counts_survive_keys_of_any_hashable_type() -> None:
    store = ring(segments=2)
    keys = [("host", 1), 7, frozenset({"x"})]
    for i, key in enumerate(keys * 2):
        store.append(key, None, i, 0, 0, payload(i, SEGMENT))
    assert {key: loss.frames for key, loss in store.lost.items()} == {("host", 1): 2, 7: 1, frozenset({"x"}): 1}
    assert {key: loss.events for key, loss in store.lost.items()} == {("host", 1): 0 + 3, 7: 1, frozenset({"x"}): 2}


def test_index_entries_count_against_the_capacity() -> None:
    store = RingStore(capacity_bytes=2 * 1000, segment_bytes=1000, entry_overhead_bytes=150)
    append_all(store, [Appended("k", 1, payload(i, 50)) for i in range(4)])  # 4 x 200 accounted: one segment
    assert store.used_bytes == 200 and store.stored_frames == 4
    append_all(store, [Appended("k", 1, payload(i, 50)) for i in range(6)])  # 10 x 200: both segments full
    assert store.stored_frames == 10 and not store.lost
    append(store, Appended("k", 1, payload(0, 50)))  # the oldest segment (5 frames) goes
    assert store.stored_frames == 6 and store.lost == {"k": Loss(events=5, frames=5)}
    with pytest.raises(ValueError, match="150 of index"):
        append(store, Appended("k", 1, payload(0, 851)))
