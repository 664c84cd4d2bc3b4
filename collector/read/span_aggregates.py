"""``GET /aggregates``: span durations summed up per name, per process or per both, exactly over what is stored (every
duration kept, as 8 bytes, per group), with the instants and messages (by priority) the same filters select.

Percentiles are nearest-rank: ``pN`` is the smallest duration that at least N% of the group's spans do not exceed,
the ``ceil(N / 100 * count)``-th of them in order (p50 of 1, 2, 3, 4 is 2). ``mean_ns`` is rounded down.
Rows come largest ``total_ns`` first (ties by name, then process).
Pure and synchronous: runs on a reader thread.
"""

from __future__ import annotations

import math
from array import array
from typing import Any, Final

from ringtrace.collector.read.frame_walk import SnapshotView, process_label
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.read.span_walk import SpanFilter, SpanWalk

__all__ = ["GROUPINGS", "aggregate_spans", "nearest_rank"]

#: The values of ``by``, the default first.
GROUPINGS: Final = ("name", "process", "name,process")


def aggregate_spans(view: SnapshotView, selected: EventFilter, spans: SpanFilter, by: str = "name") -> dict[str, Any]:
    """``{"rows": [...], "instants": N, "messages": {priority: N}, "lost": {...}}`` over the spans selected."""
    walk = SpanWalk(view, selected, spans, count_others=True, with_args=False)
    by_name, by_process = "name" in by.split(","), "process" in by.split(",")
    groups: dict[tuple[str | None, str | None], array[int]] = {}
    labels: dict[int, str] = {}
    for process, _, name, _, duration, _ in walk:
        label = labels.get(process.uid)
        if label is None:
            label = labels[process.uid] = process_label(process)
        key = (name if by_name else None, label if by_process else None)
        durations = groups.get(key)
        if durations is None:
            durations = groups[key] = array("q")
        durations.append(duration)
    rows = [_row(name, process, durations) for (name, process), durations in groups.items()]
    rows.sort(key=lambda row: (-row["total_ns"], row["name"] or "", row["process"] or ""))
    return {"rows": rows, "instants": walk.instants, "messages": walk.messages, "lost": walk.losses()}


def _row(name: str | None, process: str | None, durations: array[int]) -> dict[str, Any]:
    ordered = sorted(durations)
    total = sum(ordered)
    return {
        "name": name,
        "process": process,
        "count": len(ordered),
        "total_ns": total,
        "mean_ns": total // len(ordered),
        "min_ns": ordered[0],
        "p50_ns": nearest_rank(ordered, 50),
        "p90_ns": nearest_rank(ordered, 90),
        "p99_ns": nearest_rank(ordered, 99),
        "max_ns": ordered[-1],
    }


def nearest_rank(ordered: list[int], percent: int) -> int:
    """The nearest-rank ``percent``-th percentile of ``ordered`` (ascending, not empty)."""
    return ordered[max(math.ceil(percent * len(ordered) / 100), 1) - 1]
