"""The threads that read stored segments for snapshots and pops, off the event loop, and how readers share the GIL
with it.

Fewer threads than cores: the C writer of Chrome JSON runs without the GIL, so a snapshot's thread competes with the
event loop for a core rather than for the GIL, and four snapshots on as many threads would leave ingest and HTTP a
share of the cores instead of one of their own.

The GIL: a reader that runs Python (many small frames, a Perfetto trace, events the C writer leaves) holds it, and
the event loop, which takes it back several times a loop turn, waits each time until the reader is asked to let go
(the switch interval). ``let_the_loop_in`` has a reader let go of its own every millisecond instead, which bounds the
loop's lag to about that (40 ms became under 2 ms on a 20,000-frame store, for a few % more time reading). A lower
CPU priority for the readers made it worse: a reader holding the GIL waited for a core, and the loop for it.

Letting go costs a trip through the scheduler (``time.sleep(0)``), which on a busy machine gives the core away for a
few milliseconds each time: a reader whose C writer has just let go of the GIL for a frame says so (``let_go``), and
does not let go again before another ``YIELD_EVERY_S`` of holding it.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Final

__all__ = ["YIELD_EVERY_S", "let_go", "let_the_loop_in", "reader_pool"]

#: How long a reader runs Python at most before it lets the event loop take the GIL.
YIELD_EVERY_S: Final = 0.001

_last = threading.local()


def reader_pool() -> ThreadPoolExecutor:
    """A pool of one thread fewer than the cores this process may use (at least one)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return ThreadPoolExecutor(max(cores - 1, 1), thread_name_prefix="ringtrace-reader")


def let_the_loop_in() -> None:
    """Let go of the GIL for a moment if this thread has run ``YIELD_EVERY_S`` since it last did (a waiting event
    loop takes it at once, instead of after the switch interval); call it often from a reading loop."""
    now = time.perf_counter()
    if now - getattr(_last, "at", 0.0) >= YIELD_EVERY_S:
        _last.at = now
        time.sleep(0)  # releases the GIL, even for no time


def let_go() -> None:
    """This thread has just let go of the GIL (a C writer that ran without it, the loop free to take it meanwhile):
    ``let_the_loop_in`` counts from now."""
    _last.at = time.perf_counter()
