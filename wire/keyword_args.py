"""An instant's arguments as the C recorder keeps them, and the maps they stand for.

The C recorder keeps the arguments of ``tl.instant(name, **args)`` as its call passed them, a ``Keywords`` (the call's
names and their values, in one object), not as a dict: that spares the recording thread a dict's table and a hash
insert per key, and the flusher their walk and release. The type is the C packer's (``ringtrace.wire._packer``), which
the recorder takes at its import, and the stream encoder packs a ``Keywords`` as the map it stands for, to the same
bytes. Every other reader gets maps: the flusher hands listeners that do not set ``packs_keywords`` their records
with each ``Keywords`` made a dict (``with_maps``), as the pure-Python recorder records them, and instants and
messages the C recorder kept as compact records (``record_runs.py``) as their flat records (``as_given``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ringtrace.wire.model import RECORD_FIELDS
from ringtrace.wire.optional_c import load_optional
from ringtrace.wire.record_runs import RecordRun

if TYPE_CHECKING:
    from ringtrace.wire._packer import Keywords

__all__ = ["KEYWORDS", "as_given", "as_map", "with_maps"]

_packer = load_optional("ringtrace.wire._packer")

#: The type of an instant's arguments as the C recorder keeps them; None without the C packer (then there are none:
#: the C recorder is not used without it).
KEYWORDS: type[Keywords] | None = None if _packer is None else _packer.Keywords


def as_map(args: Any) -> Any:
    """``args`` as a dict when it is a ``Keywords``, else as it is."""
    return args.as_dict() if KEYWORDS is not None and type(args) is KEYWORDS else args


def with_maps(records: list[Any]) -> list[Any]:
    """``records`` (flat, ``RECORD_FIELDS`` values an event) as a listener that may keep them gets them: the same
    list when it holds no ``Keywords``, else a copy with each made a dict; tracked by the cyclic collector either way
    (the C drain's run lists are not, while the flusher holds them), so that a cycle through a kept one is collected."""
    if _packer is None or type(records) is not list:  # (a run of traced calls, ``CallRun``, holds no Keywords)
        return records
    copied = None
    for i in range(4, len(records), RECORD_FIELDS):
        if type(records[i]) is KEYWORDS:
            if copied is None:
                copied = list(records)
            copied[i] = records[i].as_dict()
    return _packer.tracked(records) if copied is None else copied


def as_given(records: Any) -> Any:
    """A drained run as a listener that does not pack runs itself gets it (the flusher's hand-over): flat records with
    maps (``with_maps``), a run of compact records as its flat records (``RecordRun.as_flat``); a run of calls as it
    is."""
    if type(records) is list:
        return with_maps(records)
    return records.as_flat() if type(records) is RecordRun else records
