"""The sampler's cost (issue 34, item 4): its own CPU, and what it takes from a CPU-bound thread.

Setup: 8 threads each 50 Python frames deep, on a timeline with a listener that keeps nothing (so that
only sampling and the drain are measured; the flusher runs as usual).

  cpu    the sampler at HZ for SECONDS: the CPU time of the sampler's thread (``pthread_getcpuclockid``) / wall
         time, as % of one core; and its passes, samples, and stacks made anew (misses: the rest cost a dict lookup).
         Twice: the 8 threads idle (blocked 50 deep, as a server's pool waits) and busy (all spinning: the sampler
         then waits for the GIL at each pass, and may fall behind its rate; missed passes are skipped). Then
         WARM_PASSES passes back to back from the main thread: a pass's own cost with the caches warm.
  floor  a thread that only sleeps and wakes at HZ: what the kernel charges a wake-up here, which the sampler pays
         too (38 us a wake on a loaded 2-core VM, 0.4% of a core at 100 Hz).
  slow   one CPU-bound thread (50 frames deep) doing a fixed amount of work, timed by its own thread CPU time and by
         wall time, with the sampler off and on, ROUNDS rounds interleaved (off, on, off, on, ...): the ratio on/off
         of the medians (1.00 = no slowdown).

Run: ``python benchmarks/bench_sampler.py`` (``--hz``, ``--seconds``, ``--rounds``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from typing import Any

from ringtrace.client import Timeline
from ringtrace.client.sampling.sampler import Sampler

DEPTH = 50
THREADS = 8
#: Passes timed back to back after the run (the cost of a pass with the interpreter's caches warm).
WARM_PASSES = 1000


class _KeepNothing:
    """A listener that takes every run and keeps nothing."""

    def receive(self, track: Any, records: list[Any]) -> None:
        pass

    def lost(self, events: int) -> None:
        pass

    def retire(self, track: Any) -> None:
        pass

    def flush(self, timeout_s: float) -> bool:
        return True

    def close(self, timeout_s: float) -> bool:
        return True

    def after_fork(self) -> Any:
        return self


def _deep(depth: int, work: Any) -> Any:
    return _deep(depth - 1, work) if depth > 1 else work()


def _spin(stop: threading.Event) -> None:
    while not stop.is_set():
        total = 0
        for i in range(10_000):
            total += i * i


def _fixed_work() -> None:
    total = 0
    for i in range(3_000_000):
        total += i * i


def measure_cpu(hz: float, seconds: float, busy: bool) -> dict[str, float]:
    timeline = Timeline()
    timeline.add_listener(_KeepNothing())  # type: ignore[arg-type]
    stop = threading.Event()
    work = (lambda: _spin(stop)) if busy else (lambda: stop.wait(seconds + 60))
    threads = [threading.Thread(target=_deep, args=(DEPTH, work)) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    sampler = Sampler(timeline, hz)
    started = time.monotonic()
    sampler.start()
    time.sleep(seconds)
    sampler.stop(5.0)
    wall = time.monotonic() - started
    cpu_ns, passes, samples = sampler.cpu_ns, sampler.passes, sampler.samples
    warm = time.thread_time()
    for _ in range(WARM_PASSES):  # back to back, from this thread: caches warm
        sampler.sample_once()
    warm_us = (time.thread_time() - warm) / WARM_PASSES * 1e6
    stop.set()
    for thread in threads:
        thread.join()
    timeline.close(5.0)
    return {
        "core_percent": 100.0 * cpu_ns / 1e9 / wall,
        "passes": passes,
        "samples": samples,
        "warm_us": warm_us,
        "misses": sampler._interner.misses,
        "wall_s": wall,
    }


def measure_wake_floor(hz: float, seconds: float) -> float:
    """% of one core a thread that only sleeps till its next pass at ``hz`` takes (what the kernel charges for the
    wake-ups alone, on this machine), as the sampler's loop sleeps."""
    out: list[float] = []

    def run() -> None:
        cpu, started = time.thread_time(), time.monotonic()
        next_s = started
        while next_s < started + seconds:
            next_s += 1.0 / hz
            delay = next_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        out.append(100.0 * (time.thread_time() - cpu) / (time.monotonic() - started))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


def _timed_work() -> tuple[float, float]:
    """(thread CPU s, wall s) of one ``_fixed_work`` run 50 frames deep on a thread of its own."""
    out: list[tuple[float, float]] = []

    def run() -> None:
        cpu, wall = time.thread_time(), time.perf_counter()
        _deep(DEPTH, _fixed_work)
        out.append((time.thread_time() - cpu, time.perf_counter() - wall))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


def measure_slowdown(hz: float, rounds: int) -> dict[str, float]:
    timeline = Timeline()
    timeline.add_listener(_KeepNothing())  # type: ignore[arg-type]
    off: list[tuple[float, float]] = []
    on: list[tuple[float, float]] = []
    _timed_work()  # warm up
    for _ in range(rounds):
        off.append(_timed_work())
        sampler = Sampler(timeline, hz)
        sampler.start()
        on.append(_timed_work())
        sampler.stop(5.0)
    timeline.close(5.0)
    return {
        "cpu_ratio": statistics.median(c for c, _ in on) / statistics.median(c for c, _ in off),
        "wall_ratio": statistics.median(w for _, w in on) / statistics.median(w for _, w in off),
        "off_wall_s": statistics.median(w for _, w in off),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hz", type=float, default=100)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}, {THREADS} threads {DEPTH} frames deep, {args.hz:g} Hz")
    floor = measure_wake_floor(args.hz, min(args.seconds, 3.0))
    print(f"floor a thread that only wakes at {args.hz:g} Hz: {floor:.2f}% of one core (this machine's wake-up cost)")
    for busy in (False, True):
        cpu = measure_cpu(args.hz, args.seconds, busy)
        print(
            f"cpu   {'busy' if busy else 'idle'} threads: sampler thread {cpu['core_percent']:.2f}% of one core over "
            f"{cpu['wall_s']:.1f} s: {cpu['passes']:.0f} passes ({cpu['passes'] / cpu['wall_s']:.0f}/s), "
            f"{cpu['samples']:.0f} samples, {cpu['misses']:.0f} stacks made anew, "
            f"{cpu['core_percent'] * 10_000 / max(cpu['passes'] / cpu['wall_s'], 1):.0f} us a pass; "
            f"back to back (warm): {cpu['warm_us']:.0f} us a pass"
        )
    slow = measure_slowdown(args.hz, args.rounds)
    print(
        f"slow  one CPU-bound thread, sampling on/off (medians of {args.rounds}): thread CPU x{slow['cpu_ratio']:.3f}, "
        f"wall x{slow['wall_ratio']:.3f} (off: {slow['off_wall_s']:.3f} s)"
    )


if __name__ == "__main__":
    main()
