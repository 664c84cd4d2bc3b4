"""What is recorded: event kinds and tracks, and the events a reader gets back.

An event on the recording path is ``RECORD_FIELDS`` values, ``kind, label, start_ns, end_ns, args``, added to its
track's buffer in one ``list.extend``; an instant has ``start_ns == end_ns``, and ``args`` is ``None`` when there are
none. Labels become integer ids in a per-stream string table (``string_table.py``), and argument values are
normalised (``arg_values.py``), on the flusher thread, never on the recording path.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ringtrace.wire.table_frames import KindSpec

__all__ = [
    "ASYNC_BEGIN",
    "ASYNC_END",
    "ASYNC_TRACK",
    "BUILTIN_KINDS",
    "CALL",
    "CALL_KINDS",
    "CALL_RAISED",
    "COUNTER",
    "COUNTER_TRACK",
    "FIRST_SAMPLER_TRACK_ID",
    "FIRST_TYPED_KIND",
    "INCIDENT",
    "INSTANT",
    "KINDS",
    "MARKER",
    "MARKER_END",
    "MARKER_START",
    "RECORD_FIELDS",
    "SAMPLE",
    "SAMPLER_TRACK_SUFFIX",
    "SOURCE_CLOSE",
    "SOURCE_OPEN",
    "SOURCE_TRACK",
    "SPAN",
    "THREAD_TRACK",
    "DecodedEvent",
    "KindRegistry",
    "TrackInfo",
    "new_track_id",
]

#: Values per event in a track buffer: kind, label, start_ns, end_ns, args.
RECORD_FIELDS: Final = 5
SPAN: Final = 0
INSTANT: Final = 1
#: A counter's value: ``args`` is ``{"value": number}``.
COUNTER: Final = 2
#: Gecko markers: a START pairs with the next END of the same name on its track (nesting counted).
MARKER_START: Final = 3
MARKER_END: Final = 4
MARKER: Final = 5
#: TimeLogger sources: activity on the source's own track goes up by one at an open, down by one at a close.
SOURCE_OPEN: Final = 6
SOURCE_CLOSE: Final = 7
#: Async slices across threads and tasks: ``args["id"]`` pairs a begin with its end.
ASYNC_BEGIN: Final = 8
ASYNC_END: Final = 9
#: A sample of a thread's call stack: ``args`` is a stack id (STACKS), ``name`` the running asyncio task's name or "".
SAMPLE: Final = 10
#: A function call traced (``call_records.py``): a span whose name is the function's qualified name and whose
#: ``args`` is the one-frame stack of its code location (a stack id on the wire, as a sample's): file and first line.
#: ``CALL_RAISED``: the call ended by an exception leaving the function.
CALL: Final = 11
CALL_RAISED: Final = 12
CALL_KINDS: Final = frozenset({CALL, CALL_RAISED})
#: A program's ``tl.incident(reason, **args)``: an instant named by its reason, its args free.
INCIDENT: Final = 13
BUILTIN_KINDS: Final = (
    KindSpec(SPAN, "span", "span"),
    KindSpec(INSTANT, "instant", "instant"),
    KindSpec(COUNTER, "counter", "counter"),
    KindSpec(MARKER_START, "marker_start", "marker_start"),
    KindSpec(MARKER_END, "marker_end", "marker_end"),
    KindSpec(MARKER, "marker", "instant"),
    KindSpec(SOURCE_OPEN, "source_open", "source_open"),
    KindSpec(SOURCE_CLOSE, "source_close", "source_close"),
    KindSpec(ASYNC_BEGIN, "async_begin", "async_begin"),
    KindSpec(ASYNC_END, "async_end", "async_end"),
    KindSpec(SAMPLE, "sample", "sample"),
    KindSpec(CALL, "call", "span"),
    KindSpec(CALL_RAISED, "call_raised", "span"),
    KindSpec(INCIDENT, "incident", "instant"),
)

#: Kind ids below this are built in; typed event classes get the ones above.
FIRST_TYPED_KIND: Final = 64


class KindRegistry:
    """The event kinds of this process: the built-in ones, then each typed event class in the order defined.

    Every stream declares all of them (SCHEMA), so a kind's id means the same on every stream of the process.
    """

    def __init__(self) -> None:
        self._kinds: list[KindSpec] = list(BUILTIN_KINDS)
        #: Every kind by id.
        self.by_id: dict[int, KindSpec] = {kind.id: kind for kind in BUILTIN_KINDS}
        self._ids = itertools.count(FIRST_TYPED_KIND)
        #: Per kind whose events carry something other than a map (typed events, messages' values): what turns it
        #: into wire values on the flusher, with the count of values cut, or raises ``ValueError`` to drop the event.
        self.converters: dict[int, Callable[[Any], tuple[list[Any], int]]] = {}

    def register(
        self,
        name: str,
        shape: str,
        fields: tuple[tuple[str, str], ...],
        convert: Callable[[Any], tuple[list[Any], int]],
        text: str = "",
        priority: str = "",
    ) -> KindSpec:
        """A new kind. No lock (nothing for a fork to leave held): ``next``, a dict store and ``append`` are each
        atomic, and the converter is in place before the kind can be seen."""
        spec = KindSpec(next(self._ids), name, shape, fields, text, priority)
        self.converters[spec.id] = convert
        self.by_id[spec.id] = spec
        self._kinds.append(spec)
        return spec

    def __len__(self) -> int:
        return len(self._kinds)

    def since(self, count: int) -> list[KindSpec]:
        """The kinds registered after the first ``count``."""
        return self._kinds[count:]


#: The process's event kinds.
KINDS: Final = KindRegistry()

THREAD_TRACK: Final = 0
SOURCE_TRACK: Final = 1
ASYNC_TRACK: Final = 2
COUNTER_TRACK: Final = 3

_track_ids = itertools.count(1)
#: The tracks of a sampler (one per sampled thread) take ids from here up, above any ``new_track_id`` gives (a process
#: makes fewer than 2**31 tracks): a reader never takes one for its thread's own track (``ProcessView.shares_thread``).
FIRST_SAMPLER_TRACK_ID: Final = 2**31
#: What a sampler's track is named: its thread's name, then this (``MainThread samples``).
SAMPLER_TRACK_SUFFIX: Final = " samples"


def new_track_id() -> int:
    """A track id unique within this process (and so within every stream it writes)."""
    return next(_track_ids)


@dataclass(frozen=True, slots=True)
class TrackInfo:
    """A line in the viewer: a thread, a named source, an asyncio task or a counter."""

    track_id: int
    kind: int
    name: str
    thread_id: int = 0
    parent: int = 0


@dataclass(frozen=True, slots=True)
class DecodedEvent:
    """One decoded event, as object listeners and stream readers see it."""

    kind: str
    name: str
    ts_ns: int
    dur_ns: int
    args: Any
    track: TrackInfo
