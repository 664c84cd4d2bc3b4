"""A timeline's track buffers: one per recording thread, per asyncio lane and per source, and the tables that find
them.

asyncio: a task that records while its event loop runs gets a track of its own, a *lane* of its thread, so that the
spans of concurrent tasks never overlap on one track. A lane is taken by one task at a time, and is free again as soon
as that task is done: the next task of its thread to record takes it (``lane_for``; ``lanes.py``), so the number of
lanes follows the number of tasks alive at once, not the total, however many come and go between two passes of the
flusher. A lane has one buffer for the tasks it serves in turn (a server's requests, one task each): a task that takes
it notes the switch there (a ``TASK_SWITCH`` record, with the task's name) and records after it, so what the lane
shows of each task stays whole and in order, and a task costs its events and one record, not a buffer that the flusher
drains and forgets apart. The record keeps the task's name, not the task: a done task holds its result (a server's
response, and its request with it), and a server's requests kept alive until the next drain cost it more than the rest
of recording them together (their memory cold for each new request, where freed at once it is reused hot).

``Tracks`` does no locking of its own: its timeline calls it under the timeline's lock, except where a method says
otherwise. ``task_buffers`` is one dict for the life of the tracks (emptied, never replaced): the recorder reads it
without the lock on every event of a task.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable, Collection, Iterable
from itertools import islice
from operator import countOf
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, cast

from ringtrace.client.accelerator import speedups
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.recording.asyncio_watch import is_task
from ringtrace.client.recording.greenlet_lanes import GreenletLanes, is_greenlet
from ringtrace.client.recording.lanes import Lane, ThreadLanes
from ringtrace.client.recording.sources import Source
from ringtrace.client.recording.tasks_let_go import LetGo, let_go, name_of, not_collecting
from ringtrace.wire.arg_values import display_text
from ringtrace.wire.model import ASYNC_TRACK, RECORD_FIELDS, THREAD_TRACK, TrackInfo, new_track_id

if TYPE_CHECKING:
    from asyncio import Task

__all__ = [
    "NOT_RECORDING",
    "NOWHERE",
    "TASK_SWITCH",
    "EndedThread",
    "Record",
    "Recording",
    "Sink",
    "TrackBuffer",
    "Tracks",
    "only_tasks_own",
    "switches_in",
    "thread_alive",
]

#: One event as recorded: ``RECORD_FIELDS`` values, extended onto a flat buffer.
Record = tuple[int, object, int, int, dict[str, Any] | None]
#: What records into nothing (while nothing listens): its length is 0, so it always has room, and its extend keeps
#: nothing.
NOWHERE: deque[Any] = deque(maxlen=0)
#: The kind of the record a task adds to its lane's buffer as it takes the lane, its label the task: what follows is
#: that task's, up to the next such record. The drain takes these records out (``drain.py``); none reaches a listener.
TASK_SWITCH: Any = type("TaskSwitch", (), {"__slots__": (), "__repr__": lambda self: "TASK_SWITCH"})()


#: A buffer's room where a switch needs no event's beside it (a task's traced calls are no events of its buffer).
_NO_BOUND: Final = sys.maxsize


def switches_in(values: list[Any]) -> int:
    """The ``TASK_SWITCH`` records of ``values`` (a lane's flat records, or a run taken from them: never a segment of
    compact records), found in the kinds alone: a task there (a switch's label) is never compared, which would call a
    Task subclass's ``__eq__`` (one comparing by a key may raise for what is not a task)."""
    return countOf(islice(values, 0, None, RECORD_FIELDS), TASK_SWITCH)


class Sink(Protocol):
    """Where a recorder records: a buffer's flat list, or ``NOWHERE``."""

    def __len__(self) -> int: ...

    def extend(self, values: Iterable[Any], /) -> None: ...


#: How the Python recording paths record into one buffer, in one tuple (one lookup, unpacked at once): the sink, the
#: values it may hold (its timeline's ``max_buffered_events``), the values it holds when the next event wakes the
#: flusher (about half), and what counts an event refused for want of room.
Recording = tuple[Sink, int, int, Callable[[], object]]
#: Recording into nothing.
NOT_RECORDING: Recording = (NOWHERE, 1, -1, int)


#: What records into a buffer: a thread, a task, a source (weakly), or a task a lane no longer keeps alive.
Owner: TypeAlias = "threading.Thread | EndedThread | Task[Any] | weakref.ref[Any] | LetGo"


class TrackBuffer:
    """The events one track recorded and the flusher has not taken yet, ``RECORD_FIELDS`` values each.

    ``owner`` is the thread, or the asyncio task, that records into it. A lane's buffer serves its tasks in turn:
    ``first_task`` is the name of the task whose events come first in ``events`` (the drain moves it on as it takes
    them), and each task after it begins with a ``TASK_SWITCH`` record holding its name.
    """

    __slots__ = ("events", "first_task", "owner", "records", "track")

    def __init__(self, track: TrackInfo, owner: Owner) -> None:
        self.events: list[Any] = []
        #: The C recorder's account of the compact records in ``events`` (its instants' segments), or None.
        self.records = None if speedups is None else speedups.RecordBuffer()
        self.track = track
        self.owner: Owner = owner
        self.first_task: str | None = name_of(owner) if is_task(owner) else None  # (the name: see the top)

    def owner_alive(self) -> bool:
        owner = self.owner
        if is_task(owner):  # a task left pending on a closed loop never ends
            return not owner.done() and not owner.get_loop().is_closed()
        if isinstance(owner, weakref.ref):  # a source: alive while someone can still open it
            return owner() is not None
        return thread_alive(owner)  # a thread, or a task let go of (LetGo)


class Tracks:
    """The buffers of one timeline's threads, lanes and sources, the tables that find them, and the lanes."""

    def __init__(self) -> None:
        self.buffers: list[TrackBuffer] = []
        self.task_buffers: dict[Task[Any], TrackBuffer] = {}
        #: Each thread's lanes (by its track's id).
        self._lanes: dict[int, ThreadLanes[TrackBuffer]] = {}
        self._greenlet_lanes = GreenletLanes()
        self._sources: weakref.WeakValueDictionary[int, Source] = weakref.WeakValueDictionary()
        self._source_buffers: dict[int, TrackBuffer] = {}
        #: Set while ``lane_for`` runs (under the timeline's lock: only its thread sees it set). A garbage collection
        #: that records meanwhile (the gc integration) records on the thread's track, not on a second lane.
        self.taking_lane = False
        #: Whether the lanes remember the tasks that had them (``remember_tasks``).
        self._remembering = False

    def infos(self) -> list[TrackInfo]:
        """The tracks whose owners recorded and still may: a lane once, though the buffer of the task done on it may
        still wait for the flusher beside the next task's."""
        return list(dict.fromkeys(buffer.track for buffer in self.buffers))

    def thread_buffer(self, label: str | None) -> TrackBuffer:
        """This thread's buffer, created if needed, its track named after ``label`` and the thread."""
        thread = threading.current_thread()
        for buffer in self.buffers:
            if buffer.owner is thread:
                return buffer
        track = TrackInfo(new_track_id(), THREAD_TRACK, thread_track_name(thread, label), threading.get_native_id())
        created = TrackBuffer(track, thread)
        for buffer in self.buffers:  # a re-entrant call (a signal handler) may have made one meanwhile
            if buffer.owner is thread:
                return buffer
        self.buffers.append(created)
        return created

    def buffer_of_thread(self, thread: threading.Thread | EndedThread, label: str | None) -> TrackBuffer:
        """The buffer of ``thread``, created if needed: the one the thread's own events go to. A thread gone before
        it had one (function tracing drains the calls of threads that came and went between two drains) gets one now,
        which the next drain finds ended."""
        for buffer in self.buffers:
            owner = buffer.owner
            if owner is thread:
                return buffer
            # The same thread, ended since its buffer was made: the buffer is still its own (not forgotten yet). Its
            # OS id tells it from a thread before it that had its ident (idents are reused; a live thread's OS id is
            # its own). It may still be alive to ``threading``: a thread is ended to function tracing once
            # ``Thread._delete`` ran, and ``is_alive()`` stays True until its thread state is gone, a moment later (a
            # drain in between made the thread a second track).
            if (
                type(thread) is EndedThread
                and isinstance(owner, threading.Thread | EndedThread)
                and owner.ident == thread.ident
                and owner.native_id == thread.native_id
                and (thread.native_id is not None or not thread_alive(owner))
            ):
                return buffer
        track = TrackInfo(new_track_id(), THREAD_TRACK, thread_track_name(thread, label), thread.native_id or 0)
        created = TrackBuffer(track, thread)
        self.buffers.append(created)
        return created

    def lane_for(self, task: Task[Any], label: str | None, room: int, wake_at: int) -> TrackBuffer:
        """The buffer of ``task``'s lane of this thread's (``take_lane``)."""
        return cast("TrackBuffer", self.take_lane(task, label, room, wake_at).buffer)

    def thread_lanes(self, lane: Lane[TrackBuffer]) -> list[Lane[TrackBuffer]]:
        """The lanes of ``lane``'s thread, in order (a list that grows as the thread's tasks take new lanes)."""
        return self._lanes[lane.track.parent].lanes

    def take_lane(self, task: Task[Any], label: str | None, room: int, wake_at: int) -> Lane[TrackBuffer]:
        """``task``'s lane of this thread's, its buffer ``task``'s: the lane it has, else the first free one, else a
        new one. The buffer the done task before it left takes a switch to ``task`` where it has ``room`` (values)
        for the switch and an event; else it is left to the drain and the lane gets a new one (each holds what its
        bound allows, and the drain takes them in turn, in order): a scope ``task`` opens holds its buffer, and what
        it ends there must be ``task``'s, in a buffer the drain keeps. A switch added where the buffer holds
        ``wake_at`` values wakes the flusher, as an event added there would."""
        self.taking_lane = True
        try:
            lane = self._lane(task, self.thread_buffer(label).track)
            self._take_lane(lane, task, room, wake_at, True)
            return lane
        finally:
            self.taking_lane = False

    def _take_lane(
        self, lane: Lane[TrackBuffer], task: Task[Any], room: int, wake_at: int, on_its_loop: bool
    ) -> TrackBuffer:
        """``lane``'s buffer, ``task``'s now (see ``lane_for``; ``on_its_loop``: see ``Lane.take``)."""
        buffer = lane.buffer
        if buffer is not None and buffer.owner is not task:
            held = len(buffer.events)
            holder = lane.task
            if holder is not None and holder is not task and not holder.done():  # on a closed loop: see ``forget``
                self._lanes[lane.track.parent].retrack(lane)
                buffer = None
            elif held + 2 * RECORD_FIELDS > room:
                buffer = None  # (full: it stays in ``buffers`` until drained, and then ends; its lane goes on)
            else:
                self.task_buffers.pop(cast("Task[Any]", buffer.owner), None)  # done: it records no more
                buffer.events.extend((TASK_SWITCH, name_of(task), 0, 0, None))
                buffer.owner = task
                if held == wake_at:  # the recorders wake it as they add an event there: none will be added there
                    FLUSHER.wake()
        if buffer is None:
            buffer = lane.buffer = TrackBuffer(lane.track, task)
            self.buffers.append(buffer)
        lane.take(task, on_its_loop)
        self.task_buffers[task] = buffer
        return buffer

    def remember_tasks(self) -> None:
        """From now on the lanes remember the tasks that had them (``lanes.Had``), for ``call_tracks``: traced calls
        are drained (a call source was added)."""
        self._remembering = True
        for lanes in self._lanes.values():
            lanes.had.on = True

    def call_tracks(
        self, runs: list[tuple[threading.Thread | EndedThread, Task[Any] | None, Any]], label: str | None
    ) -> list[tuple[TrackInfo, Any]]:
        """The track of each run of calls traced on a thread, in a step of a task if not None: the task's lane (the one
        its scopes use, its buffer taken now if it has none), else the thread's; a greenlet's (a weak reference to
        it) on its lane (``greenlet_lanes.py``). The tasks and greenlets of ``runs`` keep their lanes from each
        other, though done by now: their calls may overlap in time."""
        busy = {task for _, task, _ in runs if task is not None}
        tracks = []
        for thread, task, run in runs:
            if task is None:
                tracks.append((self.buffer_of_thread(thread, label).track, run))
                continue
            if is_greenlet(task):
                parent = self.buffer_of_thread(thread, label).track
                tracks.append((self._greenlet_lanes.track_for(task, parent, busy), run))
                continue
            buffer = self.task_buffers.get(task)
            if buffer is not None:
                tracks.append((buffer.track, run))
                continue
            # Its lane's buffer made or taken now, as a scope of its would: the drain that finds the task done with
            # it empty ends the lane's track and frees the lane (and lets the task go).
            parent = self.buffer_of_thread(thread, label).track
            lanes = self._lanes.get(parent.track_id)
            had = None if lanes is None else lanes.lane_it_had(task)
            held = None if had is None else had.task
            if had is not None and held is not None and held is not task and (held in busy or not held.done()):
                # Its lane, taken since by a task that may record there now: taken once this one was done, so its
                # calls came before that task's spans there, overlapping none; the lane stays that task's.
                tracks.append((had.track, run))
                continue
            lane = had or self._lane(task, parent, busy)
            # (no wake, no done callback: the flusher runs this)
            tracks.append((self._take_lane(lane, task, _NO_BOUND, -1, False).track, run))
        return tracks

    def _lane(self, task: Task[Any], parent: TrackInfo, busy: Collection[Task[Any]] = ()) -> Lane[TrackBuffer]:
        """The lane of the thread of track ``parent`` that ``task`` may record on: the one it has, else a free one
        (not one of a task of ``busy``; see ``lanes.py``), else a new one."""
        lanes = self._lanes.get(parent.track_id)
        if lanes is None:
            lanes = self._lanes[parent.track_id] = ThreadLanes[TrackBuffer](self._remembering)
        lane = lanes.free_lane(task, busy)
        if lane is None:
            name = display_text(f"{parent.name} tasks [{len(lanes.lanes) + 1}]")
            lane = lanes.add(TrackInfo(new_track_id(), ASYNC_TRACK, name, parent.thread_id, parent.track_id))
        return lane

    def add_source(self, source: Source, recording: Callable[[list[Any]], Recording] | None) -> None:
        """Keep ``source``, and make it record into a buffer here as ``recording`` says, into nothing if None."""
        self._sources[source.track.track_id] = source
        self._attach_source(source, set(), recording)  # a new source has no buffer yet

    def attach_sources(self, recording: Callable[[list[Any]], Recording] | None) -> None:
        """Every source records into its buffer here (made anew if it was taken away) as ``recording`` says (how to
        record into a buffer: its bound may have changed), into nothing if None (nothing listens)."""
        if recording is None:
            self._source_buffers.clear()  # dead sources' entries too
        live = {id(b) for b in self.buffers}
        for source in list(self._sources.values()):
            self._attach_source(source, live, recording)

    def _attach_source(
        self, source: Source, live: set[int], recording: Callable[[list[Any]], Recording] | None
    ) -> None:
        """``source`` records into its buffer here (made anew if ``live``, the ids of the buffers held, lacks it)
        as ``recording`` says, into nothing if None."""
        key = source.track.track_id
        buffer = self._source_buffers.get(key)
        if recording is None:
            self._source_buffers.pop(key, None)
            source._recording = NOT_RECORDING
            return
        first_use = type(source._recording[0]) is _FirstUse  # no event yet: the flusher may not be running
        if buffer is None or id(buffer) not in live:
            buffer = TrackBuffer(source.track, weakref.ref(source))
            self.buffers.append(buffer)
            self._source_buffers[key] = buffer
            first_use = True
        bounded = recording(buffer.events)
        source._recording = (_FirstUse(source, bounded), 1, -1, int) if first_use else bounded

    def forget(self, ended: list[TrackBuffer]) -> list[TrackInfo]:
        """Drop the buffers of ended owners. Returns the tracks that ended with them: not a lane that another task
        has taken since (its track goes on). A lane's buffer that a task took since the drain found it ended is kept."""
        tracks = []
        gone = set()
        for buffer in ended:
            owner = buffer.owner
            if is_task(owner):
                if buffer.events or buffer.owner_alive():  # taken by the next task meanwhile (its lane is its too)
                    continue
                self.task_buffers.pop(owner, None)
                lane = self._lane_of(buffer.track)  # (none: its thread ended, all of them with it)
                if lane is not None:
                    if lane.buffer is buffer:
                        lane.buffer = None
                    if lane.task is not owner and lane.task is not None:
                        gone.add(id(buffer))
                        continue  # taken by a task that traced calls and records nothing yet: its track goes on
                    lane.release()
                if not owner.done():
                    # Pending on a closed loop: the scopes it has open end as it is destroyed, into this buffer,
                    # which holds it weakly till then, on its track; the lane, free, goes on under a track of its
                    # own (spans ended on this one then would overlap those of the lane's next tasks).
                    if lane is not None:
                        self._lanes[lane.track.parent].retrack(lane)
                    let_go(buffer, owner)
                    continue
            elif isinstance(owner, weakref.ref):
                self._source_buffers.pop(buffer.track.track_id, None)
            elif type(owner) is LetGo and (lane := self._lane_of(buffer.track)) is not None and lane.taken_since():
                gone.add(id(buffer))
                continue  # a task let go of, gone now, whose lane another task has taken since: its track goes on
            else:
                self._let_go_of_idle_lanes(self._lanes.pop(buffer.track.track_id, None), ended)
                self._greenlet_lanes.forget_thread(buffer.track.track_id)
            gone.add(id(buffer))
            tracks.append(buffer.track)
        self.buffers = [b for b in self.buffers if id(b) not in gone]
        return tracks

    def _let_go_of_idle_lanes(self, lanes: ThreadLanes[TrackBuffer] | None, ended: list[TrackBuffer]) -> None:
        """The buffers of ``lanes`` (of a thread that ended) whose tasks' loops run nowhere now hold their tasks
        weakly (``LetGo``): a task left pending on a loop its thread never closed was kept alive by them for good,
        where nothing else keeps it. Such a buffer stays until its task is gone and it is drained: a scope the task had
        open ends there as the task is destroyed, and is delivered, named by it. (Its loop run again, the task takes a
        lane of the thread that runs it.)"""
        if lanes is None:
            return
        ending = {id(b) for b in ended}
        for lane in lanes.lanes:
            buffer = lane.buffer
            if buffer is None or id(buffer) in ending or not is_task(buffer.owner):
                continue
            task = buffer.owner
            if task.get_loop().is_running() or buffer.events:
                continue
            self.task_buffers.pop(task, None)
            let_go(buffer, task)

    def _lane_of(self, track: TrackInfo) -> Lane[TrackBuffer] | None:
        """The lane whose track ``track`` is, if its thread's lanes are still kept."""
        lanes = self._lanes.get(track.parent)
        return None if lanes is None else lanes.lane_of(track)

    def take_all(self) -> list[TrackBuffer]:
        """Every buffer, which the tracks then no longer hold (what they held was never drained: lost); and the lanes,
        whose threads' next buffers are tracks of their own (a lane kept would keep its task once done)."""
        buffers, self.buffers = self.buffers, []
        self.task_buffers.clear()
        self._lanes = {}
        self._greenlet_lanes.clear()
        return buffers

    def renamed_threads(self, label: str | None) -> list[TrackInfo]:
        """Thread tracks whose thread was renamed since it started recording, updated to the new name."""
        renamed = []
        for buffer in self.buffers:
            owner = buffer.owner
            if isinstance(owner, threading.Thread) and thread_track_name(owner, label) != buffer.track.name:
                old = buffer.track
                buffer.track = TrackInfo(old.track_id, old.kind, thread_track_name(owner, label), old.thread_id)
                renamed.append(buffer.track)
        return renamed

    def after_fork_in_child(self) -> None:
        """In a forked child: the parent's threads, tasks and buffers do not carry over (sources do)."""
        self.buffers = []
        self.task_buffers.clear()
        self._lanes = {}
        self._greenlet_lanes.clear()
        self._source_buffers = {}
        not_collecting()  # (a fork during another thread's collection)


class EndedThread:
    """Stands for a thread that ended before its track was made (function tracing drains the calls of threads that
    came and went between two drains): its ident, name and OS thread id as they were; never alive."""

    __slots__ = ("ident", "name", "native_id")

    def __init__(self, ident: int, name: str | None = None, native_id: int | None = None) -> None:
        self.ident = ident
        self.name = name or f"thread {ident:#x}"
        self.native_id = native_id

    def is_alive(self) -> bool:
        return False


def thread_alive(thread: Any) -> bool:
    """``thread.is_alive()``; False where it raises: on 3.13 a dummy thread (one ``threading`` did not start: a
    greenlet's under gevent, a C library's) raises once it is done, and the drain asked that of it at every pass."""
    try:
        return bool(thread.is_alive())
    except RuntimeError:
        return False


def only_tasks_own(buffers: list[TrackBuffer]) -> bool:
    """Whether every one of ``buffers`` is an asyncio task's. (A loop, not a generator expression: in a drain that
    ran out of memory, CPython 3.12.1 crashed making one.)"""
    for buffer in buffers:  # noqa: SIM110  # (see above)
        if not is_task(buffer.owner):
            return False
    return True


def thread_track_name(thread: threading.Thread | EndedThread, label: str | None) -> str:
    """The name of ``thread``'s track: its own name, or, after ``label`` (a timeline's name), ``disk (MainThread)``."""
    if label is None:
        return display_text(thread.name)
    return display_text(f"{label} ({thread.name})")


class _FirstUse:
    """A source's sink until its first event: starts the flusher (never inside a fork handler, so here), then hands
    over to its buffer."""

    __slots__ = ("_bounded", "_source")

    def __init__(self, source: Source, bounded: Recording) -> None:
        self._source, self._bounded = source, bounded

    def __len__(self) -> int:
        return 0

    def extend(self, record: Iterable[Any], /) -> None:
        self._source._recording = self._bounded
        if FLUSHER.start():
            self._bounded[0].extend(record)
