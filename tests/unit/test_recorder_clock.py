"""The C recorder's clock: the TSC turned into CLOCK_MONOTONIC ns where the kernel's clocksource is the TSC, the
monotonic clock elsewhere; either way on time.monotonic_ns()'s clock (the pure-Python recorder's, which it stands in
for), never going back, and an end never before its start."""

from __future__ import annotations

import platform
import time
from pathlib import Path

import pytest
from ringtrace.client import MemoryListener, Timeline
from ringtrace.client.accelerator import speedups

pytestmark = pytest.mark.skipif(speedups is None, reason="the C accelerator is not in use in this process")

CLOCKSOURCE = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")
#: Generous: the measured agreement is tens of ns (benchmarks/bench_scope_floor.py); this only catches a wrong line.
AGREEMENT_NS = 1_000_000


def kernel_clocksource() -> str:
    try:
        return CLOCKSOURCE.read_text().strip()
    except OSError:
        return ""


def calibrated(deadline_s: float = 10.0) -> str:
    """The clock's source once the first rate can have been measured (10 ms after the module's start, at a read)."""
    assert speedups is not None
    end = time.monotonic() + deadline_s
    while speedups.clock_source() != "tsc" and time.monotonic() < end:
        speedups.clock_ns()
        time.sleep(0.005)
    return str(speedups.clock_source())


def test_the_clock_reads_the_tsc_where_the_kernel_does() -> None:
    reads_tsc = kernel_clocksource() == "tsc" and platform.system() == "Linux" and platform.machine() == "x86_64"
    assert calibrated(deadline_s=10.0 if reads_tsc else 0.05) == ("tsc" if reads_tsc else "monotonic")


def test_the_clock_is_the_monotonic_clock_within_the_bound() -> None:
    assert speedups is not None
    calibrated()
    for _ in range(20):  # across several anchors (read again every 100 ms)
        samples = [speedups.clock_offset() for _ in range(200)]
        low, high = min(samples, key=lambda sample: sample[1] - sample[0])  # the least interrupted
        assert low <= high
        assert low > -AGREEMENT_NS and high < AGREEMENT_NS, samples
        before = time.monotonic_ns()
        now = speedups.clock_ns()
        after = time.monotonic_ns()
        assert before - AGREEMENT_NS <= now <= after + AGREEMENT_NS
        time.sleep(0.011)


def test_the_clock_never_goes_back() -> None:
    assert speedups is not None
    calibrated()
    last = speedups.clock_ns()
    end = time.monotonic() + 0.5  # past the anchor's refresh several times
    while time.monotonic() < end:
        for _ in range(1000):
            now = speedups.clock_ns()
            assert now >= last
            last = now
        time.sleep(0.001)


def test_spans_and_instants_are_stamped_on_the_monotonic_clock() -> None:
    calibrated()
    memory = MemoryListener()
    tl = Timeline("clock", listeners=[memory])
    try:
        before = time.monotonic_ns()
        for _ in range(1000):
            with tl.scope("work"):
                pass
            tl.instant("tick")
        after = time.monotonic_ns()
        assert tl.flush(timeout_s=30)
        events = memory.events
        assert len(events) == 2000
        for event in events:
            assert event.dur_ns >= 0
            assert before - AGREEMENT_NS <= event.ts_ns <= event.ts_ns + event.dur_ns <= after + AGREEMENT_NS
        starts = [event.ts_ns for event in events]
        assert starts == sorted(starts)  # one thread: in the order recorded
    finally:
        tl.close()
