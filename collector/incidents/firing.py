"""A rule that fired: what matched, where and when (what ``watch.py`` finds and ``capture.py`` keeps the window of)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Firing"]


@dataclass(frozen=True, slots=True)
class Firing:
    """One event that met a rule's condition (or a program's ``tl.incident``, a crash, a ``POST /incidents``).

    Times are wall-clock ns, as snapshots show them (an event's ``ts`` plus its process's clock offset).
    """

    #: The rule's name.
    rule: str
    #: The process (its uid in the registry) the event is of.
    process_uid: int
    #: When the event started and ended (equal for an instant, a message, a counter or a crash).
    start_ns: int
    end_ns: int
    #: What matched, said in a line ("span 'checkout' lasted 250.1 ms (>= 200 ms)").
    reason: str
    #: The event as JSON-able fields: ``kind``, ``name``, ``track``, ``ts_ns``, ``dur_ns``, ``args``.
    event: dict[str, Any] = field(default_factory=dict)
    #: Its trace (32 lowercase hex digits), if it carries one: what a ``trace`` scope follows.
    trace_id: str | None = None
