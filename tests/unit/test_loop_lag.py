"""The event loop's lag monitor: a stall shows, at least as long as it was, and nothing as long before it."""

from __future__ import annotations

import asyncio
import time

from ringtrace.collector.service.loop_lag import INTERVAL_S, LoopLag


def test_a_stall_shows_as_a_lag_about_as_long_and_a_free_loop_shows_none() -> None:
    observed: list[float] = []

    async def main() -> tuple[float, float]:
        lag = LoopLag(observed.append)
        watch = asyncio.create_task(lag.run())
        await asyncio.sleep(0.2)
        free = lag.longest_s
        time.sleep(0.25)  # a callback that holds the loop for 250 ms
        await asyncio.sleep(0.05)
        watch.cancel()
        return free, lag.longest_s

    free, stalled = asyncio.run(main())
    assert stalled >= 0.25 - INTERVAL_S - 0.002  # the loop was held that long at least, whatever the machine
    assert free < stalled  # before the stall, nothing as long
    assert max(observed) == stalled and len(observed) >= 10
