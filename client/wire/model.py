"""What is recorded: event kinds, tracks, the string table, and the normalisation of argument values.

An event on the recording path is ``RECORD_FIELDS`` values, ``kind, label, start_ns, end_ns, args``, added to its
track's buffer in one ``list.extend``; an instant has ``start_ns == end_ns``, and ``args`` is ``None`` when there are
none. Labels become integer ids in a per-stream string table, and argument values are normalised, on the flusher
thread, never on the recording path.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from ringtrace.wire.frames import KindSpec

__all__ = [
    "ASYNC_BEGIN",
    "ASYNC_END",
    "ASYNC_TRACK",
    "BUILTIN_KINDS",
    "COUNTER",
    "COUNTER_TRACK",
    "FIRST_TYPED_KIND",
    "INSTANT",
    "KINDS",
    "MARKER",
    "MARKER_END",
    "MARKER_START",
    "MAX_ARG_DEPTH",
    "MAX_ARG_ITEMS",
    "MAX_ARG_TEXT",
    "MAX_STRING_CHARS",
    "OVERFLOW_LABEL",
    "RECORD_FIELDS",
    "SOURCE_CLOSE",
    "SOURCE_OPEN",
    "SOURCE_TRACK",
    "SPAN",
    "THREAD_TRACK",
    "DecodedEvent",
    "KindRegistry",
    "StringTable",
    "TrackInfo",
    "clean_text",
    "clip_nesting",
    "display_text",
    "new_track_id",
    "normalise_args",
    "normalise_values",
    "safe_str",
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

#: Longer labels and names are cut, ending with ``CUT_MARK``: a label is for display, and the collector bounds a
#: connection's string table by max_strings x MAX_STRING_CHARS.
MAX_STRING_CHARS: Final = 256
CUT_MARK: Final = "…"
OVERFLOW_LABEL: Final = "<ringtrace: string table full>"
#: Argument values nest at most this deep, and a map or list keeps at most this many items; what is cut is marked.
MAX_ARG_DEPTH: Final = 32
MAX_ARG_ITEMS: Final = 1000
#: Values one event's arguments may hold in all.
MAX_ARG_VALUES: Final = 10_000
#: Characters of one text value (bytes of one bytes value) kept; the rest is cut, with a mark.
MAX_ARG_TEXT: Final = 65_536
#: Integers msgpack (and the JSON export) carry as numbers; wider ones are sent as text.
_INT_RANGE: Final = range(-(2**63), 2**64)

_track_ids = itertools.count(1)


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


def safe_str(value: object) -> str:
    """``str(value)`` that cannot raise, and that UTF-8 can always encode (lone surrogates are escaped)."""
    try:
        text = str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
    return clean_text(text)


def display_text(value: object) -> str:
    """A label or name any frame can carry: text UTF-8 can encode, at most ``MAX_STRING_CHARS`` long.

    A longer one is cut and ends with ``CUT_MARK``, so that a reader sees it was cut.
    """
    text = safe_str(value)
    if len(text) > MAX_STRING_CHARS:
        return text[: MAX_STRING_CHARS - len(CUT_MARK)] + CUT_MARK
    return text


def clean_text(text: str) -> str:
    """``text`` with anything UTF-8 cannot encode (lone surrogates, from ``os.fsdecode`` say) escaped."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


_SCALARS: Final = frozenset({str, int, float, bool, type(None), bytes})
_CONTAINERS: Final = frozenset({dict, list})
_DEEP_MAP: Final = f"<ringtrace: clipped a map nested deeper than {MAX_ARG_DEPTH}>"
_DEEP_LIST: Final = f"<ringtrace: clipped a list nested deeper than {MAX_ARG_DEPTH}>"


