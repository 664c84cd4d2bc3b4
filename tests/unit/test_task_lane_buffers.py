"""A lane's one buffer for the tasks it serves in turn, through a Timeline and its listener: every event recorded is
delivered or counted dropped, named after its task, whatever the labels or the buffer's bound; and a lane is taken
once per task, whatever records meanwhile."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import threading
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from ringtrace.client import MemoryListener, Timeline
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.recording.lanes import ThreadLanes
from ringtrace.wire.model import ASYNC_TRACK, TrackInfo
from waiting import wait_for


class TouchyLabel:
    """A label whose ``==`` raises (a label is any object the program gives): nothing may compare it."""

    def __eq__(self, other: object) -> bool:
        raise ZeroDivisionError("a label compared")

    __hash__ = object.__hash__

    def __str__(self) -> str:
        return "touchy"


def test_a_label_whose_equality_raises_loses_nothing_of_a_lane_nor_of_other_tracks() -> None:
    listener = MemoryListener()
    timeline = Timeline("touchy", [listener])
    label = TouchyLabel()
    names: list[str] = []

    async def request() -> None:
        task = asyncio.current_task()
        assert task is not None
        names.append(task.get_name())
        with timeline.scope(label):
            timeline.instant("inside")

    async def one_after_another() -> None:
        for _ in range(5):
            await asyncio.create_task(request())  # each takes the lane the one before left: a switch each

    timeline.instant("on the thread")
    asyncio.run(one_after_another())
    assert timeline.flush(timeout_s=30)
    events = listener.events
    assert listener.dropped_events == 0
    assert sorted(e.name for e in events) == ["inside"] * 5 + ["on the thread"] + ["touchy"] * 5
    on_lane = [e for e in events if e.track.kind == ASYNC_TRACK]
    assert [e.args["task"] for e in on_lane if e.name == "touchy"] == names
    timeline.close()


@pytest.mark.parametrize("bound", [10, 1000])
def test_every_event_of_tasks_past_a_lanes_bound_is_delivered_or_counted_dropped(bound: int) -> None:
    listener = MemoryListener()
    timeline = Timeline("bounded", [listener], max_buffered_events=bound)
    tasks = 5_000

    async def request(i: int) -> None:
        with timeline.scope("request", i=i):
            timeline.instant("midway", i=i)
            await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(*(request(i) for i in range(tasks)))

    asyncio.run(main())
    timeline.flush(timeout_s=30)  # (False when events were dropped: they are counted below)
    events = listener.events
    assert len(events) + listener.dropped_events == 2 * tasks
    # What was delivered is named after the task that recorded it: a span and its instant, the same task.
    tasks_of = {(e.name, e.args["i"]): e.args["task"] for e in events}
    for (name, i), task in tasks_of.items():
        if name == "midway" and ("request", i) in tasks_of:
            assert tasks_of[("request", i)] == task
    timeline.close()


def test_a_lane_holds_its_bound_of_one_event_tasks_though_each_switch_takes_a_place() -> None:
    listener = MemoryListener()
    timeline = Timeline("one each", [listener], max_buffered_events=100)

    async def request() -> None:
        timeline.instant("tick")

    async def one_after_another() -> None:
        for _ in range(100):
            await asyncio.create_task(request())

    asyncio.run(one_after_another())
    assert timeline.flush(timeout_s=30)
    assert (len(listener.events), listener.dropped_events) == (100, 0)
    timeline.close()


def test_a_done_task_is_not_kept_alive_by_its_lane_until_the_drain_and_its_events_keep_its_name() -> None:
    # A done task holds its result (a server's response, and its request with it): a lane's switch record that held
    # the task kept every request of a flusher's interval alive, cold memory for each new request. The record holds
    # the task's name: a done task lives no longer than the next task of its lane takes the lane.
    listener = MemoryListener()
    timeline = Timeline("done tasks", [listener])
    tasks: list[weakref.ref[asyncio.Task[Any]]] = []

    async def request(i: int) -> bytes:
        with timeline.scope("request"):
            timeline.instant("inside")
        return b"a response" * i

    async def one_after_another() -> None:
        for i in range(20):
            task = asyncio.create_task(request(i), name=f"request {i}")
            tasks.append(weakref.ref(task))
            await task
            del task

    with FLUSHER.sweeping():  # (no drain meanwhile: what the switch records hold stays held)
        asyncio.run(one_after_another())
        alive = [ref() for ref in tasks if ref() is not None]
        assert len(alive) <= 1, [task.get_name() for task in alive if task is not None]
        del alive
    assert timeline.flush(timeout_s=30)
    on_lane = [e for e in listener.events if e.track.kind == ASYNC_TRACK]
    assert listener.dropped_events == 0
    assert [e.args["task"] for e in on_lane if e.name == "request"] == [f"request {i}" for i in range(20)]
    assert [e.args["task"] for e in on_lane if e.name == "inside"] == [f"request {i}" for i in range(20)]
    assert len({e.track.track_id for e in on_lane}) == 1  # one lane served them all, a switch each
    timeline.close()


def test_tasks_whose_name_is_asked_of_code_that_records_take_their_lanes_and_lose_nothing() -> None:
    # A lane's switch record asks the task its name as the task takes the lane: a Task subclass's get_name is Python
    # code, which may record (here, into the lane being taken), and must neither hang nor lose an event.
    listener = MemoryListener()
    timeline = Timeline("named by code that records", [listener])

    class Talkative(asyncio.Task):  # type: ignore[type-arg]
        def get_name(self) -> str:
            timeline.instant("asked its name")
            return "talkative " + super().get_name()

    async def request() -> None:
        with timeline.scope("request"):
            timeline.instant("inside")

    async def one_after_another() -> None:
        asyncio.get_running_loop().set_task_factory(lambda loop, coro, **kw: Talkative(coro, loop=loop, **kw))
        for i in range(5):
            await asyncio.create_task(request(), name=f"request {i}")

    thread = threading.Thread(target=asyncio.run, args=(one_after_another(),), daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "taking a lane hung"
    assert timeline.flush(timeout_s=30)
    assert listener.dropped_events == 0
    on_lane = [e for e in listener.events if e.track.kind == ASYNC_TRACK and e.name in ("request", "inside")]
    assert [e.args["task"] for e in on_lane if e.name == "request"] == [f"talkative request {i}" for i in range(5)]
    assert [e.args["task"] for e in on_lane if e.name == "inside"] == [f"talkative request {i}" for i in range(5)]
    assert any(e.name == "asked its name" for e in listener.events)
    timeline.close()


class RichName(str):
    """A name type whose ``__str__`` answers itself: a str, but not one."""

    def __str__(self) -> str:
        return self


def _odd_name_factories() -> dict[str, tuple[Any, Callable[[int], str]]]:
    """Task factories whose tasks answer ``get_name`` oddly, each with the ``task`` arg its i-th task's events get."""

    class RichlyNamed(asyncio.Task):  # type: ignore[type-arg]
        def get_name(self) -> str:
            return RichName("rich " + super().get_name())

    class Numbered(asyncio.Task):  # type: ignore[type-arg]
        def get_name(self) -> Any:
            return 42

    class Nameless(asyncio.Task):  # type: ignore[type-arg]
        def get_name(self) -> str:
            raise RuntimeError("no name")

    def answered_by_the_instance(loop: Any, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **kw)
        task.get_name = lambda: "the instance's"  # type: ignore[method-assign]  # (not the type's: not asked)
        return task

    return {
        "str-subclass": (lambda loop, coro, **kw: RichlyNamed(coro, loop=loop, **kw), lambda i: f"rich request {i}"),
        "not-a-str": (lambda loop, coro, **kw: Numbered(coro, loop=loop, **kw), lambda i: "42"),
        "raises": (
            lambda loop, coro, **kw: Nameless(coro, loop=loop, **kw),
            lambda i: "Nameless (its get_name raised RuntimeError)",
        ),
        "instance-attribute": (answered_by_the_instance, lambda i: f"request {i}"),
    }


