"""The rules watched on what is stored (``RuleWatch.step``) with no rules and with 50, against the ingest's scan of
the same frames, in one run.

A store is filled once, in process, with the streams of 4 processes through the client's own stream encoder: web
requests (a server span of one of 20 routes carrying a trace id, three child spans, an instant, a ``queue depth``
counter and an info message each; one request in 1,000 ends with error status, one in 1,000 logs an error message,
one in 1,000 has a queue deeper than 990), in frames of up to ``--frame-events`` events (2,500: a busy streamer's).
Then interleaved rounds time, in CPU time of the thread that runs them:

  scan        the ingest's check and index of the same EVENTS frames (``scan_events``: C where built), where ingest
              reads them (a buffer of the frames one after another)
  0 rules     a fresh ``RuleWatch`` of no rules stepping once over every stored segment (nothing to judge: it skips)
  50 rules    the same with 50 rules: 30 span rules (20 by route, >= 200 ms; 10 globs), 5 message rules, 5 counter
              rules, 5 OTLP error rules, 5 ``tl.incident`` rules; how many fired is printed, and how many
              were made (past a rule's ``max_per_minute`` in a step, they are counted, not made). Its first pass in C
              (``match_run``: a run of frames a call) and the rules' verdicts on its candidates (``rule_verdicts``)
              run without the GIL: the part of its time outside them (the GIL held: what it can take from ingest's
              event loop when a core is free for the worker thread) is printed apart, and how many candidates Python
              judged.

Reported: events/s and CPU ns per event of each, as a ratio of the scan's. What ingest costs a whole event (socket
reads, the scan, the store's bookkeeping) is ``bench_ingest_cpu.py``'s figure (CPU per event, large frames); give it
with ``--ingest-ns-per-event`` for the target: 50 rules' GIL-held time <= 10% of ingest's CPU per event (a collector
that watches 50 rules keeps >= 90% of its ingest throughput where the worker thread has a core), and the whole
of their CPU time set beside it (what they cost where it has none).
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from typing import Any

from _common import bench_main, interleave, median, table, verdict
from ringtrace.collector.incidents import watch as watch_module
from ringtrace.collector.incidents.frame_match import ACCELERATED, match_frame, match_run
from ringtrace.collector.incidents.rule_verdicts import rule_verdicts
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
from ringtrace.collector.ingest.scan import scan_events
from ringtrace.collector.read.frame_walk import ProcessView
from ringtrace.collector.store.ring import SegmentView, Store
from ringtrace.wire.frame_types import EVENTS_HEADER, FRAME_HEADER, FrameType
from ringtrace.wire.frames import Stats, encode
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import COUNTER, INSTANT, SPAN, THREAD_TRACK, KindRegistry, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder
from ringtrace.wire.stream_limits import Limits
from ringtrace.wire.table_frames import Strings, Track

TARGET = 0.10
PROCESSES = 4
EVENTS_PER_REQUEST = 7
MS = 1_000_000
MAX_FRAME_BYTES = 4 * 1024 * 1024
FLAGS = argparse.Namespace(frame_events=2500, ingest_ns_per_event=0.0)


def fifty_rules() -> RuleSet:
    rules: list[Any] = [SpanCondition(f"GET /item/{i}", 200 * MS) for i in range(20)]
    rules += [SpanCondition(glob, ms * MS) for glob, ms in (("db.*", 500), ("render*", 1000), ("checkout*", 200))]
    rules += [SpanCondition(glob, 100 * MS) for glob in ("POST *", "PUT *", "cache.?et", "auth*", "*payment*")]
    rules += [SpanCondition("slow-*", 0), SpanCondition("GET /admin*", 50 * MS)]
    rules += [MessageCondition("error", "app"), MessageCondition("fatal"), MessageCondition("warning", "net")]
    rules += [MessageCondition("error", "*", "*timeout*"), MessageCondition("error", "db")]
    rules += [CounterCondition("queue depth", above=990), CounterCondition("queue depth", below=1)]
    rules += [CounterCondition("memory*", above=1e9), CounterCondition("pool*", below=2), CounterCondition("errors")]
    rules += [OtlpErrorCondition(glob) for glob in ("GET /item/1*", "POST *", "db.*", "grpc.*", "checkout")]
    rules += [IncidentCallCondition(glob) for glob in ("payment*", "checkout*", "*corrupt*", "oom", "deadlock")]
    assert len(rules) == 50
    return RuleSet(tuple(Rule(f"rule {i}", condition) for i, condition in enumerate(rules)))


class Feeder:
    """One process's stream, encoded by the real encoder and stored as ingest stores it."""

    def __init__(self, store: Store, owner: int, frame_events: int) -> None:
        self.store, self.owner = store, owner
        hello = encode(Hello(100 + owner, "host", f"web-{owner}", f"i{owner}", "boot", 1, 2, "bench"))
        self.stream = store.open_stream(owner, hello)
        self.encoder = StreamEncoder(max_events_per_frame=frame_events, registry=KindRegistry())
        values = self.encoder.registry.register
        self.info = values("app", "message", (("what", "any"),), lambda v: (list(v), 0), "did $what", "info").id
        self.error = values("app", "message", (("what", "any"),), lambda v: (list(v), 0), "failed $what", "error").id
        self.track = TrackInfo(owner * 100, THREAD_TRACK, "main", owner)
        self.frames: list[bytes] = []
        for frame in self.encoder.prefix():
            self.feed(frame)

    def send(self, records: list[Any]) -> None:
        batch = self.encoder.encode(self.track, records)
        for frame in [*batch.control, *(frame for frame, _ in batch.events)]:
            self.feed(frame)
        self.store.commit(self.stream)

    def feed(self, frame: bytes) -> None:
        _, frame_type = FRAME_HEADER.unpack_from(frame)
        body = frame[FRAME_HEADER.size :]
        if frame_type == FrameType.EVENTS:
            _, _, track_id, count, first, last = EVENTS_HEADER.unpack_from(body)
            self.store.events(self.stream, track_id, count, first, last, frame)
            self.frames.append(frame)
        elif frame_type == FrameType.TRACK:
            track = Track.decode_body(body)
            self.store.session_frame(self.stream, frame, kind="track", track_id=track.track_id, ended=track.ended)
        elif frame_type == FrameType.STRINGS:
            kind = "strings_reset" if Strings.decode_body(body).reset else "strings"
            self.store.session_frame(self.stream, frame, kind=kind)
        else:
            kind = {FrameType.SCHEMA: "schema", FrameType.STATS: "stats"}[frame_type]
            self.store.session_frame(self.stream, frame, kind=kind)  # type: ignore[arg-type]


