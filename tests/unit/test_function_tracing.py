"""Function tracing as the program uses it: the call filter's rules, ``trace_functions`` draining calls onto the
threads' tracks for every listener (spans of kind call, with file and line), calls dropped counted as the listeners'
losses, one tracing at a time, and durations read."""

from __future__ import annotations

import json
import os
import threading
import types

import pytest
from ringtrace.client import ConfigError, FunctionTracing, MemoryListener, Timeline, trace_functions
from ringtrace.client.functions.call_filter import CallFilter
from ringtrace.client.functions.function_tracing import tracer_class
from ringtrace.client.recording.tracks import EndedThread, Tracks
from ringtrace.wire.parsing import parse_duration_ns
from waiting import wait_for


def here(code: types.CodeType) -> tuple[types.CodeType, str]:
    return code, __name__


def leaf() -> None:
    pass


def branch() -> None:
    leaf()
    leaf()


def test_the_filter_takes_the_programs_code_and_leaves_the_rest() -> None:
    decide = CallFilter().decide
    assert decide(*here(leaf.__code__))
    assert not decide(json.dumps.__code__, "json")  # the standard library
    assert not decide(pytest.raises.__code__, "_pytest.python_api")  # site-packages
    assert not decide(trace_functions.__code__, "ringtrace.client.functions.function_tracing")  # ringtrace's own
    assert not decide(trace_functions.__code__, "")  # ringtrace's own, by its file
    assert CallFilter(library=True).decide(json.dumps.__code__, "json")
    assert not CallFilter(library=True).decide(trace_functions.__code__, "ringtrace.client")


def test_the_filter_globs_match_module_names() -> None:
    assert CallFilter(include=["tests.*", "test_*"]).decide(*here(leaf.__code__))
    assert not CallFilter(include=["app.*"]).decide(*here(leaf.__code__))
    assert not CallFilter(include=["test_*"], exclude=["test_function_*"]).decide(*here(leaf.__code__))
    assert CallFilter(include=["__main__"]).decide(leaf.__code__, "__main__")


def test_calls_reach_the_listeners_on_the_threads_own_tracks() -> None:
    memory = MemoryListener()
    timeline = Timeline("calls", [memory])
    try:
        with trace_functions(timeline=timeline):
            with timeline.scope("around"):
                branch()
            worker = threading.Thread(target=branch, name="worker")
            worker.start()
            worker.join()
        assert timeline.flush(10)
    finally:
        timeline.close()
    events = memory.events
    calls = [e for e in events if e.kind == "call"]
    assert [e.name for e in calls] == ["leaf", "leaf", "branch"] * 2
    assert calls[0].args == {"file": __file__, "line": leaf.__code__.co_firstlineno}
    (scope,) = [e for e in events if e.name == "around"]
    main_calls = [e for e in calls if e.track.name.endswith("(MainThread)")]
    assert len(main_calls) == 3 and all(e.track.track_id == scope.track.track_id for e in main_calls)
    assert (
        scope.ts_ns
        <= main_calls[-1].ts_ns
        <= main_calls[-1].ts_ns + main_calls[-1].dur_ns
        <= scope.ts_ns + scope.dur_ns
    )
    assert {e.track.name for e in calls} == {"calls (MainThread)", "calls (worker)"}  # (worker ended before)


def test_a_call_raised_is_its_own_kind() -> None:
    def raises() -> None:
        raise KeyError("x")

    memory = MemoryListener()
    timeline = Timeline("raised", [memory])
    try:
        with trace_functions(timeline=timeline), pytest.raises(KeyError):
            raises()
        timeline.flush(10)
    finally:
        timeline.close()
    assert [(e.kind, e.name) for e in memory.events] == [("call_raised", raises.__qualname__)]


def test_calls_dropped_are_the_listeners_losses() -> None:
    memory = MemoryListener()
    timeline = Timeline("dropped", [memory])
    tracing = FunctionTracing(timeline=timeline, buffer_bytes=24 * 10, include=[__name__])
    try:
        tracing.start()
        for _ in range(50):
            leaf()
        tracing.stop()
        assert not timeline.flush(10)  # something was lost, and said so
    finally:
        timeline.close()
    assert memory.dropped_events == tracing.tracer.dropped > 0
    assert len(memory.events) == tracing.tracer.recorded


def test_one_function_tracing_at_a_time() -> None:
    timeline = Timeline("one", [MemoryListener()])
    first = trace_functions(timeline=timeline).start()
    try:
        with pytest.raises(ConfigError, match="runs already"):
            trace_functions(timeline=timeline).start()
        assert first.running
    finally:
        first.stop()
        timeline.close()
    assert not first.running


