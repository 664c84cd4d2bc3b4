"""A message's text rendered and matched against a rule's text glob from int64 tables, as both twins of
``rule_verdicts.py`` read them, so that a message whose rule has a text glob other than ``*`` is judged without Python.

Theory of operation
-------------------
A rule's text glob (``Pattern``: the text exactly, or ``fnmatch.translate``'s regex) is compiled once into a
*glob program*: the regex as ``re`` parses it, each part a code point (``LIT``), any code point (``ANY``), a set
(``SET``: negated or not, ranges of code points), any run of code points (``STAR``: ``.*``, lazy or not, atomic or not:
with parts of one code point each, they all match the same texts) or what never matches (``NEVER``: ``(?!)``). A
regex with anything else is not compiled (None): its rule's messages stay Python's to judge.

A message kind's text is compiled into a *render program* (``render``, ``wire/message_format.py``): its pieces of
text as written, and each placeholder (``${name}``, or ``$name`` shown ``name(value)``) with the values it may show:
the indices whose name is its name (a field's, or ``value{i + 1}`` past the fields). With ``n`` values given, it
shows the last such index below ``n`` (``render``'s ``dict(zip(names, values))`` keeps the last), else stays as
written.

A program is stored at ``start`` in its table: its length in int64s, then its words. ``render_text`` and
``glob_holds`` read them as the C twin does: a program cut short, a word of no known part, or a code point that
cannot be one gives None (Python judges). Values are rendered only where each is nil, a bool, an integer or a text
(``str``): anything else (floats, bytes, containers, extensions) gives None too.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import re
import warnings
from array import array
from collections.abc import Sequence
from typing import Any, Final

from ringtrace.wire.message_format import PLACEHOLDER
from ringtrace.wire.table_frames import KindSpec

__all__ = [
    "ANY",
    "LIT",
    "NEVER",
    "PIECE_TEXT",
    "PIECE_VALUE",
    "SET",
    "STAR",
    "add_glob",
    "add_render",
    "glob_holds",
    "render_text",
    "rendered_value",
]

#: A glob program's parts (see the module docstring): LIT code point; ANY; STAR; SET negated count (lo, hi)*count;
#: NEVER.
LIT, ANY, STAR, SET, NEVER = 1, 2, 3, 4, 5
#: A render program's pieces: PIECE_TEXT count code point*count; PIECE_VALUE shown_with_name name_length
#: code point*name_length count index*count.
PIECE_TEXT, PIECE_VALUE = 1, 2
_MAX_CODE_POINT: Final = 0x10FFFF
_VALUE_NAME: Final = re.compile(r"value([1-9][0-9]*)", re.ASCII)
_parser: Any = importlib.import_module("re._parser")
_constants: Any = importlib.import_module("re._constants")
_FLAGS_OTHER_THAN_DOTALL: Final = ~(_constants.SRE_FLAG_DOTALL | _constants.SRE_FLAG_UNICODE)
#: What ``(?!)`` parses to from Python 3.13 on (an empty negative lookahead before).
_FAILURE: Final = getattr(_constants, "FAILURE", object())


def add_glob(globs: array[int], text: str) -> int:
    """The glob program of ``Pattern(text)`` added to ``globs``: where it starts, or -1 if it cannot be one."""
    words = _glob_words(text)  # (cached: every segment's criteria add the same globs)
    if words is None:
        return -1
    start = len(globs)
    globs.append(len(words))
    globs.extend(words)
    return start


def add_render(renders: array[int], kind: KindSpec) -> int:
    """The render program of a message kind added to ``renders``: where it starts."""
    names = [name for name, _ in kind.fields]
    words: list[int] = []
    position = 0
    for match in PLACEHOLDER.finditer(kind.text):
        _text_piece(words, kind.text[position : match.start()])
        position = match.end()
        plain, named = match[1], match[2]
        name = plain if plain is not None else named
        indices = [i for i, field in enumerate(names) if field == name]
        value = _VALUE_NAME.fullmatch(name)
        if value is not None and len(names) <= int(value[1]) - 1 < 2**62:
            indices.append(int(value[1]) - 1)
        words += (PIECE_VALUE, int(plain is None), len(name), *map(ord, name), len(indices), *indices)
    _text_piece(words, kind.text[position:])
    start = len(renders)
    renders.append(len(words))
    renders.extend(words)
    return start


def _text_piece(words: list[int], text: str) -> None:
    if text:
        words += (PIECE_TEXT, len(text), *map(ord, text))


def rendered_value(value: Any) -> str | None:
    """A value as ``render`` shows it, where the C twin renders it too (nil, a bool, an integer, a text); else None."""
    if value is None or type(value) in (bool, int, str):
        return f"{value}"
    return None


def render_text(renders: Sequence[int], start: int, values: Sequence[Any]) -> str | None:
    """The text of a message of these values by the render program at ``start`` (``render``'s), or None (see the
    module docstring)."""
    shown = [rendered_value(value) for value in values]
    if None in shown:
        return None
    words = _program(renders, start)
    if words is None:
        return None
    out: list[str] = []
    at, end = 0, len(words)
    while at < end:
        piece = words[at]
        if piece == PIECE_TEXT and at + 1 < end and 0 <= words[at + 1] <= end - at - 2:
            text = _text(words[at + 2 : at + 2 + words[at + 1]])
            at += 2 + words[at + 1]
        elif piece == PIECE_VALUE and at + 2 < end and 0 <= words[at + 2] <= end - at - 4:
            with_name, length = words[at + 1], words[at + 2]
            name = _text(words[at + 3 : at + 3 + length])
            count_at = at + 3 + length
            count = words[count_at]
            if not 0 <= count <= end - count_at - 1:
                return None
            indices = [i for i in words[count_at + 1 : count_at + 1 + count] if 0 <= i < len(shown)]
            at = count_at + 1 + count
            if name is None:
                return None
            if not indices:
                text = f"${name}" if with_name else f"${{{name}}}"
            else:
                text = f"{name}({shown[max(indices)]})" if with_name else shown[max(indices)]
        else:
            return None
        if text is None:
            return None
        out.append(text)
    return "".join(out)


def glob_holds(globs: Sequence[int], start: int, text: str) -> bool | None:
    """Whether ``text`` matches the glob program at ``start`` (``Pattern``'s), or None (see the module docstring)."""
    words = _program(globs, start)
    if words is None:
        return None
    at, end, never = 0, len(words), False
    while at < end:  # (checked whole first: a program cut short is refused wherever it is cut)
        part = words[at]
        if part == LIT and at + 1 < end:
            at += 2
        elif part in (ANY, STAR, NEVER):
            never |= part == NEVER
            at += 1
        elif part == SET and at + 2 < end and 0 <= words[at + 2] <= (end - at - 3) // 2:
            at += 3 + 2 * words[at + 2]
        else:
            return None
    if never:
        return False
    points = [ord(c) for c in text]
    p = t = 0
    star_p = star_t = -1
    while t < len(points):
        if p < end and words[p] == STAR:
            star_p, star_t = p, t
            p += 1
        elif p < end and _one(words, p, points[t]):
            p += 1 + (1 if words[p] == LIT else 0 if words[p] == ANY else 2 + 2 * words[p + 2])
            t += 1
        elif star_p >= 0:
            p, star_t = star_p + 1, star_t + 1
            t = star_t
        else:
            return False
    while p < end and words[p] == STAR:
        p += 1
    return p == end


def _one(words: Sequence[int], at: int, point: int) -> bool:
    """Whether the part at ``at`` (of one code point) takes ``point``."""
    part = words[at]
    if part == LIT:
        return words[at + 1] == point
    if part == ANY:
        return True
    if part == SET:
        inside = any(words[k] <= point <= words[k + 1] for k in range(at + 3, at + 3 + 2 * words[at + 2], 2))
        return inside != (words[at + 1] != 0)
    return False


def _program(table: Sequence[int], start: int) -> Sequence[int] | None:
    """The words of the program at ``start``, or None if it is not within the table."""
    if not 0 <= start < len(table) or not 0 <= table[start] <= len(table) - start - 1:
        return None
    return table[start + 1 : start + 1 + table[start]]


def _text(points: Sequence[int]) -> str | None:
    if not all(0 <= point <= _MAX_CODE_POINT for point in points):
        return None
    return "".join(map(chr, points))


@functools.lru_cache(maxsize=1024)
def _glob_words(text: str) -> tuple[int, ...] | None:
    """The parts of ``Pattern(text)``'s regex as ``re`` parses it, or None if it has any other."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a set that looks nested: the regex is what Pattern compiled)
        try:
            parsed = _parser.parse(fnmatch.translate(text))
        except Exception:
            return None
    if parsed.state.flags & _FLAGS_OTHER_THAN_DOTALL:
        return None
    items = list(parsed.data)
    if not items or items[-1] != (_constants.AT, _constants.AT_END_STRING):
        return None
    words: list[int] = []
    return tuple(words) if _walk(items[:-1], bool(parsed.state.flags & _constants.SRE_FLAG_DOTALL), words) else None


def _walk(items: Sequence[tuple[Any, Any]], dotall: bool, words: list[int]) -> bool:
    c = _constants
    for op, av in items:
        if op is c.LITERAL:
            words += (LIT, av)
        elif op is c.NOT_LITERAL:
            words += (SET, 1, 1, av, av)
        elif op is c.ANY and dotall:
            words.append(ANY)
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT) and dotall:
            low, high, repeated = av
            if low != 0 or high is not c.MAXREPEAT or list(repeated.data) != [(c.ANY, None)]:
                return False
            words.append(STAR)
        elif op is c.SUBPATTERN:
            _, add_flags, del_flags, sub = av
            if add_flags & _FLAGS_OTHER_THAN_DOTALL or del_flags:
                return False
            if not _walk(list(sub.data), dotall or bool(add_flags & c.SRE_FLAG_DOTALL), words):
                return False
        elif op is c.ATOMIC_GROUP:
            if not _walk(list(av.data), dotall, words):
                return False
        elif op is c.IN:
            negated, ranges = 0, list[int]()
            for index, (item, value) in enumerate(av):
                if item is c.NEGATE and index == 0:
                    negated = 1
                elif item is c.LITERAL:
                    ranges += (value, value)
                elif item is c.RANGE:
                    ranges += value
                else:
                    return False
            words += (SET, negated, len(ranges) // 2, *ranges)
        elif (op is c.ASSERT_NOT and not list(av[1].data)) or op is _FAILURE:
            words.append(NEVER)
        else:
            return False
    return True
