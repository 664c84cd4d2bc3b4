"""The rules' first pass over a stored EVENTS frame: which of its events may meet a rule (its candidates), found from
the kind, name and duration columns alone, without a Python object per event.

Theory of operation
-------------------
The rules a segment is watched for are compiled against its tables (``criteria.py``) into ``Criteria``: per kind id a
*criterion* (the least duration that makes an event of the kind a candidate, and flags) and a *name group*, and per
name group a criterion per string id (a name's glob is matched once per string, never per event). An event is a
candidate when its kind's criterion or its name's criterion in its kind's group passes:

- its ``dur`` is at least the criterion's least duration (``NEVER``: no duration does; ``ANY``: every event does), or
- the criterion has ``STATUS_ERROR`` and the event's args map says ``"status": "error"`` (an OTLP span's status).

What depends on other args (a counter's value, a message's text) is judged in Python on the candidates alone.

``match_frame`` runs the C twin (``_match.c``) where it was built and the Python twin (``match_frame_py``, which
defines the behaviour) otherwise, or where the C twin leaves a payload to it (nested deeper than it reads). Both
take the payload as untrusted: one msgpack-python refuses, or whose ``kind``, ``name``, ``ts`` or ``dur`` is not an
integer of 64 bits, gives None (no candidates can be told: the caller counts the frame's events undecodable).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack
from ringtrace.wire.optional_c import load_optional

__all__ = [
    "ACCELERATED",
    "ANY",
    "KIND_SLOTS",
    "MAX_GROUPS",
    "NAME_SLOTS",
    "NEVER",
    "STATUS_ERROR",
    "Criteria",
    "candidates",
    "match_frame",
    "match_frame_py",
]

_match = load_optional("ringtrace.collector.incidents._match")
#: Whether the C twin is there.
ACCELERATED: Final = _match is not None

#: A criterion's least duration that no event passes, and one that every event passes.
NEVER: Final = 2**63 - 1
ANY: Final = -(2**63)
#: A criterion's flag: an event whose args map says ``"status": "error"`` is a candidate whatever its duration.
STATUS_ERROR: Final = 1
#: int64s per kind id (least duration, flags, name group or -1), per string id of a group (least duration, flags),
#: and per candidate found (index in the frame, kind id, name id, ts column value, dur).
KIND_SLOTS: Final = 3
NAME_SLOTS: Final = 2
OUT_SLOTS: Final = 5
MAX_GROUPS: Final = 16
_INT64: Final = range(-(2**63), 2**63)


@dataclass(slots=True)
class Criteria:
    """A segment's compiled rules as both twins read them (see the module docstring)."""

    #: ``KIND_SLOTS`` int64s per kind id, from 0; kinds past the end are never candidates.
    kinds: array[int] = field(default_factory=lambda: array("q"))
    #: Per name group, ``NAME_SLOTS`` int64s per string id, from 0; ids past the end have no criterion.
    names: tuple[array[int], ...] = ()


def match_frame(payload: bytes | memoryview, count: int, columns: tuple[int, ...], criteria: Criteria) -> bytes | None:
    """The candidates of an EVENTS frame, ``OUT_SLOTS`` native int64s each (``candidates`` reads them); None if the
    payload cannot be read.

    Args:
        payload: the frame's msgpack payload.
        count: its header's event count.
        columns: where the kind, name, ts, dur and args columns are in it (a permutation of 0 to 4).
    """
    if _match is not None:
        found: bytes | None = _match.match_frame(payload, count, columns, criteria.kinds, criteria.names)
        if found is not None:
            return found
    return match_frame_py(payload, count, columns, criteria)


def match_frame_py(
    payload: bytes | memoryview, count: int, columns: tuple[int, ...], criteria: Criteria
) -> bytes | None:
    """``match_frame`` in Python: what defines it."""
    try:
        unpacked = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception:
        return None
    if type(unpacked) is not list or len(unpacked) != len(columns):
        return None
    if any(type(column) is not list or len(column) != count for column in unpacked):
        return None
    kinds, names, offsets, durations, args = (unpacked[i] for i in columns)
    table, groups = criteria.kinds, criteria.names
    kind_count = len(table) // KIND_SLOTS
    out = array("q")
    for i, (kind, name, ts, dur) in enumerate(zip(kinds, names, offsets, durations, strict=True)):
        if not (type(kind) is int and type(name) is int and type(ts) is int and type(dur) is int):
            return None
        if kind not in _INT64 or name not in _INT64 or ts not in _INT64 or dur not in _INT64:
            return None
        if not 0 <= kind < kind_count:
            continue
        at = kind * KIND_SLOTS
        hit = _meets(table[at], table[at + 1], dur, args[i])
        group = table[at + 2]
        if not hit and 0 <= group < len(groups) and 0 <= name < len(groups[group]) // NAME_SLOTS:
            names_of = groups[group]
            hit = _meets(names_of[name * NAME_SLOTS], names_of[name * NAME_SLOTS + 1], dur, args[i])
        if hit:
            out.extend((i, kind, name, ts, dur))
    return out.tobytes()


def candidates(found: bytes) -> Iterator[tuple[int, int, int, int, int]]:
    """(index in the frame, kind id, name id, ts column value, dur) of each candidate ``match_frame`` found."""
    values = memoryview(found).cast("q")
    for at in range(0, len(values), OUT_SLOTS):
        yield values[at], values[at + 1], values[at + 2], values[at + 3], values[at + 4]


def _meets(min_dur: int, flags: int, dur: int, args: Any) -> bool:
    if min_dur != NEVER and dur >= min_dur:
        return True
    return bool(flags & STATUS_ERROR) and type(args) is dict and args.get("status") == "error"
