"""Timeline: recording into per-track buffers, the listeners it feeds, thread tracks, asyncio lanes, and races.

Every test listens with a ``MemoryListener`` and looks only at what it received. The process's flusher thread sweeps
timelines in the background, so each test calls ``flush()`` (which sweeps on the calling thread) before it looks,
and asserts counts and bounds, never timings. Thread switches at one exact point are simulated by running a hook at
that point, from a public method the timeline calls there (the flusher's ``start``, a thread's ``is_alive``,
``threading.get_native_id``): what the hook does is what another thread (or a signal handler) may do there.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from out_of_memory import drains_with_a_failure, run_alone
from recording_calls import Marker, record_by
from ringtrace.client import DecodedEvent, MemoryListener, Timeline, TrackInfo
from ringtrace.client.delivery.flusher import FLUSHER, Flusher
from ringtrace.wire.arg_values import MAX_STRING_CHARS, display_text
from ringtrace.wire.model import ASYNC_TRACK, THREAD_TRACK
from waiting import wait_for


@pytest.fixture
def listener() -> MemoryListener:
    return MemoryListener()


@pytest.fixture
def tl(listener: MemoryListener) -> Iterator[Timeline]:
    timeline = Timeline("test", [listener])
    yield timeline
    timeline.close()


def flushed(tl: Timeline, listener: MemoryListener) -> list[DecodedEvent]:
    assert tl.flush(timeout_s=30)
    return listener.events


def names(events: list[DecodedEvent]) -> list[str]:
    return [event.name for event in events]


def by_track(events: list[DecodedEvent]) -> dict[TrackInfo, list[DecodedEvent]]:
    tracks: dict[TrackInfo, list[DecodedEvent]] = {}
    for event in events:
        tracks.setdefault(event.track, []).append(event)
    return tracks


def run_thread(target: Callable[[], None], name: str) -> threading.Thread:
    thread = threading.Thread(target=target, name=name)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    return thread


# -- listeners -----------------------------------------------------------------------------------------------------


def test_recording_with_no_listener_keeps_nothing() -> None:
    tl = Timeline("idle")
    for i in range(1_000):
        tl.instant("dropped", i=i)
        with tl.scope("dropped", i=i):
            pass
    assert tl.tracks() == []
    assert tl.listeners == ()
    assert not tl.flush()  # nothing to deliver to
    listener = MemoryListener()
    tl.add_listener(listener)
    assert flushed(tl, listener) == []  # nothing from before
    tl.instant("kept")
    assert names(flushed(tl, listener)) == ["kept"]
    tl.close()


def test_add_and_remove_listeners() -> None:
    first, second = MemoryListener(), MemoryListener()
    tl = Timeline("two", [first])
    tl.add_listener(second)
    tl.add_listener(second)  # once is enough
    assert tl.listeners == (first, second)
    tl.instant("both")
    assert tl.flush(timeout_s=30)
    tl.remove_listener(second)
    tl.instant("first only")
    assert tl.flush(timeout_s=30)
    assert names(first.events) == ["both", "first only"]
    assert names(second.events) == ["both"]
    tl.remove_listener(first)
    assert (tl.listeners, tl.tracks()) == ((), [])
    tl.instant("nobody")
    assert tl.tracks() == []
    tl.add_listener(second)
    tl.instant("second again")
    assert names(flushed(tl, second)) == ["both", "second again"]
    assert names(first.events) == ["both", "first only"]
    tl.close()


def test_flush_returns_true_with_a_memory_listener(tl: Timeline, listener: MemoryListener) -> None:
    assert tl.flush(timeout_s=30)
    tl.instant("a")
    assert tl.flush(timeout_s=30)
    # flush(timeout_s=0) is not asserted: it is False whenever the flusher thread happens to be sweeping
    assert tl.flush(timeout_s=30)
    assert names(listener.events) == ["a"]


def test_close_delivers_everything_then_records_nothing(listener: MemoryListener) -> None:
    tl = Timeline("closing", [listener])
    for i in range(100):
        tl.instant("before", i=i)
    assert tl.close()
    assert [event.args["i"] for event in listener.events] == list(range(100))
    assert (tl.listeners, tl.tracks()) == ((), [])
    tl.instant("after")
    assert tl.tracks() == []
    assert not tl.close()
    assert len(listener.events) == 100


def test_one_listener_attached_to_two_timelines_receives_both(listener: MemoryListener) -> None:
    first, second = Timeline("first", [listener]), Timeline("second", [listener])
    first.instant("from first")
    second.instant("from second")
    with first.scope("span of first"):
        pass
    assert first.flush(timeout_s=30) and second.flush(timeout_s=30)
    events = listener.events
    assert sorted(names(events)) == ["from first", "from second", "span of first"]
    tracks = by_track(events)
    assert len(tracks) == 2  # one per timeline, track ids unique within the process
    assert len({track.track_id for track in tracks}) == 2
    first.close()
    second.close()


def test_timelines_keep_their_events_apart() -> None:
    a, b = MemoryListener(), MemoryListener()
    tl_a, tl_b = Timeline("a", [a]), Timeline("b", [b])
    tl_a.instant("a")
    tl_b.instant("b")
    assert (names(flushed(tl_a, a)), names(flushed(tl_b, b))) == (["a"], ["b"])
    tl_a.close()
    tl_b.close()


def test_dropped_events_sums_the_listeners_counters() -> None:
    bounded, whole = MemoryListener(max_events=2), MemoryListener()
    tl = Timeline("drops", [bounded, whole])
    for i in range(5):
        tl.instant("e", i=i)
    tl.flush(timeout_s=30)
    assert (len(bounded.events), len(whole.events)) == (2, 5)
    assert tl.dropped_events == 3
    tl.close()


# -- thread tracks -------------------------------------------------------------------------------------------------


def test_thread_tracks_are_named_after_their_threads(tl: Timeline, listener: MemoryListener) -> None:
    native_ids: dict[str, int] = {}

    def worker() -> None:
        native_ids[threading.current_thread().name] = threading.get_native_id()
        for i in range(10):
            tl.instant("step", i=i)

    for name in ("alpha", "beta"):
        run_thread(worker, name)
    tl.instant("main")
    tracks = by_track(flushed(tl, listener))
    # named after the timeline too: the default timeline's track of the thread may be beside it
    assert {track.name for track in tracks} == {f"test ({name})" for name in ("alpha", "beta", "MainThread")}
    assert len({track.track_id for track in tracks}) == 3
    for track, events in tracks.items():
        assert track.kind == THREAD_TRACK and track.parent == 0
        thread_name = track.name.removeprefix("test (").removesuffix(")")
        if thread_name in native_ids:
            assert track.thread_id == native_ids[thread_name]
            assert [event.args["i"] for event in events] == list(range(10))
        else:
            assert (track.thread_id, names(events)) == (threading.get_native_id(), ["main"])


def test_long_thread_names_are_cut() -> None:
    listener = MemoryListener()
    tl = Timeline("long", [listener])
    run_thread(lambda: tl.instant("x"), "t" * 1_000)
    (event,) = flushed(tl, listener)
    assert event.track.name == display_text("long (" + "t" * 1_000)
    assert len(event.track.name) == MAX_STRING_CHARS
    tl.close()


def test_renamed_thread_gets_a_renamed_track(tl: Timeline, listener: MemoryListener) -> None:
    first_done, renamed = threading.Event(), threading.Event()

    def worker() -> None:
        tl.instant("before rename")
        first_done.set()
        renamed.wait(30)
        tl.instant("after rename")

    thread = threading.Thread(target=worker, name="old name")
    thread.start()
    try:
        assert first_done.wait(30)
        assert tl.flush(timeout_s=30)
        thread.name = "new name"
        assert "test (new name)" in {track.name for track in _tracks_after_a_sweep(tl)}
    finally:
        renamed.set()
        thread.join(30)
    before, after = flushed(tl, listener)
    assert (before.name, before.track.name) == ("before rename", "test (old name)")
    assert (after.name, after.track.name) == ("after rename", "test (new name)")
    assert before.track.track_id == after.track.track_id


def _tracks_after_a_sweep(tl: Timeline) -> list[TrackInfo]:
    FLUSHER.sweep(tl)
    return tl.tracks()


def test_ended_threads_are_forgotten_after_drain(tl: Timeline, listener: MemoryListener) -> None:
    tl.instant("main")
    threads = [run_thread(lambda: tl.instant("worker"), f"short-lived-{n}") for n in range(5)]
    events = flushed(tl, listener)
    assert sorted(names(events)) == ["main", *["worker"] * 5]
    remaining = {track.name for track in tl.tracks()}
    assert remaining == {f"test ({threading.current_thread().name})"}
    assert not remaining & {f"test ({thread.name})" for thread in threads}


def test_threads_recording_while_the_flusher_drains_lose_nothing(tl: Timeline, listener: MemoryListener) -> None:
    per_thread, start = 5_000, threading.Barrier(6)

    def worker() -> None:
        start.wait(30)
        for i in range(per_thread):
            tl.instant("e", i=i)

    threads = [threading.Thread(target=worker, name=f"busy-{n}") for n in range(5)]
    for thread in threads:
        thread.start()
    start.wait(30)
    for _ in range(20):  # sweep on this thread too, while the workers record
        FLUSHER.sweep(tl)
    for thread in threads:
        thread.join(30)
    tracks = by_track(flushed(tl, listener))
    assert len(tracks) == 5
    for events in tracks.values():  # each event whole, once, in order
        assert [event.args["i"] for event in events] == list(range(per_thread))


# -- recording racing add_listener / close ---------------------------------------------------------------------------


def test_threads_that_recorded_before_a_listener_came_record_after_it() -> None:
    """The slow path stores "keep nothing" for a thread with no listener; adding one must reach that thread.

    This is also the interleaving where add_listener() runs right after the slow path released the lock.
    """
    tl = Timeline("late")
    recorded, attached = threading.Barrier(5), threading.Event()

    def worker() -> None:
        tl.instant("before any listener")
        recorded.wait(30)
        attached.wait(30)
        for i in range(100):
            tl.instant("after", i=i)

    threads = [threading.Thread(target=worker, name=f"early-{n}") for n in range(4)]
    for thread in threads:
        thread.start()
    recorded.wait(30)
    listener = MemoryListener()
    tl.add_listener(listener)
    attached.set()
    for thread in threads:
        thread.join(30)
    events = flushed(tl, listener)
    assert len(by_track(events)) == 4
    assert names(events) == ["after"] * 400
    tl.close()


def test_listener_added_during_a_threads_first_event_loses_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    first = MemoryListener()
    tl = Timeline("racing add", [first])
    second = MemoryListener()
    real_start, me = FLUSHER.start, threading.get_ident()

    def start_after_another_thread_adds_a_listener() -> bool:
        # The slow path has made this thread's buffer and released the lock; add_listener() runs right here.
        if threading.get_ident() == me and second not in tl.listeners:
            tl.add_listener(second)
        return real_start()

    monkeypatch.setattr(FLUSHER, "start", start_after_another_thread_adds_a_listener)
    tl.instant("first event")
    for i in range(100):
        tl.instant("after", i=i)
    assert tl.flush(timeout_s=30)
    assert names(first.events) == names(second.events) == ["first event", *["after"] * 100]
    tl.close()


def test_close_during_a_threads_first_event_keeps_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    listener = MemoryListener()
    tl = Timeline("racing close", [listener])
    tracks_when_closed: list[list[TrackInfo]] = []
    real_start, me = FLUSHER.start, threading.get_ident()

    def start_after_another_thread_closes() -> bool:
        # The slow path has made this thread's buffer and released the lock; close() runs right here.
        if threading.get_ident() == me and not tracks_when_closed:
            tracks_when_closed.append(tl.tracks())
            tl.close()
        return real_start()

    monkeypatch.setattr(FLUSHER, "start", start_after_another_thread_closes)
    markers = [Marker() for _ in range(1_000)]
    refs = [weakref.ref(marker) for marker in markers]
    for marker in markers:
        tl.instant("after close", m=marker)
    del markers, marker
    assert tracks_when_closed[0], "the slow path created this thread's buffer before close() ran"
    assert (tl.listeners, tl.tracks(), listener.events) == ((), [], [])
    # Nothing holds the events: at most the first went into the buffer close() had already let go of.
    assert sum(ref() is not None for ref in refs) <= 1


def test_last_event_of_an_ending_thread_is_not_lost(tl: Timeline, listener: MemoryListener) -> None:
    first_recorded, go = threading.Event(), threading.Event()

    def worker() -> None:
        tl.instant("first")
        first_recorded.set()
        go.wait(30)
        tl.instant("last")

    thread = threading.Thread(target=worker, name="ending")
    thread.start()
    try:
        assert first_recorded.wait(30)
        assert names(flushed(tl, listener)) == ["first"]
        real_is_alive = thread.is_alive
        switched: list[bool] = []

        def is_alive_after_the_last_event() -> bool:
            # The thread switch: as drain() asks whether the thread lives, it records its last event and ends.
            if not switched:
                switched.append(True)
                go.set()
                thread.join(30)
            return real_is_alive()

        thread.is_alive = is_alive_after_the_last_event  # type: ignore[method-assign]
        assert tl.flush(timeout_s=30)
        assert switched
    finally:
        go.set()
        thread.join(30)
    assert names(flushed(tl, listener)) == ["first", "last"]
    assert "ending" not in {track.name for track in tl.tracks()}


def test_a_pure_python_drain_that_runs_out_of_memory_hands_over_or_counts_each_event_once() -> None:
    # The pure-Python twin of test_compact_records' out-of-memory drain: a buffer of three runs, each allocation of a
    # drain made to fail in turn. The delete of a run copied out (its list's allocation) once failed with the run
    # still in the buffer: counted dropped, and handed over by the next drain too. In a process of its own, as that
    # one (out_of_memory.py says why).
    pytest.importorskip("_testcapi", reason="this Python has no _testcapi to make an allocation fail")
    run_alone(__file__, "pure_python_drain_out_of_memory", RINGTRACE_PURE_PYTHON="1")


def pure_python_drain_out_of_memory() -> None:
    """The test above, in its own process (``run_alone``), the recorder pure Python."""
    from ringtrace.client.accelerator import speedups

    assert speedups is None, "not the pure-Python recorder: RINGTRACE_PURE_PYTHON is not set"
    recorded = 20_000  # three runs of a drain (8192 events each at most)
    failed_halfway = 0
    for n in range(2000):
        tl = Timeline("out of memory", [MemoryListener()])
        FLUSHER.unregister(tl)  # (drained here alone)
        try:
            for i in range(recorded):
                tl.instant("x", i=i)
            handed, dropped, failed = drains_with_a_failure(tl, n)
        finally:
            tl.close()
        assert handed + dropped == recorded, (n, handed, dropped)
        failed_halfway += failed and 0 < dropped < recorded
        if not failed and dropped == 0:
            break  # (past the drain's allocations)
    assert failed_halfway > 0 and not failed, (n, failed_halfway)


@pytest.mark.parametrize("pure_python", [False, True], ids=["c-recorder", "pure-python"])
def test_a_lane_s_drain_that_runs_out_of_memory_counts_each_event_once_and_no_task_switch(pure_python: bool) -> None:
    # A lane's buffer holds a record of each task that took it after the first (TASK_SWITCH), which the drain takes
    # out: a drain that failed before it did counted them as dropped events too. (Its own process: out_of_memory.py.)
    pytest.importorskip("_testcapi", reason="this Python has no _testcapi to make an allocation fail")
    run_alone(__file__, "lane_drain_out_of_memory", RINGTRACE_PURE_PYTHON="1" if pure_python else "0")  # (C if built)


def lane_drain_out_of_memory() -> None:
    """The test above, in its own process (``run_alone``)."""

    async def handle(i: int) -> None:
        with tl.scope("request", i=i):
            tl.instant("midway")

    async def requests() -> None:
        for i in range(3):
            await asyncio.create_task(handle(i))  # one lane, two switches

    failed_before_done = 0
    for n in range(2000):
        tl = Timeline("out of memory", [MemoryListener()])
        FLUSHER.unregister(tl)  # (drained here alone)
        try:
            asyncio.run(requests())
            handed, dropped, failed = drains_with_a_failure(tl, n)
        finally:
            tl.close()
        assert handed + dropped == 6, (n, handed, dropped)
        failed_before_done += failed and dropped > 0
        if not failed and dropped == 0:
            break  # (past the drain's allocations)
    assert failed_before_done > 0 and not failed, (n, failed_before_done)


@pytest.mark.parametrize("pure_python", [False, True], ids=["c-recorder", "pure-python"])
def test_after_a_lane_s_drain_that_runs_out_of_memory_its_running_task_s_events_are_still_named_by_it(
    pure_python: bool,
) -> None:
    # The drain moves the lane's first task on past the switches it takes: one that failed after taking them left it
    # on the task before, which then named the running task's next events. (Its own process: out_of_memory.py.)
    pytest.importorskip("_testcapi", reason="this Python has no _testcapi to make an allocation fail")
    run_alone(__file__, "lane_names_after_out_of_memory", RINGTRACE_PURE_PYTHON="1" if pure_python else "0")


def lane_names_after_out_of_memory() -> None:
    """The test above, in its own process (``run_alone``)."""
    import _testcapi

    async def before() -> None:
        tl.instant("before")

    async def running(go: asyncio.Event) -> None:
        tl.instant("running")
        await go.wait()
        tl.instant("running")

    async def drains(n: int) -> list[Any]:
        await asyncio.create_task(before(), name="before")
        go = asyncio.Event()
        task = asyncio.create_task(running(go), name="running")
        await asyncio.sleep(0)  # it took the lane, and records
        _testcapi.set_nomemory(n, n + 1)
        try:
            first = tl.drain()
        except MemoryError:
            first = None
        finally:
            _testcapi.remove_mem_hooks()
        go.set()
        await task
        return [drained for drained in (first, tl.drain()) if drained is not None]

    failed = True
    for n in range(2000):
        tl = Timeline("out of memory", [MemoryListener()])
        FLUSHER.unregister(tl)  # (drained here alone)
        try:
            drained = asyncio.run(drains(n))
        finally:
            tl.close()
        named = [(run[i + 1], run[i + 4]["task"]) for d in drained for _, run in d.runs for i in range(0, len(run), 5)]
        assert ("running", "running") in named and {task for label, task in named if label == "running"} == {
            "running"
        }, (n, named)
        failed = len(drained) == 1
        if not failed and len(named) == 3:
            break  # (past the drain's allocations)
    assert not failed, n


_REENTRANT = """
import signal, threading
from ringtrace.client import MemoryListener, Timeline

