"""How late the event loop runs what is due: the measure of everything that holds it up (a long callback, the GIL
held by another thread, a core taken by other work), as ingest and every HTTP request feel it.

A task sleeps and measures how much later than asked it wakes. While the collector is at work (``Activity``: bytes
received or an HTTP request begun within the last ``BUSY_HOLD_S``, or a request under way) it sleeps ``INTERVAL_S`` at a
time, and a stall of S seconds shows as a lag between S - ``INTERVAL_S`` and S (it may begin anywhere in a sleep).
While it is idle it sleeps ``IDLE_INTERVAL_S``: 200 wake-ups a second cost an idle collector about 30 ms of CPU a
second, 4 cost well under 1 ms. A lag is still how late that timer ran, and a stall that ends after the coarse probe
was due shows whole; one that begins and ends within an idle sleep goes unmeasured, and so may the first
``IDLE_INTERVAL_S`` of work after an idle spell (the first lag past ``INTERVAL_S`` brings the fine probe back at once).
Each lag goes to ``/metrics`` (a histogram) and the longest of the last minute or so to ``/healthz``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Final, Protocol

__all__ = ["BUSY_HOLD_S", "IDLE_INTERVAL_S", "INTERVAL_S", "Activity", "LoopLag"]

#: How often the loop is looked at while the collector is at work: 200 times a second.
INTERVAL_S: Final = 0.005
#: How often while it is idle: a probe that still wakes, coarse enough to cost an idle collector next to nothing.
IDLE_INTERVAL_S: Final = 0.25
#: The collector counts as at work this long after it last received bytes or began a request.
BUSY_HOLD_S: Final = 0.5
#: The longest lag is kept per window of this many seconds; ``longest_s`` covers the current and the previous one.
_WINDOW_S: Final = 30.0


class _Received(Protocol):
    @property
    def bytes_received(self) -> int: ...


class _Requests(Protocol):
    @property
    def requests(self) -> int: ...

    @property
    def in_flight(self) -> int: ...


class Activity:
    """Whether the collector is at work: bytes received (every client's, OTLP's too) or an HTTP request begun within
    ``BUSY_HOLD_S``, or a request under way (a snapshot being written receives nothing)."""

    __slots__ = ("_done", "_listeners", "_traffic", "_until_s")

    def __init__(self, traffic: _Received, listeners: Sequence[_Requests]) -> None:
        self._traffic = traffic
        self._listeners = listeners
        self._done = -1
        self._until_s = 0.0

    def __call__(self) -> bool:
        now = time.monotonic()
        done = self._traffic.bytes_received + sum(listener.requests for listener in self._listeners)
        if done != self._done or any(listener.in_flight for listener in self._listeners):
            self._done, self._until_s = done, now + BUSY_HOLD_S
        return now < self._until_s


def _always() -> bool:
    return True


class LoopLag:
    """Measures the running loop's lag until cancelled (``run``); ``busy``: whether the fine probe is wanted now
    (``Activity``; by default always)."""

    def __init__(self, observe: Callable[[float], None], busy: Callable[[], bool] = _always) -> None:
        self._observe = observe
        self._busy = busy
        self._window = 0
        self._longest = [0.0, 0.0]  # this window's, the previous one's

    @property
    def longest_s(self) -> float:
        """The longest lag over the last 30 to 60 seconds."""
        self._roll(time.monotonic())
        return max(self._longest)

    async def run(self) -> None:
        interval = INTERVAL_S
        while True:
            started = time.perf_counter()
            await asyncio.sleep(interval)
            lag = max(time.perf_counter() - started - interval, 0.0)
            self._observe(lag)
            self._roll(time.monotonic())
            if lag > self._longest[0]:
                self._longest[0] = lag
            interval = INTERVAL_S if lag > INTERVAL_S or self._busy() else IDLE_INTERVAL_S

    def _roll(self, now: float) -> None:
        window = int(now // _WINDOW_S)
        if window != self._window:
            self._longest = [0.0, self._longest[0] if window == self._window + 1 else 0.0]
            self._window = window
