"""The parts a Timeline is made of, each through its own interface: the track buffers (``Tracks``), draining them
(``drain.take_events``), the message gates, and the listener bookkeeping. ``test_timeline.py`` holds the whole."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from typing import Any

import pytest
from ringtrace.client import MemoryListener
from ringtrace.client.recording.drain import lane_parents, take_events
from ringtrace.client.recording.gates import MessageGates, sampling
from ringtrace.client.recording.lanes import FIRST_FIT
from ringtrace.client.recording.messages import Message, message_kind
from ringtrace.client.recording.sources import Source
from ringtrace.client.recording.timeline_listeners import close_unused, count_lost, replaced_after_fork
from ringtrace.client.recording.timelines import Timeline
from ringtrace.client.recording.tracks import NOT_RECORDING, Tracks
from ringtrace.wire.message_format import priority_level
from ringtrace.wire.model import ASYNC_TRACK, INSTANT, RECORD_FIELDS, SPAN, THREAD_TRACK, TrackInfo

#: Where lane_for's switches wake the flusher in these tests: nowhere.
NO_WAKE = -1
#: Values a lane's buffer may hold in these tests: more than any of them records.
ROOM = 2**62


def instants(count: int) -> list[Any]:
    values: list[Any] = []
    for i in range(count):
        values.extend((INSTANT, f"e{i}", i, i, None))
    return values


# -- Tracks --------------------------------------------------------------------------------------------------------


def test_a_thread_has_one_buffer_named_after_the_label_and_the_thread() -> None:
    tracks = Tracks()
    first = tracks.thread_buffer("disk")
    assert tracks.thread_buffer("disk") is first
    assert first.track.kind == THREAD_TRACK
    assert first.track.name == f"disk ({threading.current_thread().name})"
    assert Tracks().thread_buffer(None).track.name == threading.current_thread().name
    assert tracks.infos() == [first.track]


def test_a_lane_is_given_back_when_its_task_is_forgotten_and_reused_by_the_next_task() -> None:
    tracks = Tracks()

    async def lanes() -> tuple[TrackInfo, TrackInfo, TrackInfo]:
        first = asyncio.create_task(asyncio.sleep(0))
        one = tracks.lane_for(first, None, ROOM, NO_WAKE)
        two = tracks.lane_for(asyncio.create_task(asyncio.sleep(0.01)), None, ROOM, NO_WAKE)
        assert tracks.forget([one]) == []  # its task still runs: the lane and its buffer are its
        await first
        assert tracks.forget([one]) == [one.track]
        three = tracks.lane_for(asyncio.create_task(asyncio.sleep(0)), None, ROOM, NO_WAKE)
        assert three is not one  # a buffer of its own, on the lane given back
        await asyncio.sleep(0.02)
        return one.track, two.track, three.track

    one, two, three = asyncio.run(lanes())
    thread = tracks.thread_buffer(None).track
    assert (one.kind, one.parent, one.name) == (ASYNC_TRACK, thread.track_id, f"{thread.name} tasks [1]")
    assert two.name == f"{thread.name} tasks [2]"
    assert three == one
    assert [track.track_id for track in tracks.infos()] == [thread.track_id, two.track_id, one.track_id]


def test_a_done_task_s_lane_is_taken_by_the_next_task_before_the_flusher_runs_and_goes_on() -> None:
    tracks = Tracks()
    names = []

    async def record(name: str) -> None:
        task = asyncio.current_task()
        assert task is not None
        names.append(task.get_name())
        tracks.lane_for(task, None, ROOM, NO_WAKE).events.extend((INSTANT, name, 1, 1, None))

    async def one_after_another() -> None:
        await asyncio.create_task(record("first"))
        await asyncio.create_task(record("second"))  # the first is done: its lane is free at once

    asyncio.run(one_after_another())
    _, lane = tracks.buffers  # one buffer for the lane, the tasks' events one after the other
    taken, ended = take_events(tracks.buffers)
    # One run for the lane: the tasks' events in the order they held it, each named by its task, the switch gone.
    assert [
        (track, [(run[i + 1], run[i + 4]["task"]) for i in range(0, len(run), RECORD_FIELDS)]) for track, run in taken
    ] == [(lane.track, [("first", names[0]), ("second", names[1])])]
    assert ended == [lane]
    assert tracks.forget([lane]) == [lane.track]  # it ends with the second task, free for the next


def test_a_lane_taken_by_a_task_after_the_drain_found_it_ended_is_not_forgotten() -> None:
    tracks = Tracks()
    names: list[str] = []

    async def record(name: str) -> None:
        task = asyncio.current_task()
        assert task is not None
        names.append(task.get_name())
        tracks.lane_for(task, None, ROOM, NO_WAKE).events.extend((INSTANT, name, 1, 1, None))

    async def one_after_another() -> None:
        await asyncio.create_task(record("first"))
        taken, ended = take_events(tracks.buffers)  # the first task is done, its lane empty
        assert [len(run) for _, run in taken] == [RECORD_FIELDS] and len(ended) == 1
        await asyncio.create_task(record("second"))  # takes the lane before the drain forgets it
        assert tracks.forget(ended) == []
        taken, ended = take_events(tracks.buffers)
        assert [(run[1], run[4]["task"]) for _, run in taken] == [("second", names[1])]
        assert tracks.forget(ended) == [taken[0][0]]

    asyncio.run(one_after_another())


def test_a_full_lane_s_buffer_is_left_to_the_drain_and_the_next_task_records_in_a_new_one_of_the_lane() -> None:
    tracks = Tracks()
    room = 2 * RECORD_FIELDS
    lost: list[int] = []

    async def record() -> None:
        tracks.lane_for(asyncio.current_task(), None, room, NO_WAKE).events.extend(instants(2))

    async def one_after_another() -> None:
        await asyncio.create_task(record())  # as many as the timeline's bound held, say
        (full,) = tracks.task_buffers.values()
        task = asyncio.create_task(asyncio.sleep(0))
        fresh = tracks.lane_for(task, None, room, NO_WAKE)
        # Its own, on the same lane: a scope it opens holds it, and what it ends there is its own, kept.
        assert fresh is not full and (fresh.track, fresh.owner, fresh.events) == (full.track, task, [])
        assert (len(full.events), full.owner is task) == (2 * RECORD_FIELDS, False)
        count_lost((LostCounter(lost),), [full, fresh])
        await task
        taken, ended = take_events(tracks.buffers)
        assert [len(run) for _, run in taken] == [2 * RECORD_FIELDS]
        assert tracks.forget(ended) == [full.track]  # both ended: the lane's track with the last

    asyncio.run(one_after_another())
    assert lost == [2]


def test_a_lane_taken_for_a_task_s_traced_calls_alone_ends_with_it_and_lets_it_go() -> None:
    tracks = Tracks()
    done: list[weakref.ref[asyncio.Task[None]]] = []

    async def traced_calls_only() -> TrackInfo:
        task = asyncio.create_task(asyncio.sleep(0))
        await task  # done before the drain that finds its calls (function tracing: no scope of its own)
        done.append(weakref.ref(task))
        ((track, _),) = tracks.call_tracks([(threading.current_thread(), task, [])], None)
        return track

    lane = asyncio.run(traced_calls_only())
    assert lane.kind == ASYNC_TRACK
    assert tracks.forget(take_events(tracks.buffers)[1]) == [lane]  # its listeners retire the track
    gc.collect()
    assert done[0]() is None  # the lane, free again, holds it no more


def test_a_task_s_calls_drained_after_its_lane_was_freed_go_back_to_its_lane_not_another_free_one() -> None:
    tracks = Tracks()
    tracks.remember_tasks()  # (calls are traced: a call source added)

    async def lanes_and_calls() -> tuple[list[TrackInfo], list[TrackInfo]]:
        first, second = asyncio.create_task(asyncio.sleep(0)), asyncio.create_task(asyncio.sleep(0))
        scopes = [tracks.lane_for(task, None, ROOM, NO_WAKE).track for task in (first, second)]
        await asyncio.gather(first, second)
        assert tracks.forget([b for b in tracks.buffers if b.track in scopes]) == scopes  # both lanes free
        # Their calls, drained now, the second task's first: each on the lane its scope was on
        runs = [(threading.current_thread(), second, []), (threading.current_thread(), first, [])]
        return scopes, [track for track, _ in tracks.call_tracks(runs, None)]

    (first_lane, second_lane), calls = asyncio.run(lanes_and_calls())
    assert first_lane != second_lane
    assert calls == [second_lane, first_lane]


class KeyedTask(asyncio.Task[None]):
    """A task equal to any task of the same name: its ``__eq__`` takes the other for a task."""

    def __eq__(self, other: object) -> bool:
        return bool(self.get_name() == other.get_name())  # type: ignore[attr-defined]

    __hash__ = asyncio.Task.__hash__


def test_the_events_a_lane_holds_are_counted_lost_without_comparing_its_tasks() -> None:
    tracks = Tracks()
    lost: list[int] = []

    async def record() -> None:
        tracks.lane_for(asyncio.current_task(), None, ROOM, NO_WAKE).events.extend(instants(1))

    async def one_after_another() -> None:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(lambda loop, coro, **kwargs: KeyedTask(coro, loop=loop, **kwargs))
        for _ in range(3):
            await asyncio.create_task(record())  # each after the first a switch, its label the task
        count_lost((LostCounter(lost),), tracks.take_all())

    asyncio.run(one_after_another())
    assert lost == [3]


class LostCounter:
    def __init__(self, lost: list[int]) -> None:
        self._lost = lost

    def lost(self, count: int) -> None:
        self._lost.append(count)


def test_taking_all_buffers_empties_the_tables_the_recorder_reads_without_replacing_them() -> None:
    tracks = Tracks()
    task_buffers = tracks.task_buffers

    async def record() -> None:
        tracks.lane_for(asyncio.current_task(), None, ROOM, NO_WAKE).events.extend((INSTANT, "x", 1, 1, None))

    asyncio.run(record())
    taken = tracks.take_all()
    assert [len(buffer.events) for buffer in taken] == [0, RECORD_FIELDS]
    assert (tracks.infos(), tracks.task_buffers) == ([], {})
    assert tracks.task_buffers is task_buffers


def unbounded(events: list[Any]) -> Any:
    return (events, 2**62, -1, int)


def test_a_source_records_into_a_buffer_while_listening_and_into_nothing_otherwise() -> None:
    tracks = Tracks()
    source = Source("loader", NOT_RECORDING)
    tracks.add_source(source, unbounded)
    (buffer,) = tracks.buffers
    source.open()
    assert (buffer.track, len(buffer.events)) == (source.track, RECORD_FIELDS)
    tracks.attach_sources(None)
    source.close()
    assert len(buffer.events) == RECORD_FIELDS
    tracks.take_all()
    tracks.attach_sources(unbounded)  # its buffer was taken: it gets a new one
    (renewed,) = tracks.buffers
    source.close()
    assert renewed is not buffer and len(renewed.events) == RECORD_FIELDS


def test_a_source_records_no_more_than_its_bound_and_counts_the_rest() -> None:
    refused: list[int] = []
    tracks = Tracks()
    source = Source("loader", NOT_RECORDING)
    tracks.add_source(source, lambda events: (events, 3 * RECORD_FIELDS, -1, lambda: refused.append(1)))
    (buffer,) = tracks.buffers
    for _ in range(5):
        source.open()
    assert (len(buffer.events), len(refused)) == (3 * RECORD_FIELDS, 2)
    tracks.attach_sources(None)
    source.open()
    assert (len(buffer.events), len(refused)) == (3 * RECORD_FIELDS, 2)  # nothing listens: nothing kept nor lost


# -- drain ---------------------------------------------------------------------------------------------------------


def test_take_events_takes_everything_in_order() -> None:
    tracks = Tracks()
    buffer = tracks.thread_buffer(None)
    buffer.events.extend(instants(10))
    taken, ended = take_events(tracks.buffers)
    assert ended == [] and buffer.events == []
    assert [(track, run) for track, run in taken] == [(buffer.track, instants(10))]


def test_take_events_names_the_task_of_a_lane_and_reports_ended_owners() -> None:
    tracks = Tracks()

    async def record() -> None:
        lane = tracks.lane_for(asyncio.current_task(), None, ROOM, NO_WAKE)
        lane.events.extend((SPAN, "s", 1, 2, {"k": 1}, INSTANT, "i", 3, 3, None))

    asyncio.run(record())
    thread, lane = tracks.buffers
    taken, ended = take_events(tracks.buffers)
    ((track, run),) = taken
    task_name = run[4]["task"]
    assert (track, ended) == (lane.track, [lane])  # the task is done
    assert run == [SPAN, "s", 1, 2, {"k": 1, "task": task_name}, INSTANT, "i", 3, 3, {"task": task_name}]
    assert lane_parents(tracks.buffers, taken) == [(thread.track, [])]  # the thread's track is declared too


# -- gates ---------------------------------------------------------------------------------------------------------


def test_gates_turn_messages_on_up_to_the_priority_and_sampling_on_top() -> None:
    listener = MemoryListener()
    timeline = Timeline("gated", [listener])
    gates = MessageGates()
    debug = Message(message_kind("gates", "debug", "d $v"), timeline, False, priority_level("debug"))
    trace = Message(message_kind("gates", "trace", "t $v"), timeline, False, priority_level("trace"))
    gates.add(debug)
    gates.add(trace)
    assert (debug.enabled, trace.enabled) == (False, False)
    gates.set_level(priority_level("debug"))
    assert (debug.enabled, trace.enabled) == (True, False)
    debug(1)
    trace(1)
    gates.set_sampling(sampling("trace", 1.0, 0.001))  # every window sampled
    trace(2)
    gates.set_sampling(None)
    trace(3)
    assert timeline.flush(timeout_s=30)
    assert [event.name for event in listener.events] == ["d v(1)", "t v(2)"]
    timeline.close()


@pytest.mark.parametrize(("fraction", "window_s"), [(1.5, 0.001), (-0.1, 0.001), (0.5, 0.0), (float("nan"), 1.0)])
def test_sampling_refuses_a_fraction_outside_0_to_1_or_a_window_not_above_0(fraction: float, window_s: float) -> None:
    with pytest.raises(ValueError, match="0 <= fraction <= 1 and window_s > 0"):
        sampling("debug", fraction, window_s)
    assert sampling(None, fraction, window_s) is None


# -- listener bookkeeping ------------------------------------------------------------------------------------------


class Recording:
    def __init__(self, delivers: bool = True, child: Any = None) -> None:
        self.delivers, self.child = delivers, child
        self.lost_events, self.closed, self.forks = 0, 0, 0

    def lost(self, events: int) -> None:
        self.lost_events += events

    def close(self, timeout_s: float) -> bool:
        self.closed += 1
        return self.delivers

    def after_fork(self) -> Any:
        self.forks += 1
        return self.child


def test_count_lost_counts_buffered_and_carried_events_for_every_listener() -> None:
    tracks = Tracks()
    tracks.thread_buffer(None).events.extend(instants(3))
    listeners = [Recording(), Recording()]
    count_lost(listeners, tracks.buffers, carried=2)
    count_lost(listeners, [])  # nothing lost: nothing counted
    assert [x.lost_events for x in listeners] == [5, 5]


def test_close_unused_closes_only_listeners_no_other_timeline_uses_and_says_whether_all_delivered() -> None:
    shared, own, failing = Recording(), Recording(), Recording(delivers=False)
    assert close_unused([shared, own], [shared], deadline=0.0)
    assert (shared.closed, own.closed) == (0, 1)
    assert not close_unused([failing, own], [], deadline=0.0)
    assert (failing.closed, own.closed) == (1, 2)  # closed even after one failed


def test_replaced_after_fork_asks_each_listener_once_and_leaves_out_those_with_no_replacement() -> None:
    child = Recording()
    shared, gone = Recording(child=child), Recording(child=None)
    replacements: dict[int, Any] = {}
    first = replaced_after_fork([shared, gone], replacements)
    second = replaced_after_fork([shared], replacements)
    assert first == (child,) and second == (child,)
    assert (shared.forks, gone.forks) == (1, 1)


class CountedTask(asyncio.Task[None]):
    """A task that counts how often anything asks whether it is done."""

    asked = 0

    def done(self) -> bool:
        CountedTask.asked += 1
        return super().done()


def test_a_new_task_looks_at_a_few_busy_lanes_however_many_there_are_and_takes_the_lowest_freed() -> None:
    tracks = Tracks()

    async def lanes() -> tuple[list[TrackInfo], TrackInfo, int]:
        asyncio.get_running_loop().set_task_factory(lambda loop, coro, **kw: CountedTask(coro, loop=loop, **kw))
        go = [asyncio.Event() for _ in range(200)]
        busy = [asyncio.create_task(e.wait()) for e in go]
        held = [tracks.lane_for(task, None, ROOM, NO_WAKE).track for task in busy]  # 200 lanes, each busy
        for index in (150, 120):  # two requests end: their lanes are free
            go[index].set()
            await busy[index]
        await asyncio.sleep(0)  # (their done callbacks run)
        CountedTask.asked = 0
        track = tracks.lane_for(asyncio.create_task(asyncio.sleep(0)), None, ROOM, NO_WAKE).track
        asked = CountedTask.asked
        for event in go:
            event.set()
        await asyncio.sleep(0.01)
        return held, track, asked

    held, track, asked = asyncio.run(lanes())
    assert len({t.track_id for t in held}) == 200
    assert track == held[120]  # the lowest lane freed
    assert asked <= FIRST_FIT + 2  # the first few, then the free list: not a look at each of the 200 busy lanes


def test_a_task_taking_the_lane_of_a_task_left_pending_on_a_closed_loop_records_on_a_track_of_its_own() -> None:
    tracks = Tracks()

    async def pending() -> None:
        await asyncio.Event().wait()  # never set

    async def take() -> tuple[TrackInfo, asyncio.Task[None]]:
        task = asyncio.create_task(pending())
        await asyncio.sleep(0)
        return tracks.lane_for(task, None, ROOM, NO_WAKE).track, task

    loop = asyncio.new_event_loop()
    left, task = loop.run_until_complete(take())
    loop.close()  # (the task left pending: its scopes end on its lane's track as it is destroyed)

    async def next_one() -> TrackInfo:
        return tracks.lane_for(asyncio.current_task(), None, ROOM, NO_WAKE).track  # type: ignore[arg-type]

    taken = asyncio.run(next_one())
    assert taken.name == left.name  # its lane, free: the first
    assert taken.track_id != left.track_id  # but not the track the pending task may still end scopes on
    assert tracks.task_buffers[task].track == left
    del task


def test_a_task_s_calls_drained_after_the_next_task_took_its_lane_go_to_that_lane_which_stays_the_next_task_s() -> None:
    tracks = Tracks()
    tracks.remember_tasks()  # (calls are traced: a call source added)

    async def lanes_and_calls() -> tuple[TrackInfo, TrackInfo, TrackInfo, TrackInfo]:
        first = asyncio.create_task(asyncio.sleep(0))
        scope = tracks.lane_for(first, None, ROOM, NO_WAKE).track
        await first
        go = asyncio.Event()
        second = asyncio.create_task(go.wait())  # a request that runs on: its lane is the one the first left
        taken = tracks.lane_for(second, None, ROOM, NO_WAKE).track
        # The first task's calls, drained now (a drain after the next task took its lane): on its lane
        calls = tracks.call_tracks([(threading.current_thread(), first, [])], None)[0][0]
        after = tracks.lane_for(second, None, ROOM, NO_WAKE).track  # the lane is still the second task's
        go.set()
        await second
        return scope, taken, calls, after

    scope, taken, calls, after = asyncio.run(lanes_and_calls())
    assert taken == scope
    assert calls == scope
    assert after == scope
