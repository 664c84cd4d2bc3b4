"""What a timeline asks of its listeners, and the bookkeeping around attaching, losing and replacing them.

A listener may serve many timelines: closing one timeline closes only the listeners no other timeline uses, and after
a fork each listener says once what replaces it in the child, for every timeline it served.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ringtrace.client.recording.tracks import switches_in
from ringtrace.wire.call_records import CallRun
from ringtrace.wire.model import RECORD_FIELDS, TrackInfo

if TYPE_CHECKING:
    from ringtrace.client.recording.tracks import TrackBuffer

__all__ = ["Listener", "close_unused", "count_lost", "held_events", "replaced_after_fork", "subscribe_priority"]


class Listener(Protocol):
    """What a timeline hands its events to (see ``delivery/listeners.py``). Called on the flusher thread, except
    ``flush`` and ``close``; none of these may raise."""

    def receive(self, track: TrackInfo, records: list[Any] | CallRun) -> None:
        """One track's events, ``RECORD_FIELDS`` flat values each, oldest first (an instant's arguments a dict, or
        as the C recorder keeps them for a listener whose ``packs_keywords`` is true: see keyword_args.py); or a run
        of traced function calls, a ``CallRun`` (``wire/call_records.py``: ``as_flat()`` gives its flat values); or,
        for a listener whose ``packs_keywords`` is true, a ``RecordRun`` of compact instants and messages
        (``wire/record_runs.py``: ``as_flat()`` too)."""

    def lost(self, events: int) -> None:
        """``events`` recorded for this listener were dropped before it received them (counted as its drops). A
        listener that tells why may also have ``lost_to_error(events)``, which the flusher calls instead for those an
        unexpected error lost on their way (``SerializedListener``: its ``internal_error_events``)."""

    def retire(self, track: TrackInfo) -> None:
        """``track`` ended (its thread or task is gone and all its events were received): forget it."""

    def flush(self, timeout_s: float) -> bool:
        """Deliver everything received so far within ``timeout_s``; True when delivered with nothing dropped."""

    def close(self, timeout_s: float) -> bool:
        """Flush, then release the listener's resources."""

    def after_fork(self) -> Listener | None:
        """In a forked child: the listener to use there instead of this one (None: none)."""


def subscribe_priority(listener: Listener, timeline: Any) -> None:
    """A listener that hears a collector (the streamer) passes its SET_PRIORITY frames on to ``timeline``."""
    subscribe = getattr(listener, "subscribe_priority", None)
    if subscribe is not None:
        subscribe(timeline)


def count_lost(listeners: Sequence[Listener], buffers: list[TrackBuffer], carried: int = 0) -> None:
    """Events that were recorded for ``listeners`` and will never reach them: counted as their drops."""
    lost = carried + sum(held_events(buffer) for buffer in buffers)
    if lost:
        for listener in listeners:
            listener.lost(lost)


def held_events(buffer: TrackBuffer) -> int:
    """The events a buffer holds: its list's, and those its compact segments (the C recorder's, ``records.c``) hold
    past the one event's place each takes in the list, which the buffer's account of them counts as they come."""
    records, events = buffer.records, buffer.events
    switches = 0 if buffer.first_task is None else switches_in(events)  # (a lane's: records, not events)
    return (len(events) // RECORD_FIELDS - switches) + (0 if records is None else records.extra_events)


def close_unused(listeners: Sequence[Listener], still_used: Iterable[Listener], deadline: float) -> bool:
    """Close those of ``listeners`` that are not ``still_used`` (by other timelines), by ``deadline``; True when
    every one closed delivered everything."""
    used = {id(x) for x in still_used}
    delivered = True
    for listener in listeners:
        if id(listener) not in used:
            delivered = listener.close(max(deadline - time.monotonic(), 0.0)) and delivered
    return delivered


def replaced_after_fork(listeners: Sequence[Listener], replacements: dict[int, Any]) -> tuple[Listener, ...]:
    """In a forked child: what replaces ``listeners``, each asked once per process (``replacements`` remembers the
    answers by the id of the parent's listener), so that a listener shared by timelines stays shared."""
    replaced = []
    for listener in listeners:
        if id(listener) not in replacements:
            replacements[id(listener)] = listener.after_fork()
        if replacements[id(listener)] is not None:
            replaced.append(replacements[id(listener)])
    return tuple(replaced)
