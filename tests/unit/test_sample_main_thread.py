"""The C loop hands its pass to the program's main thread while that thread runs Python code
(``speedups/sample_loop.c``): the sampler's thread then takes no GIL at a pass, so it no longer waits for the busy
thread to drop it (and the busy thread no longer drops it 100 times a second); the samples are the same, of every
thread, the main one included. A main thread that waits (here: joining) leaves the pass to the sampler's thread."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import pytest
from ringtrace.client import MemoryListener, Timeline
from ringtrace.client.accelerator import speedups
from ringtrace.client.sampling.sampler import Sampler
from waiting import wait_for

pytestmark = [
    pytest.mark.skipif(speedups is None, reason="the C loop"),
    pytest.mark.skipif(sys.platform != "linux", reason="a thread's context switches are read from /proc"),
]


def _waiting_deep(depth: int, release: threading.Event, reached: threading.Event) -> None:
    if depth > 1:
        _waiting_deep(depth - 1, release, reached)
    else:
        reached.set()
        release.wait(60)


def _spinning(rounds: int) -> int:
    total = 0
    for i in range(rounds):
        total += i * i
    return total


def _voluntary_switches(native_id: int) -> int:
    """How often the thread ``native_id`` of this process has blocked (waited) so far."""
    with open(f"/proc/self/task/{native_id}/status") as status:
        for line in status:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc")


def _sampled_functions(timeline: Timeline, listener: MemoryListener) -> dict[str, set[str]]:
    """Per sampled thread's name, the functions its samples show."""
    timeline.flush(timeout_s=30)
    out: dict[str, set[str]] = {}
    for event in listener.events:
        if event.kind == "sample":
            names = out.setdefault(event.track.name.removesuffix(" samples"), set())
            names.update(location[0] for location in event.args["stack"])
    return out


def test_a_busy_main_thread_runs_the_passes_itself_and_the_sampler_waits_for_no_gil() -> None:
    timeline, listener = Timeline(), MemoryListener()
    timeline.add_listener(listener)
    release, reached = threading.Event(), threading.Event()
    waiter = threading.Thread(target=_waiting_deep, args=(3, release, reached), name="waiter")
    waiter.start()
    sampler = Sampler(timeline, 100)
    try:
        assert reached.wait(30)
        assert sampler.start()
        wait_for(lambda: sampler.passes, until=lambda passes: passes >= 3, timeout_s=30, what="3 passes")
        own = sampler._thread
        assert own is not None and own.native_id is not None
        first, first_main, switches = sampler.passes, sampler.main_thread_passes, _voluntary_switches(own.native_id)
        deadline = time.monotonic() + 120
        while sampler.passes < first + 60 and time.monotonic() < deadline:
            _spinning(20_000)  # the main thread busy in Python code meanwhile
        passes, main_passes = sampler.passes - first, sampler.main_thread_passes - first_main
        waits = _voluntary_switches(own.native_id) - switches
        # Waiting (joining) the main thread runs no call: the sampler's thread takes the passes again.
        joined = sampler.passes
        release.set()
        waiter.join(30)
        wait_for(lambda: sampler.passes, until=lambda now: now >= joined + 3, timeout_s=30, what="3 more passes")
    finally:
        release.set()
        sampler.stop(30)
    # One wait a pass (its sleep) where the pass runs in the main thread; a pass the sampler's thread takes the GIL
    # for costs it three (its sleep, the switch interval the busy thread keeps it, then the handoff): on a loaded
    # machine, where the main thread is preempted for a tick, some passes are still taken so.
    assert passes >= 60
    assert main_passes >= passes // 2, (main_passes, passes)
    assert waits <= passes + 3 * (passes - main_passes) + 10, (waits, passes, main_passes)
    functions: dict[str, Any] = _sampled_functions(timeline, listener)
    assert "_spinning" in functions["MainThread"]
    assert "_waiting_deep" in functions["waiter"]
