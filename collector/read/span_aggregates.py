"""``GET /aggregates``: span durations summed up per name, per process or per both, exactly over what is stored (every
duration kept, as 8 bytes, per group), with the instants and messages (by priority) the same filters select.

Percentiles are nearest-rank: ``pN`` is the smallest duration that at least N% of the group's spans do not exceed,
the ``ceil(N / 100 * count)``-th of them in order (p50 of 1, 2, 3, 4 is 2). ``mean_ns`` is rounded down.
A group's durations are sorted in runs of ``_RUN`` (a sort holds the GIL: one of 10M would stall the event loop for
seconds), and a percentile found by bisecting the value range, each step counting the runs' durations up to it.
Rows come largest ``total_ns`` first (ties by name, then process).
Pure and synchronous: runs on a reader thread.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from typing import Any, Final

from ringtrace.collector.read.frame_walk import SnapshotView, process_label
from ringtrace.collector.read.pool import let_the_loop_in
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.read.span_walk import SpanFilter, SpanWalk

__all__ = ["GROUPINGS", "aggregate_spans", "nearest", "nearest_rank", "summed_up"]

#: The values of ``by``, the default first.
GROUPINGS: Final = ("name", "process", "name,process")
#: Durations sorted at a time (a few ms of the GIL).
_RUN: Final = 1 << 15


def aggregate_spans(
    view: SnapshotView, selected: EventFilter, spans: SpanFilter, by: str = "name", now_ns: int | None = None
) -> dict[str, Any]:
    """``{"rows": [...], "instants": N, "messages": {priority: N}, "lost": {...}, "lost_by_forgotten_processes":
    {...}}`` over the spans selected (``SpanWalk.losses``); a span
    still open counts with its duration so far (to the window's end or ``now_ns``, the earlier; None: now), and in
    its row's ``open``."""
    walk = SpanWalk(view, selected, spans, count_others=True, with_args=False, now_ns=now_ns)
    by_name, by_process = "name" in by.split(","), "process" in by.split(",")
    groups: dict[tuple[str | None, str | None], array[int]] = {}
    still_open: dict[tuple[str | None, str | None], int] = {}
    labels: dict[int, str] = {}
    for process, name, taken, opened in walk.groups():
        label = labels.get(process.uid)
        if label is None:
            label = labels[process.uid] = process_label(process)
        key = (name if by_name else None, label if by_process else None)
        durations = groups.get(key)
        if durations is None:
            durations = groups[key] = array("q")
        durations.extend(taken)
        if opened:
            still_open[key] = still_open.get(key, 0) + opened
    rows = [
        {**summed_up(name, process, durations), "open": still_open.get((name, process), 0)}
        for (name, process), durations in groups.items()
    ]
    rows.sort(key=lambda row: (-row["total_ns"], row["name"] or "", row["process"] or ""))
    return {"rows": rows, "instants": walk.instants, "messages": walk.messages, **walk.losses()}


def summed_up(name: str | None, process: str | None, durations: array[int]) -> dict[str, Any]:
    """A row of ``/aggregates``: the count, total, mean, min, percentiles and max of ``durations`` (not empty)."""
    runs = []
    total = 0
    for start in range(0, len(durations), _RUN):
        run = sorted(durations[start : start + _RUN])
        total += sum(run)
        runs.append(run)
        let_the_loop_in()
    count = len(durations)
    low, high = min(run[0] for run in runs), max(run[-1] for run in runs)
    return {
        "name": name,
        "process": process,
        "count": count,
        "total_ns": total,
        "mean_ns": total // count,
        "min_ns": low,
        "p50_ns": _ranked(runs, nearest(50, count), low, high),
        "p90_ns": _ranked(runs, nearest(90, count), low, high),
        "p99_ns": _ranked(runs, nearest(99, count), low, high),
        "max_ns": high,
    }


def nearest(percent: int, count: int) -> int:
    """The rank (from 1) of the nearest-rank ``percent``-th percentile of ``count`` values."""
    return max(math.ceil(percent * count / 100), 1)


def nearest_rank(ordered: list[int], percent: int) -> int:
    """The nearest-rank ``percent``-th percentile of ``ordered`` (ascending, not empty)."""
    return ordered[nearest(percent, len(ordered)) - 1]


def _ranked(runs: list[list[int]], rank: int, low: int, high: int) -> int:
    """The ``rank``-th smallest duration of the sorted ``runs``, all from ``low`` to ``high``: the least value that
    as many are at most (one of them)."""
    while low < high:
        middle = (low + high) // 2
        if sum(bisect_right(run, middle) for run in runs) >= rank:
            high = middle
        else:
            low = middle + 1
    return low
