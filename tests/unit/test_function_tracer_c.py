"""The C function tracer (``ringtrace.client._functions.Tracer``): the exact call trees it records for small programs,
its options, its limits, and its clock. Skipped where the extension is not built.

A tree is read back from the records alone (``CallRun.calls()``): a call's record comes after those of the calls it
made, so the calls it made are the records before it that started after it did. Each call shows as a tuple
``(name, *calls it made)``, its name the function's qualified name, with "!" after it when an exception left it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from types import CodeType
from typing import Any

import pytest
from ringtrace.client.functions import python_tracer
from ringtrace.wire.call_records import CALL, CALL_RAISED, RECORD, CallRun
from ringtrace.wire.stack_frames import CodeLocation

functions: Any = pytest.importorskip("ringtrace.client._functions", reason="the C function tracer is not built")

MONITORING = sys.version_info >= (3, 12)

Tree = tuple[Any, ...]


def this_module(code: CodeType, module: str) -> bool:
    """The programs below: this module's code but the tests' own (their closures, the Traced helper)."""
    return module == __name__ and "<locals>" not in code.co_qualname and not code.co_qualname.startswith("Traced.")


def with_closures(code: CodeType, module: str) -> bool:
    return module == __name__ and not code.co_qualname.startswith("Traced.")


def trees(run: CallRun) -> list[Tree]:
    """The run's calls as trees, in the order they began."""
    pending: list[tuple[int, Tree]] = []
    for start, _end, location, kind in run.calls():
        assert kind in (CALL, CALL_RAISED)
        children: list[Tree] = []
        while pending and pending[-1][0] >= start:
            children.insert(0, pending.pop()[1])
        name = location[0] + ("!" if kind == CALL_RAISED else "")
        pending.append((start, (name, *children)))
    return [tree for _, tree in pending]


class Traced:
    """A tracer, its locations, and what it recorded, per thread ident."""

    def __init__(self, decide: Callable[[CodeType, str], bool] = this_module, **options: Any) -> None:
        self.locations: list[CodeLocation] = []
        self.tracer = functions.Tracer(decide, self.locations, **options)
        self.threads: dict[int, list[Tree]] = {}
        self.records = 0

    def run(self, body: Callable[[], object]) -> Traced:
        self.tracer.start()
        try:
            body()
        finally:
            self.tracer.stop()
        return self.drain()

    def drain(self) -> Traced:
        for ident, records in self.tracer.drain():
            assert len(records) % RECORD.size == 0
            self.records += len(records) // RECORD.size
            self.threads.setdefault(ident, []).extend(trees(CallRun(records, self.locations)))
        return self

    @property
    def here(self) -> list[Tree]:
        """This thread's trees."""
        return self.threads.get(threading.get_ident(), [])


# The programs traced (module level: their qualified names are short).


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def recursion() -> None:
    fib(3)


def counting() -> Iterator[int]:
    yield 1
    yield 2


def generators() -> None:
    assert list(counting()) == [1, 2]


async def leaf() -> int:
    await asyncio.sleep(0)
    return 1


async def branch() -> int:
    return await leaf() + await leaf()


def coroutines() -> None:
    assert asyncio.run(branch()) == 2


def boom() -> None:
    raise ValueError("boom")


def catcher() -> None:
    with contextlib.suppress(ValueError):
        boom()


def uncaught() -> None:
    boom()


def key(value: int) -> int:
    return -value


def sorting() -> None:
    assert sorted([3, 1, 2], key=key) == [3, 2, 1]


def c_calls() -> None:
    values: list[int] = []
    values.append(len("ab"))
    time.monotonic()


def slow() -> None:
    time.sleep(0.05)


def quick() -> None:
    pass


def durations() -> None:
    quick()
    slow()
    quick()


def test_recursion_is_a_call_per_call_nested_as_it_ran() -> None:
    traced = Traced().run(recursion)
    assert traced.here == [("recursion", ("fib", ("fib", ("fib",), ("fib",)), ("fib",)))]
    assert list(traced.threads) == [threading.get_ident()]
    assert traced.tracer.recorded == traced.records == 6 and traced.tracer.dropped == 0


def test_a_generator_is_a_call_per_resume() -> None:
    assert Traced().run(generators).here == [("generators", ("counting",), ("counting",), ("counting",))]


