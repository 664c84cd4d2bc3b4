"""When the link's next connection attempt is due: exponential backoff with jitter, sans-I/O (the caller gives the
time)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Final

__all__ = ["FLUSH_RETRY_S", "Backoff", "random_jitter"]

#: While a flush waits, connection attempts are at most this far apart.
FLUSH_RETRY_S: Final = 0.25


def random_jitter() -> float:
    return random.uniform(0.5, 1.0)


class Backoff:
    """When the next connection attempt is due: exponential backoff with jitter, ``initial_s`` up to ``max_s``."""

    __slots__ = ("_jitter", "delay_s", "initial_s", "max_s", "next_attempt")

    def __init__(self, initial_s: float, max_s: float, jitter: Callable[[], float] = random_jitter) -> None:
        self.initial_s, self.max_s, self._jitter = initial_s, max_s, jitter
        self.delay_s = initial_s
        self.next_attempt = 0.0

    def failed(self, now: float, hurry: bool) -> float:
        """An attempt failed at ``now``; returns the wait before the next. ``hurry``: a flush waits for it."""
        delay = self.delay_s * self._jitter()
        self.delay_s = min(self.delay_s * 2, self.max_s)
        if hurry:  # a collector that comes up within the flush's timeout is found soon
            delay = min(delay, FLUSH_RETRY_S)
        self.next_attempt = now + delay
        return delay

    def reset(self) -> None:
        self.delay_s = self.initial_s

    def slowest(self) -> None:
        """Waiting will not mend it: the next attempts as far apart as allowed."""
        self.delay_s = self.max_s

    def due_now(self, now: float) -> None:
        self.next_attempt = min(self.next_attempt, now)
