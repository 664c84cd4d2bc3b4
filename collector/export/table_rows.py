"""A snapshot's events as typed tables (spans, instants, messages, counters, samples): the rows of one table, as
columns of plain Python values, in batches. ``parquet.py`` writes them out; this module needs no pyarrow.

Pure functions: no asyncio, safe to run on a worker thread while ingest goes on. The events are those a Chrome
snapshot shows (``read/event_walk.py``), one frame at a time: a frame's spans, instants and counters read a column at a
time where they can be (``timeline_frames.py``, as the web view's), the rest through the walk. Every row names its
process (``process``, ``pid`` as Chrome JSON's, ``host``) and its ``track``; times are wall-clock ns since the Unix
epoch, durations ns; ``args`` is JSON text, here as UTF-8 bytes (None: none). Each table is one phase of the walk's
events:

- ``spans``: slices (``X``; traced calls with category ``call``), and those never ended by the end of the snapshot with
  a null ``duration_ns`` and ``end_ns``; ``trace_id``, ``span_id`` and ``parent_span_id`` from args where a span
  carries them (OTLP spans and ringtrace's trace context).
- ``instants``: instants, incidents (``kind`` ``incident``) and the two ends of async slices (``async_begin``,
  ``async_end``, paired by ``async_id``).
- ``messages``: messages, their rendered ``text``, ``category``, ``priority`` and values (``args``).
- ``counters``: one row per value a counter event carries (``series``: its key in the event's args).
- ``samples``: the sampler's stacks, one row a sample: ``stack`` a list of frames (``function``, ``file``, ``line``),
  root first and leaf last, ``leaf`` the function running; ``task`` the asyncio task that ran, if any.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final, NamedTuple

import orjson
from ringtrace.collector.export.chrome import json_bytes, json_value
from ringtrace.collector.export.sample_stacks import SAMPLE, sample_stack
from ringtrace.collector.export.table_columns import ACCELERATED, C_TABLES, NOT_MESSAGES, ColumnBuffers, FrameRows
from ringtrace.collector.export.table_names import DEFAULT_TABLE, TABLES, WHERE_COLUMNS
from ringtrace.collector.export.timeline_frames import FrameColumns
from ringtrace.collector.read.event_walk import EventWalk
from ringtrace.collector.read.frame_walk import ProcessView, Shown, SnapshotView, WalkedFrame
from ringtrace.collector.read.selection import EVERYTHING, EventFilter
from ringtrace.wire.model import TrackInfo

__all__ = ["BATCH_ROWS", "DEFAULT_TABLE", "TABLES", "Columns", "TableRows"]

#: Rows a batch holds at most (a Parquet row group each): memory is about one batch's worth of rows.
BATCH_ROWS: Final = 1 << 17

#: A batch of rows: column name -> its values.
Columns = dict[str, list[Any]]


_INSTANT_KINDS: Final = {"i": "instant", "b": "async_begin", "e": "async_end"}


class TableRows:
    """The rows of ``table`` among the events ``selected``: ``batches()``, then what the walk reports.

    ``accelerated``: a frame's rows made in C where it can (``table_columns.py``, where built), or else read column
    by column (``timeline_frames.py``), the rest through the event walk; False reads every event through the walk
    (the same rows, slower). ``columns``: those that will be read (None: all); the C writer fills only those.

    Raises:
        ValueError: ``table`` is none of ``TABLES``.
    """

    def __init__(
        self,
        view: SnapshotView,
        selected: EventFilter = EVERYTHING,
        table: str = DEFAULT_TABLE,
        *,
        accelerated: bool = True,
        columns: tuple[str, ...] | None = None,
    ) -> None:
        if table not in TABLES:
            raise ValueError(f"table must be one of {', '.join(TABLES)}, got {table!r:.80}")
        self.table = table
        self._columns = columns
        self._walk = EventWalk(view, selected)
        self._accelerated = accelerated

    def batches(self) -> Iterator[Columns | ColumnBuffers | None]:
        """The rows in batches of at most about ``BATCH_ROWS`` (a frame's more), None between them now and then (a
        frame read with nothing for this table: a reader may hand over its step all the same). Where the C writer is
        built (``table_columns.py``), most rows come as its buffers."""
        walk = self._walk
        fast = FrameColumns(0, *walk.window) if self._accelerated and walk.by_frame else None
        in_c = fast is not None and ACCELERATED and self.table in C_TABLES
        spans = FrameRows(self.table, *walk.window, columns=self._columns) if in_c else None
        rows = _Rows(self.table)
        for walked, _ in walk.walked():
            for events in _frame_events(walk, walked, fast, spans):
                rows.add(walked[0], walked[1], events)
            if spans is not None and spans.full():
                yield spans.take()
            yield rows.take() if rows.count >= BATCH_ROWS else None
        for process, track, (_, name, wall_ns, _, opened_args, category, async_id) in walk.still_open():
            rows.add(process, track, _Events("B", [name], [wall_ns], [-1], [opened_args], [category], [async_id]))
        if spans is not None and spans.rows:
            yield spans.take()
        if rows.count:
            yield rows.take()

    def metadata(self) -> dict[str, Any]:
        """After ``batches()``: what a Chrome snapshot's ``otherData`` says beside its events, the loss counters
        (``report``) and the window read (``capture``)."""
        return {
            "clock_origin_wall_ns": self._walk.view.origin_ns,
            **self._walk.report(),
            "capture": self._walk.capture(),
        }


class _Events(NamedTuple):
    """One frame's events as columns (or the slices left open, phase ``B``)."""

    phases: str  # one character each
    names: list[str]
    starts: list[int]  # wall-clock ns
    durations: list[int]
    args: list[Any]
    categories: list[str] | None  # None: all ""
    ids: list[str] | None  # async ids; None: all ""


