"""Greenlets under the function tracers, C and pure Python held to the same trees: each greenlet's calls nest as made,
apart from the others' (its records noted as its own), across switches made inside nested calls; a greenlet that dies
of an exception ends its calls raised, one killed never resumed too, one left suspended has them ended by stop; a
greenlet run from an asyncio task's step (as SQLAlchemy's asyncio bridge runs one) leaves the task its steps; the
trace function set before is chained and put back; greenlet is never imported by ringtrace itself; each greenlet's
calls go on a lane of its thread, free again once it is dead."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
import types
import weakref
from typing import Any

import pytest
from ringtrace.client.functions.greenlet_switches import GreenletSwitches
from ringtrace.client.functions.python_tracer import PythonTracer
from ringtrace.client.functions.thread_calls import split
from ringtrace.client.recording.tracks import Tracks
from ringtrace.wire.call_records import CallRun
from ringtrace.wire.model import CALL_RAISED

greenlet = pytest.importorskip("greenlet")

TRACERS: list[Any] = [PythonTracer]
try:
    from ringtrace.client._functions import Tracer as CTracer  # type: ignore[import-not-found]

    TRACERS.append(CTracer)
except ImportError:
    pass


def ours(code: types.CodeType, module: str) -> bool:
    return code.co_filename == __file__ and not code.co_qualname.startswith("test_")


def tree(records: bytes, locations: list[Any]) -> list[Any]:
    pending: list[tuple[int, str, bool, list[Any]]] = []
    for start, _end, location, kind in CallRun(records, locations).calls():
        children = [p for p in pending if p[0] >= start]
        pending = [p for p in pending if p[0] < start]
        pending.append((start, location[0], kind == CALL_RAISED, [c[1:] for c in children]))
    return [p[1:] for p in pending]


MAIN = greenlet.getcurrent()


def leaf() -> int:
    return 1


def pause() -> Any:
    return MAIN.switch()


def step() -> None:
    leaf()
    pause()
    leaf()


def worker() -> None:
    step()
    step()


def failing() -> None:
    step()
    raise ValueError("no")


def forgotten() -> None:
    step()


def program() -> Any:
    a, b = greenlet.greenlet(worker), greenlet.greenlet(worker)
    a.switch()
    b.switch()
    leaf()
    a.switch()
    b.switch()
    a.switch()
    b.switch()
    f = greenlet.greenlet(failing)
    f.switch()
    try:
        f.switch()
    except ValueError:
        leaf()
    killed = greenlet.greenlet(forgotten)
    killed.switch()
    del killed  # never resumed: killed as it goes
    kept = greenlet.greenlet(forgotten)
    kept.switch()
    return kept  # never resumed: suspended still when tracing stops


def call(name: str, *children: Any, raised: bool = False) -> tuple[str, bool, list[Any]]:
    return (name, raised, list(children))


STEP = call("step", call("leaf"), call("pause"), call("leaf"))
GREENLETS = sorted(
    [
        [call("worker", STEP, STEP)],
        [call("worker", STEP, STEP)],
        [call("failing", STEP, raised=True)],
        [call("forgotten", call("step", call("leaf"), call("pause", raised=True), raised=True), raised=True)],
        [call("forgotten", call("step", call("leaf"), call("pause")))],
    ],
    key=repr,
)


@pytest.fixture(params=TRACERS, ids=lambda cls: cls.__name__)
def tracer_class(request: pytest.FixtureRequest) -> Any:
    return request.param


def traced_program(tracer_class: Any, builtins: bool = False) -> tuple[dict[Any, list[Any]], Any]:
    """The trees of ``program``'s greenlets (None: the main one's), traced; and the greenlet it kept."""
    locations: list[Any] = []
    tracer = tracer_class(ours, locations, builtins=builtins)
    switches = GreenletSwitches(tracer)
    tracer.start()
    switches.start()
    try:
        kept = program()
    finally:
        switches.stop()
        tracer.stop()
    parts: dict[Any, bytes] = {}
    for ident, records, cuts in tracer.drain_cuts():
        assert ident == threading.get_ident()
        for owner, part in split(records, cuts):
            parts[owner] = parts.get(owner, b"") + part
    return {owner: tree(records, locations) for owner, records in parts.items()}, kept


def test_each_greenlets_calls_nest_apart(tracer_class: Any) -> None:
    found, kept = traced_program(tracer_class)
    assert found.pop(None) == [call("program", call("leaf"), call("leaf"))]
    assert all(type(owner) is weakref.ref for owner in found)
    assert sorted(found.values(), key=repr) == GREENLETS
    assert [owner for owner in found if owner() is kept] != []


@pytest.mark.skipif(len(TRACERS) < 2, reason="the C tracer is not built")
def test_with_c_functions_both_tracers_give_the_same_trees() -> None:
    found = [traced_program(tracer_class, builtins=True)[0] for tracer_class in TRACERS]
    main, greenlets = zip(*((each.pop(None), sorted(each.values(), key=repr)) for each in found), strict=True)
    assert main[0] == main[1] and greenlets[0] == greenlets[1]
    switch = call("greenlet.switch")
    assert greenlets[0][-1] == [call("worker", *[call("step", call("leaf"), call("pause", switch), call("leaf"))] * 2)]


def sync_part(parent: Any) -> None:
    leaf()
    parent.switch("awaitable")  # to the task's coroutine, which awaits it and switches back
    leaf()


async def bridge() -> None:
    part = greenlet.greenlet(sync_part)
    part.switch(greenlet.getcurrent())
    await asyncio.sleep(0)
    leaf()
    part.switch()


async def two_bridges() -> None:
    await asyncio.gather(asyncio.create_task(bridge()), asyncio.create_task(bridge()))


def test_a_greenlet_run_from_an_asyncio_task_leaves_the_task_its_steps(tracer_class: Any) -> None:
    locations: list[Any] = []
    tracer = tracer_class(ours, locations)
    switches = GreenletSwitches(tracer)
    tracer.start()
    switches.start()
    try:
        asyncio.run(two_bridges())
    finally:
        switches.stop()
        tracer.stop()
    found: dict[str, list[Any]] = {}
    for _, records, cuts in tracer.drain_cuts():
        for owner, part in split(records, cuts):
            kind = "greenlet" if type(owner) is weakref.ref else "task" if isinstance(owner, asyncio.Task) else None
            found.setdefault(str(kind), []).append(tree(part, locations))
    assert "None" not in found
    steps = [call("bridge"), call("bridge", call("leaf"))]
    assert sorted(found["task"], key=repr) == sorted(
        [steps, steps, [call("two_bridges"), call("two_bridges")]], key=repr
    )
    assert found["greenlet"] == [[call("sync_part", call("leaf"), call("leaf"))]] * 2


def test_the_trace_function_set_before_is_chained_and_put_back(tracer_class: Any) -> None:
    seen: list[str] = []

    def mine(event: str, args: Any) -> None:
        seen.append(event)

    before = greenlet.settrace(mine)
    try:
        tracer = tracer_class(ours, [])
        switches = GreenletSwitches(tracer)
        tracer.start()
        switches.start()
        try:
            greenlet.greenlet(leaf).switch()
        finally:
            switches.stop()
            tracer.stop()
        assert greenlet.gettrace() is mine
        assert seen == ["switch", "switch"]  # to the greenlet, and back as it ends
    finally:
        greenlet.settrace(before)


def test_ringtrace_never_imports_greenlet() -> None:
    code = (
        "import sys, ringtrace.client\n"
        "with ringtrace.client.trace_functions(timeline=ringtrace.client.Timeline()):\n"
        "    pass\n"
        "print('greenlet' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False", done.stderr


def test_a_dead_greenlets_lane_is_free_again() -> None:
    tracks = Tracks()
    parent = tracks.buffer_of_thread(threading.current_thread(), None).track
    first = greenlet.greenlet(leaf)
    second = greenlet.greenlet(leaf)
    refs = [weakref.ref(first), weakref.ref(second)]
    for ref in refs:
        hash(ref)
    runs: list[Any] = [(threading.current_thread(), ref, []) for ref in refs]
    (one, _), (two, _) = tracks.call_tracks(runs, None)
    assert one != two and one.parent == two.parent == parent.track_id
    assert one.name == f"{parent.name} greenlets [1]" and two.name == f"{parent.name} greenlets [2]"
    first.switch()  # dead now
    del first
    gc.collect()
    third = greenlet.greenlet(leaf)
    ref = weakref.ref(third)
    hash(ref)
    ((again, _),) = tracks.call_tracks([(threading.current_thread(), ref, [])], None)
    assert again == one  # the dead one's lane, taken by the next greenlet


class Counted:
    """A greenlet as the lanes see it (``dead``), counting how often they look at it (a look, or a comparison)."""

    looks = 0

    def __init__(self) -> None:
        self.alive = True

    @property
    def dead(self) -> bool:
        Counted.looks += 1
        return not self.alive

    def __eq__(self, other: object) -> bool:
        Counted.looks += 1
        return self is other

    __hash__ = object.__hash__


def test_placing_the_runs_of_many_greenlets_looks_at_each_lane_a_bounded_number_of_times() -> None:
    tracks = Tracks()
    thread = threading.current_thread()
    greenlets = [Counted() for _ in range(2000)]
    refs = [weakref.ref(each) for each in greenlets]
    for ref in refs:
        hash(ref)
    first = tracks.call_tracks([(thread, ref, []) for ref in refs], None)
    assert len({track for track, _ in first}) == len(refs)
    Counted.looks = 0
    for ended in greenlets[:500]:
        ended.alive = False
    newer = [Counted() for _ in range(1000)]
    new_refs = [weakref.ref(each) for each in newer]
    for ref in new_refs:
        hash(ref)
    for ref in refs[500:] + new_refs:  # each in a drain of its own, with the greenlets alive before it
        tracks.call_tracks([(thread, ref, []), *((thread, other, []) for other in refs[500:600])], None)
    # (a look over every lane at each run, or at each new greenlet, is millions of looks)
    assert Counted.looks < 20 * (len(refs) + len(new_refs))
    again = tracks.call_tracks([(thread, ref, []) for ref in refs[500:] + new_refs], None)
    assert len({track for track, _ in again}) == len(refs) + 500  # (the dead ones' lanes taken, apart from each other)


def test_greenlets_that_come_and_go_take_up_to_half_again_as_many_lanes_as_are_alive_at_once() -> None:
    tracks = Tracks()
    thread = threading.current_thread()
    lanes: set[Any] = set()
    alive: list[Counted] = []
    for _ in range(50):  # (a server's greenlets: a hundred at once, each gone by the next drain)
        for each in alive:
            each.alive = False
        alive = [Counted() for _ in range(100)]
        refs = [weakref.ref(each) for each in alive]
        for ref in refs:
            hash(ref)
        lanes.update(track for track, _ in tracks.call_tracks([(thread, ref, []) for ref in refs], None))
    assert 100 <= len(lanes) <= 150


def spin() -> None:
    while True:
        MAIN.switch()


def test_switches_with_no_call_recorded_between_keep_no_note_each(tracer_class: Any) -> None:
    locations: list[Any] = []
    tracer = tracer_class(lambda code, module: code is leaf.__code__, locations)
    switches = GreenletSwitches(tracer)
    spinning = greenlet.greenlet(spin)
    tracer.start()
    switches.start()
    try:
        for _ in range(1000):  # (a server's greenlets switching while no recorded code runs: kept until a call is)
            spinning.switch()
        leaf()
    finally:
        switches.stop()
        tracer.stop()
    ((_, records, cuts),) = tracer.drain_cuts()
    assert len(cuts) <= 2  # (one a switch, before: 2,001)
    ((owner, part),) = [(owner, part) for owner, part in split(records, cuts) if part]
    assert owner is None and tree(part, locations) == [call("leaf")]