def fill(n: int, frame_events: int) -> tuple[Store, list[Feeder]]:
    """The store of about ``n`` events, and its feeders."""
    store = Store(1 << 30, 4 << 20)
    feeders = [Feeder(store, owner, frame_events) for owner in range(1, PROCESSES + 1)]
    rng = random.Random(36)
    clock = itertools.count(10**15, 10 * MS)
    for feeder in feeders:
        records: list[Any] = []
        for i in range(n // EVENTS_PER_REQUEST // PROCESSES):
            ts = next(clock)
            route = f"GET /item/{i % 20}"
            error = i % 1000 == 999
            args = {"trace_id": f"{rng.getrandbits(128):032x}", "span_id": f"{rng.getrandbits(64):016x}"}
            if error:
                args["status"] = "error"
            records += [SPAN, route, ts, ts + rng.randrange(5 * MS, 150 * MS), args]
            records += [SPAN, "db.query", ts + MS, ts + 2 * MS, {"rows": i % 17}]
            records += [SPAN, "render", ts + 3 * MS, ts + 4 * MS, None]
            records += [SPAN, "cache.get", ts + 5 * MS, ts + 5 * MS + 500, None]
            records += [INSTANT, "cache miss", ts + 6 * MS, ts + 6 * MS, None]
            depth = 995 if i % 1000 == 7 else rng.randrange(10, 900)
            records += [COUNTER, "queue depth", ts, ts, {"value": depth}]
            if i % 1000 == 499:
                records += [feeder.error, "", ts, ts, [f"request {i}"]]
            else:
                records += [feeder.info, "", ts, ts, [f"request {i}"]]
            if len(records) >= 5 * 8192:
                feeder.send(records)
                records = []
        if records:
            feeder.send(records)
    return store, feeders


def segments_of(store: Store) -> list[tuple[ProcessView, SegmentView]]:
    with store.snapshot() as pinned:
        return [(process(s.owner), s) for s in pinned.segments]


def process(owner: int) -> ProcessView:
    return ProcessView(owner, 100 + owner, 100 + owner, "host", f"web-{owner}", 0, Stats(0, 0), {})


def bench(n: int, rounds: int) -> int:
    store, feeders = fill(n, FLAGS.frame_events)
    segments = segments_of(store)
    events = sum(segment.events for _, segment in segments)
    frames = [frame for feeder in feeders for frame in feeder.frames]
    run = bytearray(b"".join(frames))
    room = len(frames) * 64
    run += bytes(room)
    top = len(run)
    tracks = {feeder.track.track_id for feeder in feeders}
    rules = fifty_rules()
    fired: list[int] = []
    made: list[int] = []
    asked: list[int] = []

    def scan() -> float:
        started = time.thread_time()
        position, end, seen = 0, top - room, 0
        while position < end:
            found = scan_events(run, position, end, MAX_FRAME_BYTES, tracks, top)
            assert found is not None
            seen += found[1]
            position = found[3]
        elapsed = time.thread_time() - started
        assert seen == events
        return elapsed

    first_pass_s = [0.0]

    def timed(first_pass: Any) -> Any:
        def timed_first_pass(*args: Any) -> Any:
            started = time.thread_time()
            try:
                return first_pass(*args)
            finally:
                first_pass_s[0] += time.thread_time() - started

        return timed_first_pass

    def watch(rule_set: RuleSet) -> tuple[float, float]:
        watcher = RuleWatch(rule_set, Limits(), max_step_bytes=1 << 40)
        watcher.step([])  # it began before any of them were stored: it reads them all
        first_pass_s[0], judged[0] = 0.0, 0
        started = time.thread_time()
        firings = watcher.step(segments)
        elapsed = time.thread_time() - started
        assert watcher.unread_events == watcher.undecodable_events == 0
        if rule_set.rules:
            fired.append(len(firings) + sum(watcher.take_surplus().values()))
            made.append(len(firings))
            asked.append(judged[0])
        # (the Python twin holds the GIL throughout)
        return elapsed, elapsed - first_pass_s[0] if ACCELERATED else elapsed

    judged = [0]
    candidate = RuleWatch._candidate

    def counted(*args: Any, **kwargs: Any) -> Any:
        judged[0] += 1
        return candidate(*args, **kwargs)

    watch_module.match_frame = timed(match_frame)
    watch_module.match_run = timed(match_run)
    watch_module.rule_verdicts = timed(rule_verdicts)
    RuleWatch._candidate = counted  # type: ignore[method-assign]
    variants = {
        "scan": lambda: (scan(), 0.0),
        "0 rules": lambda: watch(RuleSet()),
        "50 rules": lambda: watch(rules),
    }
    results = interleave(variants, rounds)
    scan_s = median([total for total, _ in results["scan"]])
    rows = []
    for name, values in results.items():
        seconds = median([total for total, _ in values])
        held = median([held for _, held in values]) / events * 1e9 if name != "scan" else None
        rows.append([name, events / seconds / 1e6, seconds / events * 1e9, seconds / scan_s, held])
    c_twin = "C" if ACCELERATED else "Python"
    title = f"{events:,} events in {len(frames):,} frames, {len(segments)} segments, medians of {rounds} rounds"
    headers = ["variant", "M events/s", "CPU ns/event", "x scan", "GIL held ns/event"]
    print(table(headers, rows, title=f"{title}; first pass in {c_twin}"))
    print(
        f"50 rules fired {fired[0]:,} times a pass (the workload's errors, deep queues and slow spans), "
        f"{made[0]:,} made (the rest past their rule's max_per_minute in the step: counted); "
        f"{asked[0]:,} candidates judged in Python"
    )
    total_ns = median([total for total, _ in results["50 rules"]]) / events * 1e9
    held_ns = median([held for _, held in results["50 rules"]]) / events * 1e9
    ingest_ns = FLAGS.ingest_ns_per_event
    if not ingest_ns:
        print("give --ingest-ns-per-event (bench_ingest_cpu.py, large frames) for the verdict")
        return 0
    share = held_ns / ingest_ns
    print(f"50 rules, GIL held: {held_ns:.1f} ns/event = {share:.2f}x ingest's {ingest_ns:.1f} CPU ns/event, "
          f"target <= {TARGET}x: {verdict(share <= TARGET)}")  # fmt: skip
    print(f"50 rules, all CPU: {total_ns:.1f} ns/event = {total_ns / ingest_ns:.2f}x ingest's (no target)")
    return 0


def own_flags() -> argparse.Namespace:
    """This benchmark's own flags, taken out of ``sys.argv`` before ``bench_main`` reads the common ones."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--frame-events", type=int, default=2500, help="events per EVENTS frame at most")
    parser.add_argument("--ingest-ns-per-event", type=float, default=0.0, help="bench_ingest_cpu.py's figure")
    flags, sys.argv[1:] = parser.parse_known_args()
    return flags


if __name__ == "__main__":
    FLAGS = own_flags()
    sys.exit(bench_main(bench, __doc__, 2_000_000, 5, (100_000, 1)))
