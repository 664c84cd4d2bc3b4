"""The collector's SET_PRIORITY, handed to the timelines a streamer serves that take it."""

from __future__ import annotations

import logging
import weakref
from typing import Any

from ringtrace.wire.frames import SetPriority

__all__ = ["PriorityRequests"]

log = logging.getLogger("ringtrace.client")


class PriorityRequests:
    """Timelines that take a collector's SET_PRIORITY (held weakly: a timeline that goes is forgotten)."""

    __slots__ = ("_timelines",)

    def __init__(self) -> None:
        self._timelines: weakref.WeakSet[Any] = weakref.WeakSet()

    def subscribe(self, timeline: Any) -> None:
        self._timelines.add(timeline)

    def apply(self, frame: SetPriority, listener: object, address_text: str) -> None:
        """``frame``'s priority, for the timeline it names (or all) that ``listener`` still listens to."""
        for timeline in list(self._timelines):
            if frame.timeline in ("", timeline.name) and listener in timeline.listeners:
                try:
                    timeline.set_priority(frame.priority)
                except ValueError as exc:
                    log.warning("ringtrace: the collector at %s asked for a priority: %s", address_text, exc)
                    return
