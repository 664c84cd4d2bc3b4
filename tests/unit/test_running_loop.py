"""The C recorder's view of the running asyncio loop, held to asyncio's own answer.

Where asyncio keeps the running loop in the thread state dict (CPython 3.11 and 3.12, with asyncio's C module) or in
the thread state itself (3.13), the C recorder reads it there instead of calling
``asyncio.events._get_running_loop`` on every event; ``configure`` checks that asyncio does so on the Python that
runs, and otherwise the recorder calls asyncio. Either way it must find the loop asyncio finds: a wrong answer would
put a task's events on its thread's track, or send a thread's down the task path. ``speedups.running_loop()`` is
what the recorder finds."""

from __future__ import annotations

import asyncio
import ctypes
import os
import platform
import sys
import threading
from asyncio.events import _get_running_loop, _set_running_loop
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ringtrace.client.accelerator import speedups
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.wire.model import INSTANT, SPAN

pytestmark = pytest.mark.skipif(speedups is None, reason="the C accelerator is not in use in this process")

READ = "read from the thread state"
ASKED = "asked of asyncio"


def configure(read: bool) -> bool:
    """Configure the recorder as the client does; without asyncio's setter (``read`` false) it must ask asyncio."""
    args = (_get_running_loop, SPAN, INSTANT, FLUSHER.wake)
    found: bool = speedups.configure(*args, _set_running_loop) if read else speedups.configure(*args)
    return found


