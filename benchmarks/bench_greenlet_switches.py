"""What function tracing adds to a greenlet switch: it follows each switch (a greenlet trace function, which puts the
open calls of the greenlet switched to in place of the other's, ``client/functions/greenlet_switches.py``).

Workload: two greenlets switching to each other N times each (a switch and back, in a loop), no other call.

Variants, ROUNDS rounds interleaved round-robin (the order rotating each round), one warm-up round:
  untraced    the workload alone.
  noop        a greenlet trace function that does nothing (``greenlet.settrace``): the floor of following switches.
  ringtrace   ``trace_functions(include=["nothing"])`` into a timeline with a memory listener: the tracer (the C one
              where built) runs and follows the switches, no call is recorded.

Figures: ns per switch, the thread's CPU time (``time.thread_time_ns``) over the 2 N switches, median of the rounds.

Run: ``python benchmarks/bench_greenlet_switches.py`` (``--n``, ``--rounds``, ``--quick``); needs greenlet.
"""

from __future__ import annotations

import time
from typing import Any

import greenlet
from _common import bench_main, interleave, median, table
from ringtrace.client import MemoryListener, Timeline, trace_functions

MAIN = greenlet.getcurrent()


def _pinger() -> None:
    while True:
        MAIN.switch()


def _switches(n: int) -> float:
    other = greenlet.greenlet(_pinger)
    start = time.thread_time_ns()
    for _ in range(n):
        other.switch()
    return (time.thread_time_ns() - start) / (2 * n)


def _noop(event: str, args: Any) -> None:
    pass


def bench(n: int, rounds: int) -> int:
    timeline = Timeline("bench", [MemoryListener()])

    def noop() -> float:
        before = greenlet.settrace(_noop)
        try:
            return _switches(n)
        finally:
            greenlet.settrace(before)

    def ringtrace() -> float:
        with trace_functions(include=["nothing"], timeline=timeline):
            return _switches(n)

    try:
        results = interleave({"untraced": lambda: _switches(n), "noop": noop, "ringtrace": ringtrace}, rounds)
    finally:
        timeline.close()
    base = median(results["untraced"])
    rows = [(name, median(values), median(values) - base) for name, values in results.items()]
    print(table(["variant", "ns/switch", "added ns/switch"], rows, title=f"{2 * n:,} switches, {rounds} rounds"))
    return 0


if __name__ == "__main__":
    raise SystemExit(bench_main(bench, __doc__, 100_000, 5, (2_000, 1)))
