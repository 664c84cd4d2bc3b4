"""The string table of one stream: labels to ids, within the limits a collector states, with an overflow label
past them, or started again (a new epoch) when the reader takes that."""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterable
from typing import Final

from ringtrace.wire.arg_values import MAX_STRING_CHARS, display_text

__all__ = ["OVERFLOW_LABEL", "RetiredStrings", "StringTable"]

OVERFLOW_LABEL: Final = "<ringtrace: string table full>"

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