@pytest.mark.parametrize("odd", list(_odd_name_factories()))
def test_tasks_whose_get_name_answers_oddly_are_named_by_a_str_and_nothing_raises_or_is_lost(odd: str) -> None:
    # What a lane keeps of a task is a str: a name that is a str subclass, or no str, or raises, loses no event (the
    # drain once called get_name on a name that was not exactly a str, and lost its whole pass), and raises nothing
    # into the program; an instance's get_name attribute is not asked (it may record into the lane being taken).
    factory, name = _odd_name_factories()[odd]
    listener = MemoryListener()
    timeline = Timeline("odd names", [listener])

    async def request() -> None:
        with timeline.scope("request"):
            timeline.instant("inside")

    async def one_after_another() -> None:
        asyncio.get_running_loop().set_task_factory(factory)
        for i in range(4):
            await asyncio.create_task(request(), name=f"request {i}")

    timeline.instant("on the thread")
    asyncio.run(one_after_another())  # (raises nothing)
    assert timeline.flush(timeout_s=30)
    assert listener.dropped_events == 0
    on_lane = [e for e in listener.events if e.track.kind == ASYNC_TRACK]
    assert [(e.name, e.args["task"]) for e in on_lane] == [
        (n, name(i)) for i in range(4) for n in ("inside", "request")
    ]
    assert all(type(e.args["task"]) is str for e in on_lane)
    assert [e.name for e in listener.events if e.track.kind != ASYNC_TRACK] == ["on the thread"]
    timeline.close()


