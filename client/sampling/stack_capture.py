"""A thread's Python stack as the sampler records it: a tuple of code locations ``(function, file, line)``, root
first, the same tuple object each time the same stack is met; and the name of the task each event loop runs.

Cost: the sampler walks every thread's frames at its rate, so a stack met before must cost little more than the walk.
The walk keys a stack on each frame's code object (its ``id``) and instruction offset: ints, cheap to hash (a code
object's own hash reads its contents; its line number needs a search of its line table). Only a stack never met is
turned into code locations, each location's line looked up once. The code objects keyed on are kept (in
``_locations``), so their ids cannot be reused while a key holds them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from types import CodeType, FrameType
from typing import Any, Final

__all__ = [
    "CodeLocation",
    "StackInterner",
    "leave_out_callers_of",
    "line_of",
    "running_task_names",
    "thread_clock_id",
    "thread_cpu_ns",
]

CodeLocation = tuple[str, str, int]
#: Stacks (and locations) remembered: past this the interner starts again (what a sample holds stays valid).
_MAX_STACKS: Final = 16_384
_MAX_LOCATIONS: Final = 65_536
#: Frames walked per stack at most (deeper recursion keeps its innermost frames).
MAX_DEPTH: Final = 512
#: The ids of code whose frames, and their callers', a stack leaves out (``leave_out_callers_of``); the code objects
#: themselves are kept alive by their functions.
_LEFT_OUT: Final[set[int]] = set()


def leave_out_callers_of(*codes: CodeType) -> None:
    """From now on, a stack stops below a frame of ``codes``: it, and the frames that called it, are left out. For
    ``ringtrace run``, whose own frames call the program's: the program's stacks then begin where they would under
    ``python``. Costs nothing per sample: only a stack met anew is read this far."""
    _LEFT_OUT.update(id(code) for code in codes)


class StackInterner:
    """Frames to interned stacks. Used by one thread (the sampler's) at a time."""

    __slots__ = ("_locations", "_stacks", "_tuples", "misses")

    def __init__(self) -> None:
        #: The walk's key (code id, offset, ...) -> the stack.
        self._stacks: dict[tuple[int, ...], tuple[CodeLocation, ...]] = {}
        #: (code id, offset) -> the code object (kept) and its location.
        self._locations: dict[tuple[int, int], tuple[CodeType, CodeLocation]] = {}
        #: Each stack once, so that equal stacks met by different keys are one object.
        self._tuples: dict[tuple[CodeLocation, ...], tuple[CodeLocation, ...]] = {}
        #: Stacks made anew (for the benchmark and tests).
        self.misses = 0

    def intern(
        self, frame: FrameType | None, _id: Any = id, _depths: range = range(MAX_DEPTH)
    ) -> tuple[CodeLocation, ...]:
        """The stack whose innermost frame is ``frame``, root first: the pure-Python pass's walk, the twin of the C
        pass's (``intern_walk``, given what ``speedups/stack_walk.c`` read). The walk is the cost of a stack met
        before: kept to three attribute reads a frame (the defaults bind names once)."""
        key: list[int] = []
        append = key.append
        start = frame
        for _ in _depths:
            if frame is None:
                break
            append(_id(frame.f_code))
            append(frame.f_lasti)
            frame = frame.f_back
        whole = tuple(key)
        stack = self._stacks.get(whole)
        if stack is not None:
            return stack
        # Met anew: walked again for the code objects, the key made of this walk (the thread may have run on).
        codes: list[CodeType] = []
        key.clear()
        while start is not None and len(codes) < MAX_DEPTH:
            codes.append(start.f_code)
            key += (id(start.f_code), start.f_lasti)
            start = start.f_back
        return self._miss(tuple(key), codes)

    def intern_walk(self, whole: tuple[int, ...], codes: tuple[CodeType, ...]) -> tuple[CodeLocation, ...]:
        """The stack the C walk read (``speedups.walk_stack``): ``whole`` is the key ``intern`` makes of the same
        frames (each frame's code id and offset, innermost first), ``codes`` their code objects."""
        stack = self._stacks.get(whole)
        if stack is not None:
            return stack
        return self._miss(whole, codes)

    def _miss(self, whole: tuple[int, ...], codes: Sequence[CodeType]) -> tuple[CodeLocation, ...]:
        self.misses += 1
        locations = self._locations
        if len(locations) >= _MAX_LOCATIONS or len(self._stacks) >= 4 * _MAX_STACKS:
            locations.clear()
            self._stacks.clear()
        path: list[CodeLocation] = []
        for code, offset in zip(codes, whole[1::2], strict=True):
            if id(code) in _LEFT_OUT:
                break
            known = locations.get((id(code), offset))
            if known is None:
                location = (_function_name(code), code.co_filename, line_of(code, offset))
                locations[(id(code), offset)] = (code, location)
            else:
                location = known[1]
            path.append(location)
        path.reverse()
        stack = tuple(path)
        tuples = self._tuples
        if len(tuples) >= _MAX_STACKS:
            tuples.clear()
            self._stacks.clear()
        stack = tuples.setdefault(stack, stack)
        self._stacks[whole] = stack
        return stack


def line_of(code: CodeType, offset: int) -> int:
    """The line of the instruction at byte ``offset`` of ``code``, as a frame there gives it (``f_lineno``, CPython's
    ``PyCode_Addr2Line``): the first line before the first instruction; 0 where the instruction has none."""
    if offset < 0:
        return code.co_firstlineno
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return line if line is not None else 0
    return 0


def _function_name(code: CodeType) -> str:
    """``Class.method`` where Python knows it (3.11 and later), else the function's name."""
    name: str = getattr(code, "co_qualname", code.co_name)
    return name


def running_task_names() -> dict[int, str]:
    """The name of the task each running event loop runs now, by the thread ident of the loop's thread (asyncio's
    table of current tasks, read without a lock: a copy of a dict is atomic under the GIL)."""
    current = getattr(sys.modules.get("asyncio.tasks"), "_current_tasks", None)  # (not imported: no loop runs)
    if not current:
        return _NONE
    names = {}
    for loop, task in list(current.items()):
        thread = getattr(loop, "_thread_id", None)
        if thread is not None and task is not None:
            try:
                names[thread] = task.get_name()
            except Exception:  # a task-like object of another event loop library
                continue
    return names


def thread_clock_id(native_id: int) -> int | None:
    """The id of the CPU clock of the OS thread ``native_id`` (see ``thread_cpu_ns``), for ``time.clock_gettime_ns``;
    None where there is none (not Linux)."""
    return (~native_id << 3) | _THREAD_SCHED_CLOCK if _LINUX else None


def thread_cpu_ns(native_id: int) -> int | None:
    """The CPU time the OS thread ``native_id`` has used, in ns; None where that cannot be read (not Linux, or the
    thread is gone). A thread whose CPU time did not move between two samples ran no code: its stack is as it was.
    Linux names a thread's CPU clock by its thread id (what ``pthread_getcpuclockid`` gives), which, unlike a
    ``pthread_t``, is safe to ask about a thread that has just ended: the call fails."""
    if not _LINUX:
        return None
    try:
        return time.clock_gettime_ns((~native_id << 3) | _THREAD_SCHED_CLOCK)
    except (OSError, OverflowError):
        return None


_LINUX: Final = sys.platform == "linux"
#: No running task (shared: a pass without event loops allocates nothing for them; never changed).
_NONE: Final[dict[int, str]] = {}
#: The low bits of a Linux per-thread CPU clock id: CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_SCHED.
_THREAD_SCHED_CLOCK: Final = 6
