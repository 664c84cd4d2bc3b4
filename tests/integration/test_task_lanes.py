"""asyncio task lanes through the real collector: as many lanes as tasks alive at once, however many tasks come and go
between two passes of the flusher, and each task's events on its own lane, whole and in order."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections import defaultdict
from typing import Any

import pytest
from collector_process import CollectorProcess, events, metadata

#: Tasks that come and go, at most ALIVE at once, each a span with an instant inside it, across a few awaits.
_TASKS = """
import asyncio, sys, ringtrace.client

tl = ringtrace.client.connect(sys.argv[1], process_name="lanes")
total, alive = int(sys.argv[2]), int(sys.argv[3])

async def handle(i):
    with tl.scope("request", i=i):
        await asyncio.sleep(0)
        tl.instant("midway", i=i)
        await asyncio.sleep(0.0005)

async def main():
    room = asyncio.Semaphore(alive)
    async def admitted(i):
        async with room:
            await asyncio.create_task(handle(i))
    await asyncio.gather(*(admitted(i) for i in range(total)))

asyncio.run(main())
print("delivered:", tl.flush(timeout_s=30))
"""


@pytest.mark.parametrize("pure_python", [False, True], ids=["c-recorder", "pure-python"])
@pytest.mark.parametrize(("total", "alive"), [(2_000, 10), (500, 5)])
def test_lanes_follow_the_tasks_alive_at_once(
    collector: CollectorProcess, total: int, alive: int, pure_python: bool
) -> None:
    env = {name: value for name, value in os.environ.items() if name != "RINGTRACE_PURE_PYTHON"}
    if pure_python:
        env["RINGTRACE_PURE_PYTHON"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _TASKS, collector.tcp_address, str(total), str(alive)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0 and "delivered: True" in done.stdout, done.stderr
    trace = collector.snapshot()
    requests = {e["args"]["i"]: e for e in events(trace, "X") if e["name"] == "request"}
    midways = {e["args"]["i"]: e for e in events(trace, "i") if e["name"] == "midway"}
    assert sorted(requests) == sorted(midways) == list(range(total))
    lanes = {e["tid"] for e in requests.values()}
    names = metadata(trace, "thread_name")
    assert all(" tasks [" in names[(e["pid"], e["tid"])] for e in requests.values())
    assert len(lanes) <= 2 * alive + 2, f"{len(lanes)} lanes for {alive} tasks alive at once"
    _each_task_whole_on_its_lane(requests, midways)


def _each_task_whole_on_its_lane(requests: dict[int, Any], midways: dict[int, Any]) -> None:
    """A task's instant is on its span's lane, within it; the spans of a lane follow one another, never overlap."""
    by_lane: dict[int, list[Any]] = defaultdict(list)
    for i, span in requests.items():
        midway = midways[i]
        assert midway["tid"] == span["tid"], (span, midway)
        assert span["ts"] <= midway["ts"] <= span["ts"] + span["dur"] + 0.002, (span, midway)
        by_lane[span["tid"]].append(span)
    for spans in by_lane.values():
        spans.sort(key=lambda span: span["ts"])
        for before, after in itertools.pairwise(spans):
            assert before["ts"] + before["dur"] <= after["ts"] + 0.002, (before, after)  # (us, rounded to ns)


#: A task that takes its lane while the lane's buffer is full (the task before it filled it) opens a scope there, and
#: ends it after the flusher drained the buffer.
_FULL_LANE = """
import asyncio, sys, ringtrace.client

tl = ringtrace.client.connect(sys.argv[1], process_name="full lane")
tl.max_buffered_events = 4

async def fill():
    for i in range(4):
        tl.instant("filler", i=i)

async def late(go):
    with tl.scope("late"):
        await go.wait()

async def main():
    await asyncio.create_task(fill(), name="filler")
    go = asyncio.Event()
    task = asyncio.create_task(late(go), name="late")
    await asyncio.sleep(0)  # in its scope, on the full lane
    print("first:", tl.flush(timeout_s=30))
    go.set()
    await task

asyncio.run(main())
print("delivered:", tl.flush(timeout_s=30))
"""


@pytest.mark.parametrize("pure_python", [False, True], ids=["c-recorder", "pure-python"])
def test_a_scope_opened_on_a_full_lane_and_ended_after_the_drain_reaches_the_collector_named_by_its_task(
    collector: CollectorProcess, pure_python: bool
) -> None:
    done = _run(_FULL_LANE, [collector.tcp_address], pure_python)
    assert done.returncode == 0 and "first: True" in done.stdout and "delivered: True" in done.stdout, done.stderr
    trace = collector.snapshot()
    assert [e["args"]["task"] for e in events(trace, "i") if e["name"] == "filler"] == ["filler"] * 4
    assert [e["args"]["task"] for e in events(trace, "X") if e["name"] == "late"] == ["late"]


#: Tasks that record one instant each, one after the other, on a lane whose buffer would fill within a few of them: a
#: sweep is only what a half-full buffer asks for (the interval is far longer than the run).
_HALF_FULL = """
import asyncio, sys, ringtrace.client

tl = ringtrace.client.connect(sys.argv[1], process_name="half full", batch_interval_s=600.0)
tl.max_buffered_events = 42  # half: 21 events' values, where the records alternate a task's switch and its instant

async def one(i):
    tl.instant("request", i=i)

async def main():
    for i in range(100):
        await asyncio.create_task(one(i))
        await asyncio.sleep(0.03)  # time enough for the flusher a half-full buffer wakes

asyncio.run(main())
print("delivered:", tl.flush(timeout_s=30))
"""


@pytest.mark.parametrize("pure_python", [False, True], ids=["c-recorder", "pure-python"])
def test_a_task_switch_that_makes_a_lane_half_full_wakes_the_flusher(
    collector: CollectorProcess, pure_python: bool
) -> None:
    done = _run(_HALF_FULL, [collector.tcp_address], pure_python)
    assert done.returncode == 0 and "delivered: True" in done.stdout, (done.stdout, done.stderr)
    trace = collector.snapshot()
    assert sorted(e["args"]["i"] for e in events(trace, "i") if e["name"] == "request") == list(range(100))


def _run(program: str, args: list[str], pure_python: bool) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if name != "RINGTRACE_PURE_PYTHON"}
    if pure_python:
        env["RINGTRACE_PURE_PYTHON"] = "1"
    return subprocess.run([sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=120, env=env)