def test_each_new_task_takes_the_first_free_lane_whichever_lane_the_task_before_it_took() -> None:
    """The lane a server's next request takes (the first, its task before done: the C recorder takes it in C) and
    the cases it must leave to the full look: the first lane's task still running, a drain between two tasks, a
    thread whose last new task took another lane than the first. The same lanes under either recorder."""
    listener = MemoryListener()
    timeline = Timeline("lanes", [listener])

    async def request(name: str, hold: asyncio.Event | None = None) -> None:
        with timeline.scope(name):
            if hold is not None:
                await hold.wait()

    async def serve() -> None:
        for name in ("a", "b"):
            await asyncio.create_task(request(name))
        hold = asyncio.Event()
        held = asyncio.create_task(request("held", hold))  # the first lane's, still running while ...
        await asyncio.sleep(0)
        await asyncio.create_task(request("beside"))  # ... this one takes the second
        await asyncio.create_task(request("after"))  # the second again: its task is done, the first's is not
        hold.set()
        await held
        await asyncio.create_task(request("first again"))  # the first: free again, and first
        assert timeline.flush(timeout_s=30)  # a drain between two tasks: the buffer it took is gone
        await asyncio.create_task(request("drained"))
        await asyncio.create_task(request("last"))

    asyncio.run(serve())
    assert timeline.flush(timeout_s=30)
    timeline.close()
    lanes = {e.name: e.track.name for e in listener.events}
    first, second = lanes["a"], lanes["beside"]
    assert first != second and first.endswith("tasks [1]") and second.endswith("tasks [2]")
    assert [lanes[name] for name in ("a", "b", "held", "first again", "drained", "last")] == [first] * 6
    assert lanes["after"] == second and listener.dropped_events == 0
    tasks = {e.name: e.args["task"] for e in listener.events}
    assert len(set(tasks.values())) == len(tasks)  # each span named after its own task


def test_a_task_whose_done_is_truthy_but_not_true_frees_its_lane_as_python_reads_it() -> None:
    """A task class whose ``done()`` answers 1, not True: its lane is free once it is done (``if held.done()``), the
    first free for the next task, whichever recorder looks."""
    listener = MemoryListener()
    timeline = Timeline("truthy", [listener])

    class Answering(asyncio.Task):  # type: ignore[type-arg]
        def done(self) -> bool:
            return int(super().done()) if self.get_name().startswith("odd") else super().done()  # type: ignore[return-value]

    async def request(name: str) -> None:
        with timeline.scope(name):
            await asyncio.sleep(0)

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(lambda loop, coro, **kw: Answering(coro, loop=loop, **kw))  # type: ignore[arg-type]
        await asyncio.gather(loop.create_task(request("a"), name="odd-a"), loop.create_task(request("b"), name="b"))
        await loop.create_task(request("c"), name="c")

    asyncio.run(serve())
    assert timeline.flush(timeout_s=30)
    timeline.close()
    lanes = {e.name: e.track.name for e in listener.events}
    assert lanes["c"] == lanes["a"] != lanes["b"] and lanes["a"].endswith("tasks [1]")