def normalise_args(args: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """``args`` in a shape every reader can take, and how many values were cut.

    Keys become text; values msgpack and JSON can carry stay as they are (ints beyond 64 bits, sets, tuples and
    other objects become text or lists); maps and lists deeper than ``MAX_ARG_DEPTH`` or longer than
    ``MAX_ARG_ITEMS`` are cut, with a ``"<ringtrace: clipped ...>"`` mark where the cut is.
    """
    clipped = [0, MAX_ARG_VALUES]  # values cut, values still allowed
    try:
        value = _normalise_map(args, 1, clipped)
    except Exception as exc:  # a map or set resized by another thread while it was read, a broken container class
        clipped[0] += 1
        value = {"<ringtrace: clipped>": f"arguments that could not be read ({type(exc).__name__})"}
    return value, clipped[0]


def normalise_values(values: Any) -> tuple[list[Any], int]:
    """A message's values (a tuple) in a shape every reader can take, and how many were cut (see ``normalise_args``)."""
    clipped = [0, MAX_ARG_VALUES]
    return [_normalise(value, 1, clipped) for value in values], clipped[0]


def _normalise(value: Any, depth: int, clipped: list[int]) -> Any:
    clipped[1] -= 1
    if clipped[1] < 0:  # shared sublists can make a small object expand without bound
        clipped[0] += clipped[1] == -1
        return f"<ringtrace: clipped: more than {MAX_ARG_VALUES} values>"
    kind = type(value)
    if kind is str:
        if len(value) > MAX_ARG_TEXT:
            clipped[0] += 1
            return clean_text(value[:MAX_ARG_TEXT]) + f"<ringtrace: clipped {len(value) - MAX_ARG_TEXT} characters>"
        return clean_text(value)
    if kind is int:
        return value if value in _INT_RANGE else safe_str(value)  # str() refuses ints of over 4300 digits
    if kind in _SCALARS and kind is not bytes:
        return value
    if isinstance(value, dict):
        if depth >= MAX_ARG_DEPTH:
            clipped[0] += 1
            return _DEEP_MAP
        return _normalise_map(value, depth + 1, clipped)
    if isinstance(value, list | tuple | set | frozenset):
        if depth >= MAX_ARG_DEPTH:
            clipped[0] += 1
            return _DEEP_LIST
        items = [_normalise(v, depth + 1, clipped) for v in itertools.islice(value, MAX_ARG_ITEMS)]
        if len(value) > MAX_ARG_ITEMS:
            clipped[0] += 1
            items.append(f"<ringtrace: clipped {len(value) - MAX_ARG_ITEMS} more items>")
        return items
    if isinstance(value, int):  # bool is handled above; an int subclass (an IntEnum) shows as its text
        return safe_str(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        if len(value) > MAX_ARG_TEXT:
            clipped[0] += 1
            return bytes(value[:MAX_ARG_TEXT])
        return bytes(value)
    return safe_str(value)


def _normalise_map(mapping: dict[Any, Any], depth: int, clipped: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in itertools.islice(mapping.items(), MAX_ARG_ITEMS):
        out[_key_text(key)] = _normalise(value, depth, clipped)
    if len(mapping) > MAX_ARG_ITEMS:
        clipped[0] += 1
        out["<ringtrace: clipped>"] = f"{len(mapping) - MAX_ARG_ITEMS} more items"
    return out


def clip_nesting(args: list[Any]) -> int:
    """Cuts, in place, the maps and lists of an EVENTS frame's args column nested deeper than ``MAX_ARG_DEPTH``, as
    ``normalise_args`` would have (an event's map, or a message's or typed event's list of values, is level 0), and
    returns how many were cut.

    The real client never sends them, but msgpack carries any depth, and a reader that walks values recursively
    (JSON and protobuf writers) would fail on a peer's 1,000 levels: every reader shows a stored frame as this does.
    """
    # The usual case first, in one pass: no map or list holds another (2x faster than a walk of each value).
    inner = [v.values() if type(v) is dict else v for v in args if type(v) in _CONTAINERS]
    if _CONTAINERS.isdisjoint(map(type, itertools.chain.from_iterable(inner))):
        return 0
    cut = [0]
    for i, value in enumerate(args):
        kind = type(value)
        if (kind is dict or kind is list) and not _nests_within(value, 1):
            args[i] = _clipped(value, 0, cut)
    return cut[0]


def _nests_within(container: dict[Any, Any] | list[Any], depth: int) -> bool:
    """Whether the maps and lists in ``container`` (its items at ``depth``) stop at ``MAX_ARG_DEPTH``."""
    for item in container.values() if type(container) is dict else container:
        kind = type(item)
        if (kind is dict or kind is list) and (depth >= MAX_ARG_DEPTH or not _nests_within(item, depth + 1)):
            return False
    return True


def _clipped(item: Any, depth: int, cut: list[int]) -> Any:
    """``item`` (at ``depth``) with the maps and lists past ``MAX_ARG_DEPTH`` replaced by a mark, counted in ``cut``."""
    kind = type(item)
    if kind is not dict and kind is not list:
        return item
    if depth >= MAX_ARG_DEPTH:
        cut[0] += 1
        return _DEEP_MAP if kind is dict else _DEEP_LIST
    if kind is dict:
        return {key: _clipped(value, depth + 1, cut) for key, value in item.items()}
    return [_clipped(value, depth + 1, cut) for value in item]


def _key_text(key: object) -> str:
    """A map key as text: bytes as hex, as the JSON export shows bytes values."""
    if type(key) is str:
        return clean_text(key)
    if isinstance(key, bytes):
        return key.hex()
    return safe_str(key)


#: Label types the string table keeps as keys when their text is not cut: each has a text of its own.
_KEYED_LABELS: Final = frozenset({str, int, bool})


class RetiredStrings:
    """An earlier epoch's strings, kept compact (one text, and where each ends): a client cut off from its collector
    while it makes new labels fast keeps several epochs' strings for the frames it has queued, and a hundred thousand
    str objects take several times the bytes of their text."""

    __slots__ = ("_ends", "_text")

    def __init__(self, strings: list[str]) -> None:
        self._text = "".join(strings)
        self._ends = array("Q", itertools.accumulate(map(len, strings)))

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, index: int) -> str:
        return self._text[self._ends[index - 1] if index else 0 : self._ends[index]]


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class StringTable(dict[object, int]):
    """Maps labels to ids, assigning the next id to a label on first lookup.

    A dict subclass so that ``map(table.__getitem__, labels)`` runs in C for labels already seen; only a miss runs
    Python. The last id, ``max_strings - 1``, is reserved for ``OVERFLOW_LABEL``: once every other id is taken, each new
    label maps to it and ``overflowed`` counts the lookups that found the table full (one per event so labelled), so
    labels built from unbounded data (request ids, say) cannot grow the client and collector without bound. Labels
    that compare equal to one kept (``1.0`` or ``True`` after ``1``) share its id, as dict keys do.

    Only labels whose text is theirs alone are kept as keys: text and ints not cut to ``MAX_STRING_CHARS``. Any
    other label (an object, NaN, a long text cut to a shared prefix) is looked up by its text each time, so that
    such labels neither grow the table past its strings nor stay alive in it.

    A table whose reader takes it (``recycles``) starts again when it fills, rather than overflow for the rest of the
    stream: ``recycle`` forgets every label and begins a new ``epoch``, and the next STRINGS frame says so
    (``take_reset``), as Perfetto's producers clear their interned data. Labels recorded later keep their names.
    """

    def __init__(self, max_strings: int = 100_000) -> None:
        super().__init__()
        if max_strings < 2:
            raise ValueError(f"max_strings must be >= 2, got {max_strings}")
        self.strings: list[str] = []
        self.max_strings = max_strings
        #: The most ids a table may hold (the WELCOME's ``max_strings``): ``max_strings`` less the ids a byte budget
        #: cut (``limit_to``) holds only until the table starts again.
        self._max_ids = max_strings
        #: UTF-8 bytes the strings may take together (a collector's WELCOME may set it), and what they take.
        self.max_bytes = 2**63 - 1
        self.bytes = 0
        self.overflowed = 0
        #: Ids that named strings until the last ``limit_to`` cut them (see ``limit_to``).
        self.cut_ids = range(0)
        #: Start again when full (``recycle``): the stream's reader takes STRINGS frames that reset the table.
        self.recycles = False
        self.epoch = 0
        #: Keep each epoch's strings when it ends, in ``retired`` (until ``keep_epochs``): frames packed with them
        #: may have to be packed again in a later epoch (``labels_of``).
        self.keeps_retired = False
        self.retired: dict[int, RetiredStrings] = {}
        #: This epoch gave the overflow label's id: the stream must be told its text.
        self.overflow_used = False
        self._sent = 0
        self._overflow_sent = False
        self._reset_pending = False

    @property
    def overflow_id(self) -> int:
        return self.max_strings - 1

    def __missing__(self, label: object) -> int:
        text = display_text(label)
        if text is not label:
            string_id = self[text]
        elif len(self.strings) < self.overflow_id and self.bytes + (size := _utf8_size(text)) <= self._byte_budget:
            string_id = len(self.strings)
            self.strings.append(text)
            self.bytes += size
        else:
            self.overflowed += 1
            self.overflow_used = True
            return self.overflow_id  # not kept: keeping every overflowed label would grow the dict
        if string_id != self.overflow_id and (
            text is label or (type(label) in _KEYED_LABELS and len(text) < MAX_STRING_CHARS)
        ):
            self[label] = string_id
        return string_id

    def runs(self) -> list[tuple[int, list[str]]]:
        """The whole table as ``(first_id, strings)`` runs: what a new stream must be sent."""
        runs = [(0, list(self.strings))] if self.strings else []
        if self.overflow_used:
            runs.append((self.overflow_id, [OVERFLOW_LABEL]))
        return runs

    def take_new(self) -> list[tuple[int, list[str]]]:
        """The runs of strings added since the last call (the overflow label once, after it was first used)."""
        runs = []
        if self._sent < len(self.strings):
            runs.append((self._sent, self.strings[self._sent :]))
            self._sent = len(self.strings)
        if self.overflow_used and not self._overflow_sent:
            runs.append((self.overflow_id, [OVERFLOW_LABEL]))
            self._overflow_sent = True
        return runs

    def take_reset(self) -> bool:
        """Whether the table started again since the last call: the next STRINGS frame must reset the stream's."""
        reset, self._reset_pending = self._reset_pending, False
        return reset

    def recycle(self) -> None:
        """Forget every label and start a new epoch (the table is full, and ``recycles``)."""
        if self.keeps_retired:
            self.retired[self.epoch] = RetiredStrings(self.strings)
        self.epoch += 1
        self.max_strings = self._max_ids  # the bytes a budget cut made room for are free again
        self.clear()
        self.strings = []
        self.bytes = 0
        self.cut_ids = range(0)
        self.overflow_used = False
        self._sent = 0
        self._overflow_sent = False
        self._reset_pending = True

    def labels_of(self, epoch: int, string_ids: Iterable[int]) -> list[str | None]:
        """The labels ``string_ids`` named in ``epoch``, an earlier one kept in ``retired``; None for the overflow
        label (counted when it was packed), and for every id of an epoch not kept (counted now)."""
        strings = self.retired.get(epoch)
        if strings is None:  # (frames of an epoch not kept: a table that did not keep them)
            ids = list(string_ids)
            self.overflowed += len(ids)
            return [None] * len(ids)
        known = len(strings)
        return [strings[string_id] if string_id < known else None for string_id in string_ids]

    def keep_epochs(self, epochs: Iterable[int]) -> None:
        """Forget the retired epochs but ``epochs`` (those of the frames still queued)."""
        kept = set(epochs)
        for epoch in [epoch for epoch in self.retired if epoch not in kept]:
            del self.retired[epoch]

    @property
    def _byte_budget(self) -> int:
        """What the strings may take, the overflow label kept room for."""
        return self.max_bytes - len(OVERFLOW_LABEL.encode())

    def limit_to(self, max_strings: int, max_bytes: int | None = None) -> bool:
        """Lower the limits (a collector's WELCOME asks for fewer strings, or fewer bytes of them); True if ids at or
        past the new limit were in use.

        Labels that had such ids now map to the overflow label; frames already packed with them must be re-packed
        with ``clamp`` over their name ids. ``cut_ids`` holds the ids cut: events packed with one of them are shown
        with the overflow label from now on (and not counted yet), unlike those packed with an overflow id.
        """
        self.cut_ids = range(0)
        self._max_ids = min(self._max_ids, max(max_strings, 2))
        if max_bytes is not None and max_bytes < self.max_bytes:
            self.max_bytes = max_bytes
            fits, total = 0, 0
            for text in self.strings:
                total += _utf8_size(text)
                if total > self._byte_budget:
                    break
                fits += 1
            if fits < len(self.strings):  # the strings that fit keep their ids; the next id is the overflow label's
                max_strings = min(max_strings, fits + 1)
        if max_strings >= self.max_strings:
            return False
        # Frames packed with the overflow label's id (this epoch gave it) carry an id past the new limit too.
        moved = self.overflow_used
        self.max_strings = max(max_strings, 2)
        cut = len(self.strings) > self.overflow_id
        if cut:
            self.cut_ids = range(self.overflow_id, len(self.strings))
            self.bytes -= sum(map(_utf8_size, self.strings[self.overflow_id :]))
            del self.strings[self.overflow_id :]
            for label in [label for label, string_id in self.items() if string_id >= self.overflow_id]:
                del self[label]
        self._sent = min(self._sent, len(self.strings))
        self._overflow_sent = False
        self.overflow_used = self.overflow_used or cut
        return cut or moved

    def clamp(self, string_id: int) -> int:
        """``string_id`` if it is below the limit, else the overflow id."""
        return string_id if string_id < self.overflow_id else self.overflow_id
