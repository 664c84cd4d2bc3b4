"""Which of a timeline's messages record: its priority (``set_priority``), and the sampling (``sample``) that may turn
more on for a while.

A message carries its own gate (``messages.set_gate``), so that a call reads no more than its own attributes; the
gates here set it for every message of the timeline, when it is defined and whenever the priority or the sampling
changes. ``MessageGates`` does no locking of its own: its timeline calls it under the timeline's lock.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable

from ringtrace.client.recording.messages import Message, Sampling, set_gate
from ringtrace.wire.message_format import priority_level

__all__ = ["MessageGates", "sampling"]


class MessageGates:
    """The messages of one timeline, and what turns each on."""

    def __init__(self) -> None:
        self._messages: weakref.WeakSet[Message] = weakref.WeakSet()
        #: The least important priority recorded, as a rank (``messages.priority_level``).
        self.level = priority_level("info")
        self._sampling: Sampling | None = None
        #: Called with the new rank after each ``set_level`` (``Timeline.watch_priority``).
        self.watchers: list[Callable[[int], None]] = []

    def add(self, message: Message) -> None:
        """Gate ``message`` from now on, and now."""
        self._messages.add(message)
        self._update(message)

    def set_level(self, level: int) -> None:
        """Record messages up to the priority of rank ``level``."""
        self.level = level
        self._update_all()
        for watcher in list(self.watchers):
            watcher(level)

    def set_sampling(self, sampling: Sampling | None) -> None:
        """Turn on messages up to ``sampling.level`` during its windows (None: no sampling)."""
        self._sampling = sampling
        self._update_all()

    def _update_all(self) -> None:
        for message in list(self._messages):
            self._update(message)

    def _update(self, message: Message) -> None:
        """Whether ``message`` records, and whether sampling may turn it on."""
        sampling = self._sampling
        sampled = sampling is not None and message.level <= sampling.level
        set_gate(message, message.level <= self.level, sampling if sampled else None)


def sampling(priority: str | None, fraction: float, window_s: float) -> Sampling | None:
    """``Timeline.sample``'s arguments checked, as a ``Sampling`` (None: no sampling).

    Raises:
        ValueError: a bad priority, a fraction outside 0..1, a window not above 0.
    """
    if priority is None:
        return None
    numbers = all(type(x) in (int, float) and math.isfinite(x) for x in (fraction, window_s))
    if not numbers or not 0.0 <= fraction <= 1.0 or not window_s > 0:
        raise ValueError(f"sample() takes 0 <= fraction <= 1 and window_s > 0, got {fraction!r}, {window_s!r}")
    return Sampling(priority_level(priority), fraction, max(int(window_s * 1e9), 1))
