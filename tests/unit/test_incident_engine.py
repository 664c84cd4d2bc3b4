"""The incidents' engine around its watch: rules read again taken between two steps (never while one runs on its
worker), and a firing that cannot begin its incident counted failed, the watch going on (a real store, registry and
incidents directory; a watch that the test steps); a firing's record as it fires; an incident counted failed only once
its record says so; segments that leave while a step reads them counted dropped and unread alike, in its stats."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ringtrace.collector.incidents.admission import MAX_AHEAD_NS, MAX_DURATION_NS, Admission, refusal
from ringtrace.collector.incidents.capture import Capture, Window
from ringtrace.collector.incidents.counts import IncidentCounts
from ringtrace.collector.incidents.engine import IncidentEngine
from ringtrace.collector.incidents.firing import Firing
from ringtrace.collector.incidents.firing_record import MAX_TRIGGER_ARGS_BYTES, new_record
from ringtrace.collector.incidents.incident_files import IncidentFiles
from ringtrace.collector.incidents.rules import IncidentCallCondition, Rule, RuleSet, SpanCondition
from ringtrace.collector.incidents.watch import RuleWatch
from ringtrace.collector.store.processes import Registry
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import SPAN
from ringtrace.wire.stream_limits import Limits
from test_rule_watch import Stream

DEADLINE_S = 30.0
SLOW = RuleSet((Rule("slow", SpanCondition("checkout", 1)),))
SLOWER = RuleSet((Rule("slower", SpanCondition("checkout", 2)),))


class SteppedWatch:
    """A watch whose steps wait for the test (``go``), telling it when one runs; it yields ``firings`` once."""

    def __init__(self, firings: list[Firing]) -> None:
        self.stepping, self.go = threading.Event(), threading.Event()
        self.reloaded_while_stepping: bool | None = None
        self.firings, self.steps = firings, 0
        self.surplus: dict[str, int] = {}

    @property
    def unread_events(self) -> int:
        return 0

    @property
    def behind(self) -> bool:
        return False

    def begin(self, segments: Iterable[Any], kept: Mapping[int, int] | None = None) -> None:
        pass

    def step(self, segments: Iterable[Any], kept: Mapping[int, int] | None = None) -> list[Firing]:
        self.stepping.set()
        self.go.wait(DEADLINE_S)
        self.stepping.clear()
        self.steps += 1
        firings, self.firings = self.firings, []
        return firings

    def with_rules(self, rules: RuleSet) -> SteppedWatch:
        self.reloaded_while_stepping = self.stepping.is_set()
        return self

    def take_surplus(self) -> dict[str, int]:
        surplus, self.surplus = self.surplus, {}
        return surplus

    def unread_of(self, seq: int, events: int) -> int:
        return 0

    def to_read(self, segments: Iterable[tuple[int, int]]) -> set[int]:
        return set()


def _engine(tmp_path: Path, watch: SteppedWatch, load: RuleSet) -> IncidentEngine:
    store = Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    return IncidentEngine(
        store, Registry(), None, files, SLOW, 10**6, make_watch=lambda rules: watch, load_rules=lambda: load
    )  # type: ignore[arg-type]  # (no capture is made: no viewer needed)


async def _until(condition: Any) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not within the deadline"
        await asyncio.sleep(0.01)


def test_rules_read_again_while_a_step_runs_are_taken_between_two_steps(tmp_path: Path) -> None:
    async def run() -> None:
        watch = SteppedWatch([])
        engine = _engine(tmp_path, watch, SLOWER)
        await engine.start()
        try:
            await _until(watch.stepping.is_set)
            await engine.reload()  # while the step runs on its worker
            assert engine.rules == SLOWER
            watch.go.set()
            await _until(lambda: watch.reloaded_while_stepping is not None)
            assert watch.reloaded_while_stepping is False
        finally:
            watch.go.set()
            await engine.stop()

    asyncio.run(run())


def test_a_firing_that_cannot_begin_its_incident_is_counted_failed_and_the_watch_goes_on_counting_what_it_did_not_make(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        never = -(10**30)  # (a time no clock shows: its incident's id cannot be made)
        watch = SteppedWatch([Firing("slow", 1, never, never, "checkout lasted 2 ns")])
        watch.go.set()
        engine = _engine(tmp_path, watch, SLOW)
        await engine.start()
        try:
            await _until(lambda: watch.steps >= 3)
            assert engine.counts.failed == {"slow": 1}
            watch.surplus = {"slow": 4}  # (firings past the rule's max_per_minute in a step, not made)
            await _until(lambda: engine.counts.suppressed == {"slow": 4})
            await _until(lambda: watch.steps >= 6)
            assert engine.counts.suppressed == {"slow": 4}
        finally:
            await engine.stop()

    asyncio.run(run())


def test_a_records_trigger_event_keeps_its_args_up_to_a_few_kib_and_says_when_they_are_cut() -> None:
    capture = Capture("cut", Window(0, 1), {})
    rule = Rule("asked", IncidentCallCondition())
    small = {"kind": "incident", "name": "asked", "args": {"order": 7}}
    record = new_record(Registry(), capture, Firing("asked", 1, 0, 0, "asked", small), rule)
    assert record["trigger"]["event"] == small
    huge = {**small, "args": {"blob": "x" * 10_000}}
    event = new_record(Registry(), capture, Firing("asked", 1, 0, 0, "asked", huge), rule)["trigger"]["event"]
    assert event["args"] == {} and event["args_cut"].startswith(
        f"10012 bytes of args, more than {MAX_TRIGGER_ARGS_BYTES}"
    )


def test_a_firing_far_ahead_of_the_clock_or_absurdly_long_is_refused_saying_why() -> None:
    now = 1_796_000_000 * 10**9

    def at(start_ns: int, end_ns: int) -> Firing:
        return Firing("r", 1, start_ns, end_ns, "why")

    assert refusal(at(now - 10**9, now), now) is None
    assert refusal(at(now + 30 * 10**9, now + 30 * 10**9), now) is None  # (clocks of a fleet differ a little)
    assert "3600.0 s in the future" in (refusal(at(now + 3600 * 10**9, now + 3600 * 10**9), now) or "")
    assert "lasts -1.0 s" in (refusal(at(now, now - 10**9), now) or "")
    assert "lasts 90000.0 s" in (refusal(at(now - 90_000 * 10**9, now), now) or "")
    assert MAX_AHEAD_NS == 60 * 10**9 and MAX_DURATION_NS == 86_400 * 10**9


def test_a_firing_suppressed_as_busy_takes_no_slot_of_its_rules_minute() -> None:
    counts = IncidentCounts()
    admission = Admission(counts, max_captures=1)
    rule = Rule("once", SpanCondition("checkout", 1), max_per_minute=1)
    firing = Firing("once", 1, time.time_ns(), time.time_ns(), "why")
    assert not admission.admit(firing, rule, under_way=1)
    assert admission.busy == 1 and counts.suppressed == {"once": 1}
    assert admission.admit(firing, rule, under_way=0), "its minute's one slot is still free"
    assert not admission.admit(firing, rule, under_way=0)
    assert counts.suppressed == {"once": 2} and admission.busy == 1


class FailingFiles(IncidentFiles):
    """Incidents files that cannot begin an incident, whose failed record is written once the test says so."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, max_count=10, max_bytes=10**6)
        self.writing, self.go = threading.Event(), threading.Event()

    def begin(self, record: dict[str, Any]) -> None:
        raise OSError(28, "No space left on device")

    def fail(self, record: dict[str, Any], reason: str) -> dict[str, Any]:
        self.writing.set()
        assert self.go.wait(DEADLINE_S)
        return super().fail(record, reason)


