"""The rules' verdicts on a run's candidates (``match_run``'s), rule by rule, so that Python sees only what fires or
what it alone can judge.

Theory of operation
-------------------
The first pass (``frame_match.py``) finds an event a candidate when it may meet *some* rule. Here each candidate is
judged for each rule it may meet, from ``RuleTables`` (compiled by ``criteria.py`` beside the first pass's criteria):
per kind id and per name id of a name group, a range of *entries*, one a rule (its place in the rule set, a least
duration and a *test*):

- ``LONG``: a complete span's condition: the kind's shape is ``span`` and ``dur`` is at least the least duration;
- ``ERROR``: an OTLP span's error status: the args map says ``"status": "error"``;
- ``ALWAYS``: it holds (a ``tl.incident`` call; a message whose kind meets the rule, its text glob ``*``);
- ``CROSSES``: a counter's crossing (``judge.py``): its ``value`` is past the entry's ``above`` (or ``below``) limit
  and the counter's last value was not (or there was none). Its name's *key* (one per counter name, ``-1``: none)
  and the track tell counters apart; their last values are given (``known``: the judge's, for the run's process)
  and kept through the run, and each value read is logged (``log``: the candidate's index, track, key and value)
  for the judge to keep, in order. Where ``counters`` is false, or the name has no key, it is ``ASK``'s;
- ``TEXT``: a message's text glob (other than ``*``): the message rendered by its kind's render program and matched
  by the entry's glob program (``text_match.py``; the least duration's slot is where the glob program starts, the
  kind's fifth slot where its render program starts, -1: none). Where either cannot be read, or a value is one
  ``text_match`` does not render (its args not a list of nils, bools, integers and texts), it is ``ASK``'s;
- ``ASK``: Python judges it.

An event whose wall-clock times (``ts`` + the process's clock offset) cannot be is no candidate of any rule (as the
judge skips it). A rule whose test holds takes a place among its rule's firings of the step (``room``, per rule),
unless its event's times are ones the engine refuses (``admission.refusal_of``: made, and the engine says why,
taking no place); past its ``room`` it is counted in ``surplus`` (per rule), not made. So each rule's place is taken
in the candidates' order, as ``judge.py`` takes it for the rules it judges (a rule is judged all here or all there).

The verdicts, ``VERDICT_SLOTS`` int64s each (the candidate's index in the run, the rule's place, ``MADE`` or
``JUDGE``), come in candidate order, and for one candidate in the rules' order (the kind's entries and the name's
merged, as ``SegmentCriteria.watchers`` merges them). A counter's value (``value`` in its args map, an integer or a
float, not a bool) is read where some entry is ``CROSSES``. ``rule_verdicts`` runs the C twin (``_match.c``) where it
was built and ``rule_verdicts_py`` (which defines the behaviour) otherwise, or where the clock offset is past 64 bits.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack
from ringtrace.collector.incidents.admission import refusal_of
from ringtrace.collector.incidents.frame_match import RUN_SLOTS
from ringtrace.collector.incidents.text_match import glob_holds, render_text
from ringtrace.collector.read.frame_walk import MAX_WALL_NS
from ringtrace.wire.optional_c import load_optional

__all__ = [
    "ALWAYS",
    "ASK",
    "CROSSES",
    "ENTRY_SLOTS",
    "ERROR",
    "JUDGE",
    "KIND_ENTRY_SLOTS",
    "LIMIT_SLOTS",
    "LOG_SLOTS",
    "LONG",
    "MADE",
    "NAME_ENTRY_SLOTS",
    "TEXT",
    "VERDICT_SLOTS",
    "Judged",
    "RuleTables",
    "logged",
    "rule_verdicts",
    "rule_verdicts_py",
    "verdicts",
]

_match = load_optional("ringtrace.collector.incidents._match")

#: An entry's tests (see the module docstring).
LONG, ERROR, ALWAYS, ASK, CROSSES, TEXT = 1, 2, 3, 4, 5, 6
#: A verdict: the firing is made (a place taken, or its times refused), or Python judges it.
MADE, JUDGE = 1, 2
#: int64s per entry (rule's place, least duration, a ``CROSSES``'s limits' index or a ``TEXT``'s glob program, test),
#: per kind id (entries' start and count, name group or -1, 1 if its shape is ``span``, its render program or -1),
#: per name id of a group (entries' start and count,
#: counter's key or -1), per verdict (candidate's index in the run, rule's place, verdict), per logged value
#: (candidate's index, track, key); doubles per limits (1 if ``above``, above, 1 if ``below``, below).
ENTRY_SLOTS: Final = 3
KIND_ENTRY_SLOTS: Final = 5
NAME_ENTRY_SLOTS: Final = 3
VERDICT_SLOTS: Final = 3
LOG_SLOTS: Final = 3
LIMIT_SLOTS: Final = 4
_INT64: Final = range(-(2**63), 2**63)


@dataclass(slots=True)
class RuleTables:
    """A segment's rules by kind and name, as both twins read them (see the module docstring)."""

    entries: array[int] = field(default_factory=lambda: array("q"))
    kinds: array[int] = field(default_factory=lambda: array("q"))
    names: tuple[array[int], ...] = ()
    limits: array[float] = field(default_factory=lambda: array("d"))
    #: Glob programs and render programs (``text_match.py``).
    globs: array[int] = field(default_factory=lambda: array("q"))
    renders: array[int] = field(default_factory=lambda: array("q"))


