"""Segments the ring overwrote or a JetStream stream acknowledged (``published``) kept pinned until the rules' watch
read them (``WatchHold``): a real store and a real watch; what the bound cannot keep is counted, never silent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest
from ringtrace.collector.incidents.firing import Firing
from ringtrace.collector.incidents.rules import SpanCondition
from ringtrace.collector.incidents.watch import RuleWatch
from ringtrace.collector.incidents.watch_hold import WatchHold, step_pinned, stored_now
from ringtrace.collector.read.frame_walk import ProcessView
from ringtrace.collector.store.holdings import Removal
from ringtrace.collector.store.processes import Registry
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.collector.store.segment_buffers import MemoryBuffers
from ringtrace.collector.store.segments import Buffer, Segment
from ringtrace.collector.store.views import SegmentView
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import SPAN
from ringtrace.wire.stream_limits import Limits
from test_rule_watch import Stream, process, rules


def step(watch: RuleWatch, store: Store, hold: WatchHold) -> list[str]:
    with store.snapshot(also=hold.segments()) as pinned:
        kept = store.kept_events([1])  # (published segments' events count kept: stored in the stream)
        firings = watch.step([(process(s.owner), s) for s in pinned.segments], kept)
    hold.let_go()
    return [firing.rule for firing in firings]


def fill(store: Store, client: Stream) -> list[Segment]:
    """Send slow spans until a segment is sealed; the sealed ones."""
    while store.segment_count < 2:
        client.send(*[(SPAN, "slow", 5, {"pad": "x" * 100})] * 20)
    return [s for s in store.stored([client.owner])][:-1]


def test_a_published_segment_the_watch_has_not_read_is_kept_until_it_has() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(SpanCondition("slow", 1)), Limits())
    told: list[tuple[int, Removal]] = []
    hold = WatchHold(store, 64 * MIN_SEGMENT_BYTES, lambda s, why: told.append((s.seq, why)), lambda: watch)
    step(watch, store, hold)
    sealed = fill(store, client)
    events = sum(s.events for s in sealed)
    for segment in sealed:
        store.published(segment)  # (the stream acknowledged it before the watch stepped)
    assert told == [(s.seq, "published") for s in sealed], "the hook before it is told first"
    assert hold.segments() == sealed and all(s.pins == 1 for s in sealed)
    fired = step(watch, store, hold)
    assert fired.count("r0") >= events and watch.unread_events == 0
    assert hold.segments() == [] and hold.held_bytes == 0 and all(s.pins == 0 for s in sealed)
    step(watch, store, hold)
    assert watch.unread_events == 0 and hold.dropped_events == 0


def test_a_published_segment_read_already_or_before_the_watch_began_is_not_kept() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(SpanCondition("slow", 1)), Limits())
    hold = WatchHold(store, 64 * MIN_SEGMENT_BYTES, lambda s, why: None, lambda: watch)
    before = fill(store, client)  # stored before the watch began: not its own
    step(watch, store, hold)
    store.published(before[0])
    assert hold.segments() == []
    sealed = [s for s in fill(store, client) if s not in before]
    step(watch, store, hold)  # read whole
    for segment in sealed:
        store.published(segment)
    assert hold.segments() == [] and watch.unread_events == 0


def test_past_its_bound_a_published_segment_is_not_kept_and_its_unread_events_are_counted() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(SpanCondition("slow", 1)), Limits())
    hold = WatchHold(store, MIN_SEGMENT_BYTES // 2, lambda s, why: None, lambda: watch)
    step(watch, store, hold)
    sealed = fill(store, client)
    for segment in sealed:
        store.published(segment)
    assert hold.segments() == [] and hold.dropped_segments == len(sealed)
    assert hold.dropped_events == sum(s.events for s in sealed)
    step(watch, store, hold)
    assert watch.unread_events == hold.dropped_events


def test_a_kept_segment_of_a_process_gone_from_the_registry_is_let_go_its_unread_events_counted() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(SpanCondition("slow", 1)), Limits())
    hold = WatchHold(store, 64 * MIN_SEGMENT_BYTES, lambda s, why: None, lambda: watch)
    step(watch, store, hold)
    sealed = fill(store, client)
    for segment in sealed:
        store.published(segment)
    hold.let_go(owners={2})  # (process 1 forgotten: no step reads its segments any more)
    assert hold.segments() == [] and all(s.pins == 0 for s in sealed)
    assert hold.dropped_events == sum(s.events for s in sealed)


def test_a_segment_the_ring_overwrites_before_the_watch_read_it_is_kept_until_it_has() -> None:
    # Under a flood the ring may turn over between two steps: what it overwrote unread is kept for the watch.
    store = Store(4 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(SpanCondition("slow", 1)), Limits())
    told: list[tuple[int, Removal]] = []
    hold = WatchHold(store, 64 * MIN_SEGMENT_BYTES, lambda s, why: told.append((s.seq, why)), lambda: watch)
    step(watch, store, hold)
    first = fill(store, client)[0]
    while any(s.seq == first.seq for s in store.stored([1])):  # the ring turns over before the next step
        client.send(*[(SPAN, "slow", 5, {"pad": "x" * 100})] * 20)
    overwritten = [seq for seq, why in told if why == "overwritten"]
    assert first.seq in overwritten
    assert [s.seq for s in hold.segments()] == overwritten, "every segment overwritten unread is kept"
    sent = store.kept_events([1])[1]
    fired = step(watch, store, hold)
    assert watch.unread_events == 0 and fired.count("r0") == sent, "every event judged, the overwritten ones too"
    assert hold.segments() == [] and hold.held_bytes == 0


class CountedBuffers(MemoryBuffers):
    """Memory buffers that count the fresh ones (none spare of the size asked for)."""

    def __init__(self) -> None:
        super().__init__()
        self.fresh = 0

    def new(self, seq: int, size: int) -> Buffer:
        self.fresh += not self.has(size)
        return super().new(seq, size)


def test_the_buffers_of_kept_segments_the_watch_read_are_reused_by_the_ring_not_freed() -> None:
    # A segment kept for the watch takes its buffer out of the ring, which takes another for its next segment: once
    # the watch read the kept one, its buffer is the ring's next spare (within the hold's bound), not freed while
    # the ring zeroes a fresh one for each segment it overwrites unread.
    buffers = CountedBuffers()
    store = Store(4 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, buffers=buffers)
    client = Stream(store, 1)
    watch = RuleWatch(rules(SpanCondition("slow", 1)), Limits())
    hold = WatchHold(store, 4 * MIN_SEGMENT_BYTES, lambda s, why: None, lambda: watch)
    step(watch, store, hold)
    kept = 0
    for _ in range(30):  # the ring turns over between two steps, 30 times, past the segment written at the step
        last = fill(store, client)[-1].seq + 1
        while any(s.seq == last for s in store.stored([1])):
            client.send(*[(SPAN, "slow", 5, {"pad": "x" * 100})] * 20)
        kept += len(hold.segments())
        step(watch, store, hold)
        assert store.held_bytes + buffers.pooled_bytes + hold.held_bytes <= store.capacity_bytes + hold.max_bytes
    assert watch.unread_events == 0 and hold.dropped_events == 0 and kept >= 30
    assert buffers.fresh <= (store.capacity_bytes + hold.max_bytes) // MIN_SEGMENT_BYTES, (
        f"{buffers.fresh} fresh buffers for {kept} segments kept"
    )


def test_a_segment_cleared_on_request_is_not_kept() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(SpanCondition("slow", 1)), Limits())
    hold = WatchHold(store, 64 * MIN_SEGMENT_BYTES, lambda s, why: None, lambda: watch)
    step(watch, store, hold)
    fill(store, client)
    store.clear([1])
    assert hold.segments() == []


def test_a_step_pins_only_the_segments_it_reads_the_rest_stays_evictable() -> None:
    # A step that reads a little of a large store must not keep the rest from the ring: what it evicts meanwhile
    # would take fresh buffers.
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    registry = Registry()
    client = Stream(store, registry.known(Hello(100, "h", "proc", "i1", "boot", 1, 2, "test")).uid)
    watch = RuleWatch(rules(SpanCondition("slow", 1)), Limits(), max_step_bytes=MIN_SEGMENT_BYTES // 4)
    hold = WatchHold(store, 64 * MIN_SEGMENT_BYTES, lambda s, why: None, lambda: watch)
    frames, now, kept = stored_now(registry, store, hold)
    with frames:
        watch.begin(now, kept)
    while store.segment_count < 4:
        client.send(*[(SPAN, "slow", 5, {"pad": "x" * 100})] * 20)
    stored = store.stored([client.owner])
    fired = 0
    for _ in range(100):  # (steps of a quarter segment each: the store is read within them)
        frames, now, kept = stored_now(registry, store, hold)
        with frames:
            pinned = [s for s in stored if s.pins]
            # (a step ends within the segment it reads, or just past one it finished and into the next)
            assert len(pinned) <= 2, f"a step that reads {MIN_SEGMENT_BYTES // 4} bytes pinned {len(pinned)} segments"
            fired += len(watch.step(now, kept))
        assert all(s.pins == 0 for s in stored), "a step lets go of what it pinned"
        if all(watch.unread_of(s.seq, s.events) == 0 for s in stored):
            break
    assert fired == sum(s.events for s in stored) and watch.unread_events == 0


class TurningWatch(RuleWatch):
    """A watch whose step lets the store publish (or overwrite) segments as it begins, its snapshot taken: in the
    collector the step runs on a worker thread while ingest goes on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.meanwhile: Callable[[], None] = lambda: None

    def step(
        self, segments: Iterable[tuple[ProcessView, SegmentView]], kept: Mapping[int, int] | None = None
    ) -> list[Firing]:
        segments = list(segments)
        self.meanwhile()
        self.meanwhile = lambda: None
        return super().step(segments, kept)