listener = MemoryListener()
tl = Timeline("signals", [listener])
signal.signal(signal.SIGUSR1, lambda *_: tl.instant("from the signal handler"))
real_native_id = threading.get_native_id
raised = []

def native_id_with_a_signal():
    # A signal arrives (once) while the main thread is in the slow path, holding the timeline's lock.
    if not raised:
        raised.append(True)
        signal.raise_signal(signal.SIGUSR1)
    return real_native_id()

threading.get_native_id = native_id_with_a_signal
tl.instant("first event of the main thread")
threading.get_native_id = real_native_id
assert raised
assert tl.flush(timeout_s=30)
print(len(listener.events), len({event.track.track_id for event in listener.events}))
"""


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGUSR1"), reason="needs SIGUSR1")
def test_recording_from_a_signal_handler_during_the_slow_path_does_not_deadlock() -> None:
    # A deadlock shows as the subprocess timing out.
    done = subprocess.run([sys.executable, "-c", _REENTRANT], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "1"]  # both events, on one track


def test_recording_goes_on_quietly_when_the_flusher_cannot_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As at interpreter shutdown, or in a forked child that cannot start threads: nothing raises, nothing is kept.

    The old version of this test made ``threading._start_new_thread`` fail; a ``Thread`` subclass whose ``start``
    raises what CPython raises then does the same through public names. A fresh ``Flusher`` stands in for the
    process's, whose thread is already running.
    """

    class CannotStart(threading.Thread):
        def start(self) -> None:
            raise RuntimeError("can't create new thread at interpreter shutdown")

    import ringtrace.client.recording.timelines as timelines

    flusher = Flusher()
    monkeypatch.setattr(timelines, "FLUSHER", flusher)
    monkeypatch.setattr(threading, "Thread", CannotStart)
    listener = MemoryListener()
    tl = Timeline("no flusher", [listener])
    with caplog.at_level(logging.WARNING, logger="ringtrace.client"):
        tl.instant("first event")
        with tl.scope("span"):
            tl.instant("more")
    assert "cannot start the flusher thread" in caplog.text
    assert (tl.listeners, tl.tracks(), listener.events) == ((), [], [])
    assert not flusher.start()


