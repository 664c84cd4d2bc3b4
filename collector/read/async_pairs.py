"""Async slices (``async_begin``, ``async_end``) taken whole by a window: a begin and its end are shown together
when the slice they make overlaps ``[since, until)``, and a begin never ended that came before ``until`` is shown
(open-ended).

A begin pairs with the next end of the same id in the same process (a stack per id: the latest begin open first), as
viewers pair them. A begin in the window is shown at once; one before ``since`` is held until its end says whether the
slice reaches into the window (then both are shown, the begin with the end's frame), or the walk ends (then it is
shown, open-ended: ``still_open``); one at or after ``until`` is left out, with its end. An end with no begin is shown
when it is in the window, as a point, and kept: its begin may come after it (recorded on another thread, whose frame
came later), and is then shown with it when the two overlap the window. Memory: the begins held and open and the ends
that came first, a few numbers each.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ringtrace.collector.read.frame_walk import Shown
from ringtrace.collector.read.selection import EventFilter

__all__ = ["AsyncPairs"]

#: (process uid, track id)
TrackKey = tuple[int, int]


@dataclass
class _Begun:
    event: Shown
    track: TrackKey
    #: Whether it is shown already (it began in the window) or left out (it began at or after ``until``).
    shown: bool
    left_out: bool


@dataclass
class AsyncPairs:
    """The begins of one walk not yet ended, by (process uid, id)."""

    window: EventFilter
    _open: dict[tuple[int, str], list[_Begun]] = field(default_factory=dict)
    #: Ends that came with no begin open, by (process uid, id): their begin may come after them (a begin and its end
    #: recorded on two threads, whose frames arrive in either order).
    _ended_first: dict[tuple[int, str], list[Shown]] = field(default_factory=dict)

    def take(self, event: Shown, track: TrackKey) -> list[Shown]:
        """What to show now of an async ``event`` (``b`` or ``e``) on ``track``: none, itself, or a held begin and
        itself."""
        phase, _, wall_ns, _, _, _, async_id = event
        window = self.window
        key = (track[0], async_id)
        if phase == "b":
            shown = window.in_window(wall_ns)
            left_out = window.until_ns is not None and wall_ns >= window.until_ns
            end = self._earlier_end(key, wall_ns)
            if end is not None:  # its end came first: the two are decided now
                end_shown = window.in_window(end[2])
                if not window.in_window(wall_ns, end[2] - wall_ns):
                    return []
                return [event] if end_shown else [event, end]
            self._open.setdefault(key, []).append(_Begun(event, track, shown, left_out))
            return [event] if shown else []
        begins = self._open.get(key)
        if not begins:
            self._ended_first.setdefault(key, []).append(event)
            return [event] if window.in_window(wall_ns) else []
        begun = begins.pop()
        if begun.shown:
            return [event]
        if begun.left_out:
            return []
        # Began before ``since``: the slice is in the window when it ends after ``since``.
        began_ns = begun.event[2]
        return [begun.event, event] if window.in_window(began_ns, max(wall_ns - began_ns, 0)) else []

    def _earlier_end(self, key: tuple[int, str], began_ns: int) -> Shown | None:
        """The first end in time at or after ``began_ns`` among those of ``key`` that came before any begin (taken)."""
        ends = self._ended_first.get(key)
        if not ends:
            return None
        after = [end for end in ends if end[2] >= began_ns]
        if not after:
            return None
        end = min(after, key=lambda end: end[2])
        ends.remove(end)
        return end

    def still_open(self) -> list[tuple[TrackKey, Shown]]:
        """The begins held that never ended (they came before ``since``): shown open-ended, each with its track."""
        return [
            (begun.track, begun.event)
            for begins in self._open.values()
            for begun in begins
            if not begun.shown and not begun.left_out
        ]
