"""The rules watched on what is stored (``RuleWatch``): real client streams into a real store, each condition firing
exactly when it should, once per event, counters once per crossing, nothing stored before the watch began, what it
could not read counted, and a reload that goes on from where the watch was."""

from __future__ import annotations

import itertools
from typing import Any

import msgpack
import pytest
from ringtrace.collector.incidents import judge as judge_module
from ringtrace.collector.incidents.rules import (
    CounterCondition,
    IncidentCallCondition,
    MessageCondition,
    OtlpErrorCondition,
    Rule,
    RuleSet,
    SpanCondition,
)
from ringtrace.collector.incidents.watch import RuleWatch
from ringtrace.collector.read.frame_walk import ProcessView
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.wire.frames import Events, Stats, encode
from ringtrace.wire.model import COUNTER, INCIDENT, INSTANT, SPAN
from ringtrace.wire.stream_limits import Limits
from ringtrace.wire.string_table import StringTable
from store_client import Client

OFFSET_NS = 5_000
MS = 1_000_000
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def process(owner: int) -> ProcessView:
    return ProcessView(owner, 100 + owner, 100 + owner, "host", f"proc-{owner}", OFFSET_NS, Stats(0, 0), {})


class Stream(Client):
    """A client stream that sends any events, at times it chooses."""

    def __init__(self, store: Store, owner: int, instance: str | None = None) -> None:
        super().__init__(store, owner, instance=instance)
        self.clock = itertools.count(10**15, 10 * MS)

    def send(self, *events: tuple[int, str, int, Any]) -> list[int]:
        """``(kind, name, dur_ns, args)`` each, on track 0, one after another; their start times."""
        records: list[Any] = []
        starts = []
        for kind, name, dur, args in events:
            ts = next(self.clock)
            starts.append(ts)
            records += [kind, name, ts, ts + dur, args]
        batch = self.encoder.encode(self.tracks[0], records)
        for frame in [*batch.control, *(frame for frame, _ in batch.events)]:
            self.feed(frame)
        self.store.commit(self.stream)
        return starts

    def message_kind(self, category: str, priority: str, text: str) -> int:
        kind = self.encoder.registry.register(
            category, "message", (("what", "any"), ("trace_id", "any")), lambda v: (list(v), 0), text, priority
        )
        return kind.id


def rules(*conditions: Any, max_per_minute: int = 60000) -> RuleSet:
    """Rules of the conditions (past their ``max_per_minute`` in a step, a watch makes no firings: high here)."""
    return RuleSet(tuple(Rule(f"r{i}", c, max_per_minute=max_per_minute) for i, c in enumerate(conditions)))


def step(watch: RuleWatch, store: Store) -> list[tuple[str, str]]:
    """One step: (rule, reason) of each firing."""
    return [(firing.rule, firing.reason) for firing in step_firings(watch, store)]


def step_firings(watch: RuleWatch, store: Store) -> list[Any]:
    with store.snapshot() as pinned:
        kept = store.kept_events(range(1, 4))
        return watch.step([(process(s.owner), s) for s in pinned.segments], kept)


def test_a_span_rule_fires_for_each_span_its_glob_names_that_lasts_long_enough() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(SpanCondition("checkout*", 200 * MS)), Limits())
    client.send((SPAN, "checkout", 500 * MS, None))  # stored before the watch began: not its own
    assert step(watch, store) == []
    starts = client.send(
        (SPAN, "checkout", 250_100_000, {"trace_id": TRACE}),
        (SPAN, "checkout cart", 200 * MS, None),
        (SPAN, "checkout", 199 * MS, None),
        (SPAN, "search", 900 * MS, None),
        (INSTANT, "checkout", 0, None),
    )
    firings = step_firings(watch, store)
    assert [(f.rule, f.reason) for f in firings] == [
        ("r0", "span 'checkout' lasted 250.1 ms (>= 200 ms)"),
        ("r0", "span 'checkout cart' lasted 200.0 ms (>= 200 ms)"),
    ]
    first = firings[0]
    assert (first.process_uid, first.start_ns, first.end_ns) == (
        1,
        starts[0] + OFFSET_NS,
        starts[0] + OFFSET_NS + 250_100_000,
    )
    assert first.trace_id == TRACE and firings[1].trace_id is None
    assert first.event == {
        "kind": "span",
        "name": "checkout",
        "track": "t0",
        "ts_ns": starts[0] + OFFSET_NS,
        "dur_ns": 250_100_000,
        "args": {"trace_id": TRACE},
    }
    assert step(watch, store) == []  # once each


