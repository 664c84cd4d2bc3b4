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

from collections.abc import Callable, Iterator
from typing import Any, Final

import orjson
from ringtrace.collector.export.chrome import json_bytes, json_value
from ringtrace.collector.export.sample_stacks import SAMPLE, sample_stack
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

#: Every row's first columns: who recorded it, and where.
_WHERE: Final = ("process", "pid", "host", "track")

#: Every table and its columns, in order (``parquet.py`` gives their types).
TABLES: Final = {
    "spans": (
        *_WHERE,
        "name",
        "category",
        "start_ns",
        "duration_ns",
        "end_ns",
        "args",
        "trace_id",
        "span_id",
        "parent_span_id",
    ),
    "instants": (*_WHERE, "name", "kind", "ts_ns", "args", "trace_id", "async_id"),
    "messages": (*_WHERE, "ts_ns", "category", "priority", "text", "args", "trace_id"),
    "counters": (*_WHERE, "name", "ts_ns", "series", "value"),
    "samples": (*_WHERE, "ts_ns", "task", "leaf", "stack"),
}
#: What ``table`` is when not given.
DEFAULT_TABLE: Final = "spans"

#: The walk's categories that are no message's (a message's category is its kind's name).
_NOT_MESSAGES: Final = frozenset({"", "incident", "async", "call", "sample"})
_INSTANT_KINDS: Final = {"i": "instant", "b": "async_begin", "e": "async_end"}


