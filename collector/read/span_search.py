"""``GET /spans``: the ``limit`` slowest (or newest) spans that a filter selects, as JSON, found with a bounded heap
over the span walk (``span_walk.py``): memory holds ``limit`` spans, never every one.

Order: ``sort=duration`` is slowest first (ties: the later start first); ``sort=start`` newest first (ties: the
longer first). Spans of equal duration and start keep the first met. As the heap fills, its least span becomes a
floor that the walk's column reader applies before it makes anything of an event (``SpanWalk.floor_ns``,
``newer_than_ns``).
Pure and synchronous: runs on a reader thread.
"""

from __future__ import annotations

import heapq
from typing import Any, Final

from ringtrace.collector.read.frame_walk import SnapshotView, process_label
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.read.span_walk import Span, SpanFilter, SpanWalk

__all__ = ["MAX_SPANS", "SORTS", "search_spans", "span_document"]

#: What ``limit`` may ask for at most.
MAX_SPANS: Final = 10_000
#: The values of ``sort``, the default first.
SORTS: Final = ("duration", "start")


def search_spans(
    view: SnapshotView,
    selected: EventFilter,
    spans: SpanFilter,
    sort: str = "duration",
    limit: int = 100,
    now_ns: int | None = None,
) -> dict[str, Any]:
    """``{"spans": [...], "lost": {...}, "lost_by_forgotten_processes": {...}}``: the first ``limit`` spans in
    ``sort`` order (``span_document`` each), what the processes selected lost, and apart what those forgotten lost
    (``SpanWalk.losses``). A span still open runs to the window's end or ``now_ns``
    (None: now), the earlier."""
    walk = SpanWalk(view, selected, spans, count_others=False, with_args=True, now_ns=now_ns)
    by_duration = sort == "duration"
    heap: list[tuple[int, int, int, Span]] = []  # a min-heap: the least kept first
    for seq, span in enumerate(walk.spans_found()):
        start, duration = span[3], span[4]
        item = (duration, start, -seq, span) if by_duration else (start, duration, -seq, span)
        if len(heap) < limit:
            heapq.heappush(heap, item)
            if len(heap) < limit:
                continue
        elif item[:3] > heap[0][:3]:
            heapq.heapreplace(heap, item)
        else:
            continue
        if by_duration:
            walk.floor_ns = max(walk.floor_ns, heap[0][0])
        else:
            walk.newer_than_ns = heap[0][0]
    heap.sort(key=lambda item: item[:3], reverse=True)
    return {"spans": [span_document(item[3]) for item in heap], **walk.losses()}


def span_document(span: Span) -> dict[str, Any]:
    """A span as ``/spans`` answers it: its process's name as snapshots show it and its pid there (``pid``), its
    track's name, name, start (wall-clock ns), duration (ns), args, its ``trace_id`` arg (null without one), and
    whether it is open (begun, not ended: its duration so far)."""
    process, track, name, start_ns, duration_ns, args, is_open = span
    trace_id = args.get("trace_id") if args else None
    return {
        "process": process_label(process),
        "pid": process.trace_pid,
        "track": process.tracks.get(track.track_id, track).name,
        "name": name,
        "start_ns": start_ns,
        "duration_ns": duration_ns,
        "args": args or {},
        "trace_id": trace_id if isinstance(trace_id, str) else None,
        "open": is_open,
    }
