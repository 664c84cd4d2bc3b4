"""Texts and argument values every reader can take: labels and names cut to ``MAX_STRING_CHARS``, text UTF-8 can
encode, argument maps and lists bounded in depth, length and count, each cut marked. The client normalises on its
flusher thread, never on the recording path; a reader clips what a peer sent past the bounds (``clip_nesting``).
"""

from __future__ import annotations

import itertools
from typing import Any, Final

__all__ = [
    "CUT_MARK",
    "MAX_ARG_DEPTH",
    "MAX_ARG_ITEMS",
    "MAX_ARG_TEXT",
    "MAX_ARG_VALUES",
    "MAX_STRING_CHARS",
    "clean_text",
    "clip_nesting",
    "display_text",
    "normalise_args",
    "normalise_values",
    "safe_str",
]

#: Longer labels and names are cut, ending with ``CUT_MARK``: a label is for display, and the collector bounds a
#: connection's string table by max_strings x MAX_STRING_CHARS.
MAX_STRING_CHARS: Final = 256
CUT_MARK: Final = "…"
#: Argument values nest at most this deep, and a map or list keeps at most this many items; what is cut is marked.
MAX_ARG_DEPTH: Final = 32
MAX_ARG_ITEMS: Final = 1000
#: Values one event's arguments may hold in all.
MAX_ARG_VALUES: Final = 10_000
#: Characters of one text value (bytes of one bytes value) kept; the rest is cut, with a mark.
MAX_ARG_TEXT: Final = 65_536
#: Integers msgpack (and the JSON export) carry as numbers; wider ones are sent as text.
_INT_RANGE: Final = range(-(2**63), 2**64)


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