def test_a_message_rule_fires_at_or_above_its_priority_for_its_category_and_text() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    db_error = client.message_kind("db", "error", "query failed: $what")
    db_fatal = client.message_kind("db", "fatal", "gone: $what")
    db_warning = client.message_kind("db", "warning", "slow: $what")
    web_error = client.message_kind("web", "error", "bad request: $what")
    watch = RuleWatch(rules(MessageCondition("error", "db", "*failed*"), MessageCondition("fatal")), Limits())
    step(watch, store)
    client.send(
        (db_error, "", 0, ["orders", TRACE]),
        (db_fatal, "", 0, ["disk", ""]),
        (db_warning, "", 0, ["orders failed", ""]),
        (web_error, "", 0, ["x failed", ""]),
    )
    firings = step_firings(watch, store)
    assert [(f.rule, f.reason) for f in firings] == [
        ("r0", "error message 'db': query failed: what(orders)"),
        ("r1", "fatal message 'db': gone: what(disk)"),
    ]
    assert firings[0].trace_id == TRACE and firings[1].trace_id is None
    assert firings[0].event["args"] == {"what": "orders", "trace_id": TRACE}


def test_an_otlp_error_rule_fires_for_spans_with_error_status() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(OtlpErrorCondition("GET *")), Limits())
    step(watch, store)
    client.send(
        (SPAN, "GET /cart", 1000, {"trace_id": TRACE, "status": "error", "status_message": "timeout"}),
        (SPAN, "GET /cart", 1000, {"status": "ok"}),
        (SPAN, "POST /cart", 1000, {"status": "error"}),
        (SPAN, "GET /", 1000, None),
    )
    firings = step_firings(watch, store)
    assert [(f.reason, f.trace_id) for f in firings] == [("span 'GET /cart' ended with error status: timeout", TRACE)]


def test_a_counter_rule_fires_once_per_crossing_per_counter() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(CounterCondition("queue*", above=1000), CounterCondition("free", below=5)), Limits())
    step(watch, store)

    def counter(name: str, value: float) -> tuple[int, str, int, Any]:
        return (COUNTER, name, 0, {"value": value})

    client.send(counter("queue depth", 5), counter("queue depth", 1200), counter("queue depth", 1300))
    assert step(watch, store) == [("r0", "counter 'queue depth' rose to 1200 (> 1000)")]
    client.send(counter("queue depth", 1400), counter("other", 5000), counter("queue b", 2000))  # across steps
    assert step(watch, store) == [("r0", "counter 'queue b' rose to 2000 (> 1000)")]
    client.send(counter("queue depth", 900), counter("queue depth", 1000.5), counter("free", 3), counter("free", 2))
    assert step(watch, store) == [
        ("r0", "counter 'queue depth' rose to 1000.5 (> 1000)"),
        ("r1", "counter 'free' fell to 3 (< 5)"),
    ]


def test_an_incident_call_rule_fires_for_the_programs_incidents_its_glob_names() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(IncidentCallCondition("payment*"), IncidentCallCondition()), Limits())
    step(watch, store)
    client.send(
        (INCIDENT, "payment failed", 0, {"order": 7}), (INCIDENT, "other", 0, None), (INSTANT, "payment", 0, None)
    )
    firings = step_firings(watch, store)
    assert [(f.rule, f.reason) for f in firings] == [
        ("r0", "the program reported incident 'payment failed'"),
        ("r1", "the program reported incident 'payment failed'"),
        ("r1", "the program reported incident 'other'"),
    ]
    assert firings[0].event["args"] == {"order": 7} and firings[0].event["kind"] == "incident"


def test_segments_written_after_the_watch_began_are_read_across_processes_and_segments() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    one, two = Stream(store, 1), Stream(store, 2)
    watch = RuleWatch(rules(SpanCondition("slow", 1)), Limits())
    step(watch, store)
    sent = 0
    while store.segment_count < 6:
        one.send(*[(SPAN, "slow", 5, {"pad": "x" * 100})] * 20, (SPAN, "fast", 0, None))
        two.send((SPAN, "slow", 5, None))
        sent += 21
    firings = step_firings(watch, store)
    assert len(firings) == sent
    assert {f.process_uid for f in firings} == {1, 2}
    assert (watch.unread_events, watch.undecodable_events, watch.unseen_segments) == (0, 0, 0)