def test_an_incident_is_counted_failed_only_once_its_failed_record_is_written_and_it_is_no_longer_pending(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        files = FailingFiles(tmp_path)
        store = Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
        engine = IncidentEngine(store, Registry(), None, files, RuleSet(()), 10**6)  # type: ignore[arg-type]
        now = time.time_ns()
        incident_id = engine.fire(Firing("slow", 1, now, now, "why"), Rule("slow", SpanCondition("checkout", 1)))
        assert incident_id is not None
        await _until(files.writing.is_set)
        assert engine.counts.failed == {} and incident_id in engine.under_way, "its record is not written yet"
        files.go.set()
        await _until(lambda: engine.counts.failed == {"slow": 1})
        assert incident_id not in engine.under_way
        [record] = files.records()
        assert record["id"] == incident_id and record["status"] == "failed" and "No space" in record["failure"]
        await engine.stop()

    asyncio.run(run())


class HeldWatch(RuleWatch):
    """A real watch whose first step that sees stored events waits for the test (``go``) before it reads them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stepping, self.go = threading.Event(), threading.Event()
        self.steps = 0

    def step(self, segments: Iterable[Any], kept: Mapping[int, int] | None = None) -> list[Firing]:
        segments = list(segments)
        if not self.go.is_set() and any(segment.events for _, segment in segments):
            self.stepping.set()
            self.go.wait(DEADLINE_S)
        try:
            return super().step(segments, kept)
        finally:
            self.steps += 1


def test_segments_that_leave_while_a_step_reads_them_count_only_what_it_left_unread_in_the_stats(
    tmp_path: Path,
) -> None:
    # The step runs on a worker thread while the event loop stores and publishes: the segments its snapshot pinned
    # leave, past the hold's bound, before it reads half of the first.
    async def run() -> None:
        store, registry = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES), Registry()
        client = Stream(store, registry.known(Hello(100, "h", "proc", "i1", "boot", 1, 2, "test")).uid)
        watch = HeldWatch(SLOW, Limits(), max_step_bytes=MIN_SEGMENT_BYTES // 2)  # (met by no span sent)
        files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
        engine = IncidentEngine(
            store, registry, None, files, SLOW, MIN_SEGMENT_BYTES // 2, make_watch=lambda rules: watch
        )  # type: ignore[arg-type]  # (nothing fires: no viewer needed)
        await engine.start()
        try:
            while store.segment_count < 3:
                client.send(*[(SPAN, "slow", 5, {"pad": "x" * 100})] * 20)
            await _until(watch.stepping.is_set)
            for segment in store.stored([client.owner])[:-1]:
                store.published(segment)
            steps = watch.steps
            watch.go.set()
            await _until(lambda: watch.steps >= steps + 2)  # (the step that read, and one that saw them gone)
            stats = engine.stats()
            assert 0 < stats["watch_hold_dropped_events"] == stats["unread_events"], stats
        finally:
            watch.go.set()
            await engine.stop()

    asyncio.run(run())


class LoopBusyWatch(SteppedWatch):
    """A watch whose steps are quick but keep the event loop busy meanwhile for ``busy_s`` (as ingest keeps a flooded
    collector's loop), so that each step's await ends that late; it notes when each step began."""

    def __init__(self, loop: asyncio.AbstractEventLoop, busy_s: float) -> None:
        super().__init__([])
        self.loop, self.busy_s = loop, busy_s
        self.began: list[float] = []

    def step(self, segments: Iterable[Any], kept: Mapping[int, int] | None = None) -> list[Firing]:
        self.began.append(time.monotonic())
        busy = threading.Event()

        def keep_busy() -> None:
            busy.set()
            time.sleep(self.busy_s)  # (the loop's thread at work: the step's result waits for it)

        self.loop.call_soon_threadsafe(keep_busy)
        busy.wait(DEADLINE_S)
        self.steps += 1
        return []


def test_the_watch_is_paced_by_what_its_steps_take_not_by_how_late_the_busy_loop_takes_them_back(
    tmp_path: Path,
) -> None:
    # The pause after a step was 19 times the whole await of it, the time the busy loop took to take its result back
    # included: a loaded collector's watch stepped every few seconds (its steps taking milliseconds), and its rules
    # fired seconds late.
    async def run() -> None:
        busy_s = 0.5
        watch = LoopBusyWatch(asyncio.get_running_loop(), busy_s)
        engine = _engine(tmp_path, watch, SLOW)
        await engine.start()
        try:
            await _until(lambda: watch.steps >= 3)
        finally:
            await engine.stop()
        gaps = [later - earlier for earlier, later in zip(watch.began, watch.began[1:], strict=False)]
        assert max(gaps) < busy_s + 2.0, f"steps {gaps} s apart, each taking milliseconds"

    asyncio.run(run())
