"""The sampler's walk of other threads' frames (``speedups/stack_walk.c``, and its twin ``StackInterner.intern`` over
frame objects): the same stacks of threads parked in known places, in generators and coroutines running or being
closed; a thread that returns from the frames being walked and ends while a collection the walk ran lets the GIL go
(on CPython 3.11, where an allocation runs a collection, frame objects made there read freed frames: a segfault in
PyFrame_GetBack); a thread caught inside a frame's set-up.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import threading
import warnings
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from ringtrace.client import MemoryListener, Timeline
from ringtrace.client.accelerator import speedups
from ringtrace.client.sampling import sampler as sampler_module
from ringtrace.client.sampling.sampler import Sampler
from ringtrace.client.sampling.stack_capture import StackInterner
from ringtrace.client.sampling.thread_pass import take_samples_in_python
from ringtrace.wire.model import SAMPLE
from waiting import wait_for

PASSES: dict[str, Callable[..., Any]] = {"python": take_samples_in_python}
if speedups is not None:
    PASSES["c"] = speedups.take_samples

needs_c = pytest.mark.skipif(speedups is None, reason="the C accelerator is not built (or RINGTRACE_PURE_PYTHON=1)")


def _parked_in_generator(release: threading.Event, reached: threading.Event) -> Generator[int, None, None]:
    reached.set()
    release.wait(60)
    yield 1


def _parked_in_loop(release: threading.Event, reached: threading.Event) -> None:
    async def parked() -> None:
        reached.set()
        release.wait(60)  # (blocks the loop on purpose: the coroutine's frame is the running one)

    asyncio.run(parked())


def _parked_in_recursion(depth: int, release: threading.Event, reached: threading.Event) -> None:
    if depth > 1:
        _parked_in_recursion(depth - 1, release, reached)
    else:
        sum(_parked_in_generator(release, reached))


def _closed_generator(release: threading.Event, reached: threading.Event) -> Generator[int, None, None]:
    try:
        yield 1
    finally:
        reached.set()
        release.wait(60)


def _parked_in_a_generators_close(release: threading.Event, reached: threading.Event) -> None:
    generator = _closed_generator(release, reached)
    next(generator)
    generator.close()


class _Suspend:
    """An awaitable that suspends its coroutine once."""

    def __await__(self) -> Generator[None, None, None]:
        yield


async def _closed_coroutine(release: threading.Event, reached: threading.Event) -> None:
    try:
        await _Suspend()
    finally:
        reached.set()
        release.wait(60)


def _parked_in_a_coroutines_close(release: threading.Event, reached: threading.Event) -> None:
    coroutine = _closed_coroutine(release, reached)
    coroutine.send(None)  # (suspended: no loop needed)
    coroutine.close()


@contextmanager
def _parked_threads() -> Iterator[list[threading.Thread]]:
    release, reached = threading.Event(), [threading.Event() for _ in range(4)]
    threads = [
        threading.Thread(target=_parked_in_recursion, args=(4, release, reached[0]), name="t-generator"),
        threading.Thread(target=_parked_in_loop, args=(release, reached[1]), name="t-coroutine"),
        threading.Thread(target=_parked_in_a_generators_close, args=(release, reached[2]), name="t-generator-close"),
        threading.Thread(target=_parked_in_a_coroutines_close, args=(release, reached[3]), name="t-coroutine-close"),
    ]
    for thread in threads:
        thread.start()
    try:
        for at in reached:
            assert at.wait(30)
        yield threads
    finally:
        release.set()
        for thread in threads:
            thread.join(30)


@needs_c
def test_the_c_walk_reads_the_stack_the_frame_objects_show() -> None:
    assert speedups is not None
    with _parked_threads() as threads:
        frames = sys._current_frames()
        for thread in threads:
            walked = speedups.walk_stack(thread.ident or 0)
            assert walked is not None
            key, codes = walked
            python, c = StackInterner(), StackInterner()
            assert c.intern_walk(key, codes) == python.intern(frames[thread.ident or 0])
            frame: Any = frames[thread.ident or 0]
            expected: list[Any] = []
            while frame is not None:
                expected += [id(frame.f_code), frame.f_lasti]
                frame = frame.f_back
            assert key == tuple(expected) and [id(code) for code in codes] == expected[::2]
        functions = [c[0] for c in StackInterner().intern_walk(*(speedups.walk_stack(threads[1].ident or 0) or ()))]
        assert functions[-3:] == ["_parked_in_loop.<locals>.parked", "Event.wait", "Condition.wait"]
    assert speedups.walk_stack(threads[0].ident or 0) is None  # (ended)


def test_the_twins_sample_the_same_stacks_in_generators_and_coroutines(monkeypatch: pytest.MonkeyPatch) -> None:
    with _parked_threads():
        seen = {}
        for name, take in PASSES.items():
            timeline, listener = Timeline(), MemoryListener()
            timeline.add_listener(listener)
            monkeypatch.setattr(sampler_module, "take_samples", take)
            Sampler(timeline, 100).sample_once()
            timeline.flush(timeout_s=30)
            seen[name] = {
                event.track.name: event.args["stack"]
                for event in listener.events
                if event.kind == "sample" and event.track.name.startswith("t-")
            }
    python = seen["python"]
    generator = [function for function, _, _ in python["t-generator samples"]]
    assert generator[-7:] == ["_parked_in_recursion"] * 4 + ["_parked_in_generator", "Event.wait", "Condition.wait"]
    for name, closed in (("t-generator-close", "_closed_generator"), ("t-coroutine-close", "_closed_coroutine")):
        functions = [function for function, _, _ in python[f"{name} samples"]]
        assert functions[-4:] == [f"_parked_in_a_{closed[8:]}s_close", closed, "Event.wait", "Condition.wait"]
    for name, stacks in seen.items():
        assert stacks == python, name


# -- a collection during the walk, and a frame's set-up -----------------------------------------------------------


class _Cycle:
    """Garbage whose collection closes a socket that lingers: the close waits, the GIL let go, until its peer has read
    what it was sent (``_drain``)."""

    def __init__(self, sock: socket.socket) -> None:
        self.me = self
        self.sock = sock


def _lingering_socket(peer: socket.socket) -> socket.socket:
    sock = socket.create_connection(peer.getsockname(), timeout=30)
    sock.setblocking(False)
    try:
        while True:
            sock.send(b"x" * 65536)
    except BlockingIOError:
        pass
    sock.setblocking(True)
    linger = (1).to_bytes(4, sys.byteorder) + (60).to_bytes(4, sys.byteorder)  # on, 60 s at most
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
    return sock


def _drain(accepted: socket.socket) -> None:
    accepted.settimeout(30)
    while accepted.recv(1 << 20):
        pass


@contextmanager
def _collections_under_test() -> Iterator[None]:
    """The garbage collector off (a test turns it on where it must run), its thresholds and state restored after, and
    the warning of the socket a collection closes ignored."""
    thresholds, enabled = gc.get_threshold(), gc.isenabled()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
        gc.disable()
        try:
            yield
        finally:
            gc.set_threshold(*thresholds)
            (gc.enable if enabled else gc.disable)()
            gc.collect()


def _parked_twice(first: threading.Event, second: threading.Event, reached: list[threading.Event]) -> None:
    _parked_once(first, reached[0])
    _parked_again(second, reached[1])  # (new frames: none has a frame object)


def _parked_once(release: threading.Event, reached: threading.Event) -> None:
    reached.set()
    release.wait(60)


def _parked_again(release: threading.Event, reached: threading.Event) -> None:
    reached.set()
    release.wait(60)


@pytest.mark.parametrize("twin", sorted(PASSES))
def test_a_thread_that_ends_during_a_collection_the_walk_ran_is_sampled_as_it_was(twin: str) -> None:
    """The collection a walk's allocation runs (3.11 runs one at the allocation) finalises a socket whose close lets
    the GIL go; meanwhile the walked thread returns from the frames being walked and ends (its frame stack freed).
    Frame objects made there (3.11's PyFrame_GetBack, PyThreadState_GetFrame) went on with freed frames."""
    if twin == "python" and sys.version_info < (3, 12):
        pytest.skip("on 3.11 the twin makes frame objects of the thread's frames, which is what the C walk avoids")
    first, second, reached = threading.Event(), threading.Event(), [threading.Event(), threading.Event()]
    collecting, ended = threading.Event(), threading.Event()
    timeline, listener = Timeline(), MemoryListener()
    timeline.add_listener(listener)
    sampler = Sampler(timeline, 100)
    take = PASSES[twin]

    def on_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and threading.current_thread() is threading.main_thread():
            collecting.set()

    with socket.create_server(("127.0.0.1", 0)) as server, _collections_under_test():
        _Cycle(_lingering_socket(server))
        accepted, _ = server.accept()
        thread = threading.Thread(target=_parked_twice, args=(first, second, reached), name="t-ending")

        def release_during_the_collection() -> None:
            assert collecting.wait(60)
            second.set()
            thread.join(60)  # (its frame stack freed)
            ended.set()
            _drain(accepted)  # (the close ends: the pass goes on)

        releaser = threading.Thread(target=release_during_the_collection, name="t-releaser")
        releaser.start()
        thread.start()  # (after the releaser: the newest thread, the first a pass meets)
        gc.callbacks.append(on_collection)
        try:
            assert reached[0].wait(30)
            sampler.sample_once()
            timeline.flush(timeout_s=30)  # (the flusher's thread started: met by the next pass)
            sampler.sample_once()  # (every thread met: the next pass allocates nothing before the walk)
            met = len(_stacks_of("t-ending", timeline, listener))
            first.set()
            assert reached[1].wait(30)
            args = (sampler._threads, threading._active, threading.get_ident(), {}, 0, SAMPLE, sampler._sampled_of)
            args += (sampler._interner, lambda: None)
            gc.set_threshold(1)
            gc.enable()
            taken = take(*args)  # (the collection runs in the walk of the thread)
            gc.disable()
        finally:
            gc.callbacks.remove(on_collection)
            first.set()
            second.set()
            collecting.set()
            releaser.join(60)
            thread.join(60)
            accepted.close()
    assert ended.is_set()
    stacks = _stacks_of("t-ending", timeline, listener)[met:]
    assert all(stack[-4:] == ("_parked_twice", "_parked_again", "Event.wait", "Condition.wait") for stack in stacks)
    # The C walk reads every frame before it allocates: its sample is taken. 3.12's twin may run the collection (at its
    # eval loop's next check) before the thread's turn, and then has no sample of it.
    if twin == "c":
        assert len(stacks) == 1 and taken[0] >= 1


def _stacks_of(name: str, timeline: Timeline, listener: MemoryListener) -> list[tuple[str, ...]]:
    """The functions of each sample of the thread ``name`` so far, root first."""
    timeline.flush(timeout_s=30)
    return [
        tuple(function for function, _, _ in event.args["stack"])
        for event in listener.events
        if event.kind == "sample" and event.track.name == f"{name} samples"
    ]


#: Where a sample of the thread finds it in the collection: on 3.11 (a collection at the allocation) at the call, the
#: generator function's frame (not yet begun) left out; from 3.12 on (at the eval loop's next check), where that is.
IN_THE_COLLECTION = (
    ("_make_a_generator_in_a_collection",)
    if sys.version_info < (3, 12)
    else ("_make_a_generator_in_a_collection", "_generator_function")
)


def _generator_function() -> Generator[int, None, None]:
    yield 1


def _make_a_generator_in_a_collection(ready: threading.Event, out: dict[str, Any]) -> None:
    gc.set_threshold(1)
    ready.set()  # (the test's thread waits a switch interval for the GIL before it asks for it: ours till the call)
    gc.enable()
    generator = _generator_function()  # (the collection runs in the new generator's allocation)
    out["code"] = generator.gi_frame.f_code
    out["next"] = next(generator)


@pytest.mark.parametrize("twin", sorted(PASSES))
def test_a_thread_sampled_inside_a_frames_set_up_shows_the_frames_begun(twin: str) -> None:
    """A collection inside RETURN_GENERATOR, its finaliser's close letting the GIL go: the thread's innermost frame has
    not begun (CPython's incomplete frame), and is left out, as CPython's frame objects leave it out; the generator
    made there is sound."""
    timeline, listener = Timeline(), MemoryListener()
    timeline.add_listener(listener)
    sampler = Sampler(timeline, 100)
    out: dict[str, Any] = {}
    ready = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as server, _collections_under_test():
        _Cycle(_lingering_socket(server))
        accepted, _ = server.accept()
        thread = threading.Thread(target=_make_a_generator_in_a_collection, args=(ready, out), name="t-set-up")
        args = (sampler._threads, threading._active, threading.get_ident(), {}, 0, SAMPLE, sampler._sampled_of)
        args += (sampler._interner, lambda: None)
        try:
            thread.start()
            assert ready.wait(30)
            innermost = wait_for(
                lambda: _innermost(timeline, listener, PASSES[twin], args),
                timeout_s=30,
                what="a sample of the thread in the collection",
                until=lambda innermost: innermost in IN_THE_COLLECTION,
            )
        finally:
            _drain(accepted)
            thread.join(30)
            accepted.close()
    assert out == {"code": _generator_function.__code__, "next": 1}
    assert innermost in IN_THE_COLLECTION


def _innermost(timeline: Timeline, listener: MemoryListener, take: Callable[..., Any], args: tuple[Any, ...]) -> str:
    """A pass, then the innermost function of the last sample of ``t-set-up`` ("" for none)."""
    take(*args)
    stacks = _stacks_of("t-set-up", timeline, listener)
    return stacks[-1][-1] if stacks else ""