# -- asyncio lanes -------------------------------------------------------------------------------------------------


def test_concurrent_tasks_record_on_lanes_of_their_thread(tl: Timeline, listener: MemoryListener) -> None:
    tl.instant("on the thread")

    async def work(i: int, barrier: asyncio.Barrier) -> None:
        with tl.scope("outer", i=i):
            await barrier.wait()  # every task is inside its outer span at once
            with tl.scope("inner", i=i):
                await asyncio.sleep(0)
                tl.instant("point", i=i)
            await barrier.wait()

    async def main() -> None:
        barrier = asyncio.Barrier(5)
        await asyncio.gather(*(work(i, barrier) for i in range(5)))

    asyncio.run(main())
    tracks = by_track(flushed(tl, listener))
    (thread_track,) = [track for track in tracks if track.kind == THREAD_TRACK]
    assert names(tracks.pop(thread_track)) == ["on the thread"]
    assert len(tracks) == 5
    assert len({track.name for track in tracks}) == 5
    seen = set()
    for lane, events in tracks.items():
        assert (lane.kind, lane.parent, lane.thread_id) == (ASYNC_TRACK, thread_track.track_id, thread_track.thread_id)
        assert lane.name.startswith(thread_track.name)
        point, inner, outer = events  # in the order they ended
        assert (point.name, inner.name, outer.name) == ("point", "inner", "outer")
        assert point.args == inner.args == outer.args  # one task's events, none of another's
        seen.add(outer.args["i"])
        assert outer.ts_ns <= inner.ts_ns <= point.ts_ns <= inner.ts_ns + inner.dur_ns <= outer.ts_ns + outer.dur_ns
    assert seen == set(range(5))


