"""What the rules' watch's steps cost: CPU seconds of the thread that runs them, and of those the seconds spent in
calls that run without the GIL (the first pass and the verdicts in C). The rest held the GIL ingest needs; the
engine paces the steps by both (``engine.py``: ``WATCH_SHARE``, ``WATCH_CORE_SHARE``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["StepClock"]

T = TypeVar("T")


class StepClock:
    """CPU seconds (``time.thread_time``: the calling thread's) in ``running`` blocks, and in ``released`` ones."""

    def __init__(self) -> None:
        self.cpu_s = self.released_s = 0.0

    @contextmanager
    def running(self) -> Iterator[None]:
        began = time.thread_time()
        try:
            yield
        finally:
            self.cpu_s += time.thread_time() - began

    def run(self, call: Callable[[], T]) -> T:
        """``call()`` within ``running``."""
        with self.running():
            return call()

    @contextmanager
    def released(self, without_gil: bool) -> Iterator[None]:
        """A call that runs without the GIL where ``without_gil`` (its C twin is built)."""
        began = time.thread_time()
        try:
            yield
        finally:
            if without_gil:
                self.released_s += time.thread_time() - began