def test_a_coroutine_is_a_call_per_resume_and_its_awaits_nest() -> None:
    # asyncio's own code is another module's: not recorded. Each leaf waits once (sleep(0)), so branch runs in
    # three steps: to the first leaf's wait, then to the second leaf's, then to its end.
    traced = Traced().run(coroutines)
    assert traced.here == [
        ("coroutines", ("branch", ("leaf",)), ("branch", ("leaf",), ("leaf",)), ("branch", ("leaf",)))
    ]


def test_an_exception_that_leaves_a_function_makes_its_call_raised() -> None:
    assert Traced().run(catcher).here == [("catcher", ("boom!",))]

    def body() -> None:
        with pytest.raises(ValueError, match="boom"):
            uncaught()

    assert Traced().run(body).here == [("uncaught!", ("boom!",))]


def test_a_generator_an_exception_leaves_is_raised() -> None:
    def body() -> None:
        numbers = counting()
        next(numbers)
        with pytest.raises(KeyError):
            numbers.throw(KeyError("thrown"))

    assert Traced().run(body).here == [("counting",), ("counting!",)]


def test_each_thread_has_its_own_records() -> None:
    idents: list[int] = []

    def work() -> None:
        idents.append(threading.get_ident())
        fib(2)

    def body() -> None:
        for _ in range(2):
            thread = threading.Thread(target=work)
            thread.start()
            thread.join(timeout=60)
        fib(1)

    traced = Traced().run(body)
    # each thread ended before the drain: drained once, then forgotten
    assert traced.here == [("fib",)]
    for ident in set(idents):
        assert traced.threads[ident] == [("fib", ("fib",), ("fib",))] * idents.count(ident)
    assert traced.tracer.drain() == []


def test_a_thread_running_before_start_records_its_calls_after() -> None:
    go, done = threading.Event(), threading.Event()
    idents: list[int] = []

    def waiting() -> None:
        idents.append(threading.get_ident())
        assert go.wait(timeout=60)
        fib(1)
        done.set()

    thread = threading.Thread(target=waiting)
    thread.start()
    traced = Traced()
    traced.tracer.start()
    try:
        go.set()
        assert done.wait(timeout=60)
    finally:
        traced.tracer.stop()
        thread.join(timeout=60)
    assert traced.drain().threads[idents[0]] == [("fib",)]


def test_a_c_function_calling_back_into_python_with_builtins_off_and_on() -> None:
    assert Traced().run(sorting).here == [("sorting", ("key",), ("key",), ("key",))]
    assert Traced(builtins=True).run(sorting).here == [("sorting", ("sorted", ("key",), ("key",), ("key",)))]


def test_a_c_function_is_named_by_its_module_and_qualified_name() -> None:
    traced = Traced(builtins=True).run(c_calls)
    assert traced.here == [("c_calls", ("len",), ("list.append",), ("time.monotonic",))]
    assert ("time.monotonic", "", 0) in traced.locations


def test_decide_is_asked_once_per_code_and_false_leaves_no_record() -> None:
    asked: list[tuple[str, str]] = []

    def decide(code: CodeType, module: str) -> bool:
        asked.append((code.co_name, module))
        return this_module(code, module) and code.co_name != "fib"

    traced = Traced(decide).run(lambda: [recursion(), recursion(), generators()])
    # fib's calls are not recorded: what they called would show under recursion (they called only fib)
    assert traced.here == [("recursion",), ("recursion",), ("generators", ("counting",), ("counting",), ("counting",))]
    mine = [name for name, module in asked if module == __name__]
    assert sorted(mine) == sorted(["<lambda>", "recursion", "fib", "generators", "counting"])
    assert [location[0] for location in traced.locations] == ["recursion", "generators", "counting"]


@pytest.mark.parametrize("builtins", [False, True])
def test_the_calls_decide_makes_are_not_recorded(builtins: bool) -> None:
    def decide(code: CodeType, module: str) -> bool:
        quick()  # recorded code, called by decide: not recorded there
        return this_module(code, module) and len(code.co_name) > 0

    traced = Traced(decide, builtins=builtins).run(recursion)
    assert traced.here == [("recursion", ("fib", ("fib", ("fib",), ("fib",)), ("fib",)))]


def down(depth: int) -> int:
    return 0 if depth == 0 else 1 + down(depth - 1)


def test_recursion_as_deep_as_the_recursion_limit_allows_untraced() -> None:
    depth = sys.getrecursionlimit() - 50  # this test's own frames below
    traced = Traced().run(lambda: down(depth))
    assert traced.tracer.recorded == depth + 1 and traced.tracer.dropped == 0