class TableRows:
    """The rows of ``table`` among the events ``selected``: ``batches()``, then what the walk reports.

    ``accelerated``: a frame's spans, instants and counters read column by column (``timeline_frames.py``), the
    rest through the event walk; False reads every event through the walk (the same rows, slower).

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
    ) -> None:
        if table not in TABLES:
            raise ValueError(f"table must be one of {', '.join(TABLES)}, got {table!r:.80}")
        self.table = table
        self._walk = EventWalk(view, selected)
        self._accelerated = accelerated

    def batches(self) -> Iterator[Columns | None]:
        """The rows in batches of at most about ``BATCH_ROWS`` (a frame's more), None between them now and then (a
        frame read with nothing for this table: a reader may hand over its step all the same)."""
        walk = self._walk
        fast = FrameColumns(0, *walk.window) if self._accelerated and walk.by_frame else None
        rows = _Rows(self.table)
        for walked, _ in walk.walked():
            for phases, names, starts, durations, args, categories, ids in _frame_events(walk, walked, fast):
                rows.add(walked[0], walked[1], phases, names, starts, durations, args, categories, ids)
            yield rows.take() if rows.count >= BATCH_ROWS else None
        for process, track, (_, name, wall_ns, _, opened_args, category, async_id) in walk.still_open():
            rows.add(process, track, "B", [name], [wall_ns], [-1], [opened_args], [category], [async_id])
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


#: One frame's events as columns: phases (one character each), names, wall-clock ns, durations, args, categories
#: (None: all ""), async ids (None: all "").
_Events = tuple[str, list[str], list[int], list[int], list[Any], list[str] | None, list[str] | None]


def _frame_events(walk: EventWalk, walked: WalkedFrame, fast: FrameColumns | None) -> Iterator[_Events]:
    """The selected events of one frame: those ``fast`` takes a column at a time, then the walk's of the rest (or
    of all of it)."""
    process, track, tables, frame = walked
    whole = fast is not None and walk.takes_whole(process, track, frame)
    names: dict[str, int] = {}
    taken = fast.take(tables, frame, process.clock_offset_ns, names) if fast is not None and whole else None
    only = None
    if taken is not None:
        if taken.columns is not None:
            by_index = list(names)
            columns = taken.columns
            named = [by_index[index] for index in columns["name"]]
            yield columns["ph"], named, columns["ts"], columns["dur"], columns["args"], None, None
        if taken.deferred is None:
            return
        only = taken.deferred
    shown = walk.shown(process, track, tables, frame, only)
    if shown:
        yield _from_shown(shown)


def _from_shown(shown: list[Shown]) -> _Events:
    phases, names, starts, durations, args, categories, ids = zip(*shown, strict=True)
    return "".join(phases), list(names), list(starts), list(durations), list(args), list(categories), list(ids)


class _Rows:
    """The rows of one table gathered so far, as columns."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.columns: Columns = {name: [] for name in TABLES[table]}
        self.count = 0
        self._add: Callable[..., None] = getattr(self, f"_{table}")

    def take(self) -> Columns:
        taken, self.columns, self.count = self.columns, {name: [] for name in TABLES[self.table]}, 0
        return taken

    def add(
        self,
        process: ProcessView,
        track: TrackInfo,
        phases: str,
        names: list[str],
        starts: list[int],
        durations: list[int],
        args: list[Any],
        categories: list[str] | None,
        ids: list[str] | None,
    ) -> None:
        """One frame's events (or the slices left open, phase ``B``): those of this table as rows."""
        last = self.columns[TABLES[self.table][-1]]  # (a column of the table's own, not one of _WHERE)
        before = len(last)
        self._add(phases, names, starts, durations, args, categories, ids)
        added = len(self.columns[TABLES[self.table][-1]]) - before
        if added:
            track_name = process.tracks.get(track.track_id, track).name  # the latest name, or an ended track's
            columns = self.columns
            columns["process"] += [process.name] * added
            columns["pid"] += [process.trace_pid] * added
            columns["host"] += [process.host] * added
            columns["track"] += [track_name] * added
            self.count += added

    def _spans(
        self,
        phases: str,
        names: list[str],
        starts: list[int],
        durations: list[int],
        args: list[Any],
        categories: list[str] | None,
        ids: list[str] | None,
    ) -> None:
        if phases.count("X") + phases.count("B") != len(phases):  # (the usual frame is all spans: no per-event test)
            picked = [i for i, phase in enumerate(phases) if phase == "X" or phase == "B"]
            if not picked:
                return
            phases = "".join(phases[i] for i in picked)
            names, starts, durations, args = _pick(picked, names, starts, durations, args)
            categories = _pick(picked, categories)[0] if categories is not None else None
        columns = self.columns
        columns["name"] += names
        columns["category"] += [c or None for c in categories] if categories is not None else [None] * len(names)
        columns["start_ns"] += starts
        ended: list[int | None] = list(durations)
        if "B" in phases:  # never ended by the end of the snapshot
            ended = [None if phase == "B" else d for phase, d in zip(phases, durations, strict=True)]
        columns["duration_ns"] += ended
        columns["end_ns"] += [None if d is None else s + d for s, d in zip(starts, ended, strict=True)]
        texts = _json_texts(args)
        columns["args"] += texts
        # One search of the frame's args for each id, rather than a lookup per span: most spans carry none.
        joined = b"\n".join(filter(None, texts))
        for key in ("trace_id", "span_id", "parent_span_id"):
            carried = b'"%s"' % key.encode() in joined
            columns[key] += [_text_arg(a, key) for a in args] if carried else [None] * len(args)

    def _instants(
        self,
        phases: str,
        names: list[str],
        starts: list[int],
        durations: list[int],
        args: list[Any],
        categories: list[str] | None,
        ids: list[str] | None,
    ) -> None:
        columns = self.columns
        for index, phase in enumerate(phases):
            kind = _INSTANT_KINDS.get(phase)
            category = categories[index] if categories is not None else ""
            if kind is None or (phase == "i" and category not in ("", "incident")):
                continue  # (an "i" of another category is a message)
            arg = args[index]
            columns["name"].append(names[index])
            columns["kind"].append("incident" if category == "incident" else kind)
            columns["ts_ns"].append(starts[index])
            columns["args"].append(_json(arg))
            columns["trace_id"].append(_text_arg(arg, "trace_id"))
            columns["async_id"].append(ids[index] if ids is not None and phase != "i" else None)

    def _messages(
        self,
        phases: str,
        names: list[str],
        starts: list[int],
        durations: list[int],
        args: list[Any],
        categories: list[str] | None,
        ids: list[str] | None,
    ) -> None:
        if categories is None:
            return  # (the column reader takes no message)
        columns = self.columns
        for index, phase in enumerate(phases):
            category = categories[index]
            if phase != "i" or category in _NOT_MESSAGES:
                continue
            values = dict(args[index] or {})
            values.pop("category", None)
            priority = values.pop("priority", None)
            columns["ts_ns"].append(starts[index])
            columns["category"].append(category)
            columns["priority"].append(priority)
            columns["text"].append(names[index])
            columns["args"].append(_json(values) if values else None)
            columns["trace_id"].append(_text_arg(values, "trace_id"))

    def _counters(
        self,
        phases: str,
        names: list[str],
        starts: list[int],
        durations: list[int],
        args: list[Any],
        categories: list[str] | None,
        ids: list[str] | None,
    ) -> None:
        columns = self.columns
        for index, phase in enumerate(phases):
            if phase != "C":
                continue
            values = args[index]
            for series, value in values.items() if type(values) is dict else ():
                columns["name"].append(names[index])
                columns["ts_ns"].append(starts[index])
                columns["series"].append(str(series))
                is_number = isinstance(value, int | float) and not isinstance(value, bool)
                columns["value"].append(float(value) if is_number else None)

    def _samples(
        self,
        phases: str,
        names: list[str],
        starts: list[int],
        durations: list[int],
        args: list[Any],
        categories: list[str] | None,
        ids: list[str] | None,
    ) -> None:
        columns = self.columns
        for index, phase in enumerate(phases):
            if phase != SAMPLE:
                continue
            stack = sample_stack(args[index])
            columns["ts_ns"].append(starts[index])
            columns["task"].append(names[index] or None)
            columns["leaf"].append(stack[-1][0] if stack else None)
            columns["stack"].append([{"function": f, "file": file, "line": line} for f, file, line in stack])


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
