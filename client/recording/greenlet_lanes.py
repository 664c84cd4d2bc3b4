"""The lanes of a thread's greenlets: where function tracing puts the calls each greenlet made (``Tracks.call_tracks``;
the tracer tells whose they are, ``functions/greenlet_switches.py``).

A greenlet's calls stay open while it is suspended, and another greenlet of the thread runs meanwhile: on one track
their spans would overlap. So each greenlet that made calls has a lane of its thread's, as an asyncio task has, for as
long as it is alive; a lane whose greenlet is dead (or gone) is free again for the next one. A greenlet is known by a
weak reference (``greenlet_switches._lane``): nothing here keeps one alive. The main greenlet's calls stay on the
thread's track.

A gevent server holds thousands of greenlets, each of whose calls come in every drain: finding a greenlet's lane is
one dict look-up, and a new greenlet takes a lane among those found free by the last look over all of them, which is
made again only once a third as many greenlets as there were lanes then have taken one since (a look over every lane
at each new greenlet, or at each run, made a drain of ten thousand greenlets take seconds): three lanes looked at a
new greenlet, and at most half again as many lanes as are held at once by greenlets alive.
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


class _ThreadLanes:
    """One thread's greenlet lanes: each [track, the weak reference of the greenlet that has it], the lane of each
    greenlet by that reference (equal while the greenlet lives; once it is gone, only to itself), the lanes found free
    at the last look over all of them, how many lanes there were then, and how many greenlets took one since."""

    __slots__ = ("asked", "by_greenlet", "free", "lanes", "looked_at")

    def __init__(self) -> None:
        self.lanes: list[list[Any]] = []
        self.by_greenlet: dict[weakref.ref[Any], list[Any]] = {}
        self.free: list[list[Any]] = []
        self.looked_at = self.asked = 0


class GreenletLanes:
    """Each thread's greenlet lanes, by the id of the thread's track."""

    def __init__(self) -> None:
        self._threads: dict[int, _ThreadLanes] = {}

    def track_for(self, greenlet: weakref.ref[Any], parent: TrackInfo, busy: Collection[Any]) -> TrackInfo:
        """The lane of ``greenlet``, of the thread of track ``parent``: the one it has, else one whose greenlet is dead
        or gone (not one of ``busy``, whose calls this drain places too), else a new one."""
        thread = self._threads.get(parent.track_id)
        if thread is None:
            thread = self._threads[parent.track_id] = _ThreadLanes()
        lane = thread.by_greenlet.get(greenlet)
        if lane is not None:
            return lane[0]  # type: ignore[no-any-return]
        lane = _free_lane(thread, busy)
        if lane is None:
            name = display_text(f"{parent.name} greenlets [{len(thread.lanes) + 1}]")
            lane = [TrackInfo(new_track_id(), ASYNC_TRACK, name, parent.thread_id, parent.track_id), None]
            thread.lanes.append(lane)
        else:
            thread.by_greenlet.pop(lane[1], None)
        lane[1] = greenlet
        thread.by_greenlet[greenlet] = lane
        return lane[0]  # type: ignore[no-any-return]

    def forget_thread(self, track_id: int) -> None:
        """The thread of that track ended: its lanes with it."""
        self._threads.pop(track_id, None)

    def clear(self) -> None:
        self._threads = {}


def _free_lane(thread: _ThreadLanes, busy: Collection[Any]) -> list[Any] | None:
    """A lane of ``thread`` whose greenlet is dead or gone and not one of ``busy``; None: make a new one. Every lane is
    looked at again once the free ones found before are taken and a third as many greenlets as it found have asked."""
    thread.asked += 1
    for looked in (False, True):
        free = thread.free
        while free:
            lane = free.pop()
            if lane[1] not in busy:  # (dead or gone when found: it stays so)
                return lane
        if looked or thread.asked * 3 < thread.looked_at:
            return None
        thread.free = [lane for lane in thread.lanes if lane[1] not in busy and _done(lane[1])]
        thread.free.reverse()  # (the first lanes first)
        thread.looked_at, thread.asked = len(thread.lanes), 0
    return None


def _done(greenlet: weakref.ref[Any]) -> bool:
    alive = greenlet()
    return alive is None or bool(alive.dead)
