"""``Timeline.incident``: the program says that something went wrong here, and a collector may keep the recent past.

    tl.incident("payment declined", order=order_id, code=503)

One event of the built-in kind ``incident`` (13, shape ``instant``): its name is the reason, its args are free. A
collector whose rules hold ``incident_call = true`` saves, on such an event, the window before and after it of the
processes the rule's scope takes (docs/incidents.md); any other reader shows an instant (of category ``incident``).

Theory of operation
-------------------
Recorded as every event is: one tuple appended to the running thread's or task's buffer (``_events_with_room``,
the C recorder's or its pure-Python twin's, so both record the same values), the arguments normalised on the
flusher. Then the flusher is woken (``FLUSHER.wake``) rather than left to its interval: an incident is worth sending
at once, and the collector's window after it runs from when it arrives. A wake while one is pending costs a flag
test, so a flood of incidents makes back-to-back sweeps at most, each taking all of them; the collector's rule
limits, not the client, bound what a flood saves. Like every recording method it never raises into the program: a
full buffer counts the event as dropped, a timeline with no listener keeps nothing.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.wire.model import INCIDENT

if TYPE_CHECKING:
    from ringtrace.client.recording.recorder import Recorder

__all__ = ["record_incident"]

_now = time.monotonic_ns
_wake_flusher = FLUSHER.wake


def record_incident(recorder: Recorder, reason: object, args: dict[str, Any]) -> None:
    """Record an incident named ``reason`` with ``args`` where the running thread or task records, then hurry the
    flusher (see the module docstring)."""
    events = recorder._events_with_room()
    if events is None:
        return
    now = _now()
    events.extend((INCIDENT, reason, now, now, args or None))
    _wake_flusher()
