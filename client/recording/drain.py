"""Taking recorded events out of track buffers, for the flusher.

A buffer is flat (``RECORD_FIELDS`` values per event) rather than a list of tuples: the encoder splits it into columns
with strided slices, in C, touching each value once, and no tuple outlives its call. Events are taken by copying a
prefix and then deleting it (slices of ``events[:n]``, then ``del`` of the same slices); these, and ``extend`` of a
tuple, are each one atomic list operation, and recording only ever appends, so an event racing with a drain lands
whole either in the prefix or after it, never nowhere and never cut. Runs are taken at most ``_RUN_VALUES`` values at
a time, so that no single list operation holds the interpreter for long while a recording thread waits. The C
accelerator moves the values without touching them (``take_runs``).

A lane serves many short tasks in turn (a server's requests: one task each) with one buffer, in which each task after
the first begins with a ``TASK_SWITCH`` record (``tracks.py``): the drain takes these out and names each task's spans
and instants after it (a ``task`` argument), so that listeners and the flusher pay per lane and sweep, not per task.

A drain that fails once events have left their buffers (a MemoryError: the copy of a segment of compact records is
as large as the segment) hands nothing over: ``take_events`` fills the caller's list as it goes, segments first as
they are, copied in place after, so that the caller counts what it held as dropped (``events_in``). What it holds
has left its buffer, and only that: each event is handed over or counted dropped, once (the pure-Python path puts a
run in the list as its delete from the buffer succeeds, ``_take``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ringtrace.client.accelerator import speedups
from ringtrace.client.recording.tracks import TASK_SWITCH, TrackBuffer, switches_in
from ringtrace.wire.call_records import event_count
from ringtrace.wire.keyword_args import as_map
from ringtrace.wire.model import ASYNC_TRACK, INSTANT, RECORD_FIELDS, SPAN, THREAD_TRACK, TrackInfo
from ringtrace.wire.record_runs import RecordRun

__all__ = ["Run", "events_in", "events_taken", "lane_parents", "take_events"]

#: One track's events taken in one piece: ``RECORD_FIELDS`` flat values each, oldest first.
Run = tuple[TrackInfo, Any]
#: Values taken from a buffer in one list operation (8192 events).
_RUN_VALUES = 8192 * RECORD_FIELDS
_take_runs = None if speedups is None else speedups.take_runs
#: The C twin of ``_name_tasks`` (a lane's run, a list: a value at a time in bytecode cost the flusher more than the
#: rest of its pass together under a server's load; see ``benchmarks/bench_lane_drain.py``).
_name_tasks_accelerated = None if speedups is None else speedups.name_tasks
#: The C recorder's table of labels, which its compact records index (append only).
_LABELS: list[str] = [] if speedups is None else speedups.record_labels()
#: The C recorder's segment of compact records (None without it).
_SEGMENT: Any = None if speedups is None else speedups.Segment


def take_events(buffers: list[TrackBuffer], taken: list[Run] | None = None) -> tuple[list[Run], list[TrackBuffer]]:
    """Take every event of ``buffers``: the runs taken (added to ``taken`` as they leave the buffers, when given),
    and the buffers whose owner ended with nothing left. (A buffer holds no more than its timeline's bound: the
    recorders refuse what does not fit.)"""
    taken = [] if taken is None else taken
    ended = []
    for buffer in buffers:
        alive = buffer.owner_alive()  # before len(): an owner dead by now appends nothing after it (a task that takes
        _take(buffer, taken)  # its lane meanwhile does: forget() looks again, under the lock)
        if not alive and not buffer.events:
            ended.append(buffer)
    return taken, ended


def events_in(runs: Iterable[Any]) -> int:
    """The events of runs taken: flat values (a lane's with its ``TASK_SWITCH`` records, which are none, where the
    drain stopped before it took them out), a ``CallRun``, a ``RecordRun``, or a segment not copied yet."""
    return sum(
        run.count if type(run) is _SEGMENT else event_count(run) - (switches_in(run) if type(run) is list else 0)
        for run in runs
    )


def events_taken(taken: list[Any]) -> int:
    """The events of the runs in ``taken`` as ``take_events`` left it, whole or halfway: ``(track, run)`` pairs, and
    where it stopped, take_runs' list of runs or an empty place (None: a run still in its buffer; see ``_take``)."""
    return sum(events_in((item[1],) if type(item) is tuple else item or ()) for item in taken)


def _record_run(segment: Any) -> RecordRun:
    """A segment of compact records the C drain took, as the run listeners get (``wire/record_runs.py``)."""
    records, count = segment.take()
    return RecordRun(records, _LABELS, count)


