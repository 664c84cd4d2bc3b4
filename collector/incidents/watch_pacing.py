"""How long the rules' watch pauses between two steps: a small share of the time while ingest keeps the event loop
busy, much more while the loop has room and the watch is behind.

A step holds the GIL the event loop needs for part of its time (in C the first pass runs without it), so under a
flood the watch takes at most ``BUSY_SHARE`` of the wall time, and what it cannot read in time is counted unread,
rather than held up ingest. But a collector taking a few million events a second spends most of its time waiting for
them: held to that share there, the watch read at most ~80 MB/s of stored bytes (a step of 16 MiB, then a pause of
19 times its length), and left most of a moderate stream unread while a core idled. So while a step left bytes to
read (``behind``) and there is room, it takes up to ``ROOMY_SHARE``. There is room when, since the last step, the
loop's thread spent less than ``BUSY_LOOP`` of the wall time on the CPU, the pause before the step ended within
``LAG_BOUND_S`` of when it was due (a loop kept waiting for the GIL by the watch spends little CPU, but is late: the
lag says so, and the watch steps back). Not whether the machine has an idle core: under a flood of clients on the
same cores the watch must keep up with what the ring turns over, and a watch that waited for an idle core there
left a slow span unjudged until the ring had overwritten its window (``bench_incidents.py --no-rules``: 3 runs of 3).
The cores it takes there are the clients', which count what they cannot send. Without the C first pass (not built, or
``RINGTRACE_PURE_PYTHON=1``) all of a step holds the GIL: the watch keeps to ``BUSY_SHARE`` always (given more, at
150 MB/s it read no more, and doubled the collector's CPU and its HTTP API's slowest answers). Under a flood a step
reads what it can (what the ring overwrote is kept for it within a bound); what is left unread is counted, never
silent. (Paced by CPU time, the watch cost a saturated ingest far more than its share, pinning only what it read.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from ringtrace.collector.incidents.frame_match import ACCELERATED

__all__ = [
    "BUSY_LOOP",
    "BUSY_SHARE",
    "LAG_BOUND_S",
    "ROOMY_SHARE",
    "WATCH_INTERVAL_S",
    "WatchPacing",
]

#: How often the watch reads what was stored since, when it keeps up (or ingest keeps the loop busy).
WATCH_INTERVAL_S: Final = 0.1
#: The share of the time the watch's steps take at most while ingest keeps the loop busy.
BUSY_SHARE: Final = 0.05
#: The share they take at most while they are behind and the loop has room.
ROOMY_SHARE: Final = 0.75
#: The loop thread's share of CPU time since the last step from which it counts as busy.
BUSY_LOOP: Final = 0.5
#: How late the pause before a step may end for the loop to count as having room.
LAG_BOUND_S: Final = 0.005


class WatchPacing:
    """The pauses of one watch loop, on the event loop's thread (it reads that thread's CPU clock).

    Args:
        clock: wall time in seconds (monotonic).
        loop_cpu: the CPU time of the calling thread (the event loop's), in seconds.
        first_pass_in_c: a step's first pass runs in C, without the GIL (else it keeps to ``BUSY_SHARE``).
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        loop_cpu: Callable[[], float] = time.thread_time,
        first_pass_in_c: bool = ACCELERATED,
    ) -> None:
        self._clock, self._loop_cpu, self._roomy = clock, loop_cpu, first_pass_in_c
        self._since, self._cpu_since = clock(), loop_cpu()

    def pause_after(self, spent_s: float, behind: bool, late_s: float) -> float:
        """The pause before the next step, after one that took ``spent_s`` (its own time, not its waits), left bytes
        to read if ``behind``, and began ``late_s`` after its pause was due."""
        now, cpu = self._clock(), self._loop_cpu()
        busy = (cpu - self._cpu_since) / max(now - self._since, 1e-9)
        self._since, self._cpu_since = now, cpu
        if self._roomy and behind and busy < BUSY_LOOP and late_s < LAG_BOUND_S:
            return spent_s * (1 - ROOMY_SHARE) / ROOMY_SHARE
        return max(WATCH_INTERVAL_S, spent_s * (1 - BUSY_SHARE) / BUSY_SHARE)
