"""The function tracers, C and pure Python, held to the same call trees: recursion, generators and coroutines (a span
per resume), exceptions (call_raised), threads, a C function calling back into Python (builtins off and on), decide
asked once per code, min_duration, max_depth, a full buffer counted, stop closing open calls, and calls begun before
start ignored, each asyncio task's steps cut apart from the others'. Each test runs with every tracer this
interpreter has: ``PythonTracer`` always, the C one where built.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import subprocess
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import pytest
from ringtrace.client.functions.python_tracer import PythonTracer
from ringtrace.client.functions.thread_calls import split
from ringtrace.wire.call_records import RECORD, CallRun
from ringtrace.wire.model import CALL, CALL_RAISED

TRACERS: list[Any] = [PythonTracer]
try:
    from ringtrace.client._functions import Tracer as CTracer  # type: ignore[import-not-found]

    TRACERS.append(CTracer)
except ImportError:
    pass

#: A call tree: (name, raised, children) per call, in the order the calls began.
Tree = list[tuple[str, bool, list[Any]]]


def ours(code: types.CodeType, module: str) -> bool:
    """This file's workloads: not the tests and what they define (their lambdas and local functions)."""
    return code.co_filename == __file__ and not code.co_qualname.startswith("test_")


def trees(drained: list[tuple[int, bytes]], locations: list[Any]) -> dict[int, Tree]:
    """Each thread's calls as a tree, from its records (a call's record comes after those of the calls it made)."""
    by_thread: dict[int, Tree] = {}
    for ident, records in drained:
        pending: list[tuple[int, str, bool, list[Any]]] = []
        for start, _end, location, kind in CallRun(records, locations).calls():
            children = [p for p in pending if p[0] >= start]
            pending = [p for p in pending if p[0] < start]
            pending.append((start, location[0], kind == CALL_RAISED, [c[1:] for c in children]))
        by_thread.setdefault(ident, []).extend(p[1:] for p in pending)
    return by_thread


def traced(tracer_class: Any, workload: Callable[[], object], **options: Any) -> tuple[Any, dict[int, Tree], list]:
    """Run ``workload`` traced; returns the tracer, the trees by thread and the locations."""
    locations: list[Any] = []
    tracer = tracer_class(options.pop("decide", ours), locations, **options)
    tracer.start()
    try:
        workload()
    finally:
        tracer.stop()
    return tracer, trees(tracer.drain(), locations), locations


def main_tree(by_thread: dict[int, Tree]) -> Tree:
    return by_thread.get(threading.get_ident(), [])


# -- workloads ---------------------------------------------------------------------------------------------------------


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def numbers() -> Any:
    yield 1
    yield 2


def use_numbers() -> list[int]:
    return list(numbers())


async def child() -> int:
    await asyncio.sleep(0)
    return 1


async def parent() -> int:
    return await child()


async def sleeper() -> None:
    await asyncio.sleep(0)
    leaf()


async def task_work() -> None:
    leaf()
    await sleeper()


async def two_tasks() -> None:
    await asyncio.gather(task_work(), task_work())


def boom() -> None:
    raise ValueError("boom")


def catches() -> None:
    try:  # noqa: SIM105 - a handler in the traced code itself, not a context manager's calls
        boom()
    except ValueError:
        pass


def lets_through() -> None:
    boom()


def negative(x: int) -> int:
    return -x


def sorts() -> list[int]:
    return sorted([1, 2, 3], key=negative)


def sorts_too(x: int) -> int:
    """A key whose code is left out (decide): calls sorted, the C function running it, then recorded code."""
    sorted([x])
    return negative(x)


def sorts_through_code_left_out() -> list[int]:
    return sorted([1, 2, 3], key=sorts_too)


def leaf() -> None:
    pass


def catches_one_thrown() -> Any:
    try:
        yield
    except KeyError:
        yield "after KeyError"
    yield


def throws_into_generators() -> None:
    caught = catches_one_thrown()
    next(caught)
    caught.throw(KeyError())  # caught there: the resume ends at the next yield
    caught.close()  # GeneratorExit at a bare yield: the resume ends raising
    let_through = catches_one_thrown()
    next(let_through)
    with contextlib.suppress(ValueError):
        let_through.throw(ValueError())  # not caught: the resume ends raising


def nested(depth: int) -> None:
    if depth:
        nested(depth - 1)
    else:
        leaf()


# -- the trees ---------------------------------------------------------------------------------------------------------


def call(name: str, *children: Any, raised: bool = False) -> tuple[str, bool, list[Any]]:
    return (name, raised, list(children))