def test_lanes_are_reused_once_tasks_end(tl: Timeline, listener: MemoryListener) -> None:
    async def one(i: int) -> None:
        with tl.scope("task", i=i):
            await asyncio.sleep(0)

    async def rounds_of_concurrent_tasks() -> list[set[int]]:
        lanes = []
        for round_number in range(3):
            await asyncio.gather(*(one(i) for i in range(4)))
            events = flushed(tl, listener)[4 * round_number :]
            lanes.append({event.track.track_id for event in events})
        return lanes

    first, second, third = asyncio.run(rounds_of_concurrent_tasks())
    assert len(first) == 4 and first == second == third

    async def sequential_tasks() -> None:
        for i in range(1_000):
            await asyncio.create_task(one(i))
            if i % 50 == 49:
                assert tl.flush(timeout_s=30)

    listener.clear()
    asyncio.run(sequential_tasks())
    events = flushed(tl, listener)
    assert sorted(event.args["i"] for event in events) == list(range(1_000))
    lanes = {event.track.track_id for event in events}
    assert len(lanes) == 1  # one task at a time: each takes the lane the one before left
    assert all(event.track.kind == ASYNC_TRACK for event in events)
    assert len([track for track in tl.tracks() if track.kind == ASYNC_TRACK]) == 0  # every task ended