def test_later_segments_of_a_process_judge_as_the_first_and_a_new_name_in_one_is_matched() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(SpanCondition("slow*", 5), CounterCondition("depth", above=10)), Limits())
    step(watch, store)
    sent = 0
    while store.segment_count < 5:  # (each segment replays the same tables: its criteria are the previous ones')
        client.send(*[(SPAN, "slow a", 10, {"pad": "x" * 100})] * 20, (COUNTER, "depth", 0, {"value": 5}))
        sent += 20
    client.send((SPAN, "slow b", 10, None), (COUNTER, "depth", 0, {"value": 11}))  # (a name only the last declares)
    firings = step(watch, store)
    assert [reason for _, reason in firings].count("span 'slow a' lasted 10 ns (>= 5 ns)") == sent
    assert firings[-2:] == [("r0", "span 'slow b' lasted 10 ns (>= 5 ns)"), ("r1", "counter 'depth' rose to 11 (> 10)")]


def test_events_of_segments_overwritten_before_the_watch_read_them_are_counted() -> None:
    store = Store(4 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(SpanCondition("*")), Limits(), max_step_bytes=2048)
    step(watch, store)
    sent = fired = 0
    for _ in range(40):  # a reader too slow for what is written: the ring goes round under it
        client.send(*[(SPAN, "s", 1, {"pad": "x" * 100})] * 100)
        sent += 100
        fired += len(step(watch, store))
    for _ in range(400):  # the rest, a bounded number of bytes a step (some steps read session frames alone)
        fired += len(step(watch, store))
    assert watch.unread_events > 0 and watch.unseen_segments == 0
    assert fired + watch.unread_events == sent


def test_a_step_stopped_by_its_byte_budget_says_it_is_behind_until_it_has_read_everything() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(SpanCondition("*")), Limits(), max_step_bytes=2048)
    step(watch, store)
    assert not watch.behind
    client.send(*[(SPAN, "s", 1, {"pad": "x" * 100})] * 100)  # ~15 KB: several steps of 2 KB
    fired = len(step(watch, store))
    assert watch.behind
    steps = 1
    while watch.behind:
        fired += len(step(watch, store))
        steps += 1
        assert steps < 100
    assert fired == 100 and watch.unread_events == 0 and steps > 2


def test_a_reload_keeps_the_cursors_and_the_counters_last_values() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(CounterCondition("q", above=10), SpanCondition("a", 0)), Limits())
    step(watch, store)
    client.send((SPAN, "a", 1, None), (COUNTER, "q", 0, {"value": 50}))
    assert step(watch, store) == [("r1", "span 'a' lasted 1 ns (>= 0 ns)"), ("r0", "counter 'q' rose to 50 (> 10)")]
    client.send((SPAN, "b", 1, None))  # stored before the reload, not yet read: judged by the new rules
    watch = watch.with_rules(rules(CounterCondition("q", above=10), SpanCondition("b", 0)))
    client.send((SPAN, "a", 1, None), (SPAN, "b", 1, None), (COUNTER, "q", 0, {"value": 60}))
    assert step(watch, store) == [
        ("r1", "span 'b' lasted 1 ns (>= 0 ns)"),
        ("r1", "span 'b' lasted 1 ns (>= 0 ns)"),
    ]
    watch = watch.with_rules(RuleSet())
    client.send((SPAN, "b", 1, None))
    assert step(watch, store) == []
    watch = watch.with_rules(rules(SpanCondition("b", 0)))  # rules again: what came meanwhile is not judged
    assert step(watch, store) == []
    client.send((SPAN, "b", 1, None))
    assert step(watch, store) == [("r0", "span 'b' lasted 1 ns (>= 0 ns)")]


