"""Drains made to run out of memory (CPython's own fault injection, ``_testcapi.set_nomemory``): one allocation of a
drain failed, then the next drain, and what the two handed over and counted dropped. Each such test runs in a process
of its own (``run_alone``): the injection fails the nth allocation of whichever thread makes it, and one of another
thread's (the flusher's, in its lock's wait) once left a test process's flusher deadlocked for every test after; a
switch interval of a minute there keeps the other threads off the interpreter while an allocation is made to fail."""

from __future__ import annotations

from typing import Any

import alone
from ringtrace.wire.call_records import event_count

__all__ = ["drains_with_a_failure", "run_alone"]


def run_alone(test_file: str, function: str, **environment: str) -> None:
    """``alone.run_alone``, with the switch interval of a minute said above."""
    alone.run_alone(test_file, function, switch_interval_s=60.0, **environment)


def drains_with_a_failure(timeline: Any, n: int) -> tuple[int, int, bool]:
    """Drain ``timeline`` with the ``n``-th allocation from here made to fail, then again: the events the two drains
    handed over, those they counted dropped, and whether the first one raised (MemoryError)."""
    import _testcapi  # type: ignore[import-not-found]  # (CPython's test module)

    _testcapi.set_nomemory(n, n + 1)
    try:
        first = timeline.drain()
    except MemoryError:
        first = None
    finally:
        _testcapi.remove_mem_hooks()
    second = timeline.drain()
    drains = [drained for drained in (first, second) if drained is not None]
    handed = sum(event_count(run) for drained in drains for _, run in drained.runs)
    return handed, sum(drained.dropped for drained in drains), first is None
