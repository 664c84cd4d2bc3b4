"""The lanes of a thread's greenlets: where function tracing puts the calls each greenlet made (``Tracks.call_tracks``;
the tracer tells whose they are, ``functions/greenlet_switches.py``).

A greenlet's calls stay open while it is suspended, and another greenlet of the thread runs meanwhile: on one track
their spans would overlap. So each greenlet that made calls has a lane of its thread's, as an asyncio task has, for as
long as it is alive; a lane whose greenlet is dead (or gone) is free again for the next one, so the number of lanes
follows the number of greenlets alive at once. A greenlet is known by a weak reference (``greenlet_switches._lane``):
nothing here keeps one alive. The main greenlet's calls stay on the thread's track.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection
from typing import Any, TypeGuard

from ringtrace.wire.arg_values import display_text
from ringtrace.wire.model import ASYNC_TRACK, TrackInfo, new_track_id

__all__ = ["GreenletLanes", "is_greenlet"]


def is_greenlet(owner: object) -> TypeGuard[weakref.ref[Any]]:
    """Whether ``owner``, whose calls the tracer tells apart, is a greenlet's (a weak reference to it, hashed while it
    lived), not an asyncio task."""
    return type(owner) is weakref.ref


class GreenletLanes:
    """Each thread's greenlet lanes, by the id of the thread's track: [track, the weak reference of the greenlet that
    has it]."""

    def __init__(self) -> None:
        self._lanes: dict[int, list[list[Any]]] = {}

    def track_for(self, greenlet: weakref.ref[Any], parent: TrackInfo, busy: Collection[Any]) -> TrackInfo:
        """The lane of ``greenlet``, of the thread of track ``parent``: the one it has, else the first whose greenlet
        is dead or gone (not one of ``busy``, whose calls this drain places too), else a new one."""
        lanes = self._lanes.setdefault(parent.track_id, [])
        free = None
        for lane in lanes:
            held = lane[1]
            if held is greenlet or held == greenlet:  # (equal: the same greenlet, alive; gone: the same reference)
                return lane[0]  # type: ignore[no-any-return]
            if free is None and held not in busy:
                alive = held()
                if alive is None or alive.dead:
                    free = lane
        if free is None:
            name = display_text(f"{parent.name} greenlets [{len(lanes) + 1}]")
            free = [TrackInfo(new_track_id(), ASYNC_TRACK, name, parent.thread_id, parent.track_id), None]
            lanes.append(free)
        free[1] = greenlet
        return free[0]  # type: ignore[no-any-return]

    def forget_thread(self, track_id: int) -> None:
        """The thread of that track ended: its lanes with it."""
        self._lanes.pop(track_id, None)

    def clear(self) -> None:
        self._lanes = {}
