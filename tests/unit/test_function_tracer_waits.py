"""The function tracers never make a thread of the program wait for one another inside their callbacks: what runs
inside a callback (``decide``, and what the interpreter runs meanwhile: a garbage collection's callbacks, finalisers)
may wait for a lock a thread of the program holds, and that thread, meeting code of its own for the first time, goes
on meanwhile. Each test runs with every tracer this interpreter has: ``PythonTracer`` always, the C one where built.
"""

from __future__ import annotations

import threading
import types
from typing import Any

import pytest
from ringtrace.client.functions.python_tracer import PythonTracer
from ringtrace.wire.call_records import CallRun

TRACERS: list[Any] = [PythonTracer]
try:
    from ringtrace.client._functions import Tracer as CTracer  # type: ignore[import-not-found]

    TRACERS.append(CTracer)
except ImportError:
    pass

DEADLINE_S = 10.0


def met_on_the_deciding_thread() -> None:
    pass


def met_on_the_holding_thread() -> None:
    pass


@pytest.mark.parametrize("tracer_class", TRACERS, ids=lambda cls: cls.__name__)
def test_a_thread_holding_a_lock_meets_new_code_while_another_decides_code_that_waits_for_that_lock(
    tracer_class: Any,
) -> None:
    # The hang of the end-to-end test on 3.12 (two threads' stacks): the streamer, inside the tracer's callback on
    # its first call of a function, ran the gc integration's callback, which waited for the timeline's lock; the main
    # thread held that lock and had met a function for the first time too, and waited for the tracer. Here decide is
    # what waits for the lock (the gc integration did so inside decide). Only C locks signal between the two threads:
    # their acquire and release are no Python calls, so the tracer sees none of the holding thread's steps but its
    # call of met_on_the_holding_thread.
    program_lock = threading.Lock()
    deciding, holding = threading.Lock(), threading.Lock()
    deciding.acquire()
    holding.acquire()
    got_the_lock: list[bool] = []

    def decide(code: types.CodeType, module: str) -> bool:
        if code is met_on_the_deciding_thread.__code__:
            deciding.release()
            if holding.acquire(timeout=DEADLINE_S):
                acquired = program_lock.acquire(timeout=DEADLINE_S)
                if acquired:
                    program_lock.release()
                got_the_lock.append(acquired)
        return code in (met_on_the_deciding_thread.__code__, met_on_the_holding_thread.__code__)

    locations: list[Any] = []
    tracer = tracer_class(decide, locations)
    deciding_thread = threading.Thread(target=met_on_the_deciding_thread)
    tracer.start()
    try:
        deciding_thread.start()
        assert deciding.acquire(timeout=DEADLINE_S), "decide was not asked for the deciding thread's function"
        with program_lock:
            holding.release()
            met_on_the_holding_thread()
        deciding_thread.join(DEADLINE_S)
    finally:
        tracer.stop()
    assert got_the_lock == [True]  # (False: the holding thread waited for the tracer until decide gave up the lock)
    assert not deciding_thread.is_alive()
    names = {location[0] for _, records in tracer.drain() for _, _, location, _ in CallRun(records, locations).calls()}
    assert names == {"met_on_the_deciding_thread", "met_on_the_holding_thread"}