@pytest.fixture(params=TRACERS, ids=lambda cls: cls.__name__)
def tracer_class(request: pytest.FixtureRequest) -> Any:
    return request.param


def test_recursion(tracer_class: Any) -> None:
    _, by_thread, _ = traced(tracer_class, lambda: fib(3))
    assert main_tree(by_thread) == [call("fib", call("fib", call("fib"), call("fib")), call("fib"))]


def test_a_span_per_resume_of_a_generator(tracer_class: Any) -> None:
    _, by_thread, _ = traced(tracer_class, use_numbers)
    # Resumed three times: two yields, then the end.
    assert main_tree(by_thread) == [call("use_numbers", call("numbers"), call("numbers"), call("numbers"))]


def test_a_span_per_resume_of_a_coroutine(tracer_class: Any) -> None:
    _, by_thread, _ = traced(tracer_class, lambda: asyncio.run(parent()))
    # The await of sleep(0) suspends both: a span of each before it, and after.
    assert main_tree(by_thread) == [call("parent", call("child")), call("parent", call("child"))]


@pytest.mark.parametrize("builtins", [False, True])
def test_the_calls_of_each_asyncio_tasks_steps_are_cut_apart(tracer_class: Any, builtins: bool) -> None:
    locations: list[Any] = []
    tracer = tracer_class(ours, locations, builtins=builtins)
    tracer.start()
    try:
        asyncio.run(two_tasks())
    finally:
        tracer.stop()
    by_task: dict[Any, list[tuple[int, bytes]]] = {}
    for ident, records, cuts in tracer.drain_cuts():
        for task, part in split(records, cuts):
            by_task.setdefault(task, []).append((ident, part))
    assert None not in by_task  # every call of ours ran in a task's step
    found = sorted(main_tree(trees(runs, locations)) for runs in by_task.values())
    work = [call("task_work", call("leaf"), call("sleeper")), call("task_work", call("sleeper", call("leaf")))]
    assert found == [work, work, [call("two_tasks"), call("two_tasks")]]  # each task's steps, apart


