"""The sampler's pass and loop (``sampling/thread_pass.py``) and their C twins (``speedups/samples.c``): the same
samples for the same threads, a thread that ran walked again and one that did not keep its stack, a full buffer
counted, and the loop's stop, exit and counts."""

from __future__ import annotations

import subprocess
import sys
import threading
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
from ringtrace.client import MemoryListener, Timeline
from ringtrace.client.accelerator import speedups
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.sampling import sampler as sampler_module
from ringtrace.client.sampling.sampler import Sampler
from ringtrace.client.sampling.stack_capture import StackInterner
from ringtrace.client.sampling.thread_pass import run_passes_in_python, take_samples_in_python
from ringtrace.wire.model import SAMPLE
from waiting import wait_for

PASSES: dict[str, Callable[..., Any]] = {"python": take_samples_in_python}
LOOPS: dict[str, Callable[..., Any]] = {"python": run_passes_in_python}
#: Where a thread waiting on an event is, innermost last.
WAITING = ("Event.wait", "Condition.wait")
if speedups is not None:
    PASSES["c"] = speedups.take_samples
    LOOPS["c"] = speedups.run_passes


def _blocked_in_first(depth: int, release: threading.Event, reached: threading.Event) -> None:
    if depth > 1:
        _blocked_in_first(depth - 1, release, reached)
    else:
        reached.set()
        release.wait(60)


def _blocked_in_second(depth: int, release: threading.Event, reached: threading.Event) -> None:
    if depth > 1:
        _blocked_in_second(depth - 1, release, reached)
    else:
        reached.set()
        release.wait(60)


def _moving(
    first: threading.Event, second: threading.Event, release: threading.Event, reached: threading.Event
) -> None:
    _blocked_in_first(3, first, reached)  # (released by the test: then it waits in the other function)
    _blocked_in_second(5, release, second)


@contextmanager
def _threads(count: int = 2) -> Iterator[tuple[list[threading.Thread], threading.Event]]:
    """``count`` threads blocked at known stacks, their names ``t0``, ``t1``, ...: even ones 4 frames deep in
    ``_blocked_in_first``, odd ones 6 deep in ``_blocked_in_second``."""
    release = threading.Event()
    threads, reached = [], []
    for i in range(count):
        at = threading.Event()
        target = _blocked_in_first if i % 2 == 0 else _blocked_in_second
        thread = threading.Thread(target=target, args=(4 + 2 * (i % 2), release, at), name=f"t{i}")
        thread.start()
        threads.append(thread)
        reached.append(at)
    try:
        for at in reached:
            assert at.wait(30)
        yield threads, release
    finally:
        release.set()
        for thread in threads:
            thread.join(30)


def _samples(timeline: Timeline, listener: MemoryListener) -> dict[str, list[tuple[str, tuple[Any, ...]]]]:
    """Per sampled thread name (``t0``, ...): its samples' (name, functions of the stack, root first)."""
    timeline.flush(timeout_s=30)
    out: dict[str, list[tuple[str, tuple[Any, ...]]]] = {}
    for event in listener.events:
        if event.kind == "sample" and event.track.name.startswith("t"):
            functions = tuple(location[0] for location in event.args["stack"])
            out.setdefault(event.track.name.removesuffix(" samples"), []).append((event.name, functions))
    return out