@dataclass(slots=True)
class Judged:
    """What ``rule_verdicts`` gave: the verdicts (``verdicts`` reads them), and the counters' values it read
    (``LOG_SLOTS`` int64s each in ``log``, their values in ``log_values``; ``logged`` reads them)."""

    verdicts: bytes
    log: bytes
    log_values: bytes


def rule_verdicts(
    found: bytes,
    buffer: bytes | bytearray | memoryview,
    tables: RuleTables,
    room: array[int],
    surplus: array[int],
    now_ns: int,
    clock_offset_ns: int,
    known: array[int],
    known_values: array[float],
    counters: bool,
) -> Judged:
    """The verdicts on ``match_run``'s candidates ``found`` (see the module docstring); ``room`` and ``surplus`` (per
    rule's place) are written.

    Args:
        buffer: the segment's buffer (the candidates' args are in it).
        now_ns: the collector's wall clock (the step's).
        clock_offset_ns: the process's (wall-clock ns = ts + it).
        known, known_values: counters' last values: (track, key) pairs, and their values.
        counters: whether counters' crossings are judged here.
    """
    if _match is not None and clock_offset_ns in _INT64:
        made: tuple[bytes, bytes, bytes] = _match.rule_verdicts(
            found, buffer, tables.entries, tables.kinds, tables.names, tables.limits, tables.globs, tables.renders,
            room, surplus, now_ns, clock_offset_ns, known, known_values, counters,
        )  # fmt: skip
        return Judged(*made)
    return rule_verdicts_py(
        found, buffer, tables, room, surplus, now_ns, clock_offset_ns, known, known_values, counters
    )


