"""A stream's tables (strings, kinds, tracks, the column layout): what decoding its EVENTS needs, kept by a
``SessionDecoder`` and by every frame read from the stream."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from ringtrace.wire.arg_values import clip_nesting
from ringtrace.wire.call_records import call_args, is_call
from ringtrace.wire.errors import MalformedFrame
from ringtrace.wire.frame_types import EVENT_COLUMNS
from ringtrace.wire.frames import Events, unpack_columns
from ringtrace.wire.message_format import render
from ringtrace.wire.model import DecodedEvent, TrackInfo
from ringtrace.wire.stack_tree import StackTree
from ringtrace.wire.table_frames import KindSpec

__all__ = ["StreamTables", "typed_args"]

#: The columns a reader needs from an EVENTS payload, found by name in SCHEMA's column list.
_NEEDED_COLUMNS: Final = EVENT_COLUMNS

#: Levels of nested typed events a reader turns into maps (a kind may name itself: the stream is not trusted).
_MAX_NESTING: Final = 32


class StreamTables:
    """A stream's strings, kinds, tracks and column layout: everything decoding its EVENTS needs.

    Tables only grow within a stream (a TRACK frame may rename a track), so a stored frame can keep a reference to
    the tables of the stream it came on and decode later. A STRINGS frame that resets the string table gives the
    stream new tables (``with_new_strings``) rather than emptying these, and so does a STACKS frame that resets the
    stack table (``with_new_stacks``).
    """

    __slots__ = ("_column_index", "columns", "kinds", "stacks", "strings", "tracks")

    def __init__(self) -> None:
        self.strings: dict[int, str] = {}
        self.kinds: dict[int, KindSpec] = {}
        self.tracks: dict[int, TrackInfo] = {}
        #: The call stacks ``sample`` events name (STACKS frames).
        self.stacks = StackTree()
        self.columns: tuple[str, ...] = EVENT_COLUMNS
        self._column_index = tuple(range(len(EVENT_COLUMNS)))

    def with_new_strings(self) -> StreamTables:
        """Tables with no strings and these kinds, tracks and columns (a STRINGS frame reset the table): a frame
        read before keeps these, with their strings."""
        tables = StreamTables()
        tables.kinds, tables.tracks, tables.stacks = self.kinds, self.tracks, self.stacks
        tables.columns, tables._column_index = self.columns, self._column_index
        return tables

    def with_new_stacks(self) -> StreamTables:
        """Tables with an empty stack table and these strings, kinds, tracks and columns (a STACKS frame reset it):
        a frame read before keeps these, with their stacks."""
        tables = self.with_new_strings()
        tables.strings = self.strings
        tables.stacks = StackTree()
        return tables

    def set_columns(self, columns: tuple[str, ...]) -> None:
        missing = [name for name in _NEEDED_COLUMNS if name not in columns]
        if missing:
            raise MalformedFrame(f"SCHEMA frame: field 'columns' lacks {missing} (got {list(columns)!r:.120})")
        self.columns = columns
        self._column_index = tuple(columns.index(name) for name in _NEEDED_COLUMNS)

    def unpack(self, frame: Events) -> list[list[Any]]:
        """The columns of ``frame``, args nested past what any reader walks clipped as the client clips them.

        Raises:
            MalformedFrame: the payload does not match the columns or the header's count.
        """
        columns = unpack_columns(frame, self.columns)
        clip_nesting(columns[self._column_index[-1]])
        return columns

    def rows(self, frame: Events) -> Iterator[tuple[KindSpec | None, str, int, int, Any]]:
        """``(kind, name, ts_ns, dur_ns, args)`` for each event of ``frame``; ``kind`` is None if never declared.

        Raises:
            MalformedFrame: the payload does not match the columns or the header's count.
        """
        columns = self.unpack(frame)
        kinds, names, offsets, durations, args = (columns[i] for i in self._column_index)
        strings, kind_specs, first_ns = self.strings, self.kinds, frame.first_ts_ns
        for kind, name, offset, duration, arg in zip(kinds, names, offsets, durations, args, strict=True):
            if not (type(kind) is int and type(name) is int and type(offset) is int and type(duration) is int):
                raise MalformedFrame("EVENTS frame: columns 'kind', 'name', 'ts' and 'dur' must hold integers")
            text = strings.get(name)
            yield (
                kind_specs.get(kind),
                text if text is not None else f"<unknown string {name}>",
                first_ns + offset,
                duration,
                arg,
            )

    def events(self, frame: Events) -> Iterator[DecodedEvent]:
        """The events of ``frame`` as objects (slower than ``rows``; for listeners, files and tests)."""
        track = self.tracks[frame.track_id]
        for kind, name, ts_ns, dur_ns, args in self.rows(frame):
            if kind is not None and kind.shape == "message" and type(args) is list:
                name, args = render(kind, args)
            elif kind is not None and kind.fields and type(args) is list:
                args = typed_args(kind, args, self.kinds)
            elif kind is not None and kind.shape == "sample":  # its stack, root first (empty: never declared)
                args = {"stack": self.stacks.resolve(args) or ()}
            elif kind is not None and is_call(kind):  # its one-frame stack: the function's file and first line
                args = call_args(self.stacks.innermost(args))
            yield DecodedEvent(kind.name if kind else "unknown", name, ts_ns, dur_ns, args, track)


def typed_args(kind: KindSpec, values: list[Any], kinds: Mapping[int, KindSpec], depth: int = 0) -> dict[str, Any]:
    """A typed event's values as a map of its fields, nested events (type code ``kind:ID``, looked up in ``kinds``)
    as maps too.

    A nested event carries its kind's fields after the first, the ``id`` only an event pushed on its own has.
    """
    out = {}
    for (name, code), value in zip(kind.fields[1:] if depth else kind.fields, values, strict=False):
        if code.startswith("kind:") and type(value) is list and depth < _MAX_NESTING:
            nested = kinds.get(int(code[5:])) if code[5:].isdigit() else None
            if nested is not None:
                value = typed_args(nested, value, kinds, depth + 1)
        out[name] = value
    return out