def _sampled_with(take: Callable[..., Any], passes: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    timeline, listener = Timeline(), MemoryListener()
    timeline.add_listener(listener)
    monkeypatch.setattr(sampler_module, "take_samples", take)
    sampler = Sampler(timeline, 100)
    for _ in range(passes):
        sampler.sample_once()
    return _samples(timeline, listener), sampler


def test_the_twins_take_the_same_samples_of_the_same_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    with _threads(3):
        seen = {name: _sampled_with(take, 3, monkeypatch)[0] for name, take in PASSES.items()}
    python = seen["python"]
    assert sorted(python) == ["t0", "t1", "t2"]
    for name in ("t0", "t2"):
        assert len(python[name]) == 3 and all(task == "" for task, _ in python[name])
        assert python[name][0][1][-6:] == ("_blocked_in_first",) * 4 + WAITING
    assert python["t1"][0][1][-8:] == ("_blocked_in_second",) * 6 + WAITING
    assert python["t1"] == python["t1"][:1] * 3
    for name, samples in seen.items():
        assert samples == python, name


@pytest.mark.parametrize("twin", sorted(PASSES))
def test_a_thread_that_ran_is_walked_again_and_one_that_did_not_keeps_its_stack(
    twin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    timeline, listener = Timeline(), MemoryListener()
    timeline.add_listener(listener)
    monkeypatch.setattr(sampler_module, "take_samples", PASSES[twin])
    first, second, release, reached = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    mover = threading.Thread(target=_moving, args=(first, second, release, reached), name="tmove")
    mover.start()
    try:
        assert reached.wait(30)
        sampler = Sampler(timeline, 100)
        sampler.sample_once()
        sampler.sample_once()
        first.set()  # it runs on, and waits in _blocked_in_second
        assert second.wait(30)
        sampler.sample_once()
    finally:
        first.set()
        release.set()
        mover.join(30)
    stacks = [functions for _, functions in _samples(timeline, listener)["tmove"]]
    assert len(stacks) == 3 and stacks[0] == stacks[1]
    assert "_blocked_in_first" in stacks[0] and "_blocked_in_second" not in stacks[0]
    assert stacks[2][-7:] == ("_blocked_in_second",) * 5 + WAITING


@pytest.mark.parametrize("twin", sorted(PASSES))
def test_samples_refused_for_want_of_room_are_taken_and_counted_as_dropped(
    twin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    timeline, listener = Timeline(max_buffered_events=2), MemoryListener()
    timeline.add_listener(listener)
    FLUSHER.unregister(timeline)  # (no sweep between the passes, which would make room: the flush below hands over)
    monkeypatch.setattr(sampler_module, "take_samples", PASSES[twin])
    with _threads(2):
        sampler = Sampler(timeline, 100)
        for _ in range(5):
            sampler.sample_once()
    timeline.flush(timeout_s=30)
    kept = sum(1 for event in listener.events if event.kind == "sample" and event.track.name.startswith("t"))
    assert sampler.samples >= 10  # (the test runner's own threads, if any, too)
    assert 2 <= kept < 10 and listener.dropped_events >= 10 - kept


def _take_args(sampled_of: Callable[[int, Any], Any] = lambda ident, thread: None) -> tuple[Any, ...]:
    """A loop's take_args with ``sampled_of`` (by default one that samples no thread)."""
    threads: dict[int, Any] = {}
    active = threading._active  # type: ignore[attr-defined]
    return (threads, active, threading.get_ident(), SAMPLE, sampled_of, StackInterner(), lambda: None)


@pytest.mark.parametrize("twin", sorted(LOOPS))
def test_the_loop_samples_at_its_rate_until_stopped_and_counts(twin: str, monkeypatch: pytest.MonkeyPatch) -> None:
    timeline, listener = Timeline(), MemoryListener()
    timeline.add_listener(listener)
    monkeypatch.setattr(sampler_module, "run_passes", LOOPS[twin])
    with _threads(2):
        sampler = Sampler(timeline, 200)
        assert sampler.start()
        try:
            wait_for(lambda: sampler.passes, until=lambda passes: passes >= 5, timeout_s=30, what="5 passes")
        finally:
            sampler.stop(30)
    assert not sampler.running
    assert sampler.samples >= 2 * 5 and sampler.cpu_ns > 0
    assert set(_samples(timeline, listener)) == {"t0", "t1"}


@pytest.mark.parametrize("twin", sorted(LOOPS))
def test_the_loop_takes_no_pass_once_the_exit_delivery_began_and_stops_within_its_latency(
    twin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = array("q", [0, 0, 0])
    exiting = SimpleNamespace(exiting=True)
    LOOPS[twin](10_000_000, bytearray(1), counts, exiting, _take_args(), dict, lambda: None)
    assert counts[0] == 0 and counts[1] == 0
    stopping = bytearray(1)
    done = threading.Event()

    def slow_loop() -> None:  # one pass an hour: the stop flag is looked at every 50 ms meanwhile
        LOOPS[twin](3600 * 10**9, stopping, counts, SimpleNamespace(exiting=False), _take_args(), dict, int)
        done.set()

    thread = threading.Thread(target=slow_loop)
    thread.start()
    stopping[0] = 1
    assert done.wait(30)
    thread.join(30)
    assert counts[0] == 0


@pytest.mark.parametrize("twin", sorted(LOOPS))
def test_the_loop_raises_what_a_pass_raises(twin: str) -> None:
    def broken_sampled_of(ident: int, thread: object) -> None:
        raise RuntimeError("broken")

    broken = _take_args(broken_sampled_of)
    with _threads(1), pytest.raises(RuntimeError, match="broken"):
        LOOPS[twin](1_000_000, bytearray(1), array("q", [0, 0, 0]), SimpleNamespace(exiting=False), broken, dict, int)


COLLECTIONS_DURING_PASSES = """
import gc, sys, threading
from ringtrace.client import MemoryListener, Timeline
from ringtrace.client.sampling.sampler import Sampler
from ringtrace.client.sampling import sampler as sampler_module
from ringtrace.client.sampling.thread_pass import take_samples_in_python

sampler_module.take_samples = take_samples_in_python  # the pure-Python pass, whatever is built
timeline = Timeline("collected", [MemoryListener()])
sampler = Sampler(timeline, 100)

class Holder:
    pass

gc.set_threshold(1)  # a collection at each allocation of a tracked object: inside the pass's own, too
for _ in range(300):
    holder = Holder()
    holder.local, holder.itself = threading.local(), holder  # garbage only a collection frees, a threading.local
    holder.local.value = 1
    del holder
    sampler.sample_once()
assert gc.isenabled()
print("done", sampler.samples)
"""


def test_passes_that_collections_would_interrupt_neither_hang_nor_leave_collections_off() -> None:
    # On 3.11, a collection set off inside sys._current_frames() that frees a threading.local hung the process for
    # good (the pure-Python pass: CPython's lock on its thread list taken twice). A pass holds collections off there.
    done = subprocess.run([sys.executable, "-c", COLLECTIONS_DURING_PASSES], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("done ")