def test_a_lane_taken_by_the_next_task_before_the_flusher_runs_is_one_of_the_tracks(tl: Timeline) -> None:
    async def record() -> None:
        tl.instant("in-task")

    async def one_after_another() -> list[TrackInfo]:
        await asyncio.create_task(record())
        await asyncio.create_task(record())  # on the lane the first left, its events not drained yet
        return tl.tracks()

    with FLUSHER.sweeping():  # as if the flusher were busy elsewhere
        tracks = asyncio.run(one_after_another())
    assert [track.kind for track in tracks] == [THREAD_TRACK, ASYNC_TRACK]  # the lane once, not once per task


def test_event_loop_on_another_thread_puts_lanes_under_that_thread(tl: Timeline, listener: MemoryListener) -> None:
    async def work(i: int, barrier: asyncio.Barrier) -> None:
        with tl.scope("task", i=i):
            await barrier.wait()

    async def main() -> None:
        tl.instant("loop thread, main task")
        barrier = asyncio.Barrier(2)
        await asyncio.gather(work(0, barrier), work(1, barrier))

    def loop_thread() -> None:
        tl.instant("loop thread, outside the loop")
        asyncio.run(main())

    run_thread(loop_thread, "loop-thread")
    tracks = by_track(flushed(tl, listener))
    (thread_track,) = [track for track in tracks if track.kind == THREAD_TRACK]
    assert thread_track.name == "test (loop-thread)"
    lanes = [track for track in tracks if track.kind == ASYNC_TRACK]
    assert len(lanes) == 3  # the main task and the two it gathers
    assert {lane.parent for lane in lanes} == {thread_track.track_id}


def test_callbacks_outside_any_task_record_on_the_thread_track(tl: Timeline, listener: MemoryListener) -> None:
    async def main() -> None:
        done = asyncio.get_running_loop().create_future()

        def callback() -> None:
            tl.instant("callback")
            done.set_result(None)

        asyncio.get_running_loop().call_soon(callback)
        await done

    asyncio.run(main())
    (event,) = flushed(tl, listener)
    assert (event.name, event.track.kind, event.track.name) == ("callback", THREAD_TRACK, "test (MainThread)")


