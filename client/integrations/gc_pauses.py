"""The ``gc`` integration: a span per collection of the cyclic garbage collector, on the thread that collected.

``gc.callbacks`` calls ``_on_collection`` at the start and at the stop of every collection, on the thread whose
allocation set it off, while that thread holds the GIL: the span ``gc`` from start to stop is the time the program
stood still for it. Its args are the ``generation`` collected, the objects ``collected`` and those found
``uncollectable``. Collections never overlap in one interpreter, so one start time is kept, not one per thread.
"""

from __future__ import annotations

import gc
import time
from typing import TYPE_CHECKING, Any

from ringtrace.client.integrations.hook_errors import count_failure
from ringtrace.wire.model import SPAN

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["LABEL", "install"]

_NAME = "gc"
#: The label of a collection's span.
LABEL = "gc"

_now = time.monotonic_ns
_timeline: Timeline | None = None
#: When the collection under way started; None between collections.
_start_ns: int | None = None


def install(timeline: Timeline) -> None:
    """Record a span per garbage collection into ``timeline`` (idempotent: a second call changes nothing)."""
    global _timeline
    if _timeline is not None:
        return
    _timeline = timeline
    gc.callbacks.append(_on_collection)


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    global _start_ns
    try:
        if phase == "start":
            _start_ns = _now()
            return
        start_ns, _start_ns = _start_ns, None
        if start_ns is None or _timeline is None:
            return
        end_ns = _now()
        events = _timeline._events_with_room()
        if events is not None:
            args = {
                "generation": info.get("generation"),
                "collected": info.get("collected"),
                "uncollectable": info.get("uncollectable"),
            }
            events.extend((SPAN, LABEL, start_ns, end_ns, args))
    except Exception as exc:  # a failure here must not reach the collector's caller: any allocation in the program
        count_failure(_NAME, exc)