@pytest.fixture(params=[READ, ASKED])
def lookup(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test runs with the running loop read from the thread state where that works, and with it asked of
    asyncio; the client's own configuration is put back after."""
    configure(request.param == READ)
    yield str(request.param)
    configure(True)


def agrees(where: str, seen: list[str]) -> None:
    """Note whether the recorder and asyncio find the same running loop here (``seen``: what did not)."""
    found, expected = speedups.running_loop(), _get_running_loop()
    if found is not expected:
        seen.append(f"{where}: the recorder found {found!r}, asyncio {expected!r}")


def in_a_thread(body: Callable[[], None]) -> None:
    """Run ``body`` in a new thread, re-raising what it raised."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            body()
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failures:
        raise failures[0]


def test_the_running_loop_is_read_from_the_thread_state_where_asyncio_keeps_it_there() -> None:
    try:
        in_c = _get_running_loop.__module__ == "_asyncio"
        read_there = {(3, 11), (3, 12), (3, 13)}
        expected = platform.python_implementation() == "CPython" and sys.version_info[:2] in read_there and in_c
        assert configure(True) is expected
        assert configure(False) is False  # without asyncio's setter there is no check, and no reading
    finally:
        configure(True)


def test_a_thread_that_never_ran_a_loop_has_none(lookup: str) -> None:
    seen: list[str] = []

    def plain() -> None:
        agrees("first look", seen)
        agrees("second look", seen)  # the dict as it was at the first

    in_a_thread(plain)
    assert seen == []


def run_a_loop(seen: list[str]) -> None:
    """Look inside a task, inside a callback of the running loop, and after the loop stopped."""

    async def main() -> None:
        agrees("in a task", seen)
        callback_ran = asyncio.get_running_loop().create_future()

        def callback() -> None:
            agrees("in a callback (no task)", seen)
            callback_ran.set_result(None)

        asyncio.get_running_loop().call_soon(callback)
        await callback_ran
        agrees("in the task, after an await", seen)

    asyncio.run(main())
    agrees("after the loop stopped", seen)
    agrees("again after the loop stopped", seen)


def test_a_thread_running_a_loop_has_it_and_has_none_once_it_stopped(lookup: str) -> None:
    seen: list[str] = []

    def looping() -> None:
        agrees("before any loop", seen)  # looked at first: what is seen here must not hide the loop to come
        run_a_loop(seen)
        run_a_loop(seen)  # a thread whose loop ran and stopped, running one again

    in_a_thread(looping)
    assert seen == []


def test_the_thread_running_the_tests_agrees_before_during_and_after_a_loop(lookup: str) -> None:
    seen: list[str] = []
    agrees("before", seen)
    run_a_loop(seen)
    assert seen == []


def test_a_loop_run_by_hand_and_a_running_loop_set_by_hand_are_found(lookup: str) -> None:
    seen: list[str] = []

    def by_hand() -> None:
        agrees("before", seen)
        loop = asyncio.new_event_loop()
        try:

            async def look() -> None:
                agrees("run_until_complete", seen)

            loop.run_until_complete(look())
            agrees("between runs", seen)
        finally:
            loop.close()
        marker = object()  # what an event loop written in C (uvloop) does: set it, run, set None
        _set_running_loop(marker)
        try:
            agrees("set by hand", seen)
        finally:
            _set_running_loop(None)
        agrees("set back to None", seen)

    in_a_thread(by_hand)
    assert seen == []


def test_configuring_inside_a_running_loop_leaves_the_loop_running() -> None:
    seen: list[str] = []

    async def main() -> bool:
        loop = asyncio.get_running_loop()
        found = configure(True)
        assert asyncio.get_running_loop() is loop
        agrees("in the task that configured", seen)
        await asyncio.sleep(0)
        agrees("after an await", seen)
        return found

    def body() -> None:
        try:
            found = asyncio.run(main())
        finally:
            configure(True)  # from a thread outside any loop, as the client does
        agrees("after the loop stopped", seen)
        assert found is configure(True)  # the probe answers the same inside a loop as outside

    in_a_thread(body)
    assert seen == []


@pytest.mark.skipif(platform.python_implementation() != "CPython", reason="reads the thread state dict of CPython")
def test_configuring_leaves_the_thread_state_dict_as_it_found_it() -> None:
    get_dict = ctypes.pythonapi.PyThreadState_GetDict
    get_dict.restype = ctypes.c_void_p  # a borrowed reference: as py_object, ctypes would release one it does not own

    def thread_dict() -> dict[Any, Any]:
        return dict(ctypes.cast(get_dict(), ctypes.py_object).value)

    snapshots: list[dict[Any, Any]] = []

    def probe() -> None:
        snapshots.append(thread_dict())
        configure(True)
        snapshots.append(thread_dict())

    try:
        in_a_thread(probe)
    finally:
        configure(True)
    before, after = snapshots
    assert after.keys() == before.keys()
    assert all(after[key] is value for key, value in before.items())


@pytest.mark.skipif(
    sys.version_info[:2] not in {(3, 11), (3, 13)} or _get_running_loop.__module__ != "_asyncio",
    reason="where asyncio's C module keeps a holder of the loop (3.11) or the loop in the thread state (3.13)",
)
def test_inside_a_running_loop_the_loop_is_read_without_asking_asyncio() -> None:
    """3.11's asyncio asks the process's pid (a system call) each time it is asked for the running loop: the recorder
    reads its holder of the loop itself, on every event of a task, and asks nothing."""
    asked = [0]

    def counted() -> Any:
        asked[0] += 1
        return _get_running_loop()

    async def main() -> tuple[int, bool]:
        asked[0] = 0
        found = [speedups.running_loop() for _ in range(100)]
        return asked[0], all(loop is asyncio.get_running_loop() for loop in found)

    try:
        assert speedups.configure(counted, SPAN, INSTANT, FLUSHER.wake, _set_running_loop) is True
        assert asyncio.run(main()) == (0, True)
        assert speedups.running_loop() is None
    finally:
        configure(True)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_inside_a_running_loop_agrees_with_asyncio() -> None:
    """A forked child inherits its parent's thread state dict, the holder of the running loop with it: 3.11's asyncio
    answers no loop there (the holder is the parent's process's), and so must the recorder, in the child's first
    look and after."""

    async def main() -> int:
        assert speedups.running_loop() is asyncio.get_running_loop()  # (the parent's pid known before the fork)
        pid = os.fork()
        if pid == 0:  # the child: what the recorder finds, against asyncio, reported by the exit code
            agree = all(speedups.running_loop() is _get_running_loop() for _ in range(2))
            os._exit(0 if agree else 1)
        return os.waitpid(pid, 0)[1]

    agreed_in_parent: list[str] = []
    status = asyncio.run(main())
    agrees("the parent, after", agreed_in_parent)
    assert os.waitstatus_to_exitcode(status) == 0
    assert agreed_in_parent == []


def test_a_setter_that_does_not_write_the_thread_state_is_not_taken_for_one_that_does() -> None:
    """After a loop ran in this thread, 3.11 leaves a holder under the key; asyncio's pure-Python setter, which keeps
    the loop elsewhere, leaves that holder as it was: the check must not read that as the setter writing the key."""
    import asyncio.events as events

    async def nothing() -> None:
        pass

    def body() -> None:
        asyncio.run(nothing())  # (asyncio's C functions: the key now holds something, in this thread)
        args = (events._py__get_running_loop, SPAN, INSTANT, FLUSHER.wake)
        try:
            assert speedups.configure(*args, events._py__set_running_loop) is False
        finally:
            configure(True)

    in_a_thread(body)


def test_a_task_s_events_go_to_its_lane_where_asyncio_s_table_of_running_tasks_is_not_the_one_it_fills() -> None:
    """From 3.14 asyncio's C module keeps the running task in the thread's state: ``asyncio.tasks._current_tasks`` is
    then the pure-Python tasks' table, never filled. An asyncio laid out so (on this Python) must not leave the C
    recorder reading that table, where no task would ever run."""
    import types

    from ringtrace.client import MemoryListener, Timeline
    from ringtrace.client.recording import recorder
    from ringtrace.wire.model import ASYNC_TRACK

    tasks = asyncio.tasks
    unfilled = types.SimpleNamespace(  # the C module's functions, the pure-Python table beside them
        _current_tasks={}, _enter_task=tasks._enter_task, _py_enter_task=tasks._py_enter_task
    )
    listener = MemoryListener()
    tl = Timeline("unfilled table", [listener])

    async def request() -> None:
        tl.instant("in a task")

    try:
        recorder._use_asyncio(types.SimpleNamespace(events=asyncio.events, tasks=unfilled))  # type: ignore[arg-type]
        asyncio.run(request())
        assert tl.flush()
    finally:
        recorder._use_asyncio(asyncio)
        tl.close()
    ((event,),) = [[e for e in listener.events if e.name == "in a task"]]
    assert event.track.kind == ASYNC_TRACK and event.args["task"].startswith("Task-"), event