def test_cancelled_task_records_the_cancellation(tl: Timeline, listener: MemoryListener) -> None:
    async def victim(started: asyncio.Event) -> None:
        with tl.scope("cancelled", step=1):
            started.set()
            await asyncio.Event().wait()  # until cancelled

    async def main() -> None:
        started = asyncio.Event()
        task = asyncio.create_task(victim(started), name="victim")
        await started.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    (event,) = flushed(tl, listener)
    assert (event.name, event.track.kind) == ("cancelled", ASYNC_TRACK)
    assert event.args == {"step": 1, "exception": "CancelledError", "task": "victim"}


# -- what recording accepts ----------------------------------------------------------------------------------------


def test_exception_inside_a_scope_records_its_type_and_propagates(tl: Timeline, listener: MemoryListener) -> None:
    with pytest.raises(KeyError), tl.scope("with args", key="k"):
        raise KeyError("k")
    with pytest.raises(ZeroDivisionError), tl.scope("without args"):
        1 / 0  # noqa: B018
    with tl.scope("fine", n=1):
        pass
    events = flushed(tl, listener)
    assert [(event.name, event.args) for event in events] == [
        ("with args", {"key": "k", "exception": "KeyError"}),
        ("without args", {"exception": "ZeroDivisionError"}),
        ("fine", {"n": 1}),
    ]
    assert all(event.kind == "span" and event.dur_ns >= 0 for event in events)


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class BadHash:
    def __hash__(self) -> int:
        raise RuntimeError("no hash for you")


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": [value]}
    return value


ODD_LABELS = [
    None,
    3,
    2**100,
    10**5_000,
    float("nan"),
    b"bytes",
    ["a", "list"],
    {"a": "dict"},
    {"a", "set"},
    Unprintable(),
    BadHash(),
    "lone \udc80 surrogate",
    "x" * 10_000,
    "",
]
ODD_ARGS: list[dict[str, Any]] = [
    {"self": 1, "name": "n", "label": "l"},
    {"deep": _deep(300)},
    {"many": list(range(5_000)), "map": {(2, 3): "y", None: 1}},
    {"set": {1, 2}, "bytes": b"\x00", "nan": float("nan"), "big": 2**100, "huge": [10**5_000]},
    {"object": Unprintable(), "surrogate": "\ud800"},
    {"\udc80 key": 1},
]


@pytest.mark.parametrize("label", ODD_LABELS, ids=lambda label: type(label).__name__)
def test_scope_and_instant_never_raise_for_odd_labels(tl: Timeline, listener: MemoryListener, label: object) -> None:
    tl.instant("before")
    tl.instant(label)
    with tl.scope(label, n=1):
        pass
    tl.instant("after")
    assert names(flushed(tl, listener)) == ["before", display_text(label), display_text(label), "after"]


@pytest.mark.parametrize("args", ODD_ARGS, ids=lambda args: "-".join(args))
def test_scope_and_instant_never_raise_for_odd_args(
    tl: Timeline, listener: MemoryListener, args: dict[str, Any]
) -> None:
    tl.instant("before", n=0)
    tl.instant("odd", **args)
    with tl.scope("odd", **args):
        pass
    tl.instant("after", n=1)
    events = flushed(tl, listener)
    assert names(events) == ["before", "odd", "odd", "after"]
    assert (events[0].args, events[-1].args) == ({"n": 0}, {"n": 1})
    assert all(isinstance(event.args, dict) and len(event.args) == len(args) for event in events[1:3])


def test_recording_odd_values_from_many_threads_and_tasks_at_once(tl: Timeline, listener: MemoryListener) -> None:
    def worker() -> None:
        for label in ODD_LABELS:
            for args in ODD_ARGS:
                tl.instant(label, **args)

    async def tasks() -> None:
        await asyncio.gather(*(asyncio.to_thread(worker) for _ in range(2)), asyncio.sleep(0))
        worker()

    asyncio.run(tasks())
    assert len(flushed(tl, listener)) == 3 * len(ODD_LABELS) * len(ODD_ARGS)


def test_a_task_left_pending_on_a_closed_loop_is_forgotten_once_it_is_gone() -> None:
    memory = MemoryListener()
    timeline = Timeline("t", [memory])
    loop = asyncio.new_event_loop()

    async def stuck() -> None:
        timeline.instant("in-task")
        await asyncio.Event().wait()  # never set

    task = loop.create_task(stuck())
    loop.run_until_complete(asyncio.sleep(0.01))
    loop.close()  # the task stays pending forever
    assert timeline.flush(timeout_s=30)
    assert [e.name for e in memory.events] == ["in-task"]
    gone = weakref.ref(task)
    del task
    gc.collect()
    assert gone() is None  # not kept alive by its lane
    for _ in range(2):  # (the pass that finds it gone, and the one after: see the lanes' let-go owners)
        assert timeline.flush(timeout_s=30)
    assert all(track.kind != ASYNC_TRACK for track in timeline.tracks())  # its lane's track ended with it
    timeline.close()


