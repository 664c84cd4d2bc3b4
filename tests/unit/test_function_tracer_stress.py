"""The C function tracer under stress: Ctrl-C while its Python callbacks run, threads that start and end while it
records and drains, a fork while it records, the interpreter's exit while it runs, generators closed and thrown into,
a recursion deeper than a small thread stack allows, calls specialized before it started. Skipped where the
extension is not built. Each program that could crash the interpreter runs in a child process."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from types import CodeType
from typing import Any

import pytest
from ringtrace.wire.call_records import CALL_RAISED, CallRun
from ringtrace.wire.stack_frames import CodeLocation

functions: Any = pytest.importorskip("ringtrace.client._functions", reason="the C function tracer is not built")

DEADLINE_S = 30.0


def this_module(code: CodeType, module: str) -> bool:
    return module == __name__ and "<locals>" not in code.co_qualname


def names(tracer: Any, locations: list[CodeLocation]) -> dict[int, list[str]]:
    """Each thread's calls drained, as their names ("!" after a call an exception left), in the order they ended."""
    out: dict[int, list[str]] = {}
    for ident, records in tracer.drain():
        for _start, _end, location, kind in CallRun(records, locations).calls():
            out.setdefault(ident, []).append(location[0] + ("!" if kind == CALL_RAISED else ""))
    return out


def run_child(program: str, timeout_s: float = DEADLINE_S) -> subprocess.CompletedProcess[str]:
    """`program` run by a child interpreter: it must exit 0 (no crash, no abort)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(program)], capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-3000:])
    return done


def quick() -> None:
    pass


CHILD_PRELUDE = """
import os, sys, threading, time
from ringtrace.client._functions import Tracer
from ringtrace.wire.call_records import CallRun
LOCATIONS = []
def main_module(code, module):
    return module == "__main__"
def names(tracer):
    out = {}
    for ident, records in tracer.drain():
        out.setdefault(ident, []).extend(loc[0] for _, _, loc, _ in CallRun(records, LOCATIONS).calls())
    return out
"""


@pytest.mark.parametrize("callback", ["decide", "wake"])
def test_ctrl_c_while_decide_or_wake_runs_reaches_the_program(callback: str) -> None:
    # Ctrl-C arrives as a KeyboardInterrupt raised in whatever Python code runs: here, the tracer's decide or wake.
    # The tracer must not swallow it as an error of that callback (the Python twin lets it through too). In a child
    # of its own, whose SIGINT is Python's default whatever the test process's is.
    done = run_child(
        CHILD_PRELUDE
        + f"""
import json, signal
# Python's own Ctrl-C handling, as a program started from a terminal has (one started in the background by a shell
# ignores SIGINT: an interrupt made pending again is then dropped, as such a program asked)
signal.signal(signal.SIGINT, signal.default_int_handler)
callback = {callback!r}
asked, wakes, unraisable = [], [], []
sys.unraisablehook = unraisable.append
def quick():
    pass
def decide(code, module):
    asked.append(code.co_name)
    if callback == "decide" and asked.count("quick") == 1:
        raise KeyboardInterrupt  # (which says nothing of quick: asked again when next met)
    return main_module(code, module)
def wake():
    wakes.append(None)
    if len(wakes) == 1:
        raise KeyboardInterrupt
def interrupted_soon():
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            quick()
    except KeyboardInterrupt:
        return True
    return False
tracer = Tracer(decide, LOCATIONS, buffer_bytes=24 * 64, wake=wake if callback == "wake" else None)
tracer.start()
interrupted = interrupted_soon()
for _ in range(10):
    quick()
tracer.stop()
print(json.dumps({{
    "interrupted": interrupted,
    "quick": names(tracer).get(threading.get_ident(), []).count("quick"),
    "unraisable": [type(u.exc_value).__name__ for u in unraisable],
    "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
    "asked": asked[:10],
}}))
"""
    )
    seen = json.loads(done.stdout)
    assert seen["interrupted"], seen
    assert seen["quick"] >= 10, seen
    assert "KeyboardInterrupt" not in seen["unraisable"], seen
    assert seen["sigint"], seen


@pytest.mark.parametrize("recorded", [False, True])
def test_a_recursion_deeper_than_a_small_thread_stack_is_a_recursion_error(recorded: bool) -> None:
    # The frame evaluation hook keeps a reserve of the thread's C stack: with the recursion limit raised far past
    # what a 256 KiB stack holds, through a C function (sorted's key) too, a RecursionError and not a crash.
    done = run_child(
        CHILD_PRELUDE
        + f"""
