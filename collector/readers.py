"""The threads that read stored segments for snapshots, pops, live tails and ``/sources``, off the event loop.

Fewer threads than cores, and at a lower CPU priority: the C writer of Chrome JSON runs without the GIL, so a
snapshot's thread competes with the event loop for a core rather than for the GIL, and four snapshots on as many
threads would leave ingest and HTTP a share of the cores instead of one of their own. A lower priority (Linux
``nice``, per thread) lets the scheduler run the event loop first whenever it has work.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Final

__all__ = ["NICENESS", "reader_pool"]

#: How much lower the readers' CPU priority is than the event loop's.
NICENESS: Final = 10


def reader_pool() -> ThreadPoolExecutor:
    """A pool of one thread fewer than the cores this process may use (at least one)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return ThreadPoolExecutor(max(cores - 1, 1), thread_name_prefix="ringtrace-reader", initializer=_lower_priority)


def _lower_priority() -> None:
    # On Linux a thread id names the thread alone; elsewhere this would renice the whole process, so it is skipped.
    if hasattr(os, "setpriority") and hasattr(threading, "get_native_id") and os.uname().sysname == "Linux":
        with contextlib.suppress(OSError):
            current = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(current + NICENESS, 19))