def test_a_replaced_asyncio_current_task_is_obeyed(tracer_class: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # (the C tracer reads asyncio's running task in C while asyncio.tasks.current_task is asyncio's own)
    traced(tracer_class, lambda: asyncio.run(two_tasks()))  # asyncio's own found first, then replaced
    monkeypatch.setattr(asyncio.tasks, "current_task", lambda loop=None: None)
    locations: list[Any] = []
    tracer = tracer_class(ours, locations)
    tracer.start()
    try:
        asyncio.run(two_tasks())
    finally:
        tracer.stop()
    lanes = {task for _, records, cuts in tracer.drain_cuts() for task, _ in split(records, cuts)}
    assert lanes == {None}  # no task, as the replacement says: every call on the thread


def test_an_exception_that_leaves_a_call_is_call_raised(tracer_class: Any) -> None:
    def workload() -> None:
        catches()
        try:  # noqa: SIM105
            lets_through()
        except ValueError:
            pass

    _, by_thread, _ = traced(tracer_class, workload)
    assert main_tree(by_thread) == [
        call("catches", call("boom", raised=True)),
        call("lets_through", call("boom", raised=True), raised=True),
    ]


def exits(code: object) -> None:
    if code == "raise":
        raise SystemExit
    sys.exit(code)


def calls_exit(code: object) -> None:
    exits(code)


def exits_each_way() -> None:
    for code in (0, None, False, "raise", 3, "bye"):
        with contextlib.suppress(SystemExit):
            calls_exit(code)


def exit_is_seen(tracer_class: Any, builtins: bool) -> bool:
    """Whether the tracer tells a SystemExit's code as it unwinds: the C tracer's frame evaluation hook does, and
    sys.monitoring (3.12+) does; the profile function of 3.11 (the pure-Python twin's, and the C one's with
    builtins) is not shown the exception."""
    return sys.version_info >= (3, 12) or (tracer_class is not PythonTracer and not builtins)


@pytest.mark.parametrize("builtins", [False, True])
def test_a_clean_exit_returns_and_any_other_exit_raises(tracer_class: Any, builtins: bool) -> None:
    _, by_thread, _ = traced(tracer_class, exits_each_way, builtins=builtins)
    clean_raised = not exit_is_seen(tracer_class, builtins)
    # (sys.exit's own call, with builtins: its argument tells on 3.12+, C_RAISE's arg0; 3.11's profile function
    # is shown neither)
    clean_exit_call = [call("sys.exit", raised=sys.version_info < (3, 12))] if builtins else []
    exit_call = [call("sys.exit", raised=True)] if builtins else []
    ends = [call("calls_exit", call("exits", *clean_exit_call, raised=clean_raised), raised=clean_raised)] * 3
    ends += [call("calls_exit", call("exits", raised=clean_raised), raised=clean_raised)]  # raise SystemExit
    ends += [call("calls_exit", call("exits", *exit_call, raised=True), raised=True)] * 2
    assert main_tree(by_thread) == [call("exits_each_way", *ends)]


def test_an_exception_thrown_into_a_generator_that_leaves_it_is_call_raised(tracer_class: Any) -> None:
    _, by_thread, _ = traced(tracer_class, throws_into_generators)
    resumes = [call("catches_one_thrown"), call("catches_one_thrown"), call("catches_one_thrown", raised=True)]
    resumes += [call("catches_one_thrown"), call("catches_one_thrown", raised=True)]
    assert main_tree(by_thread) == [call("throws_into_generators", *resumes)]


def test_threads_have_trees_of_their_own(tracer_class: Any) -> None:
    def workload() -> None:
        threads = [threading.Thread(target=fib, args=(2,)) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    _, by_thread, _ = traced(tracer_class, workload)
    # (each thread's calls on their own; a thread may have the ident of one that ended before it)
    others = [root for ident, tree in by_thread.items() if ident != threading.get_ident() for root in tree]
    assert others == [call("fib", call("fib"), call("fib"))] * 3
    assert main_tree(by_thread) == []


@pytest.mark.parametrize("builtins", [False, True])
def test_a_c_function_calling_back_into_python(tracer_class: Any, builtins: bool) -> None:
    _, by_thread, locations = traced(tracer_class, sorts, builtins=builtins)
    keys = [call("negative")] * 3
    expected = [call("sorts", call("sorted", *keys))] if builtins else [call("sorts", *keys)]
    assert main_tree(by_thread) == expected
    if builtins:
        assert ("sorted", "", 0) in locations


def test_a_c_function_called_again_inside_its_call_from_code_left_out_ends_once(tracer_class: Any) -> None:
    def decide(code: types.CodeType, module: str) -> bool:
        return ours(code, module) and code.co_name != "sorts_too"

    _, by_thread, _ = traced(tracer_class, sorts_through_code_left_out, builtins=True, decide=decide)
    keys = [call("negative")] * 3
    assert main_tree(by_thread) == [call("sorts_through_code_left_out", call("sorted", *keys))]


def test_c_functions_are_named_by_module_and_qualified_name(tracer_class: Any) -> None:
    import time

    def workload() -> None:
        items: list[int] = []
        items.append(len(items))
        time.sleep(0)

    _, by_thread, _ = traced(tracer_class, workload, builtins=True, decide=lambda c, m: c.co_name == "workload")
    assert main_tree(by_thread) == [
        call(
            "test_c_functions_are_named_by_module_and_qualified_name.<locals>.workload",
            call("len"),
            call("list.append"),
            call("time.sleep"),
        )
    ]


def test_decide_is_asked_once_per_code(tracer_class: Any) -> None:
    asked: list[types.CodeType] = []

    def decide(code: types.CodeType, module: str) -> bool:
        asked.append(code)
        return ours(code, module)

    traced(tracer_class, lambda: (fib(6), use_numbers(), fib(4)), decide=decide)
    assert len(asked) == len({id(code) for code in asked})
    assert fib.__code__ in asked and numbers.__code__ in asked


def test_threads_meeting_code_at_once_record_their_calls_at_one_location(tracer_class: Any) -> None:
    asked: list[types.CodeType] = []
    barrier = threading.Barrier(6)

    def decide(code: types.CodeType, module: str) -> bool:
        asked.append(code)
        return code is leaf.__code__

    def meet() -> None:
        barrier.wait(30)
        leaf()

    def workload() -> None:
        threads = [threading.Thread(target=meet) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    _, by_thread, locations = traced(tracer_class, workload, decide=decide)
    # Each thread meeting it at the same moment may ask (none waits for another inside a callback: see
    # test_function_tracer_waits.py); most often one does.
    assert 1 <= asked.count(leaf.__code__) <= 6
    assert [root for tree in by_thread.values() for root in tree] == [call("leaf")] * 6
    assert set(locations) == {(leaf.__qualname__, leaf.__code__.co_filename, leaf.__code__.co_firstlineno)}


def test_decide_is_given_the_module(tracer_class: Any) -> None:
    modules: dict[str, str] = {}

    def decide(code: types.CodeType, module: str) -> bool:
        modules[code.co_name] = module
        return False

    traced(tracer_class, lambda: fib(2), decide=decide)
    assert modules["fib"] == __name__


def test_min_duration_leaves_out_short_calls(tracer_class: Any) -> None:
    import time

    def slow() -> None:
        leaf()
        time.sleep(0.02)

    def workload() -> None:
        slow()
        leaf()

    _, by_thread, _ = traced(
        tracer_class, workload, min_duration_ns=10_000_000, decide=lambda c, m: c.co_name in ("slow", "leaf")
    )
    assert main_tree(by_thread) == [call("test_min_duration_leaves_out_short_calls.<locals>.slow")]


def test_max_depth_leaves_out_deeper_calls(tracer_class: Any) -> None:
    _, by_thread, _ = traced(tracer_class, lambda: nested(5), max_depth=3, decide=lambda c, m: c.co_name == "nested")
    assert main_tree(by_thread) == [call("nested", call("nested", call("nested")))]


def test_a_full_buffer_counts_the_calls_dropped(tracer_class: Any) -> None:
    woken: list[int] = []
    tracer, by_thread, _ = traced(
        tracer_class,
        lambda: [leaf() for _ in range(100)],
        buffer_bytes=10 * RECORD.size,
        wake=lambda: woken.append(1),
        decide=lambda c, m: c.co_name == "leaf",
    )
    assert len(main_tree(by_thread)) == 10
    assert tracer.dropped == 90
    assert tracer.recorded == 10
    assert len(woken) == 1  # once per drain


def test_stop_closes_the_calls_open(tracer_class: Any) -> None:
    locations: list[Any] = []
    tracer = tracer_class(lambda c, m: c.co_name == "stops_inside", locations)

    def stops_inside() -> None:
        tracer.stop()

    tracer.start()
    stops_inside()
    tracer.stop()  # idempotent
    assert main_tree(trees(tracer.drain(), locations)) == [
        call("test_stop_closes_the_calls_open.<locals>.stops_inside")
    ]


def test_calls_begun_before_start_are_not_recorded(tracer_class: Any) -> None:
    locations: list[Any] = []
    tracer = tracer_class(lambda c, m: c.co_name in ("begun_before", "leaf"), locations)

    def begun_before() -> None:
        tracer.start()
        leaf()

    begun_before()
    leaf()
    tracer.stop()
    assert main_tree(trees(tracer.drain(), locations)) == [call("leaf"), call("leaf")]


def test_drain_takes_each_record_once_and_forgets_ended_threads(tracer_class: Any) -> None:
    locations: list[Any] = []
    tracer = tracer_class(lambda c, m: c.co_name == "leaf", locations)
    tracer.start()
    leaf()
    first = tracer.drain()
    thread = threading.Thread(target=leaf)
    thread.start()
    thread.join()
    gc.collect()
    second = tracer.drain()
    tracer.stop()
    assert [len(records) // RECORD.size for _, records in first] == [1]
    assert sorted(len(records) // RECORD.size for _, records in second) == [1]
    assert second[0][0] == thread.ident
    assert tracer.drain() == []
    assert tracer.recorded == 2


def test_records_are_on_the_monotonic_clock(tracer_class: Any) -> None:
    import time

    before = time.monotonic_ns()
    locations: list[Any] = []
    tracer = tracer_class(lambda c, m: c.co_name == "leaf", locations)
    tracer.start()
    leaf()
    tracer.stop()
    after = time.monotonic_ns()
    ((_, records),) = tracer.drain()
    ((start, end, location, kind),) = CallRun(records, locations).calls()
    assert before <= start <= end <= after
    assert location == ("leaf", __file__, leaf.__code__.co_firstlineno)
    assert kind == CALL


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring tool ids: 3.12 and later")
def test_no_free_tool_id_is_a_clear_error(tracer_class: Any) -> None:
    monitoring = sys.monitoring  # type: ignore[attr-defined]
    taken = [tool for tool in (3, 4) if monitoring.get_tool(tool) is None]
    for tool in taken:
        monitoring.use_tool_id(tool, "another tool")
    tracer = tracer_class(ours, [], builtins=True)  # (the C tracer takes a tool id for C functions alone)
    try:
        with pytest.raises(RuntimeError, match="tool id"):
            tracer.start()
    finally:
        tracer.stop()
        for tool in taken:
            monitoring.free_tool_id(tool)


def test_code_compiled_again_shares_its_location(tracer_class: Any) -> None:
    # Locations are interned by value: the table grows with the program's code, not with how often it is compiled.
    source = "def compiled_again():\n    pass\ncompiled_again()\n"
    locations: list[Any] = [("compiled_again", "<again>", 1)]  # as a tracer before this one left it
    tracer = tracer_class(lambda code, module: code.co_filename == "<again>", locations)
    tracer.start()
    try:
        for _ in range(50):
            exec(compile(source, "<again>", "exec"), {"__name__": __name__})
    finally:
        tracer.stop()
    assert main_tree(trees(tracer.drain(), locations)) == [("<module>", False, [call("compiled_again")])] * 50
    assert sorted(locations) == [("<module>", "<again>", 1), ("compiled_again", "<again>", 1)]


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="SIGUSR1")
@pytest.mark.parametrize("where", ["decide", "wake"])
def test_a_signal_handlers_exception_inside_the_tracer_reaches_the_program(tracer_class: Any, where: str) -> None:
    # A handler runs between any two bytecodes, the tracer's decide and wake too: its exception (a timeout's, say) is
    # the program's.
    def on_signal(signum: int, frame: object) -> None:
        raise TimeoutError("the program's timeout")

    def decide(code: types.CodeType, module: str) -> bool:
        if where == "decide" and code is leaf.__code__:
            signal.raise_signal(signal.SIGUSR1)
        return ours(code, module)

    def wake() -> None:
        if where == "wake":
            signal.raise_signal(signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, on_signal)
    tracer = tracer_class(decide, [], buffer_bytes=RECORD.size * 4, wake=wake)
    tracer.start()
    try:
        with pytest.raises(TimeoutError, match="the program's timeout"):
            for _ in range(10):
                leaf()
    finally:
        tracer.stop()
        signal.signal(signal.SIGUSR1, previous)


#: Start and stop a tracer (by ``sys.argv[1]``: module:class) while a collection may start at any allocation, with a
#: ``gc.callbacks`` entry (Python code the tracer sees too), on this thread and on one started while it traced.
STOPPED_DURING_COLLECTIONS = """
import gc
import importlib
import sys
import threading

module, _, name = sys.argv[1].partition(":")
tracer_class = getattr(importlib.import_module(module), name)


def on_collection(phase, info):
    return phase


def work():
    return sum(i for i in range(10))


gc.callbacks.append(on_collection)
stops = 0
for threshold in range(1, 12):
    for garbage in range(threshold + 2):
        tracer = tracer_class(lambda code, module: True, [], builtins=garbage % 2 == 1)
        tracer.start()
        go = threading.Event()
        worker = threading.Thread(target=lambda: (go.wait(60), work()))
        worker.start()
        work()
        gc.set_threshold(threshold)
        made = [[] for _ in range(garbage)]
        tracer.stop()
        go.set()
        worker.join()
        gc.set_threshold(700)
        del made
        stops += 1
print("stopped", stops)
"""


def test_a_tracer_stops_while_collections_run_traced_code(tracer_class: Any) -> None:
    # On 3.11 the interpreter makes a frame's object before it calls the profile function through a reference borrowed
    # from the thread; a collection set off by that allocation runs its callbacks, traced too. The pure-Python tracer's
    # bound method, removed in one of them (the tracer had stopped), was freed, and then called: a crash, in about one
    # run in 300 of a test under ``ringtrace run --functions``. Here a collection may start at every allocation.
    where = f"{tracer_class.__module__}:{tracer_class.__qualname__}"
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_DURING_COLLECTIONS, where], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout) == (0, "stopped 88\n"), done.stderr


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.11's profile function; sys.monitoring has two tool ids")
def test_on_311_a_second_python_tracer_is_refused_until_the_first_stops() -> None:
    first, second = PythonTracer(ours, []), PythonTracer(ours, [])
    first.start()
    try:
        with pytest.raises(RuntimeError, match="one tracer at a time"):
            second.start()
        leaf()
    finally:
        first.stop()
    second.start()
    leaf()
    second.stop()
    assert (first.recorded, second.recorded) == (1, 1)


def test_a_tracer_recording_everything_records_no_call_its_stop_makes_on_311(tracer_class: Any) -> None:
    # (The call of stop() itself, open then, ends there as every open call does. On 3.12 the tool's release, a Python
    # function called while its events are still on, is recorded too.)
    locations: list[Any] = []
    tracer = tracer_class(lambda code, module: True, locations)
    tracer.start()
    leaf()
    tracer.stop()
    names = {locations[index][0] for index in _recorded_indexes(tracer.drain())}
    assert "leaf" in names
    assert not names & {"_stop_profiling", "setprofile"}, names


def _recorded_indexes(drained: list[tuple[int, bytes]]) -> set[int]:
    return {location for _, records in drained for _, _, location, _ in RECORD.iter_unpack(records)}