def _frame_events(
    walk: EventWalk, walked: WalkedFrame, fast: FrameColumns | None, spans: FrameRows | None
) -> Iterator[_Events]:
    """The selected events of one frame: those ``spans`` (the C writer, of the table's rows) or else ``fast`` takes a
    column at a time, then the walk's of the rest (or of all of it)."""
    process, track, tables, frame = walked
    whole = fast is not None and walk.takes_whole(process, track, frame)
    in_c = spans.add(tables, frame, process, track) if spans is not None and whole else None
    names: dict[str, int] = {}
    taken = None
    if fast is not None and whole and in_c is None:
        taken = fast.take(tables, frame, process.clock_offset_ns, names)
    only = None
    if in_c is not None:
        if in_c[0] is None:
            return
        only = in_c[0]
    elif taken is not None:
        if taken.columns is not None:
            by_index = list(names)
            columns = taken.columns
            named = [by_index[index] for index in columns["name"]]
            yield _Events(columns["ph"], named, columns["ts"], columns["dur"], columns["args"], None, None)
        if taken.deferred is None:
            return
        only = taken.deferred
    shown = walk.shown(process, track, tables, frame, only)
    if shown:
        yield _from_shown(shown)


def _from_shown(shown: list[Shown]) -> _Events:
    phases, names, starts, durations, args, categories, ids = zip(*shown, strict=True)
    return _Events("".join(phases), list(names), list(starts), list(durations), list(args), list(categories), list(ids))


#: A table's own columns (those after ``WHERE_COLUMNS``), in ``TABLES`` order, of as many rows each.
_Own = Sequence[Sequence[Any]]


class _Rows:
    """The rows of one table gathered so far, as columns."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.columns: Columns = {name: [] for name in TABLES[table]}
        self.count = 0
        self._own = TABLES[table][len(WHERE_COLUMNS) :]
        self._build = _BUILDERS[table]

    def take(self) -> Columns:
        taken, self.columns, self.count = self.columns, {name: [] for name in TABLES[self.table]}, 0
        return taken

    def add(self, process: ProcessView, track: TrackInfo, events: _Events) -> None:
        """One frame's events (or the slices left open, phase ``B``): those of this table as rows."""
        own = self._build(events)
        added = len(own[0]) if own else 0
        if added:
            columns = self.columns
            for name, values in zip(self._own, own, strict=True):
                columns[name] += values
            track_name = process.tracks.get(track.track_id, track).name  # the latest name, or an ended track's
            columns["process"] += [process.name] * added
            columns["pid"] += [process.trace_pid] * added
            columns["host"] += [process.host] * added
            columns["track"] += [track_name] * added
            self.count += added


def _as_columns(rows: Iterable[tuple[Any, ...]]) -> _Own:
    """Rows (a table's own values each) as its own columns; none for no rows."""
    return list(zip(*rows, strict=True))


