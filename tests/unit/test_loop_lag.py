"""The event loop's lag monitor: a stall shows, at least as long as it was, and nothing as long before it."""

from __future__ import annotations

import asyncio
import time

from ringtrace.collector.service.loop_lag import BUSY_HOLD_S, IDLE_INTERVAL_S, INTERVAL_S, Activity, LoopLag
from waiting import wait_for, wait_for_async


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


class _Traffic:
    bytes_received = 0


class _Listener:
    requests = 0
    in_flight = 0


def test_the_collector_is_at_work_while_bytes_come_or_a_request_runs_and_idle_once_they_stop() -> None:
    traffic, listener = _Traffic(), _Listener()
    activity = Activity(traffic, [listener])
    assert activity()  # (just started: at work for the hold)
    wait_for(lambda: not activity(), timeout_s=30, what="idle after the hold")
    traffic.bytes_received += 10
    assert activity()
    wait_for(lambda: not activity(), timeout_s=30, what="idle again")
    listener.requests, listener.in_flight = 1, 1  # a request begun, and under way for longer than the hold
    assert activity()
    time.sleep(BUSY_HOLD_S * 1.5)
    assert activity()
    listener.in_flight = 0
    wait_for(lambda: not activity(), timeout_s=30, what="idle once the request ended")


def test_an_idle_collector_looks_coarsely_yet_sees_a_stall_and_looks_finely_again_while_at_work() -> None:
    observed: list[float] = []
    busy = [False]

    async def main() -> tuple[int, int, float]:
        lag = LoopLag(observed.append, lambda: busy[0])
        watch = asyncio.create_task(lag.run())
        await wait_for_async(lambda: len(observed) >= 2, timeout_s=30, what="two idle probes")
        idle = len(observed)
        await asyncio.sleep(3 * IDLE_INTERVAL_S)
        idle = len(observed) - idle  # a few at most: each probe sleeps IDLE_INTERVAL_S
        seen = len(observed)
        time.sleep(0.6)  # a callback holds the loop longer than an idle probe's sleep
        await wait_for_async(lambda: len(observed) > seen, timeout_s=30, what="the stall measured")
        stalled = observed[seen]
        busy[0] = True
        before = len(observed)
        await wait_for_async(lambda: len(observed) - before >= 50, timeout_s=30, what="fine probes at work")
        watch.cancel()
        return idle, len(observed) - before, stalled

    idle, busy_probes, stalled = asyncio.run(main())
    assert idle < 20  # about 3 (a late probe is followed by a fine one); the fine probe would make about 150
    assert busy_probes >= 50
    assert stalled >= 0.6 - IDLE_INTERVAL_S - 0.002  # the stall ended after the coarse probe was due: it shows whole
