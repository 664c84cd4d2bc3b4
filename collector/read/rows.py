"""The selected events of a snapshot as rows a reader takes in: the text dump (``ringtrace dump``) and the live tail
(``tail.py``) show them one a line.

Pure functions: no asyncio, safe to run on a worker thread while ingest goes on. A row is one event decoded for a
person: a typed event's fields by name, a message rendered (its text is its name), a traced call's file and line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ringtrace.collector.read.frame_walk import (
    MAX_WALL_NS,
    ProcessView,
    SnapshotView,
    incident_args,
    is_incident,
    prepare,
)
from ringtrace.collector.read.selection import EVERYTHING, EventFilter, Selection, category_of
from ringtrace.wire.call_records import call_args, is_call
from ringtrace.wire.errors import ProtocolError
from ringtrace.wire.frames import Events
from ringtrace.wire.message_format import render
from ringtrace.wire.model import TrackInfo
from ringtrace.wire.stream_tables import StreamTables, typed_args

__all__ = ["Row", "frame_rows", "selected_rows", "stack_text"]


@dataclass(frozen=True, slots=True)
class Row:
    """One selected event as a text dump shows it."""

    process: ProcessView
    track: str
    category: str
    #: A message's priority; "" for other events.
    priority: str
    #: As a snapshot shows it: a message's rendered text.
    name: str
    wall_ns: int
    dur_ns: int
    args: Any
    #: The kind's name: the category, or the member of a built-in family (``source_open``, ``marker_end`` ...).
    kind: str


def selected_rows(view: SnapshotView, selected: EventFilter = EVERYTHING) -> Iterator[Row]:
    """The events ``selected``, in the order they arrived per segment (oldest segment first), decoded for a reader:
    typed events' fields by name, messages rendered. Events whose kind was never declared are left out."""
    walk, selection = prepare(view, selected)
    for process, track, tables, frame in walk.frames():
        yield from frame_rows(process, track, tables, frame, selection)


def frame_rows(
    process: ProcessView, track: TrackInfo, tables: StreamTables, frame: Events, selection: Selection | None = None
) -> Iterator[Row]:
    """The events of one frame that ``selection`` takes, decoded for a reader (none if the frame cannot be)."""
    track_name = process.tracks.get(track.track_id, track).name
    offset_ns = process.clock_offset_ns
    track_key = (process.uid, track.track_id)
    try:
        rows = list(tables.rows(frame))
    except ProtocolError:
        return
    for kind, name, ts_ns, dur_ns, args in rows:
        if kind is None or not 0 <= ts_ns + offset_ns <= ts_ns + offset_ns + dur_ns <= MAX_WALL_NS:
            continue
        shown_name, shown_args = name, args
        if kind.shape == "message" and isinstance(args, list):
            shown_name, shown_args = render(kind, args)
        elif kind.fields and isinstance(args, list):
            shown_args = typed_args(kind, args, tables.kinds)
        elif kind.shape == "sample":
            shown_args = stack_text(tables.stacks.resolve(args) or ())
        elif is_call(kind):  # a traced call's stack id: its file and line
            shown_args = call_args(tables.stacks.innermost(args))
        elif is_incident(kind):
            shown_args = incident_args(name, args)
        if selection is not None and not selection.event(kind, shown_name, ts_ns + offset_ns, args, dur_ns, track_key):
            continue
        priority = kind.priority if kind.shape == "message" else ""
        wall_ns = ts_ns + offset_ns
        yield Row(process, track_name, category_of(kind), priority, shown_name, wall_ns, dur_ns, shown_args, kind.name)


def stack_text(stack: tuple[tuple[str, str, int], ...]) -> str:
    """A sampled stack on one line, its leaf (the function running) first: ``leaf (file:line) < caller (...)``."""
    if not stack:
        return "<stack unknown>"
    return " < ".join(f"{function} ({file}:{line})" for function, file, line in reversed(stack))
