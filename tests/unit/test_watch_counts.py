"""Every event stored since the rules' watch began is judged, or counted unread exactly once where it is lost, for any
interleaving of ingest, the ring turning over (overwritten or published segments), and watch steps of any size, some
of them while the ring turns (in the collector a step runs on a worker thread while ingest goes on): a real store, a
real watch and its hold (``WatchHold``) driven as the engine drives them, Hypothesis drawing the interleavings."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from ringtrace.collector.incidents.rules import SpanCondition
from ringtrace.collector.incidents.watch_hold import WatchHold, stored_now
from ringtrace.collector.store.processes import Registry
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.collector.store.segments import Segment
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import SPAN
from ringtrace.wire.stream_limits import Limits
from test_rule_watch import Stream, rules
from test_watch_hold import TurningWatch, engine_step

#: What a step is drawn to read at most: part of a segment, one, several.
STEP_BYTES = (MIN_SEGMENT_BYTES // 8, MIN_SEGMENT_BYTES // 2, MIN_SEGMENT_BYTES, 4 * MIN_SEGMENT_BYTES)


class WatchCounts(RuleBasedStateMachine):
    """A store of 4 segments, a watch whose one rule every event meets, and a hold of 0 to 3 segments; one process
    connected at a time (each forgotten once it ended and all it stored left)."""

    @initialize(step_bytes=st.sampled_from(STEP_BYTES), held_segments=st.integers(0, 3))
    def start(self, step_bytes: int, held_segments: int) -> None:
        self.store = Store(4 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
        self.registry = Registry()
        self.instances = 0
        self.client = self.connect()
        #: Events the store kept of the processes forgotten (its accounts of them are gone).
        self.kept_of_forgotten = 0
        self.watch = TurningWatch(rules(SpanCondition("slow", 1)), Limits(), max_step_bytes=step_bytes)
        self.hold = WatchHold(self.store, held_segments * MIN_SEGMENT_BYTES, lambda s, why: None, lambda: self.watch)
        frames, now, kept = stored_now(self.registry, self.store, self.hold)
        with frames:
            self.watch.begin(now, kept)
        self.judged = 0

    def connect(self) -> Stream:
        self.instances += 1
        hello = Hello(100 + self.instances, "h", "proc", f"i{self.instances}", "boot", 1, 2, "t")
        return Stream(self.store, self.registry.known(hello).uid)

    def send(self, events: int) -> None:
        """``events`` spans the rule meets (the ring overwrites the oldest segments when it is full)."""
        self.client.send(*[(SPAN, "slow", 5, {"pad": "x" * 100})] * events)

    def sealed(self) -> list[Segment]:
        open_segment = self.client.stream.segment
        return [s for s in self.store.stored([self.client.owner]) if open_segment is None or s is not open_segment]

    def publish(self, count: int) -> None:
        """The oldest ``count`` sealed segments leave (a JetStream stream acknowledged them)."""
        for segment in self.sealed()[:count]:
            self.store.published(segment)

    @rule(events=st.integers(1, 80))
    def ingest(self, events: int) -> None:
        self.send(events)

    @precondition(lambda self: bool(self.sealed()))
    @rule(count=st.integers(1, 3))
    def published(self, count: int) -> None:
        self.publish(count)

    @rule()
    def forgotten(self) -> None:
        """The process ends, all it stored leaves, and it is forgotten (as ``ProcessControl.forget_idle`` does: idle,
        nothing stored); another connects."""
        owner = self.client.owner
        self.store.close_stream(self.client.stream)
        for segment in self.store.stored([owner]):
            self.store.published(segment)
        self.kept_of_forgotten += self.store.kept_events([owner]).get(owner, 0)
        [record] = [p for p in self.registry.by_uid.values() if p.uid == owner]
        self.registry.forget(record)
        self.store.forget(owner)
        self.client = self.connect()

    @rule(sent=st.integers(0, 80), published=st.integers(0, 3))
    def step(self, sent: int, published: int) -> None:
        """A step, the ring turning over while it reads: ``sent`` events stored (overwriting what the store cannot
        hold) and ``published`` segments leaving, after its snapshot was taken."""
        # (what the hold keeps of a forgotten process the step does not read: it counts it unread, the hold dropped)
        dropped_before = self.hold.dropped_events + sum(
            self.watch.unread_of(s.seq, s.events) for s in self.hold.segments() if s.owner not in self.registry.by_uid
        )

        def meanwhile() -> None:
            if sent:
                self.send(sent)
            self.publish(published)

        self.watch.meanwhile = meanwhile
        self.judged += engine_step(self.registry, self.store, self.watch, self.hold)
        unread = self.watch.unread_events
        # What the hold dropped before the step's snapshot, the step saw gone and counted unread (there is no other
        # way to lose an event here); what it dropped since, the next step counts.
        assert unread == dropped_before, f"{unread} events counted unread, {dropped_before} dropped by the hold"
        assert unread <= self.hold.dropped_events

    @invariant()
    def the_kept_and_the_spare_buffers_stay_within_the_capacity_and_the_hold_s_bound(self) -> None:
        store, spare = self.store, self.store.buffers.pooled_bytes
        assert store.held_bytes + spare + self.hold.held_bytes <= store.capacity_bytes + self.hold.max_bytes

    @invariant()
    def every_event_is_judged_readable_or_counted_once(self) -> None:
        stored = self.kept_of_forgotten + self.store.kept_events([self.client.owner]).get(self.client.owner, 0)
        readable = sum(self.watch.unread_of(s.seq, s.events) for s in [*self.hold.segments(), *self.sealed()])
        open_segment = self.client.stream.segment
        if open_segment is not None:
            readable += self.watch.unread_of(open_segment.seq, open_segment.events)
        dropped = self.hold.dropped_events
        assert self.judged + readable + dropped == stored, (
            f"{self.judged} judged + {readable} still readable + {dropped} dropped != {stored} stored"
        )


WatchCounts.TestCase.settings = settings(max_examples=150, stateful_step_count=30)
test_watch_counts = WatchCounts.TestCase