def engine_step(registry: Registry, store: Store, watch: RuleWatch, hold: WatchHold) -> int:
    """One step as the engine runs it (``IncidentEngine._watch_step``): the events it judged (a rule met by all)."""
    frames, segments, kept = stored_now(registry, store, hold)
    with frames:
        fired = len(watch.step(segments, kept))
    hold.let_go()
    return fired + sum(watch.take_surplus().values())


def test_a_segment_that_leaves_while_a_step_reads_it_counts_only_what_the_step_left_unread() -> None:
    # Past the hold's bound, a segment published while a step reads it was counted dropped whole, though the step
    # (its snapshot pinned it) judged part of it: more dropped than unread, events counted twice.
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    registry = Registry()
    client = Stream(store, registry.known(Hello(100, "h", "proc", "i1", "boot", 1, 2, "test")).uid)
    watch = TurningWatch(rules(SpanCondition("slow", 1)), Limits(), max_step_bytes=MIN_SEGMENT_BYTES // 2)
    hold = WatchHold(store, MIN_SEGMENT_BYTES // 2, lambda s, why: None, lambda: watch)  # (keeps none)
    engine_step(registry, store, watch, hold)
    sealed = fill(store, client)
    events = sum(s.events for s in sealed)
    stored = store.kept_events([client.owner])[client.owner]  # (the open segment's too)

    def publish() -> None:
        for segment in sealed:
            store.published(segment)

    watch.meanwhile = publish
    judged = engine_step(registry, store, watch, hold)
    assert 0 < judged < events, "the step reads half a segment"
    assert hold.dropped_segments == len(sealed)
    assert hold.dropped_events == events - judged, "what the step judged is not counted dropped"
    judged += engine_step(registry, store, watch, hold)  # (sees them gone, reads the open one)
    assert watch.unread_events == hold.dropped_events == stored - judged


def test_what_a_forgotten_process_left_unread_is_counted_unread_and_dropped_once() -> None:
    # A process that ended, whose segments all left the ring before the watch read them whole, is forgotten (idle,
    # nothing stored): the hold drops what it kept of it, and the store can no longer say what it kept. The watch
    # counted none of it unread, and the hold counted dropped what the watch had read of it.
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    registry = Registry()
    record = registry.known(Hello(100, "h", "proc", "i1", "boot", 1, 2, "test"))
    client = Stream(store, record.uid)
    watch = RuleWatch(rules(SpanCondition("slow", 1)), Limits(), max_step_bytes=MIN_SEGMENT_BYTES // 2)
    hold = WatchHold(store, MIN_SEGMENT_BYTES, lambda s, why: None, lambda: watch)  # (keeps one)
    engine_step(registry, store, watch, hold)
    fill(store, client)
    judged = engine_step(registry, store, watch, hold)  # (half the first segment)
    store.close_stream(client.stream)
    stored = store.kept_events([record.uid])[record.uid]
    for segment in store.stored([record.uid]):
        store.published(segment)
    assert len(hold.segments()) == 1 and 0 < judged < stored
    registry.forget(record)  # (as ``ProcessControl.forget_idle`` does)
    store.forget(record.uid)
    judged += engine_step(registry, store, watch, hold)
    assert hold.segments() == [] and hold.dropped_events == stored - judged
    assert watch.unread_events == stored - judged


class FailingWatch(RuleWatch):
    """A watch whose next step raises once ``fail`` is set, as a bug in it would: the engine logs it and steps on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail = False

    def step(
        self, segments: Iterable[tuple[ProcessView, SegmentView]], kept: Mapping[int, int] | None = None
    ) -> list[Firing]:
        if self.fail:
            self.fail = False
            raise RuntimeError("the step failed")
        return super().step(segments, kept)


def pinned_step(registry: Registry, store: Store, watch: RuleWatch, hold: WatchHold) -> int:
    """One step as the engine takes it (``step_pinned``, on a worker thread): the events it judged."""
    fired = len(asyncio.run(step_pinned(watch, registry, store, hold)))
    return fired + sum(watch.take_surplus().values())


def test_what_a_forgotten_process_left_unread_is_counted_after_a_step_that_raised() -> None:
    # The processes forgotten since the last step are told to the next step once (what the store had kept of each):
    # a step that raised took them along, and the watch never counted what it had not read of them (segments stored
    # and gone between two steps, which it never saw).
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    registry = Registry()
    record = registry.known(Hello(100, "h", "proc", "i1", "boot", 1, 2, "test"))
    client = Stream(store, record.uid)
    watch = FailingWatch(rules(SpanCondition("slow", 1)), Limits(), max_step_bytes=MIN_SEGMENT_BYTES // 2)
    hold = WatchHold(store, MIN_SEGMENT_BYTES, lambda s, why: None, lambda: watch)  # (keeps one)
    pinned_step(registry, store, watch, hold)
    fill(store, client)
    store.close_stream(client.stream)
    stored = store.kept_events([record.uid])[record.uid]
    for segment in store.stored([record.uid]):
        store.published(segment)
    registry.forget(record)  # (as ``ProcessControl.forget_idle`` does)
    store.forget(record.uid)
    watch.fail = True
    with pytest.raises(RuntimeError, match="the step failed"):
        pinned_step(registry, store, watch, hold)
    assert pinned_step(registry, store, watch, hold) == 0
    assert hold.segments() == [] and hold.dropped_events == stored
    assert watch.unread_events == stored, "what the step that raised was told is told to the next one"
