"""ns per call of the recording model (issue 6's targets): each call beside its baseline, interleaved, in one run.

Variants, each a loop of N calls, on a timeline whose one listener keeps nothing and which nothing drains during a
loop (recording only; the benchmark drains it between rounds), except where it says unobserved:

  empty call (3 args)    ``noop3(10, 20, 3)``, ``def noop3(a, b, c): pass``: the baseline of the next
  disabled message       ``log(10, 20, 3)``, a message of priority debug on a timeline at info
  empty call (1 arg)     ``noop1("paint")``, ``def noop1(a): pass``: the baseline of the next two (a plain function
                         of the same arity: ``*args, **kwargs`` would cost it a tuple and a dict, and hide the gap)
  unobserved marker      ``tl.marker("paint")`` on a timeline with no listener
  unobserved scope       ``with tl.scope("work"): pass`` on a timeline with no listener
  floor recorder         ``append((perf_counter_ns(), 10, 20, 3))``: the baseline of the next
  enabled message        ``log(10, 20, 3)``, priority info
  dataclass + append     ``append(Packet(size=1500, proto="udp", flags=3))``, Packet a plain @dataclass
  typed push             ``tl.push(Packet(size=1500, proto="udp", flags=3))``, Packet a ringtrace Event (u16 str u8)
  floor span             ``with FloorSpan(append, "work"):`` (as bench_span)
  source open/close      ``src.open(); src.close()``
  scope, instant         ``with tl.scope("work"):`` and ``tl.instant("tick")``, for reference
  floor instant          ``append(("tick", monotonic_ns()))``
  plain call             ``work()``, ``def work(): pass``: the baseline of the next two
  traced call            ``traced_work()``, ``work`` under ``@ringtrace.client.recording.traced(timeline=tl)``
  viztracer call         ``work()`` while viztracer's tracer runs (``VizTracer(verbose=0)``, started and stopped
                         around the loop, its buffer cleared between rounds); skipped when viztracer is not installed

GC stays enabled. Ratios are of median wall ns per call; for ``@traced`` against viztracer, of what each adds to the
plain call.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from _common import FloorSpan, ParkedListener, bench_main, interleave, median, table, verdict
from ringtrace.client import Event, Timeline, string, traced, u8, u16
from ringtrace.client.delivery.flusher import FLUSHER

_perf = time.perf_counter_ns
_now = time.monotonic_ns

#: (variant, baseline, target ratio)
TARGETS = [
    ("disabled message", "empty call (3 args)", 1.5),
    ("unobserved marker", "empty call (1 arg)", 1.5),
    ("unobserved scope", "empty call (1 arg)", 2.0),
    ("enabled message", "floor recorder", 1.5),
    ("typed push", "dataclass + append", 1.5),
    ("source open/close", "floor span", 1.3),
    ("scope", "floor span", 1.3),
    ("instant", "floor instant", 1.3),
]


class Packet(Event):
    size: u16
    proto: string
    flags: u8


@dataclass
class PlainPacket:
    size: int
    proto: str
    flags: int


def noop3(a: Any, b: Any, c: Any) -> None:
    pass


def noop1(a: Any) -> None:
    pass


def work() -> None:
    pass


#: @traced against viztracer: what each adds to a plain call, as a ratio.
TARGET_TRACED_RATIO = 1.0


def bench(n: int, rounds: int) -> int:
    tl = Timeline("model", [ParkedListener()], max_buffered_events=2 * n)  # a round fits: nothing refused
    FLUSHER.unregister(tl)
    unobserved = Timeline("unobserved")
    enabled = tl.message("engine", "info", "processed $tcp, $udp, and $other")
    disabled = tl.message("engine", "debug", "detail $tcp, $udp, and $other")
    src = tl.source("GPU queue")
    traced_work = traced(timeline=tl)(work)
    sink: list[Any] = []
    try:
        from viztracer import VizTracer

        tracer: Any = VizTracer(verbose=0)
    except ImportError:
        tracer = None

    def timed(body: Callable[[], None]) -> Callable[[], float]:
        def run() -> float:
            t0 = _perf()
            body()
            elapsed = (_perf() - t0) / n
            sink.clear()
            tl.drain()
            if tracer is not None:
                tracer.clear()
            return elapsed

        return run

    def empty_call3() -> None:
        for _ in repeat(None, n):
            noop3(10, 20, 3)

    def empty_call1() -> None:
        for _ in repeat(None, n):
            noop1("paint")

    def disabled_message() -> None:
        log = disabled
        for _ in repeat(None, n):
            log(10, 20, 3)

    def unobserved_marker() -> None:
        marker = unobserved.marker
        for _ in repeat(None, n):
            marker("paint")

    def unobserved_scope() -> None:
        scope = unobserved.scope
        for _ in repeat(None, n):
            with scope("work"):
                pass

    def floor_recorder() -> None:
        append = sink.append
        for _ in repeat(None, n):
            append((_perf(), 10, 20, 3))

    def enabled_message() -> None:
        log = enabled
        for _ in repeat(None, n):
            log(10, 20, 3)

    def dataclass_append() -> None:
        append = sink.append
        for _ in repeat(None, n):
            append(PlainPacket(size=1500, proto="udp", flags=3))

    def typed_push() -> None:
        push = tl.push
        for _ in repeat(None, n):
            push(Packet(size=1500, proto="udp", flags=3))

    def floor_span() -> None:
        append = sink.append
        for _ in repeat(None, n):
            with FloorSpan(append, "work"):
                pass

    def source_open_close() -> None:
        opened, closed = src.open, src.close
        for _ in repeat(None, n):
            opened()
            closed()

    def scope() -> None:
        for _ in repeat(None, n):
            with tl.scope("work"):
                pass

    def floor_instant() -> None:
        append = sink.append
        for _ in repeat(None, n):
            append(("tick", _now()))

    def instant() -> None:
        for _ in repeat(None, n):
            tl.instant("tick")

    def plain_call() -> None:
        for _ in repeat(None, n):
            work()

    def traced_call() -> None:
        for _ in repeat(None, n):
            traced_work()

    def viztracer_call() -> None:
        tracer.start()
        for _ in repeat(None, n):
            work()
        tracer.stop()

    bodies = {
        "empty call (3 args)": empty_call3,
        "disabled message": disabled_message,
        "empty call (1 arg)": empty_call1,
        "unobserved marker": unobserved_marker,
        "unobserved scope": unobserved_scope,
        "floor recorder": floor_recorder,
        "enabled message": enabled_message,
        "dataclass + append": dataclass_append,
        "typed push": typed_push,
        "floor span": floor_span,
        "source open/close": source_open_close,
        "scope": scope,
        "floor instant": floor_instant,
        "instant": instant,
        "plain call": plain_call,
        "traced call": traced_call,
    }
    if tracer is not None:
        bodies["viztracer call"] = viztracer_call
    results = interleave({name: timed(body) for name, body in bodies.items()}, rounds=rounds, warmup=1)
    wall = {name: median(values) for name, values in results.items()}
    print(
        table(
            ["variant", "ns/call (median)", "min"],
            [(name, wall[name], min(results[name])) for name in bodies],
            title=f"bench_model: N={n:,} per round, {rounds} interleaved rounds (+1 warm-up)",
        )
    )
    print()
    rows = []
    for variant, baseline, limit in TARGETS:
        ratio = wall[variant] / wall[baseline]
        rows.append((f"{variant} / {baseline}", f"{ratio:.2f}x", f"<= {limit}x  {verdict(ratio <= limit)}"))
    if tracer is not None:
        added = wall["traced call"] - wall["plain call"]
        viz_added = wall["viztracer call"] - wall["plain call"]
        ratio = added / viz_added
        rows.append(
            (
                f"@traced adds / viztracer adds ({added:.0f} / {viz_added:.0f} ns)",
                f"{ratio:.2f}x",
                f"<= {TARGET_TRACED_RATIO}x  {verdict(ratio <= TARGET_TRACED_RATIO)}",
            )
        )
    print(table(["ratio (medians)", "value", "target"], rows))
    if tracer is None:
        print("viztracer is not installed (pip install -e '.[bench]'): @traced was not measured against it")
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, n=200_000, rounds=7, quick=(20_000, 3)))