def test_a_task_that_records_as_the_last_listener_goes_is_not_kept_once_done() -> None:
    memory = MemoryListener()
    timeline = Timeline("t", [memory])

    class Result:
        pass

    async def handler(go: asyncio.Event) -> Result:
        timeline.instant("in-task")
        await go.wait()
        return Result()

    async def main() -> tuple[weakref.ref[Any], weakref.ref[Any]]:
        go = asyncio.Event()
        task = asyncio.create_task(handler(go))
        await asyncio.sleep(0)  # it records, on a lane of its own
        timeline.remove_listener(memory)  # the last: every buffer is let go, the task's lane with them
        go.set()
        return weakref.ref(task), weakref.ref(await task)

    task, result = asyncio.run(main())
    gc.collect()
    assert [e.name for e in memory.events] == ["in-task"]
    assert task() is None and result() is None  # nothing of the timeline keeps the done task, nor what it returned
    timeline.close()


BOUND = 1000


@pytest.mark.parametrize("call", ["instant", "scope", "push", "message", "marker", "async_begin"])
@pytest.mark.parametrize("in_task", [False, True], ids=["thread", "task"])
def test_a_full_buffer_refuses_events_as_they_are_recorded_counted_as_dropped(call: str, in_task: bool) -> None:
    memory = MemoryListener()
    timeline = Timeline("bounded", [memory], max_buffered_events=BOUND)
    held: list[weakref.ref[Any]] = []

    def record() -> None:
        for i in range(3 * BOUND):
            record_by(call, timeline, i, held)

    async def in_a_task() -> None:
        record()

    with FLUSHER.sweeping():  # as if the flusher were busy elsewhere: nothing drains while this thread records
        if in_task:
            asyncio.run(in_a_task())
        else:
            record()
        # The buffer holds the bound, no more: the rest were let go as they came.
        assert sum(ref() is not None for ref in held) == BOUND
    assert timeline.flush() is False  # it dropped
    assert memory.dropped_events == 2 * BOUND
    assert len(memory.events) == BOUND
    timeline.close()


def test_a_full_buffer_refuses_counters_too() -> None:
    memory = MemoryListener()
    timeline = Timeline("bounded", [memory], max_buffered_events=BOUND)
    with FLUSHER.sweeping():
        for i in range(3 * BOUND):
            timeline.counter("level", i)
    assert timeline.flush() is False
    assert memory.dropped_events == 2 * BOUND
    assert [e.args["value"] for e in memory.events] == list(range(BOUND))  # the first ones: the rest were refused
    timeline.close()


def test_a_full_buffer_refuses_a_source_s_events_too() -> None:
    memory = MemoryListener()
    timeline = Timeline("bounded", [memory], max_buffered_events=BOUND)
    loader = timeline.source("loader")
    with FLUSHER.sweeping():
        for _ in range(BOUND):
            loader.open()
        full = time.monotonic_ns()
        for _ in range(2 * BOUND):
            loader.open()
    assert timeline.flush() is False
    assert memory.dropped_events == 2 * BOUND
    assert len(memory.events) == BOUND
    assert all(event.ts_ns < full for event in memory.events)  # refused as they came, once the buffer was full
    timeline.max_buffered_events = 10 * BOUND  # its buffer takes the new bound too
    with FLUSHER.sweeping():
        for _ in range(3 * BOUND):
            loader.close()
    assert timeline.flush(timeout_s=30)
    assert len(memory.events) == 4 * BOUND
    timeline.close()


def test_a_lowered_buffer_bound_applies_from_the_next_event() -> None:
    memory = MemoryListener()
    timeline = Timeline("bounded", [memory], max_buffered_events=BOUND)
    with FLUSHER.sweeping():
        for i in range(10):
            timeline.instant("e", i=i)
        timeline.max_buffered_events = 5  # the buffer holds 10: the next events find it full
        for i in range(10, 20):
            timeline.instant("e", i=i)
    assert timeline.flush() is False
    assert memory.dropped_events == 10
    assert [e.args["i"] for e in memory.events] == list(range(10))
    timeline.instant("e", i=20)  # drained: room again
    assert timeline.flush(timeout_s=30)
    assert memory.events[-1].args["i"] == 20
    timeline.close()


def test_a_flush_out_of_time_hands_the_rest_over_later_in_order() -> None:
    memory = MemoryListener()
    timeline = Timeline("late", [memory])
    try:  # (closed whatever happens: a timeline left registered would hold the next tests' flushes up)
        with FLUSHER.sweeping():
            for i in range(100_000):
                timeline.instant("e", i=i)
            assert timeline.flush(timeout_s=0) is False  # the runs it took are carried over
        assert timeline.flush(timeout_s=60)
        assert [e.args["i"] for e in memory.events] == list(range(100_000))
        assert memory.dropped_events == 0
    finally:
        timeline.close()


def test_a_listener_that_asks_is_told_when_a_pass_over_the_runs_ends_even_out_of_time() -> None:
    calls: list[str] = []

    class Told(MemoryListener):
        def receive(self, track: TrackInfo, records: list[Any]) -> None:
            calls.append("receive")
            super().receive(track, records)

        def handed_over(self) -> None:
            calls.append("handed_over")

    timeline = Timeline("told", [Told(), MemoryListener()])  # one that does not ask is left as it is
    try:
        with FLUSHER.sweeping():
            for i in range(50_000):  # several runs
                timeline.instant("e", i=i)
            assert timeline.flush(timeout_s=0) is False  # out of time at once: carried over, and said
            assert calls == ["handed_over"]
        assert timeline.flush(timeout_s=60)
        assert calls[-1] == "handed_over"
        assert 1 < calls.count("handed_over") < calls.count("receive")  # once a pass, not run by run
    finally:
        timeline.close()