sys.setrecursionlimit(1_000_000)
def down(n):
    return 0 if n == 0 else down(n - 1) + 1
def down_through_c(n):
    return 0 if n == 0 else sorted([1], key=lambda _: down_through_c(n - 1))[0] + 1
results = []
def run():
    for f in (down, down_through_c):
        try:
            results.append(f(200_000))
        except RecursionError:
            results.append("RecursionError")
threading.stack_size(256 * 1024)
tracer = Tracer(main_module if {recorded} else (lambda code, module: False), LOCATIONS)
tracer.start()
thread = threading.Thread(target=run)
thread.start()
thread.join()
tracer.stop()
print(results)
"""
    )
    assert done.stdout.strip() == "['RecursionError', 'RecursionError']"


def test_a_fork_while_threads_record_leaves_parent_and_child_recording() -> None:
    done = run_child(
        CHILD_PRELUDE
        + """
def leaf():
    pass
stop = False
def busy():
    while not stop:
        leaf()
def forking():
    return os.fork()
tracer = Tracer(main_module, LOCATIONS)
tracer.start()
threads = [threading.Thread(target=busy) for _ in range(2)]
for thread in threads:
    thread.start()
time.sleep(0.05)
pid = forking()
if pid == 0:
    tracer.drain()  # the parent's records, copied: what the at-fork handler of trace_functions discards
    for _ in range(10):
        leaf()
    tracer.stop()
    calls = names(tracer)
    # the child's one thread: its ten calls and forking() (open at the fork, closed by stop)
    os._exit(0 if list(calls) == [threading.get_ident()] and calls[threading.get_ident()].count("leaf") == 10 else 3)
_, status = os.waitpid(pid, 0)
stop = True
for thread in threads:
    thread.join()
tracer.stop()
assert names(tracer)
print(os.waitstatus_to_exitcode(status))
"""
    )
    assert done.stdout.strip() == "0"


@pytest.mark.parametrize("builtins", [False, True])
def test_the_interpreter_exits_cleanly_with_the_tracer_running(builtins: bool) -> None:
    # never stopped: daemon threads still calling, a finalizer and an atexit function traced at exit, wake called
    done = run_child(
        CHILD_PRELUDE
        + f"""
def leaf():
    pass
def spin():
    while True:
        leaf()
        time.sleep(0.0001)
for _ in range(3):
    threading.Thread(target=spin, daemon=True).start()
tracer = Tracer(lambda code, module: True, LOCATIONS, builtins={builtins}, buffer_bytes=24 * 64, wake=lambda: None)
tracer.start()
class Finalized:
    def __del__(self):
        leaf()
finalized = Finalized()
import atexit
atexit.register(leaf)
for _ in range(1000):
    leaf()
