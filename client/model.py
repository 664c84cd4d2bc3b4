"""Event kinds and the string table.

An event on the recording path is ``RECORD_FIELDS`` values, ``kind, label, start_ns, end_ns, args``, added to its
thread's buffer in one ``list.extend``; an instant has ``start_ns == end_ns``, and ``args`` is ``None`` when there are
none. Labels become integer ids in a per-process
string table on the flusher thread, never on the recording path.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "INSTANT",
    "KINDS",
    "MAX_STRING_CHARS",
    "RECORD_FIELDS",
    "SPAN",
    "StringTable",
    "clean_text",
    "display_text",
    "safe_str",
]

#: Values per event in a thread buffer: kind, label, start_ns, end_ns, args.
RECORD_FIELDS: Final = 5
SPAN: Final = 0
INSTANT: Final = 1
#: (kind id, kind name) as sent in the SCHEMA frame.
KINDS: Final = ((SPAN, "span"), (INSTANT, "instant"))
#: Longer labels are cut: a label is for display, and the collector bounds a connection's string table by
#: max_strings x MAX_STRING_CHARS.
MAX_STRING_CHARS: Final = 256
OVERFLOW_LABEL: Final = "<ringtrace: string table full>"


def safe_str(value: object) -> str:
    """``str(value)`` that cannot raise, and that UTF-8 can always encode (lone surrogates are escaped)."""
    try:
        text = str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
    return clean_text(text)


def display_text(value: object) -> str:
    """A label or name any frame can carry: text UTF-8 can encode, at most ``MAX_STRING_CHARS`` long."""
    return safe_str(value)[:MAX_STRING_CHARS]


def clean_text(text: str) -> str:
    """``text`` with anything UTF-8 cannot encode (lone surrogates, from ``os.fsdecode`` say) escaped."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


class StringTable(dict[object, int]):
    """Maps labels to ids, assigning the next id to a label on first lookup.

    A dict subclass so that ``map(table.__getitem__, labels)`` runs in C for labels already seen; only a miss runs
    Python. Past ``max_strings`` entries every new label maps to one overflow string, and ``overflowed`` counts the
    lookups that found the table full (one per event so labelled): labels built from unbounded data (request ids, say)
    must not grow the client and collector without bound. Labels that compare equal (``1``, ``1.0``, ``True``) share
    an id, as dict keys do.
    """

    def __init__(self, max_strings: int = 100_000) -> None:
        super().__init__()
        self.strings: list[str] = []
        self.max_strings = max_strings
        self.overflowed = 0
        self._overflow_id: int | None = None
        self._sent = 0

    def __missing__(self, label: object) -> int:
        text = display_text(label)
        if text is not label:
            string_id = self[text]
        elif len(self.strings) < self.max_strings:
            string_id = len(self.strings)
            self.strings.append(text)
        else:
            self.overflowed += 1
            if self._overflow_id is None:
                self._overflow_id = len(self.strings)
                self.strings.append(OVERFLOW_LABEL)
            return self._overflow_id
        if string_id != self._overflow_id:  # an overflowed label is not kept: that would grow the dict
            self[label] = string_id
        return string_id

    def take_new(self) -> tuple[int, list[str]]:
        """The strings added since the last call, as ``(first_id, strings)``."""
        first = self._sent
        self._sent = len(self.strings)
        return first, self.strings[first:]
