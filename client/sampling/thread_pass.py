"""One pass of the sampler over the program's threads: ``take_samples`` records a sample of each (``sampler.py`` calls
it ``hz`` times a second). The accelerator's ``take_samples`` (``speedups/samples.c``) is used where it is built; the
pure-Python one here is its twin, which defines the behaviour (tests hold the two to the same samples).

Cost: a thread whose CPU clock did not move since its last sample ran no code, so it keeps its last stack, without a
look at its frames. At 100 Hz most threads of a program are idle that way, and right after the sampler's sleep every
cache is cold: a pass that costs 10 us back to back costs several times that. The C pass does not even make
``sys._current_frames()``'s dict of every thread's frame: it walks the interpreter's thread states for their idents
and reads the frames of a thread that ran only.

The walk: the twin walks frame objects (``StackInterner.intern``); the C pass reads the frames without making frame
objects on 3.11 (``speedups/stack_walk.c``, then ``StackInterner.intern_walk``), where making one of another thread's
frame can run a garbage collection whose finalisers let that thread run on and free the frame being read (a segfault
in ``PyFrame_GetBack``). The twin, which runs where the accelerator is not built or with ``RINGTRACE_PURE_PYTHON=1``,
holds collections off during a pass on 3.11 instead (``_HOLD_OFF_COLLECTIONS``).
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ringtrace.client.accelerator import speedups
from ringtrace.client.delivery import unpatched
from ringtrace.client.recording.sources import Source

if TYPE_CHECKING:
    from ringtrace.client.sampling.stack_capture import StackInterner

__all__ = ["SampledThread", "run_passes", "run_passes_in_python", "take_samples", "take_samples_in_python"]


class SampledThread:
    """What the sampler keeps of a thread met: the ``threading.Thread`` it is (an ident is reused by a thread started
    after one ended), its track (None: not sampled, one of ringtrace's), its CPU clock (``thread_clock_id``), and at
    its last sample its CPU time (None: not read) and its stack. The C pass reads and sets these attributes by name."""

    __slots__ = ("clock", "cpu", "stack", "thread", "track")

    def __init__(self, thread: threading.Thread, track: Source | None, clock: int | None) -> None:
        self.thread = thread
        self.track = track
        self.clock = clock
        self.cpu: int | None = None
        self.stack: tuple[Any, ...] = ()


def _cpu_of(clock: int | None, _read: Any = time.clock_gettime_ns) -> int | None:
    """A thread's CPU time in ns by its clock, or None (no clock; the thread has just ended)."""
    if clock is None:
        return None
    try:
        return int(_read(clock))
    except (OSError, OverflowError):
        return None


#: On 3.11 a pass holds the garbage collector's automatic collections off. ``sys._current_frames()`` makes frame
#: objects while it holds the interpreter's lock on its thread list, and a collection set off there that frees a
#: ``threading.local`` takes that lock again (``local_clear``): the process hung for good (met in a test run; a script
#: with ``gc.set_threshold(1)`` hangs each time). A collection set off by the walk of another thread's frame objects
#: could run finalisers that let that thread free the frame being read. 3.12 and 3.13 do neither. (A program that
#: turns collections off in another thread during the microseconds of a pass has them turned on again after it.)
_HOLD_OFF_COLLECTIONS: Final = sys.version_info < (3, 12)


def take_samples_in_python(
    threads: dict[int, SampledThread],
    active: dict[int, threading.Thread],
    own: int,
    tasks: dict[int, str],
    now: int,
    kind: int,
    sampled_of: Callable[[int, threading.Thread | None], SampledThread | None],
    interner: StackInterner,
    wake: Callable[[], object],
) -> tuple[int, int]:
    """A sample of every thread that runs Python code but ``own`` (the sampler's), of ``kind`` at ``now``, named by
    ``tasks`` (its running task's name, "" for none). Returns how many were taken (refused for want of room too:
    counted by their track), and how many threads were met (``own`` too). ``threads`` is what is kept of each thread
    met (``SampledThread``, by ident; ``active`` is ``threading``'s own table, to tell a thread that took an ended
    one's ident), ``sampled_of`` meets a thread for the first time, ``interner`` walks a stack (``intern``, of the
    thread's frame object; the C twin reads the frames itself and calls ``intern_walk``), and ``wake`` wakes the
    flusher (a buffer half full)."""
    held_off = _HOLD_OFF_COLLECTIONS and gc.isenabled()
    if held_off:  # (see _HOLD_OFF_COLLECTIONS)
        gc.disable()
    try:
        frames = sys._current_frames()
        taken = 0
        for ident, frame in frames.items():
            sampled = threads.get(ident)
            if sampled is None or active.get(ident) is not sampled.thread:
                if ident == own:
                    continue
                sampled = sampled_of(ident, active.get(ident))
                if sampled is None:
                    continue
            track = sampled.track
            if track is None:
                continue
            # A thread that used no CPU since its last sample ran no code: the same stack, without the walk.
            cpu = _cpu_of(sampled.clock)
            if cpu is None or cpu != sampled.cpu:
                sampled.stack, sampled.cpu = interner.intern(frame), cpu  # (the clock read before the walk)
            # What ``ThreadSamples.record`` does, inline: a call less per thread and pass.
            sink, limit, wake_at, count_full = track._recording
            held = len(sink)
            if held < limit:
                sink.extend((kind, tasks.get(ident, "") if tasks else "", now, now, sampled.stack))
                if held == wake_at:
                    wake()
            else:
                count_full()
            taken += 1
        return taken, len(frames)  # (the frames go here: they keep their threads' locals alive)
    finally:
        if held_off:
            gc.enable()


def run_passes_in_python(
    interval_ns: int,
    stopping: bytearray,
    counts: array[int],
    flusher: Any,
    take_args: tuple[Any, ...],
    task_names: Callable[[], dict[int, str]],
    forget_ended: Callable[[], object],
) -> None:
    """The sampler's loop: a pass (``take_samples``) every ``interval_ns`` until ``stopping[0]`` is set (looked at
    every ``_STOP_LATENCY_S`` at least) or ``flusher.exiting`` (once the exit delivery has begun, a sample would land
    after its last sweep and count as dropped); passes missed (a long pause) are skipped, not run back to back.
    ``take_args`` are ``take_samples``' but the running tasks (``task_names()``, called only where asyncio's table of
    current tasks has any) and the time: threads, active, own, kind, sampled_of, interner, wake; ``forget_ended`` drops
    the threads that ended. ``counts``: passes, samples taken, and the CPU time of this thread in ns (every
    ``_OWN_CPU_EVERY`` passes, and as the loop ends). The C twin runs no bytecode between passes: at 100 Hz even the
    few lines of this loop cost 10-20 us a pass with the caches cold."""
    threads, active, own, kind, sampled_of, interner, wake = take_args
    interval_s = interval_ns / 1e9
    counts[2] = _own_cpu_ns()
    try:
        next_s = time.monotonic()
        while not stopping[0]:
            next_s += interval_s
            delay = next_s - time.monotonic()
            if delay < 0:  # fell behind (a long pause): skip the missed passes rather than run them back to back
                next_s -= delay
                delay = 0.0
            while delay > 0 and not stopping[0]:
                unpatched.sleep(min(delay, _STOP_LATENCY_S))  # (not gevent's, patched since: see unpatched.py)
                delay = next_s - time.monotonic()
            if stopping[0] or flusher.exiting:
                break
            tasks = task_names() if _tasks_running() else _NO_TASKS
            taken, met = take_samples(
                threads, active, own, tasks, time.monotonic_ns(), kind, sampled_of, interner, wake
            )
            counts[0] += 1
            counts[1] += taken
            if len(threads) > met - 1:  # threads ended: their tracks go
                forget_ended()
            if not counts[0] % _OWN_CPU_EVERY:
                counts[2] = _own_cpu_ns()
    finally:
        counts[2] = _own_cpu_ns()


def _tasks_running() -> bool:
    """Whether asyncio's table of current tasks has any (not imported: no loop runs)."""
    return bool(getattr(sys.modules.get("asyncio.tasks"), "_current_tasks", None))


def _own_cpu_ns() -> int:
    """This thread's CPU time in ns (0 where it cannot be read)."""
    try:
        return time.clock_gettime_ns(time.CLOCK_THREAD_CPUTIME_ID)
    except (AttributeError, OSError):
        return 0


#: The longest sleep between looks at the stop flag (``samples.c``: ``STOP_LATENCY_NS``).
_STOP_LATENCY_S: Final = 0.05
#: Passes between reads of the loop's own CPU time (a system call; read as it ends too).
_OWN_CPU_EVERY: Final = 16
#: No running task (shared, never changed).
_NO_TASKS: Final[dict[int, str]] = {}

#: The pass and the loop the sampler runs: the C twins where they are built.
take_samples: Callable[..., tuple[int, int]] = speedups.take_samples if speedups is not None else take_samples_in_python
run_passes: Callable[..., None] = speedups.run_passes if speedups is not None else run_passes_in_python
