"""ns per ``with tl.scope("x"):`` and per ``tl.instant("x")`` on a connected timeline, against the floors of a lock
and a list append, in one run; and how far the recorder's clock is from ``time.monotonic_ns()``.

Variants, each a loop of N iterations, interleaved round-robin over several rounds (GC on, as in a program):

  lock            ``with threading.Lock():`` (make a lock, take it, let it go: the issue's floor for a scope)
  held lock       ``with lock:`` on one lock made before the loop (for reference)
  scope           ``with tl.scope("x"):`` on the timeline ``connect()`` returns, streaming to a real collector
                  subprocess; the flusher and streamer threads drain, encode and send concurrently
  list.append     ``append("x")`` (the floor for an instant)
  instant         ``tl.instant("x")``, connected, as above

A connected variant's round ends with ``tl.flush()`` (untimed), so that no round's background work spills into the
next. Each round reports wall ns/op and the timing thread's own CPU ns/op (``time.thread_time_ns``): on a shared,
loaded machine the wall time is much of it other processes' (a core taken away mid-loop), where the CPU time counts
what the loop itself ran; the background threads' share of the GIL is in the wall column only.

Then the clock: the C recorder's ``clock_offset()`` (its clock read just before and just after CLOCK_MONOTONIC, each
less that reading: the offset lies between the two) taken ``--clock-samples`` times spread over ``--clock-s``
seconds, sleeping between batches (so that the recorder's anchor is read again many times over); the bound is the
largest offset, either way, among the samples whose two reads are at most 100 ns apart.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from itertools import repeat

import ringtrace.client
from _common import collector, interleave, median, recorder, table, verdict, wait_connected
from ringtrace.client.accelerator import speedups

_perf = time.perf_counter_ns
_cpu = time.thread_time_ns

Result = tuple[float, float]  # (wall ns/op, this thread's CPU ns/op)

#: The issue's target: scope / lock, and (reported) instant / list.append.
TARGET_SCOPE_RATIO = 1.2
#: A clock sample counts when its two reads of the recorder's clock are at most this far apart (ns).
TIGHT_NS = 100


def loops(n: int, tl: ringtrace.client.Timeline) -> dict[str, Callable[[], Result]]:
    held = threading.Lock()
    sink: list[str] = []

    def lock() -> Result:
        make = threading.Lock
        c0, t0 = _cpu(), _perf()
        for _ in repeat(None, n):
            with make():
                pass
        return (_perf() - t0) / n, (_cpu() - c0) / n

    def held_lock() -> Result:
        c0, t0 = _cpu(), _perf()
        for _ in repeat(None, n):
            with held:
                pass
        return (_perf() - t0) / n, (_cpu() - c0) / n

    def scope() -> Result:
        c0, t0 = _cpu(), _perf()
        for _ in repeat(None, n):
            with tl.scope("x"):
                pass
        elapsed, cpu = _perf() - t0, _cpu() - c0
        if not tl.flush(timeout_s=30):
            raise RuntimeError("flush was not acknowledged")
        return elapsed / n, cpu / n

    def append() -> Result:
        add = sink.append
        c0, t0 = _cpu(), _perf()
        for _ in repeat(None, n):
            add("x")
        elapsed, cpu = _perf() - t0, _cpu() - c0
        sink.clear()
        return elapsed / n, cpu / n

    def instant() -> Result:
        c0, t0 = _cpu(), _perf()
        for _ in repeat(None, n):
            tl.instant("x")
        elapsed, cpu = _perf() - t0, _cpu() - c0
        if not tl.flush(timeout_s=30):
            raise RuntimeError("flush was not acknowledged")
        return elapsed / n, cpu / n

    return {"lock": lock, "held lock": held_lock, "scope": scope, "list.append": append, "instant": instant}


def clock_offsets(samples: int, seconds: float) -> tuple[int, int, int, int]:
    """(tight samples, lowest low, highest high, widest interruption seen) of the recorder's clock less
    CLOCK_MONOTONIC, over ``seconds``."""
    if speedups is None or not hasattr(speedups, "clock_offset"):  # pure Python, or a build from before the TSC clock
        return 0, 0, 0, 0
    batches = 50
    low, high, tight, widest = 0, 0, 0, 0
    for _ in range(batches):
        for _ in range(samples // batches):
            before, after = speedups.clock_offset()
            widest = max(widest, after - before)
            if after - before <= TIGHT_NS:
                tight += 1
                low, high = min(low, before), max(high, after)
        time.sleep(seconds / batches)
    return tight, low, high, widest


def bench(n: int, rounds: int, clock_samples: int, clock_s: float) -> int:
    print(f"recorder: {recorder()}; Python {sys.version.split()[0]}")
    with collector() as coll:
        tl = ringtrace.client.connect(coll.tcp, process_name="bench_scope_floor")
        if wait_connected(tl) is None:
            print("could not connect to the collector", file=sys.stderr)
            return 1
        try:
            results = interleave(loops(n, tl), rounds=rounds, warmup=1)
            tight, low, high, widest = clock_offsets(clock_samples, clock_s)
        finally:
            tl.close(timeout_s=30)
    wall = {name: median([r[0] for r in values]) for name, values in results.items()}
    cpu = {name: median([r[1] for r in values]) for name, values in results.items()}
    print(
        table(
            ["variant", "wall ns/op", "min", "thread CPU ns/op", "min"],
            [
                (name, wall[name], min(r[0] for r in values), cpu[name], min(r[1] for r in values))
                for name, values in results.items()
            ],
            title=f"bench_scope_floor: N={n:,} per round, {rounds} interleaved rounds (+1 warm-up), medians",
        )
    )

    def ratio(of: str, to: str, target: float | None = None) -> tuple[str, str, str, str]:
        by_wall, by_cpu = wall[of] / wall[to], cpu[of] / cpu[to]
        aim = (
            ""
            if target is None
            else f"<= {target}x  wall {verdict(by_wall <= target)}, CPU {verdict(by_cpu <= target)}"
        )
        return (f"{of} / {to}", f"{by_wall:.2f}x", f"{by_cpu:.2f}x", aim)

    print()
    print(
        table(
            ["ratio (medians)", "wall", "thread CPU", "target"],
            [
                ratio("scope", "lock", TARGET_SCOPE_RATIO),
                ratio("scope", "held lock"),
                ratio("instant", "list.append"),
            ],
        )
    )
    source = getattr(speedups, "clock_source", lambda: "time.monotonic_ns()")()
    print(
        f"\nclock: {source}; recorder's clock less CLOCK_MONOTONIC over {clock_s:g} s, {tight:,} of {clock_samples:,}"
        f" samples read within {TIGHT_NS} ns: from {low} to {high} ns (an interrupted sample spanned {widest:,} ns)"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200_000, help="iterations per round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=9, help="measured rounds (default %(default)s)")
    parser.add_argument("--clock-samples", type=int, default=200_000, help="clock samples (default %(default)s)")
    parser.add_argument("--clock-s", type=float, default=5.0, help="seconds the clock is sampled over")
    parser.add_argument("--quick", action="store_true", help="N=20,000, 3 rounds, 1 s of clock: a smoke test")
    args = parser.parse_args()
    if args.quick:
        return bench(20_000, 3, 20_000, 1.0)
    return bench(args.n, args.rounds, args.clock_samples, args.clock_s)


if __name__ == "__main__":
    sys.exit(main())