def rule_verdicts_py(
    found: bytes,
    buffer: bytes | bytearray | memoryview,
    tables: RuleTables,
    room: array[int],
    surplus: array[int],
    now_ns: int,
    clock_offset_ns: int,
    known: array[int],
    known_values: array[float],
    counters: bool,
) -> Judged:
    """``rule_verdicts`` in Python: what defines it."""
    rows = memoryview(found)[: len(found) // 8 * 8].cast("q")
    view = memoryview(buffer)
    entries, kinds, groups = tables.entries, tables.kinds, tables.names
    places = min(len(room), len(surplus))
    last = {(known[2 * i], known[2 * i + 1]): known_values[i] for i in range(min(len(known) // 2, len(known_values)))}
    out, log, log_values = array("q"), array("q"), array("d")
    for index in range(len(rows) // RUN_SLOTS):
        kind, name, ts, dur, args_start, args_end, track, first_ts = rows[index * RUN_SLOTS : (index + 1) * RUN_SLOTS]
        wall_ns = first_ts + ts + clock_offset_ns
        if not 0 <= wall_ns <= wall_ns + dur <= MAX_WALL_NS or not 0 <= kind < len(kinds) // KIND_ENTRY_SLOTS:
            continue
        start, count, group, span, render = kinds[kind * KIND_ENTRY_SLOTS : (kind + 1) * KIND_ENTRY_SLOTS]
        named, key = (0, 0), -1
        if 0 <= group < len(groups) and 0 <= name < len(groups[group]) // NAME_ENTRY_SLOTS:
            at = name * NAME_ENTRY_SLOTS
            named, key = (groups[group][at], groups[group][at + 1]), groups[group][at + 2] if counters else -1
        refused = refusal_of(wall_ns, wall_ns + dur, now_ns) is not None
        error: bool | None = None
        rendered, text = False, None
        merged = list(_merged(entries, (start, count), named))
        value = None
        if key >= 0 and any(test == CROSSES for _, _, test in merged):
            value = _value(view, args_start, args_end)
        before = last.get((track, key)) if value is not None else None
        for place, min_dur, test in merged:
            if not 0 <= place < places:
                continue
            if test == ASK or (test == CROSSES and key < 0):
                out.extend((index, place, JUDGE))
                continue
            if test == ERROR and error is None:
                error = _status_error(view, args_start, args_end)
            holds = test == ALWAYS or (test == LONG and span == 1 and dur >= min_dur) or (test == ERROR and error)
            if test == TEXT:  # (rendered once, for the first of its entries)
                if not rendered:
                    values = _values(view, args_start, args_end)
                    rendered, text = True, render_text(tables.renders, render, values) if values is not None else None
                glob = glob_holds(tables.globs, min_dur, text) if text is not None else None
                if glob is None:
                    out.extend((index, place, JUDGE))
                    continue
                holds = glob
            if test == CROSSES and value is not None:
                holds = _crossed(tables.limits, min_dur, value, before)
            if not holds:
                continue
            if refused:
                out.extend((index, place, MADE))
            elif room[place] > 0:
                room[place] -= 1
                out.extend((index, place, MADE))
            else:
                surplus[place] += 1
        if value is not None:
            last[track, key] = value
            log.extend((index, track, key))
            log_values.append(value)
    return Judged(out.tobytes(), log.tobytes(), log_values.tobytes())


def logged(judged: Judged) -> Iterator[tuple[int, int, int, float]]:
    """(candidate's index in the run, track, counter's key, value) of each counter's value ``rule_verdicts`` read."""
    entries, values = memoryview(judged.log).cast("q"), memoryview(judged.log_values).cast("d")
    for at in range(len(values)):
        yield entries[at * LOG_SLOTS], entries[at * LOG_SLOTS + 1], entries[at * LOG_SLOTS + 2], values[at]


def verdicts(found: bytes) -> Iterator[tuple[int, int, int]]:
    """(candidate's index in the run, rule's place, verdict) of each verdict ``rule_verdicts`` gave."""
    values = memoryview(found).cast("q")
    for at in range(0, len(values), VERDICT_SLOTS):
        yield values[at], values[at + 1], values[at + 2]


def _merged(
    entries: array[int], kind_range: tuple[int, int], name_range: tuple[int, int]
) -> Iterator[tuple[int, int, int]]:
    """The entries of both ranges (each in the rules' order), merged by rule's place; a range not within the entries
    is taken as empty."""
    ranges = []
    for start, count in (kind_range, name_range):
        ok = start >= 0 and 0 <= count <= len(entries) // ENTRY_SLOTS - start
        ranges.append([start, start + count] if ok else [0, 0])
    (a, a_end), (b, b_end) = ranges
    while a < a_end or b < b_end:
        take_a = b >= b_end or (a < a_end and entries[a * ENTRY_SLOTS] <= entries[b * ENTRY_SLOTS])
        at = a if take_a else b
        if take_a:
            a += 1
        else:
            b += 1
        yield entries[at * ENTRY_SLOTS], entries[at * ENTRY_SLOTS + 1], entries[at * ENTRY_SLOTS + 2]


def _crossed(limits: array[float], index: int, value: float, before: float | None) -> bool:
    """Whether the counter entry's limits (``limits[index]``) hold of ``value``, its last value ``before``."""
    if not 0 <= index < len(limits) // LIMIT_SLOTS:
        return False
    has_above, above, has_below, below = limits[index * LIMIT_SLOTS : (index + 1) * LIMIT_SLOTS]
    if has_above == 1.0 and value > above and not (before is not None and before > above):
        return True
    return has_below == 1.0 and value < below and not (before is not None and before < below)


def _args(view: memoryview, start: int, end: int) -> Any:
    """The args packed there, or None where the range or the bytes are not msgpack's."""
    if not 0 <= start <= end <= len(view):
        return None
    try:
        return msgpack.unpackb(view[start:end], raw=False, strict_map_key=False)
    except Exception:
        return None


def _value(view: memoryview, start: int, end: int) -> float | None:
    """A counter's ``value`` in the args there (as the judge reads it), or None."""
    args = _args(view, start, end)
    value = args.get("value") if type(args) is dict else None
    return float(value) if isinstance(value, int | float) and type(value) is not bool else None


def _values(view: memoryview, start: int, end: int) -> list[Any] | None:
    """The args there if they are a list (a message's values, as the judge reads them), else None."""
    args = _args(view, start, end)
    return args if type(args) is list else None


def _status_error(view: memoryview, start: int, end: int) -> bool:
    """Whether the args there are a map that says ``"status": "error"`` (as the judge reads them)."""
    if not 0 <= start <= end <= len(view):
        return False
    try:
        args: Any = msgpack.unpackb(view[start:end], raw=False, strict_map_key=False)
    except Exception:
        return False
    return type(args) is dict and args.get("status") == "error"