@pytest.mark.parametrize("max_counters", [judge_module.MAX_COUNTERS, 3])
def test_rules_with_thresholds_on_one_counter_each_fire_at_their_crossings_per_track(
    max_counters: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (with 3 counters remembered at most, a run of more values than can be remembered without forgetting one is
    # judged in Python, the others by the rules' verdicts: the same firings)
    monkeypatch.setattr(judge_module, "MAX_COUNTERS", max_counters)
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(CounterCondition("q", above=990), CounterCondition("*", above=2000)), Limits())
    step(watch, store)
    for value in (5, 995, 1500):
        client.send((COUNTER, "q", 0, {"value": value}))
    assert step(watch, store) == [("r0", "counter 'q' rose to 995 (> 990)")]
    client.send(*[(COUNTER, "q", 0, {"value": value}) for value in (2500, 2600, 1200, 900, 3000)])
    assert step(watch, store) == [
        ("r1", "counter 'q' rose to 2500 (> 2000)"),
        ("r0", "counter 'q' rose to 3000 (> 990)"),
        ("r1", "counter 'q' rose to 3000 (> 2000)"),
    ]
    # The same counter's name on another track is another counter.
    other = client.tracks[1]
    client.tracks[0], client.tracks[1] = other, client.tracks[0]
    client.send((COUNTER, "q", 0, {"value": 3100}))
    assert step(watch, store) == [
        ("r0", "counter 'q' rose to 3100 (> 990)"),
        ("r1", "counter 'q' rose to 3100 (> 2000)"),
    ]


def test_a_frame_that_cannot_be_decoded_is_counted_and_the_frames_after_it_are_judged() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(SpanCondition("s")), Limits())
    step(watch, store)
    track = client.tracks[0].track_id
    client.send((SPAN, "s", 1, None))
    client.feed(encode(Events(track, 3, 10**15, 10**15, b"\xc1 not msgpack")))
    client.feed(encode(Events(track, 1, 10**15, 10**15, msgpack.packb([[0], [0], [0], [True], [None]]))))
    client.send((SPAN, "s", 2, None))
    assert step(watch, store) == [("r0", "span 's' lasted 1 ns (>= 0 ns)"), ("r0", "span 's' lasted 2 ns (>= 0 ns)")]
    assert watch.undecodable_events == 4 and watch.unread_events == 0


def test_names_are_matched_again_after_the_string_table_starts_again() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    client.encoder.strings = StringTable(max_strings=6)
    client.encoder.strings.recycles = True  # (a client resets its table when the collector takes it)
    watch = RuleWatch(rules(SpanCondition("slow*", 5)), Limits())
    step(watch, store)
    names = [f"name {i}" for i in range(12)] + ["slow one", "other", "slow two"]
    for name in names:  # the table fills and starts again, more than once: ids name other strings each time
        client.send((SPAN, name, 10, None))
    assert step(watch, store) == [
        ("r0", "span 'slow one' lasted 10 ns (>= 5 ns)"),
        ("r0", "span 'slow two' lasted 10 ns (>= 5 ns)"),
    ]


def test_two_streams_of_one_process_are_each_read_whole_while_both_grow() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    first, second = Stream(store, 1, "a"), Stream(store, 1, "b")  # (a reconnect while the old connection lingers)
    watch = RuleWatch(rules(SpanCondition("s")), Limits())
    step(watch, store)
    sent = fired = 0
    for _ in range(30):
        for stream in (first, second):
            stream.send(*[(SPAN, "s", 1, {"pad": "x" * 100})] * 50)
            sent += 50
        fired += len(step(watch, store))
    assert store.segment_count > 4
    assert fired == sent and watch.unread_events == 0


def test_a_segment_stored_after_begin_but_before_the_first_step_is_judged() -> None:
    """``begin`` marks where the watch starts (the engine calls it as it makes the watch, on the event loop): a
    connection whose first segment is stored before the first step, late on a busy machine, is the watch's whole."""
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    watch = RuleWatch(rules(SpanCondition("checkout", 100 * MS)), Limits())
    with store.snapshot() as pinned:
        watch.begin([(process(s.owner), s) for s in pinned.segments], store.kept_events(range(1, 4)))
    Stream(store, 1).send((SPAN, "checkout", 500 * MS, None))
    assert step(watch, store) == [("r0", "span 'checkout' lasted 500.0 ms (>= 100 ms)")]


def test_a_step_makes_no_more_firings_of_a_rule_than_its_max_per_minute_and_counts_the_rest() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Stream(store, 1)
    watch = RuleWatch(rules(SpanCondition("slow", 1), SpanCondition("slow*", 1), max_per_minute=3), Limits())
    step(watch, store)
    client.send(*[(SPAN, "slow", 5, None)] * 10)
    assert [rule for rule, _ in step(watch, store)] == ["r0", "r1"] * 3
    assert watch.take_surplus() == {"r0": 7, "r1": 7}
    assert watch.take_surplus() == {}
    # A new step, a new minute's worth (the engine's own limit holds each rule to its sliding minute).
    client.send(*[(SPAN, "slow", 5, None)] * 4)
    assert len(step(watch, store)) == 6 and watch.take_surplus() == {"r0": 1, "r1": 1}
    # An event whose times the engine refuses (far in the future) is made, and takes no place of the step's.
    future = Stream(store, 2)
    future.clock = itertools.count(2 * 10**18, 10 * MS)
    future.send(*[(SPAN, "slow", 5, None)] * 2)
    client.send(*[(SPAN, "slow", 5, None)] * 3)
    assert len(step(watch, store)) == 2 * (2 + 3) and watch.take_surplus() == {}
