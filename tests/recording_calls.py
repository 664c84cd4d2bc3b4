"""Each way a thread records an event into a timeline, as tests of what buffers hold ask for them by name."""

from __future__ import annotations

import weakref
from typing import Any

from ringtrace.client import Event, Timeline, u32

__all__ = ["Counted", "Marker", "record_by"]


class Marker:
    """An argument value whose lifetime shows whether some buffer still holds the event."""

    __slots__ = ("__weakref__",)


class Counted(Event):
    """A typed event whose lifetime shows whether a buffer holds it."""

    n: u32


def record_by(call: str, tl: Timeline, i: int, held: list[weakref.ref[Any]]) -> None:
    """Record one event by ``call``, holding a fresh object (``held`` refers to it) that lives as long as a buffer
    keeps it."""
    token = Marker() if call != "push" else Counted(n=i)
    held.append(weakref.ref(token))
    if call == "instant":
        tl.instant("e", i=i, token=token)
    elif call == "compact":  # (the C recorder keeps it as a compact record: it holds no token)
        tl.instant("e")
    elif call == "scope":
        with tl.scope("e", i=i, token=token):
            pass
    elif call == "push":
        tl.push(token)
    elif call == "message":
        tl.message("bounded", "info", "e $i $token")(i, token)
    elif call == "marker":
        tl.marker("e", i=i, token=token)
    else:
        tl.async_begin("e", i, token=token)
