"""The lanes of one thread: the tracks its asyncio tasks record on, a task at a time each (``tracks.py`` says why).

A new task takes the first free lane of the first ``FIRST_FIT`` (each looked at: tidy rows where few tasks record at
once, and no more than that costs), else a lane from the free list, else a new one. A task that takes a lane past the
first ``FIRST_FIT`` puts it on the free list as it is done (a done callback, which its loop runs: about 1 us, what
looking at a dozen busy lanes costs), and a lane the drain frees (``Tracks.forget``) goes there too: so a new task
costs the same however many lanes are busy (a server holding thousands of connections open, each a task that
recorded once), where it looked at every busy lane, about 80 ns each (``benchmarks/bench_task_lanes.py --busy N``).
"""

from __future__ import annotations

import weakref
from collections.abc import Collection
from contextlib import suppress
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, cast

from ringtrace.wire.model import TrackInfo, new_track_id

if TYPE_CHECKING:
    from asyncio import AbstractEventLoop, Task

#: What a lane's buffer is (``tracks.TrackBuffer``).
B = TypeVar("B")

#: The lanes a new task looks through in order before the free list.
FIRST_FIT: Final = 32
#: The entries of tasks gone that ``Had`` holds at least before it looks for them.
_HAD_SLACK: Final = 256


class Had(dict[int, "tuple[weakref.ref[Task[Any]], Lane[Any]]"]):
    """The lane each task that had one had, by the task's id, the task held weakly: the entries of tasks gone are
    let go of as they grow past twice those of tasks alive the last time they were looked at (a look costs no more
    than the entries added since). Used under the timeline's lock."""

    __slots__ = ("bound", "on")

    def __init__(self, on: bool) -> None:
        super().__init__()
        self.bound = _HAD_SLACK
        #: Whether tasks are remembered: only once calls are traced (``Tracks.remember_tasks``), as only their
        #: placing asks (remembering costs a task about 1 us: ``benchmarks/bench_task_lanes.py --busy 100``).
        self.on = on

    def remember(self, task: Task[Any], lane: Lane[Any]) -> None:
        if not self.on:
            return
        self[id(task)] = (weakref.ref(task), lane)
        if len(self) > self.bound:
            for key in [key for key, (ref, _) in self.items() if ref() is None]:
                del self[key]
            self.bound = 2 * len(self) + _HAD_SLACK

    def lane_of(self, task: Task[Any]) -> Lane[Any] | None:
        """The lane ``task`` had last (None: none)."""
        entry = self.get(id(task))
        return None if entry is None or entry[0]() is not task else entry[1]


class Lane(Generic[B]):
    """A lane of a thread, the task that has it (None: free), and its buffer (None: none held now). The tasks that
    had it are remembered in ``had`` while they live: their traced calls, drained after another task took the lane or
    the drain freed it, go back to it (where the task's scopes are)."""

    __slots__ = ("buffer", "free", "had", "index", "loop", "task", "track")

    def __init__(self, track: TrackInfo, index: int, free: list[int], had: Had) -> None:
        self.track, self.index, self.free, self.had = track, index, free, had
        self.task: Task[Any] | None = None
        self.buffer: B | None = None
        #: The loop of ``task`` (read once: a busy lane looked at calls no method of its task's but ``done()``).
        self.loop: AbstractEventLoop | None = None

    def take(self, task: Task[Any], on_its_loop: bool) -> None:
        """``task`` has the lane now; ``on_its_loop``: called on its loop's thread as it runs, which may watch it
        (a done callback from another thread would not be thread-safe)."""
        held = self.task
        if held is not None and held is not task:
            self._remember(held)
        self.task, self.loop = task, task.get_loop()
        if on_its_loop and self.index >= FIRST_FIT:
            with suppress(Exception):  # (a task factory's odd task: the drain frees the lane, Tracks.forget)
                task.add_done_callback(self._done)

    def release(self) -> None:
        """Free, and the task that had it no longer kept alive by it."""
        task, self.task, self.loop = self.task, None, None
        if task is not None:
            self._remember(task)
        self._freed()

    def _remember(self, task: Task[Any]) -> None:
        self.had.remember(task, self)

    def _done(self, task: Task[Any]) -> None:
        if self.task is task:  # (not taken since by another: it is free now)
            self._freed()

    def _freed(self) -> None:
        if self.index >= FIRST_FIT:
            heappush(self.free, self.index)  # (may be there already: what is popped is looked at again)

    def taken_since(self) -> bool:
        """Whether the lane serves a task now."""
        return self.buffer is not None or self.task is not None


class ThreadLanes(Generic[B]):
    """A thread's lanes, in the order they were made, found by their tracks' ids; and the free list of those past
    ``FIRST_FIT`` (their indexes, a heap: the lowest first)."""

    __slots__ = ("by_track", "free", "had", "lanes")

    def __init__(self, remember: bool) -> None:
        self.lanes: list[Lane[B]] = []
        self.by_track: dict[int, Lane[B]] = {}
        self.free: list[int] = []
        #: The lane each task had, by the task's id, while the task lives (``remember``: from now on; see ``Had``).
        self.had = Had(remember)

    def lane_of(self, track: TrackInfo) -> Lane[B] | None:
        lane = self.by_track.get(track.track_id)
        return lane if lane is not None and lane.track is track else None

    def retrack(self, lane: Lane[B]) -> None:
        """``lane`` goes on under a track of its own, named as its track was: that track is left to a buffer whose
        task, pending on a closed loop, may still end scopes there as it is destroyed, which would overlap the spans
        of the lane's next tasks."""
        old = lane.track
        del self.by_track[old.track_id]
        lane.track = TrackInfo(new_track_id(), old.kind, old.name, old.thread_id, old.parent)
        self.by_track[lane.track.track_id] = lane

    def add(self, track: TrackInfo) -> Lane[B]:
        lane: Lane[B] = Lane(track, len(self.lanes), self.free, self.had)
        self.lanes.append(lane)
        self.by_track[track.track_id] = lane
        return lane

    def free_lane(self, task: Task[Any], busy: Collection[Task[Any]]) -> Lane[B] | None:
        """A lane ``task`` may record on (see the module): it has it already, or no task that may still record does
        (a task of ``task``'s loop, which runs, is on no closed loop). Not a lane of a task of ``busy``."""
        loop = task.get_loop()
        lanes, free = self.lanes, self.free
        first = min(len(lanes), FIRST_FIT)
        index = 0
        kept = []
        found = None
        while True:  # (one loop for both: a server's every request runs it)
            if index < first:
                lane = lanes[index]
                index += 1
            elif free:
                lane = lanes[heappop(free)]
            else:
                break
            held = lane.task
            if held is None or held is task:
                found = lane
                break
            if busy and held in busy:
                if lane.index >= first:
                    kept.append(lane.index)  # (its task's calls are being placed: free again for the next task)
                continue
            if held.done():
                found = lane
                break
            held_loop = lane.loop
            if held_loop is not loop and held_loop is not None and held_loop.is_closed():
                found = lane
                break
        for each in kept:
            heappush(free, each)
        return found

    def lane_it_had(self, task: Task[Any]) -> Lane[B] | None:
        """The lane ``task`` had until another task took it or a drain found it done and freed it (None: none)."""
        return cast("Lane[B] | None", self.had.lane_of(task))