def test_a_pass_over_nothing_tells_no_listener_it_ended() -> None:
    told: list[str] = []

    class Told(MemoryListener):
        def handed_over(self) -> None:
            told.append("handed_over")

    timeline = Timeline("quiet", [Told()])
    try:
        for _ in range(5):  # (the flusher's own sweeps may come between: each over nothing too)
            assert timeline.flush(timeout_s=30)
        assert told == []  # (a streamer told would wake its thread, taking the GIL from a busy program thread)
        timeline.instant("e")
        assert timeline.flush(timeout_s=30)
        assert told == ["handed_over"]
    finally:
        timeline.close()


def test_closing_one_timeline_keeps_a_listener_another_one_uses() -> None:
    shared = MemoryListener()
    first, second = Timeline("first", [shared]), Timeline("second", [shared])
    first.instant("from-first")
    assert first.close()
    second.instant("from-second")
    assert second.flush(timeout_s=30)
    assert sorted(e.name for e in shared.events) == ["from-first", "from-second"]
    second.close()


@pytest.mark.timeout(900)  # its work is what the recorder got in during the swap: more, the longer the swap waited
def test_replacing_a_listener_loses_no_event_recorded_meanwhile() -> None:
    old, new = MemoryListener(), MemoryListener()
    # A thread recording flat out can outrun the flusher: a bound that cannot fill keeps this about the swap.
    timeline = Timeline("swap", [old], max_buffered_events=100_000_000)
    done = threading.Event()
    recorded = [0]

    def record() -> None:
        while not done.is_set():
            timeline.instant("e", i=recorded[0])
            recorded[0] += 1

    recorder = threading.Thread(target=record)
    recorder.start()
    try:
        try:
            while recorded[0] < 10_000:
                done.wait(0.001)
            timeline.replace_listener(old, new)
            while recorded[0] < 20_000:
                done.wait(0.001)
        finally:
            done.set()
            recorder.join()
        # The recorder runs on while the swap waits for the GIL: on a loaded machine a million events or more may need
        # handing over, each flush going on where the last one ran out of time (nothing is dropped on the way).
        wait_for(lambda: timeline.flush(timeout_s=60), timeout_s=600, what="every event handed over")
        got = sorted(e.args["i"] for e in [*old.events, *new.events])
        assert got == list(range(recorded[0]))
        assert old.events and new.events
        assert old.dropped_events == new.dropped_events == 0
    finally:
        timeline.close()  # (else the flusher thread sweeps on the rest under the next tests of this process)


def test_ended_threads_are_retired_from_listeners() -> None:
    retired: list[TrackInfo] = []

    class Retiring(MemoryListener):
        def retire(self, track: TrackInfo) -> None:
            retired.append(track)

    timeline = Timeline("churn", [Retiring()])
    for i in range(20):
        worker = threading.Thread(target=timeline.instant, args=("t",), kwargs={"i": i}, name=f"w{i}")
        worker.start()
        worker.join()
    assert timeline.flush(timeout_s=30)
    assert sorted(track.name for track in retired) == sorted(f"churn (w{i})" for i in range(20))
    timeline.close()


@pytest.mark.parametrize("bad", [0, -1, 1.5, "1000", True])
def test_a_bad_buffer_bound_is_refused_naming_it(bad: Any) -> None:
    from ringtrace.client import ConfigError

    with pytest.raises(ConfigError, match="max_buffered_events"):
        Timeline("t", max_buffered_events=bad)


def test_a_lane_that_serves_many_tasks_in_turn_names_each_slice_s_task(tl: Timeline, listener: MemoryListener) -> None:
    shared = {"kept": 1}

    async def job(i: int) -> None:
        with tl.scope("job", i=i):
            tl.instant("mark", **shared)
            tl.counter("level", i)  # a counter's args are its values: no task there
            await asyncio.sleep(0)

    async def main() -> None:
        for i in range(6):  # one after the other: one lane, reused once the last task is done
            await asyncio.create_task(job(i), name=f"job-{i}")
            assert tl.flush(timeout_s=30)

    asyncio.run(main())
    lanes = {e.track.track_id for e in listener.events if e.track.kind == ASYNC_TRACK}
    assert len(lanes) == 1
    named = [(e.name, e.args) for e in listener.events if e.name != "level"]
    assert named == [
        (name, {**args, "task": f"job-{i}"}) for i in range(6) for name, args in (("mark", shared), ("job", {"i": i}))
    ]
    assert shared == {"kept": 1}  # the caller's map is not written to
    assert all("task" not in e.args for e in listener.events if e.name == "level")


def test_what_waits_for_the_flusher_to_start_runs_once_on_the_thread_that_starts_it() -> None:
    flusher = Flusher()
    ran: list[str] = []
    flusher.when_started(lambda: ran.append(threading.current_thread().name))
    flusher.when_started(lambda: 1 / 0)  # (a failure is logged, never raised into the recording thread)
    assert flusher.start() and flusher.start()
    assert ran == [threading.current_thread().name]
