"""Drains made to run out of memory (CPython's own fault injection, ``_testcapi.set_nomemory``): one allocation of a
drain failed, then the next drain, and what the two handed over and counted dropped. Each such test runs in a process
of its own (``run_alone``): the injection fails the nth allocation of whichever thread makes it, and one of another
thread's (the flusher's, in its lock's wait) once left a test process's flusher deadlocked for every test after; a
switch interval of a minute there keeps the other threads off the interpreter while an allocation is made to fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ringtrace.wire.call_records import event_count

__all__ = ["drains_with_a_failure", "run_alone"]


def run_alone(test_file: str, function: str, **environment: str) -> None:
    """Call ``function`` of the module ``test_file`` in a Python process of its own (``environment`` added to this
    one's), the tests' helpers importable, and fail with its error output if it does."""
    here = Path(test_file)
    paths = [str(here.parent), str(Path(__file__).parent)]
    program = f"import sys; sys.path[:0] = {paths!r}; sys.setswitchinterval(60); from {here.stem} import {function}"
    done = subprocess.run(
        [sys.executable, "-c", f"{program}; {function}()"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **environment},
    )
    assert done.returncode == 0, done.stderr[-4000:]


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