print("exiting")
"""
    )
    assert done.stdout.strip() == "exiting" and done.stderr == ""


def counter() -> Iterator[int]:
    try:
        yield 1
        yield 2
    finally:
        quick()


def generators_closed_and_thrown_into() -> None:
    gen = counter()
    next(gen)
    gen.close()
    gen = counter()
    next(gen)
    with pytest.raises(ValueError):
        gen.throw(ValueError)
    counter().close()  # never started: not evaluated, no call


def test_generators_closed_and_thrown_into_are_calls_raised_as_the_python_twin_records() -> None:
    from ringtrace.client.functions.python_tracer import PythonTracer

    recorded = []
    for tracer_class in (functions.Tracer, PythonTracer):
        locations: list[CodeLocation] = []
        tracer = tracer_class(this_module, locations)
        tracer.start()
        try:
            generators_closed_and_thrown_into()
        finally:
            tracer.stop()
        recorded.append(names(tracer, locations)[threading.get_ident()])
    # (3.11 also evaluates a generator closed before it started: GeneratorExit thrown in, a call raised)
    unstarted = ["counter!"] if sys.version_info < (3, 12) else []
    assert (
        recorded[0]
        == recorded[1]
        == [
            "counter",  # next(): yields 1
            "quick",
            "counter!",  # close(): GeneratorExit left it (after its finally)
            "counter",
            "quick",
            "counter!",  # throw(ValueError)
            *unstarted,
            "generators_closed_and_thrown_into",
        ]
    )


def calling(times: int) -> None:
    for _ in range(times):
        quick()


def test_calls_specialized_before_start_are_recorded() -> None:
    calling(10_000)  # the interpreter specializes the call to quick (inlined, not through the hook) before start
    locations: list[CodeLocation] = []
    tracer = functions.Tracer(this_module, locations)
    tracer.start()
    try:
        calling(5)
    finally:
        tracer.stop()
    assert names(tracer, locations)[threading.get_ident()] == ["quick"] * 5 + ["calling"]


def working() -> None:
    for _ in range(200):
        quick()


def test_threads_that_start_and_end_while_drained_from_several_threads_lose_nothing_uncounted() -> None:
    locations: list[CodeLocation] = []
    tracer = functions.Tracer(this_module, locations, buffer_bytes=24 * 100, wake=lambda: None)
    taken = [0]
    stopping = threading.Event()

    def draining() -> None:
        while not stopping.is_set():
            for _ident, records in tracer.drain():
                taken[0] += len(records) // 24

    drainers = [threading.Thread(target=draining) for _ in range(3)]
    tracer.start()
    try:
        for drainer in drainers:
            drainer.start()
        for _ in range(100):
            workers = [threading.Thread(target=working) for _ in range(4)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(DEADLINE_S)
    finally:
        stopping.set()
        for drainer in drainers:
            drainer.join(DEADLINE_S)
        tracer.stop()
    for _ident, records in tracer.drain():
        taken[0] += len(records) // 24
    assert taken[0] == tracer.recorded
    assert tracer.recorded + tracer.dropped >= 100 * 4 * 201
    assert tracer.drain() == []


class CallsAsItGoes:
    """A thread-local value whose finalizer makes a traced call: it runs as its thread's state is cleared."""

    def __del__(self) -> None:
        quick()


def test_calls_made_as_a_thread_state_is_cleared_leave_no_memory_behind() -> None:
    # On 3.11 and 3.12 a threading.local's values go with the thread state's dict, after the tracer's capsule there
    # (made first): a call their finalizer makes must not make a new dict, capsule and buffer that nothing clears.
    import tracemalloc

    local = threading.local()
    go = threading.Event()

    def worker() -> None:
        quick()  # this thread's buffer first: its capsule in the thread state's dict
        local.value = CallsAsItGoes()
        go.wait(DEADLINE_S)

    locations: list[CodeLocation] = []
    tracer = functions.Tracer(this_module, locations)
    tracer.start()
    CallsAsItGoes()  # (its code decided here)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        workers = [threading.Thread(target=worker) for _ in range(20)]
        for thread in workers:
            thread.start()
        go.set()
        for thread in workers:
            thread.join(DEADLINE_S)
        tracer.drain()
        tracer.drain()
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
        tracer.stop()
    # what was allocated with no Python frame running (as a thread state is cleared) and is still there
    kept = sum(
        difference.count_diff
        for difference in after.compare_to(before, "traceback")
        if difference.traceback[0].filename == "<unknown>"
    )
    assert kept < 10
    assert tracer.recorded + tracer.dropped == 2 + 20 * 3  # each call recorded or counted


def first_met_as_its_thread_ends() -> None:
    pass


class CallsCodeFirstMetAsItGoes:
    """A thread-local value whose finalizer calls code not yet decided, as its thread's state is cleared."""

    def __del__(self) -> None:
        first_met_as_its_thread_ends()


def test_calls_of_code_first_met_as_a_thread_state_is_cleared_are_counted() -> None:
    # Such a call may find no buffer (3.11 and 3.12: the tracer's capsule went first): its code is decided still, and
    # the call counted in dropped if it is recorded code.
    local = threading.local()

    def worker() -> None:
        quick()
        local.value = CallsCodeFirstMetAsItGoes()

    tracer = functions.Tracer(this_module, [])
    tracer.start()
    try:
        workers = [threading.Thread(target=worker) for _ in range(20)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join(DEADLINE_S)
        assert not any(thread.is_alive() for thread in workers)
    finally:
        tracer.stop()
    tracer.drain()
    assert tracer.recorded + tracer.dropped == 20 * 3  # quick, __del__ and what it calls: recorded or counted
