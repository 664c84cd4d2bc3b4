"""Housekeeping: the collector's timers run from start to stop, and stop leaves no task behind."""

from __future__ import annotations

import asyncio

from ringtrace.collector.read.inventory import RateSampler
from ringtrace.collector.service.housekeeping import Housekeeping
from ringtrace.collector.store.heap import HeapTrimmer
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from waiting import wait_for_async


def test_the_timers_run_until_stop_which_ends_every_task_the_extra_loops_too() -> None:
    async def scenario() -> tuple[int, int, int]:
        sweeps: list[None] = []
        extra_began = asyncio.Event()

        async def extra_loop() -> None:
            extra_began.set()
            await asyncio.Event().wait()

        housekeeping = Housekeeping(
            Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES),
            set(),
            RateSampler(),
            HeapTrimmer(),
            forget_idle=lambda: sweeps.append(None),
            forget_after_s=0.0,  # a sweep every 50 ms, the shortest interval
            idle_timeout_s=60.0,
        )
        housekeeping.start(extra_loop)
        running = len(asyncio.all_tasks()) - 1
        await asyncio.wait_for(extra_began.wait(), timeout=30)
        await wait_for_async(lambda: len(sweeps), until=lambda n: n >= 2, timeout_s=30, what="two sweeps")
        await housekeeping.stop()
        return running, len(sweeps), len(asyncio.all_tasks()) - 1

    running, sweeps, left = asyncio.run(scenario())
    assert running == 4  # forgetting, rates, idle connections, the extra loop
    assert sweeps >= 2
    assert left == 0