def _spans(events: _Events) -> _Own:
    phases, names, starts, durations, args, categories, _ = events
    if phases.count("X") + phases.count("B") != len(phases):  # (the usual frame is all spans: no per-event test)
        picked = [i for i, phase in enumerate(phases) if phase == "X" or phase == "B"]
        if not picked:
            return ()
        phases = "".join(phases[i] for i in picked)
        names, starts, durations, args = _pick(picked, names, starts, durations, args)
        categories = _pick(picked, categories)[0] if categories is not None else None
    ended: list[int | None] = list(durations)
    if "B" in phases:  # never ended by the end of the snapshot
        ended = [None if phase == "B" else d for phase, d in zip(phases, durations, strict=True)]
    texts = _json_texts(args)
    # One search of the frame's args for each id, rather than a lookup per span: most spans carry none.
    joined = b"\n".join(filter(None, texts))
    carried = [
        [_text_arg(a, key) for a in args] if b'"%s"' % key.encode() in joined else [None] * len(args)
        for key in ("trace_id", "span_id", "parent_span_id")
    ]
    return (
        names,
        [c or None for c in categories] if categories is not None else [None] * len(names),
        starts,
        ended,
        [None if d is None else s + d for s, d in zip(starts, ended, strict=True)],
        texts,
        *carried,
    )


def _instants(events: _Events) -> _Own:
    phases, names, starts, _, args, categories, ids = events
    rows = []
    for index, phase in enumerate(phases):
        kind = _INSTANT_KINDS.get(phase)
        category = categories[index] if categories is not None else ""
        if kind is None or (phase == "i" and category not in ("", "incident")):
            continue  # (an "i" of another category is a message)
        arg = args[index]
        rows.append(
            (
                names[index],
                "incident" if category == "incident" else kind,
                starts[index],
                _json(arg),
                _text_arg(arg, "trace_id"),
                ids[index] if ids is not None and phase != "i" else None,
            )
        )
    return _as_columns(rows)


def _messages(events: _Events) -> _Own:
    phases, names, starts, _, args, categories, ids = events
    if categories is None:
        return ()  # (the column reader takes no message)
    rows = []
    for index, phase in enumerate(phases):
        category = categories[index]
        if phase != "i" or category in NOT_MESSAGES:
            continue
        values = args[index]  # (its own: its kind's category and priority are apart, ``Shown``)
        text_args = _json(values) if values else None
        priority = ids[index] if ids is not None else None
        rows.append((starts[index], category, priority, names[index], text_args, _text_arg(values, "trace_id")))
    return _as_columns(rows)


def _counters(events: _Events) -> _Own:
    phases, names, starts, _, args, _, _ = events
    rows = []
    for index, phase in enumerate(phases):
        if phase != "C":
            continue
        values = args[index]
        for series, value in values.items() if type(values) is dict else ():
            is_number = isinstance(value, int | float) and not isinstance(value, bool)
            rows.append((names[index], starts[index], str(series), float(value) if is_number else None))
    return _as_columns(rows)


def _samples(events: _Events) -> _Own:
    phases, names, starts, _, args, _, _ = events
    rows = []
    for index, phase in enumerate(phases):
        if phase != SAMPLE:
            continue
        stack = sample_stack(args[index])
        rows.append(
            (
                starts[index],
                names[index] or None,
                stack[-1][0] if stack else None,
                [{"function": f, "file": file, "line": line} for f, file, line in stack],
            )
        )
    return _as_columns(rows)


#: Each table's own columns of one frame's events (the order of ``TABLES``).
_BUILDERS: Final[dict[str, Callable[[_Events], _Own]]] = {
    "spans": _spans,
    "instants": _instants,
    "messages": _messages,
    "counters": _counters,
    "samples": _samples,
}


def _pick(picked: list[int], *lists: list[Any]) -> list[list[Any]]:
    return [[values[i] for i in picked] for values in lists]


def _json(args: Any) -> bytes | None:
    """Args as JSON text, UTF-8 (bytes as hex, as Chrome JSON shows them); None for none."""
    return None if args is None else json_bytes(args)


def _json_texts(args: list[Any]) -> list[bytes | None]:
    """``_json`` of each, at one orjson call each where every map's keys are text (the usual args)."""
    dumps, default = orjson.dumps, json_value
    try:
        return [None if arg is None else dumps(arg, default=default) for arg in args]
    except TypeError:  # a map key that is not a str
        return [_json(arg) for arg in args]


def _text_arg(args: Any, key: str) -> str | None:
    value = args.get(key) if type(args) is dict else None
    return value if type(value) is str else None