def _take(buffer: TrackBuffer, taken: list[Run]) -> None:
    """Adds the runs of ``buffer`` to ``taken``."""
    events = buffer.events
    count = len(events)
    first = len(taken)
    task = buffer.first_task
    # A lane's task after what is taken now, found before anything leaves the buffer, and the buffer's as soon as all
    # of it has left: a drain that fails after (a MemoryError) hands nothing over, but the buffer's next events are
    # still named by the task that recorded them, not by the one before the switches it took.
    after = task if task is None else _last_task(events, count, task)
    held: list[Any] = taken  # (halfway, a place holds others than runs: see events_taken)
    if _take_runs is not None:  # C: the values move, untouched, in one pass; a segment of compact records is a run
        # In the caller's hands at every step (see the top): a place first, then take_runs' list of runs there (a
        # store, which allocates nothing), then its runs as pairs (one slice assignment), each segment then copied.
        held.append(None)
        held[first] = runs = _take_runs(events, count, _RUN_VALUES)
        buffer.first_task = after
        held[first : first + 1] = [(buffer.track, run) for run in runs]
        for i in range(first, len(taken)):
            if type(taken[i][1]) is not list:
                taken[i] = (buffer.track, _record_run(taken[i][1]))
    else:
        # Copy the runs first, then delete them from the last one back: each delete then moves only the values
        # appended since the drain began, where deleting from the front would move the rest of the buffer every time
        # (quadratic in a buffer that grew while the flusher was busy). A run is in the caller's hands once deleted,
        # not before: its place holds None until then (see events_taken), and everything a place needs is made
        # before the first delete, so a delete that fails (it allocates) leaves its run and those before it in the
        # buffer alone, for the next drain, where they had been counted dropped and handed over by it too.
        places = []
        for i, start in enumerate(range(0, count, _RUN_VALUES)):
            end = min(start + _RUN_VALUES, count)  # never past count
            places.append((first + i, (buffer.track, events[start:end]), start, end))
        held += [None] * len(places)
        for place, run, start, end in reversed(places):
            del events[start:end]
            taken[place] = run
        buffer.first_task = after
    if task is not None:  # a lane serves many tasks in turn: each event says whose it is
        for _, run in taken[first:]:
            if _name_tasks_accelerated is not None and type(run) is list:
                task = _name_tasks_accelerated(run, task, TASK_SWITCH, SPAN, INSTANT)
            else:
                task = _name_tasks(run, task)


def _last_task(events: list[Any], count: int, task: Any) -> Any:
    """The task of the last of the first ``count`` values of a lane's ``events``, ``task``'s first: the label of the
    last ``TASK_SWITCH`` record there (found in the kinds alone, in C), else ``task``."""
    kinds = events[count - RECORD_FIELDS :: -RECORD_FIELDS] if count else []
    try:
        last = kinds.index(TASK_SWITCH)
    except ValueError:
        return task
    return events[count - RECORD_FIELDS * (last + 1) + 1]


def _name_tasks(run: list[Any], task: Any) -> Any:
    """Adds the name of the task that recorded it to the args of each span and instant of ``run`` (flat records of
    one lane, ``task``'s first), and takes the ``TASK_SWITCH`` records out. Returns the task of the last events.
    ``task``, and the task of a switch, is a task or its name (a str)."""
    kept: list[Any] | None = None  # (the records kept, once a switch is met: told by identity, never a label's ==)
    name = task if type(task) is str else task.get_name()
    for i in range(0, len(run), RECORD_FIELDS):
        kind = run[i]
        if kind is TASK_SWITCH:
            if kept is None:
                kept = run[:i]
            task = run[i + 1]
            name = task if type(task) is str else task.get_name()
            continue
        if kind in (SPAN, INSTANT):
            args = as_map(run[i + 4])
            if args is None:
                run[i + 4] = {"task": name}
            elif type(args) is dict and "task" not in args:
                run[i + 4] = {**args, "task": name}  # a copy: the caller may hold on to its map
        if kept is not None:
            kept += run[i : i + RECORD_FIELDS]
    if kept is not None:
        run[:] = kept
    return task


def lane_parents(buffers: list[TrackBuffer], taken: list[Run]) -> list[Run]:
    """An empty run for each thread whose lanes have events and it none, so that listeners declare its track (a
    reader names the lanes' thread by it; on the wire a track is declared with its first events)."""
    parents = {track.parent for track, _ in taken if track.kind == ASYNC_TRACK and track.parent}
    if not parents:
        return []
    parents -= {track.track_id for track, _ in taken}
    return [(b.track, []) for b in buffers if b.track.track_id in parents and b.track.kind == THREAD_TRACK]