def test_bad_options_are_refused() -> None:
    with pytest.raises(ConfigError, match="max_depth"):
        trace_functions(max_depth=-1)
    with pytest.raises(ConfigError, match="duration"):
        trace_functions(min_duration="soon")
    with pytest.raises(ConfigError, match="include"):
        trace_functions(include=[""])
    for endless in (float("inf"), 1e300, "9999999999999999s"):  # (no tracer takes them: a clear error, not Overflow)
        with pytest.raises(ConfigError, match="min_duration"):
            trace_functions(min_duration=endless)
    with pytest.raises(ConfigError, match="max_depth"):
        trace_functions(max_depth=2**63)
    assert trace_functions(min_duration="250us").min_duration_ns == 250_000
    assert trace_functions(min_duration=0.001).min_duration_ns == 1_000_000


def test_durations() -> None:
    assert parse_duration_ns("1ms") == 1_000_000
    assert parse_duration_ns("250us") == 250_000
    assert parse_duration_ns("0.5 s") == 500_000_000
    assert parse_duration_ns("0") == 0
    with pytest.raises(ConfigError):
        parse_duration_ns("5")


def test_the_tracer_is_the_c_one_where_built() -> None:
    import os

    from ringtrace.client.functions.python_tracer import PythonTracer

    try:
        from ringtrace.client._functions import Tracer  # type: ignore[import-not-found]
    except ImportError:
        Tracer = None
    pure = os.environ.get("RINGTRACE_PURE_PYTHON", "") not in ("", "0")
    assert tracer_class() is (PythonTracer if Tracer is None or pure else Tracer)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_traces_its_own_calls_not_the_parents() -> None:
    timeline = Timeline("forked", [MemoryListener()])
    tracing = FunctionTracing(timeline=timeline, include=[__name__]).start()
    try:
        branch()  # in the parent's buffer when it forks
        pid = os.fork()
        if pid == 0:  # the child: what its tracer holds is its own calls alone
            status = 1
            try:
                leaf()
                runs, _ = tracing.drain_calls()
                names = [location[0] for _, _, run in runs for _, _, location, _ in run.calls()]
                status = 0 if names == ["leaf"] else 3
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        tracing.stop()
        timeline.close()


def test_a_thread_keeps_its_track_when_it_ends_between_two_drains() -> None:
    memory = MemoryListener()
    timeline = Timeline("two drains", [memory])
    go_on = threading.Event()

    def work() -> None:
        leaf()
        go_on.wait(30)
        leaf()

    try:
        with trace_functions(timeline=timeline, include=[__name__]):
            worker = threading.Thread(target=work, name="twice")
            worker.start()
            wait_for(lambda: timeline.flush(10) and memory.events, timeout_s=30, what="the worker's first call")
            go_on.set()
            worker.join()
        assert timeline.flush(10)
    finally:
        timeline.close()
    leaves = [e for e in memory.events if e.name == "leaf"]
    assert len(leaves) == 2
    assert leaves[0].track == leaves[1].track and leaves[0].track.name == "two drains (twice)"


def test_a_thread_ending_is_its_own_thread_while_threading_still_calls_it_alive() -> None:
    # Function tracing takes a thread for ended once ``Thread._delete`` ran; ``is_alive()`` answers True until its
    # thread state is gone. A drain in that moment gave the thread a second track (met beside a loaded machine).
    tracks = Tracks()
    release = threading.Event()
    worker = threading.Thread(target=release.wait, args=(30,), name="ending")
    worker.start()
    try:
        assert worker.ident is not None
        own = tracks.buffer_of_thread(worker, None)
        ending = EndedThread(worker.ident, worker.name, worker.native_id)
        assert worker.is_alive()
        assert tracks.buffer_of_thread(ending, None) is own
        # Another thread that had its ident (but not its OS id) is not it.
        other = EndedThread(worker.ident, "before", (worker.native_id or 0) + 1)
        assert tracks.buffer_of_thread(other, None) is not own
    finally:
        release.set()
        worker.join()


def test_threads_that_reuse_an_ident_between_two_drains_keep_tracks_of_their_own() -> None:
    memory = MemoryListener()
    timeline = Timeline("reused", [memory])
    names = [f"one after another {i}" for i in range(6)]
    try:
        with trace_functions(timeline=timeline, include=[__name__]):
            for name in names:  # each ends before the next starts: the interpreter may hand them the same ident
                worker = threading.Thread(target=leaf, name=name)
                worker.start()
                worker.join()
        assert timeline.flush(10)
    finally:
        timeline.close()
    leaves = [e for e in memory.events if e.name == "leaf"]
    assert sorted(e.track.name for e in leaves) == sorted(f"reused ({name})" for name in names)
    assert len({e.track.track_id for e in leaves}) == len(names)