DEEP_PROGRAM = """
import sys, threading
from ringtrace.client._functions import Tracer

def down(depth):
    return 0 if depth == 0 else 1 + down(depth - 1)

def deep():
    try:
        down(10**6)
    except RecursionError:
        print("RecursionError")

sys.setrecursionlimit(10**6)
tracer = Tracer(lambda code, module: module == "__main__", [])
tracer.start()
deep()
thread = threading.Thread(target=deep)
thread.start()
thread.join()
tracer.stop()
print("recorded", tracer.recorded > 1000)
"""


def test_a_recursion_deeper_than_the_c_stack_allows_is_a_recursion_error_not_a_crash() -> None:
    # Frames evaluated through the tracer's hook take C stack that the interpreter's inlined calls do not.
    done = subprocess.run([sys.executable, "-c", DEEP_PROGRAM], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n") == ["RecursionError", "RecursionError", "recorded True", ""]


def test_min_duration_leaves_short_calls_out() -> None:
    traced = Traced(min_duration_ns=20_000_000).run(durations)
    assert traced.here == [("durations", ("slow",))]


def test_max_depth_leaves_deeper_calls_out() -> None:
    assert Traced(max_depth=2).run(recursion).here == [("recursion", ("fib",))]
    assert Traced(max_depth=3).run(recursion).here == [("recursion", ("fib", ("fib",), ("fib",)))]


def test_a_full_buffer_drops_calls_and_counts_them() -> None:
    traced = Traced(buffer_bytes=10 * RECORD.size + 5)  # rounded down to whole records
    traced.run(lambda: fib(10))  # 177 calls of fib (the lambda is the test's)
    assert traced.records == traced.tracer.recorded == 10
    assert traced.tracer.dropped == 177 - 10
    # drained, the buffer has room again
    traced.run(lambda: fib(1))
    assert traced.tracer.recorded == 11 and traced.records == 11


def test_wake_is_called_once_per_drain_when_a_buffer_passes_a_quarter_full() -> None:
    woken: list[int] = []
    traced = Traced(buffer_bytes=100 * RECORD.size, wake=lambda: woken.append(1))
    traced.run(lambda: fib(6))  # 25 calls: a quarter, not past it
    assert woken == []
    traced.run(lambda: fib(8))  # 67: past a quarter once
    assert woken == [1]
    traced.run(lambda: fib(8))
    assert woken == [1, 1]


def fib_on_threads() -> None:
    threads = [threading.Thread(target=fib, args=(5,)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    fib(5)


def test_a_drain_begun_while_another_runs_gets_nothing() -> None:
    # A finalizer the garbage collector runs during drain()'s allocations (3.11 collects there) drains too: one drain
    # at a time (the nested one gets nothing), so that each record is taken once and no buffer is freed under the
    # running drain.
    traced = Traced()
    tracer = traced.tracer
    tracer.start()
    try:
        fib_on_threads()  # itself, and 15 calls of fib on each of 4 threads
    finally:
        tracer.stop()
    finalized: list[int] = []
    nested: list[tuple[int, bytes]] = []

    class DrainsWhenCollected:
        def __init__(self) -> None:
            self.cycle = self

        def __del__(self) -> None:
            finalized.append(1)
            if len(finalized) < 20:
                DrainsWhenCollected()  # the next collection finds another
            nested.extend(tracer.drain())

    thresholds = gc.get_threshold()
    was_enabled = gc.isenabled()
    gc.disable()
    DrainsWhenCollected()
    pairs = [(i, i) for i in range(5000)]  # no pair left free to reuse: drain()'s (ident, records) are new objects
    gc.set_threshold(1)
    gc.enable()
    try:
        outer = tracer.drain()
    finally:
        gc.set_threshold(*thresholds)
        if not was_enabled:
            gc.disable()
    del pairs
    gc.collect()
    taken = [len(records) // RECORD.size for _, records in outer + nested]
    assert sum(taken) == tracer.recorded == 61
    assert tracer.drain() == []


@pytest.mark.parametrize("builtins", [False, True])
@pytest.mark.parametrize("callback", ["decide", "wake"])
def test_a_tracer_stopped_and_let_go_inside_decide_or_wake_is_not_used_after(callback: str, builtins: bool) -> None:
    # Nothing but the program holds the tracer while decide or wake runs: the tracer holds itself meanwhile.
    held: list[Any] = []

    def let_go() -> None:
        if held:
            held.pop().stop()  # the last reference goes as this returns

    def decide(code: CodeType, module: str) -> bool:
        if callback == "decide" and code is fib.__code__:
            let_go()
        return this_module(code, module)

    def wake() -> None:
        if callback == "wake":
            let_go()

    tracer = functions.Tracer(decide, [], buffer_bytes=RECORD.size * 8, wake=wake, builtins=builtins)
    gone = weakref.ref(tracer)
    held.append(tracer)
    tracer.start()
    del tracer
    for _ in range(5):
        fib(4)
        len("calls a C function")
    assert held == []
    gc.collect()
    assert gone() is None


def test_stop_closes_the_open_calls() -> None:
    traced = Traced(with_closures)

    def inner() -> None:
        traced.tracer.stop()
        fib(1)  # after stop: not recorded

    def outer() -> None:
        inner()

    traced.tracer.start()
    outer()
    traced.tracer.stop()  # again: nothing more
    traced.drain()
    assert traced.here == [
        ("test_stop_closes_the_open_calls.<locals>.outer", ("test_stop_closes_the_open_calls.<locals>.inner",))
    ]
    assert traced.tracer.recorded == 2


def test_started_and_stopped_twice_records_each_time() -> None:
    traced = Traced()
    traced.run(recursion)
    traced.run(generators)
    assert traced.here == [
        ("recursion", ("fib", ("fib", ("fib",), ("fib",)), ("fib",))),
        ("generators", ("counting",), ("counting",), ("counting",)),
    ]
    assert not traced.tracer.running


def test_calls_begun_before_start_are_not_recorded() -> None:
    traced = Traced()

    def begun_before() -> None:
        traced.tracer.start()
        fib(1)

    try:
        begun_before()
        fib(0)
    finally:
        traced.tracer.stop()
    # begun_before's end, and this test function's, are ignored
    assert traced.drain().here == [("fib",), ("fib",)]


def test_records_are_on_the_monotonic_clock() -> None:
    marks: list[tuple[int, int]] = []
    traced = Traced()

    def body() -> None:
        for _ in range(3):
            before = time.monotonic_ns()
            slow()
            marks.append((before, time.monotonic_ns()))

    traced.tracer.start()
    try:
        body()
    finally:
        traced.tracer.stop()
    calls = [call for _, records in traced.tracer.drain() for call in CallRun(records, traced.locations).calls()]
    slows = [(start, end) for start, end, location, _ in calls if location[0] == "slow"]
    assert len(slows) == 3
    for (before, after), (start, end) in zip(marks, slows, strict=True):
        assert before <= start <= end <= after
        assert end - start >= 50_000_000


def test_records_drained_often_are_on_the_monotonic_clock_too() -> None:
    # Drains closer together than the clock's anchors span (clock.c), and farther apart.
    traced = Traced()
    marks: list[tuple[int, int]] = []
    drained: list[tuple[int, int]] = []
    traced.tracer.start()
    try:
        for pause in [0.002] * 30 + [0.06] * 3:
            before = time.monotonic_ns()
            quick()
            marks.append((before, time.monotonic_ns()))
            for _, records in traced.tracer.drain():
                drained.extend((start, end) for start, end, _, _ in CallRun(records, traced.locations).calls())
            time.sleep(pause)
    finally:
        traced.tracer.stop()
    assert len(drained) == len(marks)
    for (before, after), (start, end) in zip(marks, drained, strict=True):
        assert before <= start <= end <= after


def test_one_tracer_runs_at_a_time() -> None:
    first, second = Traced(), Traced()
    first.tracer.start()
    try:
        with pytest.raises(RuntimeError, match="another function tracer runs"):
            second.tracer.start()
    finally:
        first.tracer.stop()
    second.run(quick)  # once the first stopped


def test_the_constructor_checks_its_arguments() -> None:
    with pytest.raises(TypeError, match="decide must be callable"):
        functions.Tracer(None, [])
    with pytest.raises(ValueError, match="buffer_bytes 10 is not between one record"):
        functions.Tracer(this_module, [], buffer_bytes=10)
    with pytest.raises(ValueError, match="must be >= 0"):
        functions.Tracer(this_module, [], max_depth=-1)
    assert functions.DEFAULT_BUFFER_BYTES == 16 * 1024 * 1024 == python_tracer.DEFAULT_BUFFER_BYTES
    assert RECORD.size == functions.RECORD_SIZE


def test_a_decide_that_raises_leaves_its_code_unrecorded_and_the_program_running() -> None:
    def decide(code: CodeType, module: str) -> bool:
        if code.co_name == "fib":
            raise RuntimeError("decide failed")
        return module == __name__

    unraisable: list[Any] = []
    hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        traced = Traced(decide).run(recursion)
    finally:
        sys.unraisablehook = hook
    assert traced.here == [("recursion",)]
    assert len(unraisable) == 1 and "decide failed" in str(unraisable[0].exc_value)


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring is 3.12+")
def test_no_free_tool_id_is_a_clear_error() -> None:
    # C functions are recorded through sys.monitoring (Python functions alone through the frame evaluation hook)
    monitoring = sys.monitoring
    taken = [tool for tool in (3, 4) if monitoring.get_tool(tool) is None]
    for tool in taken:
        monitoring.use_tool_id(tool, "someone else")
    try:
        with pytest.raises(RuntimeError, match=r"needs a free sys\.monitoring tool id, 4 or 3"):
            Traced(builtins=True).tracer.start()
        assert Traced().run(recursion).here  # Python functions alone need no tool id
    finally:
        for tool in taken:
            monitoring.free_tool_id(tool)
    assert Traced(builtins=True).run(recursion).here  # and free again, it runs


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring is 3.12+")
@pytest.mark.parametrize("builtins", [False, True])
def test_coverage_on_sys_monitoring_sees_its_lines_while_the_tracer_records(
    monkeypatch: pytest.MonkeyPatch, builtins: bool
) -> None:
    coverage = pytest.importorskip("coverage")
    monkeypatch.setenv("COVERAGE_CORE", "sysmon")
    cov = coverage.Coverage(data_file=None, include=[__file__])
    cov.start()
    try:
        assert sys.monitoring.get_tool(sys.monitoring.COVERAGE_ID) is not None  # coverage is on sys.monitoring
        traced = Traced(builtins=builtins).run(catcher)
    finally:
        cov.stop()
    # catcher's with statement calls contextlib.suppress (a class: not a C function), and its __exit__ (another
    # module's code)
    assert traced.here == [("catcher", ("boom!",))]
    lines = set(cov.get_data().lines(__file__) or ())
    for function in (catcher, boom):
        first = function.__code__.co_firstlineno
        assert first + 1 in lines, (function, sorted(lines))


#: A thread's call whose frame object sets off a collection: its callback (traced) holds the thread there while the
#: main thread stops the tracer and lets it go; then the thread's call goes on to the profile function.
STOPPED_AND_LET_GO_MID_CALL = """
import gc
import sys
import threading
import weakref

from ringtrace.client._functions import Tracer

held, release = threading.Event(), threading.Event()
armed = [False]


def on_collection(phase, info):
    if armed[0] and phase == "start" and threading.current_thread() is worker:
        if sys._getframe(1).f_code.co_name == "called":  # (set off by the frame object of a call of called)
            armed[0] = False
            held.set()
            release.wait(60)


def called():
    return 1


def work():
    for _ in range(50):
        armed[0] = True
        called()
        if held.is_set():
            return
        [[]]  # (an allocation, so that the next call's frame object may be the one that sets a collection off)
    armed[0] = False
    held.set()


gc.callbacks.append(on_collection)
tracer = Tracer(lambda code, module: True, [], builtins=True)
tracer.start()
worker = threading.Thread(target=work)
gc.set_threshold(1, 1000, 1000)
worker.start()
assert held.wait(60), "the worker's call never set off a collection"
gc.set_threshold(700, 10, 10)
tracer.stop()
gone = weakref.ref(tracer)
del tracer
print("let go", gone() is None, "held in the call", not armed[0], flush=True)
release.set()
worker.join(60)
"""


@pytest.mark.skipif(MONITORING, reason="3.11's profile function (3.12+: sys.monitoring)")
def test_a_tracer_let_go_while_a_thread_is_inside_a_profiled_call_is_not_called_after() -> None:
    # The interpreter calls a thread's profile function with the profile object it borrows from the thread, after
    # making the frame's object: a collection set off there may run code that stops the tracer and lets it go. The
    # tracer was that object (a use after free; a crash each run); the object is None now, the tracer is rt_running.
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_AND_LET_GO_MID_CALL], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout) == (0, "let go True held in the call True\n"), done.stderr