GREEN_THREADS_SHARING_A_LOOP = """
import sys
from ringtrace.client import MemoryListener, Timeline

if sys.argv[1] == "before":  # the timeline made before gevent patches threading
    listener = MemoryListener()
    timeline = Timeline("green", [listener])

from gevent import monkey

monkey.patch_all()

import asyncio, gevent, json, threading

if sys.argv[1] == "after":
    listener = MemoryListener()
    timeline = Timeline("green", [listener])
loop = asyncio.new_event_loop()

async def request(name):
    with timeline.scope(name):
        await asyncio.sleep(0)

def serve(name):  # each greenlet a thread of its own to the program (threading.current_thread())
    loop.run_until_complete(loop.create_task(request(name)))

for name in ("a", "b", "c"):
    gevent.spawn(serve, name).join()
assert timeline.flush(timeout_s=30)
print(json.dumps({e.name: e.track.name for e in listener.events}))
"""


@pytest.mark.parametrize("timeline_made", ["after", "before"])
def test_greenlets_sharing_an_os_thread_take_lanes_of_their_own_threads(timeline_made: str) -> None:
    """Under gevent the green threads share one thread state: the lane a task takes is its green thread's, as the
    Python path finds it, never the lane of the green thread before it (which the thread state would not tell);
    also where the timeline was made before gevent patched threading."""
    pytest.importorskip("gevent")
    done = subprocess.run(
        [sys.executable, "-c", GREEN_THREADS_SHARING_A_LOOP, timeline_made], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lanes = json.loads(done.stdout)
    assert sorted(lanes) == ["a", "b", "c"] and len(set(lanes.values())) == 3
    assert all(name.endswith("tasks [1]") for name in lanes.values())  # each green thread's own first lane


def test_a_collection_recorded_while_a_task_takes_its_lane_makes_no_second_lane() -> None:
    listener = MemoryListener()
    timeline = Timeline("collected", [listener])

    def collected(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            timeline.instant("gc")

    async def request() -> None:
        with timeline.scope("request"):
            await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(*(request() for _ in range(20)))

    def in_a_thread(threshold: int) -> None:  # (each thread's lanes numbered from 1: a collection among the first)
        gc.set_threshold(threshold)
        asyncio.run(main())

    thresholds = gc.get_threshold()
    gc.callbacks.append(collected)
    try:
        for threshold in range(1, 40):
            thread = threading.Thread(target=in_a_thread, args=(threshold,))
            thread.start()
            thread.join(timeout=60)
            assert not thread.is_alive()
    finally:
        gc.callbacks.remove(collected)
        gc.set_threshold(*thresholds)
    assert timeline.flush(timeout_s=30)
    lanes = {e.track.track_id: e.track.name for e in listener.events if e.track.kind == ASYNC_TRACK}
    same_name = [name for name, count in Counter(lanes.values()).items() if count > 1]
    assert same_name == []
    timeline.close()


def test_tasks_a_factory_makes_of_the_pure_python_task_class_record_on_lanes() -> None:
    listener = MemoryListener()
    timeline = Timeline("py tasks", [listener])
    py_task = getattr(asyncio.tasks, "_PyTask", None)
    if py_task is None:
        pytest.skip("this asyncio has no pure-Python Task")

    async def request() -> None:
        with timeline.scope("request"):
            await asyncio.sleep(0)

    async def main() -> None:
        asyncio.get_running_loop().set_task_factory(lambda loop, coro, **kw: py_task(coro, loop=loop, **kw))
        for _ in range(3):
            await asyncio.create_task(request())

    asyncio.run(main())
    assert timeline.flush(timeout_s=30)
    assert [e.name for e in listener.events] == ["request"] * 3
    assert all(e.track.kind == ASYNC_TRACK for e in listener.events)
    timeline.close()


def test_tasks_left_pending_on_a_loop_its_thread_never_closed_are_not_kept_alive_once_the_thread_ended() -> None:
    listener = MemoryListener()
    timeline = Timeline("left pending", [listener])
    left: list[weakref.ref[asyncio.Task[None]]] = []

    async def pending() -> None:
        with timeline.scope("pending"):
            await asyncio.Event().wait()  # never set

    async def main() -> None:
        for _ in range(20):
            task = asyncio.create_task(pending())
            left.append(weakref.ref(task))
        await asyncio.sleep(0)  # each has begun, and recorded, and waits

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(main(),))  # (the loop not closed by its thread)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()

    def collected() -> tuple[int, list[Any]]:
        # A collection under way on another thread (one set off by an allocation there) makes gc.collect() return at
        # once: that one destroys the tasks, and runs the finalizers that end their scopes, on its thread, in its time.
        gc.collect()
        timeline.flush(timeout_s=30)
        return sum(ref() is not None for ref in left), [e for e in listener.events if e.name == "pending"]

    try:
        assert timeline.flush(timeout_s=30)  # the pass that finds the thread ended
        # Each task destroyed pending, its span ended then (GeneratorExit), delivered, named by its task.
        spans = wait_for(
            collected,
            timeout_s=30,
            what="the tasks destroyed, their spans delivered",
            until=lambda c: c[0] == 0 and len(c[1]) >= 20,
        )[1]
        assert len(spans) == 20 and listener.dropped_events == 0
        assert {e.args["exception"] for e in spans} == {"GeneratorExit"}
        assert len({e.args["task"] for e in spans}) == 20
    finally:
        loop.close()
        timeline.close()


def test_the_scopes_of_tasks_left_pending_are_delivered_though_passes_come_while_another_thread_collects_them() -> None:
    listener = MemoryListener()
    timeline = Timeline("collected elsewhere", [listener])
    left: list[weakref.ref[asyncio.Task[None]]] = []
    inside, resume = threading.Event(), threading.Event()

    async def pending() -> None:
        with timeline.scope("pending"):
            await asyncio.Event().wait()  # never set

    async def main() -> None:
        for _ in range(20):
            left.append(weakref.ref(asyncio.create_task(pending())))
        await asyncio.sleep(0)  # each has begun its scope, and waits

    def paused(_: object) -> None:
        # The collecting thread, between clearing the tasks' weak references and running the finalizers that end
        # their scopes, held up as a busy machine may hold it (a weak reference's callback is Python code).
        inside.set()
        resume.wait(timeout=60)

    loop = asyncio.new_event_loop()
    collecting = gc.isenabled()
    gc.disable()  # (the tasks are collected below, on the thread chosen, not by the first allocation anywhere)
    try:
        thread = threading.Thread(target=loop.run_until_complete, args=(main(),))  # (the loop not closed by it)
        thread.start()
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert timeline.flush(timeout_s=30)  # the pass that finds the thread ended and lets its tasks go
        watched = weakref.ref(left[0](), paused)  # type: ignore[arg-type]
        collector = threading.Thread(target=gc.collect)
        collector.start()
        assert inside.wait(timeout=60)
        assert sum(ref() is not None for ref in left) == 0  # all gone to weak references, no scope ended yet
        assert timeline.flush(timeout_s=30) and timeline.flush(timeout_s=30)  # passes come meanwhile
        resume.set()
        collector.join(timeout=60)
        assert not collector.is_alive() and watched() is None
        assert timeline.flush(timeout_s=30)
        spans = [e for e in listener.events if e.name == "pending"]
        assert (len(spans), listener.dropped_events) == (20, 0)
        assert len({e.args["task"] for e in spans}) == 20
    finally:
        resume.set()
        if collecting:
            gc.enable()
        loop.close()
        timeline.close()


def test_tasks_left_pending_on_a_closed_loop_deliver_the_scopes_they_end_as_they_are_destroyed() -> None:
    listener = MemoryListener()
    timeline = Timeline("closed loop", [listener])
    left: list[weakref.ref[asyncio.Task[None]]] = []

    async def pending(i: int) -> None:
        with timeline.scope(f"pending {i}"):
            await asyncio.Event().wait()  # never set

    async def main() -> None:
        for i in range(5):
            left.append(weakref.ref(asyncio.create_task(pending(i))))
        await asyncio.sleep(0)  # each has begun its scope, and waits

    loop = asyncio.new_event_loop()
    loop.run_until_complete(main())
    loop.close()  # (its tasks left pending: the thread lives on)
    try:
        assert timeline.flush(timeout_s=30)  # the pass that finds their loop closed

        def alive() -> int:
            gc.collect()  # (returns at once where a collection is under way on another thread: that one destroys them)
            return sum(ref() is not None for ref in left)

        wait_for(alive, timeout_s=30, what="the tasks destroyed", until=lambda n: n == 0)  # not kept alive by lanes
        asyncio.run(asyncio.sleep(0))  # the lanes go on: a task of the next loop takes one

        def delivered() -> list[Any]:  # (the finalizers ending their scopes run on the collecting thread)
            timeline.flush(timeout_s=30)
            return [e for e in listener.events if e.name.startswith("pending")]

        spans = wait_for(
            delivered, timeout_s=30, what="the 5 spans of the tasks destroyed", until=lambda s: len(s) >= 5
        )
        assert sorted(e.name for e in spans) == [f"pending {i}" for i in range(5)]
        assert listener.dropped_events == 0
        assert {e.args["exception"] for e in spans} == {"GeneratorExit"}
        assert len({e.args["task"] for e in spans}) == 5
        assert len({e.track.track_id for e in spans}) == 5  # each on its lane, none of them after another task's
    finally:
        timeline.close()


def test_a_scope_a_task_left_pending_on_a_closed_loop_ends_as_it_is_destroyed_overlaps_no_span_of_its_lane() -> None:
    listener = MemoryListener()
    timeline = Timeline("closed loop, next loop", [listener])
    left: list[weakref.ref[asyncio.Task[None]]] = []

    async def pending() -> None:
        with timeline.scope("pending"):
            await asyncio.Event().wait()  # never set

    async def main() -> None:
        left.append(weakref.ref(asyncio.create_task(pending())))
        await asyncio.sleep(0)  # it has begun its scope, and waits

    loop = asyncio.new_event_loop()
    loop.run_until_complete(main())
    loop.close()  # (its task left pending: the thread lives on)

    async def later() -> None:
        with timeline.scope("later"):  # on the lane the pending task had
            await asyncio.sleep(0)
            gc.collect()  # the pending task is destroyed: its scope ends now, inside this one
            await asyncio.sleep(0)

    try:
        assert timeline.flush(timeout_s=30)  # the pass that finds its loop closed and lets it go
        asyncio.run(later())
        assert timeline.flush(timeout_s=30)
        spans = {e.name: e for e in listener.events if e.name in ("pending", "later")}
        assert sorted(spans) == ["later", "pending"]
        first, second = spans["pending"], spans["later"]
        assert first.ts_ns < second.ts_ns < first.ts_ns + first.dur_ns < second.ts_ns + second.dur_ns
        assert first.track.track_id != second.track.track_id  # overlapping, so never on one track
        assert first.track.name == second.track.name  # the same lane
        assert left[0]() is None
    finally:
        timeline.close()


class Remembered:
    """Stands for a task (``Had`` holds any object weakly, found by its id)."""

    __slots__ = ("__weakref__",)


def test_the_tasks_lanes_remember_are_let_go_of_as_they_end_and_their_entries_do_not_pile_up() -> None:
    lanes = ThreadLanes[None](remember=True)
    lane = lanes.add(TrackInfo(1, ASYNC_TRACK, "tasks [1]", 0, 0))
    ballast = []  # (takes the room of those gone: the next ones' ids are new)
    sizes = []
    for _ in range(100):
        batch = [Remembered() for _ in range(100)]
        for task in batch:
            lanes.had.remember(task, lane)  # type: ignore[arg-type]
        del batch, task
        ballast += [Remembered() for _ in range(100)]
        sizes.append(len(lanes.had))
    kept = Remembered()
    lanes.had.remember(kept, lane)  # type: ignore[arg-type]
    assert lanes.lane_it_had(kept) is lane  # type: ignore[arg-type]
    assert lanes.lane_it_had(Remembered()) is None  # type: ignore[arg-type]
    assert max(sizes) <= 1_000
