"""The collector's timers, started and stopped together: forgetting idle processes, closing idle connections,
sampling each process's rate, watching the event loop's lag, and syncing the data dir under ``--fsync interval``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from ringtrace.collector.ingest.connection import IngestProtocol
from ringtrace.collector.read.inventory import RateSampler
from ringtrace.collector.store.heap import HeapTrimmer
from ringtrace.collector.store.ring import Store

__all__ = ["Housekeeping"]


class Housekeeping:
    """Background tasks on the event loop, each a loop that sleeps between rounds; ``stop`` cancels them all.

    Args:
        forget_idle: forgets the idle processes that hold nothing (every ``forget_after_s / 4``, within bounds).
        idle_timeout_s: how long a connection may sit in the middle of a frame (``IngestProtocol.close_if_idle``).
    """

    def __init__(
        self,
        store: Store,
        connections: Iterable[IngestProtocol],
        rates: RateSampler,
        heap: HeapTrimmer,
        forget_idle: Callable[[], object],
        forget_after_s: float,
        idle_timeout_s: float,
    ) -> None:
        self._store = store
        self._connections = connections
        self._rates = rates
        self._heap = heap
        self._forget_idle = forget_idle
        self._forget_after_s = forget_after_s
        self._idle_timeout_s = idle_timeout_s
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, *extra: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start the timers, and the ``extra`` loops with them (stopped with them too)."""
        loops = (self._forget_idle_processes, self._sample_rates, self._close_idle_connections, *extra)
        self._tasks = [asyncio.create_task(run()) for run in loops]

    async def stop(self) -> None:
        """Cancel every task and wait for each to end."""
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _forget_idle_processes(self) -> None:
        """Every few seconds: forget processes with no connection and nothing stored (bounded bookkeeping)."""
        interval = min(max(self._forget_after_s / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(interval)
            self._forget_idle()
            self._heap.trim_if_due()

    async def _close_idle_connections(self) -> None:
        """Now and then: close connections idle past ``idle_timeout_s`` (``IngestProtocol.close_if_idle``)."""
        timeout_s = self._idle_timeout_s
        while True:
            await asyncio.sleep(min(timeout_s / 4, 5.0))
            self._close_idle(timeout_s)

    def _close_idle(self, timeout_s: float) -> None:
        # Not in the coroutine: its loop variable would keep the last connection (its tables, its buffers) alive
        # while it sleeps, and for good once every connection is gone.
        now_s = time.monotonic()
        for connection in list(self._connections):
            connection.close_if_idle(now_s, timeout_s)

    async def _sample_rates(self) -> None:
        """Every second: each process's totals, from which ``/sources`` tells its rate."""
        while True:
            self._rates.sample(self._store.process_received())
            await asyncio.sleep(1.0)
