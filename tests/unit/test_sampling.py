"""The sampler and the stack tables of the sending side: stacks interned (a stack met again is the same object, made
once), samples on a track of each sampled thread with its asyncio task's name, start_sampler idempotent and off at
0 Hz, a forked child sampling again, and the encoder's STACKS frames within limits, overflow and reset."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType

import pytest
from ringtrace.client import FileListener, MemoryListener, Timeline, read_trace_file
from ringtrace.client.delivery.threads import background_thread, is_background_thread
from ringtrace.client.sampling import sampler as sampler_module
from ringtrace.client.sampling import start_sampler
from ringtrace.client.sampling.sampler import Sampler
from ringtrace.client.sampling.stack_capture import StackInterner
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.frames import Events, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import SAMPLE, THREAD_TRACK, TrackInfo
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.stack_table import StackTable
from ringtrace.wire.stream_encoder import StreamEncoder
from waiting import wait_for

HELLO = Hello(1, "host", "proc", "instance", "boot", 0, 0, "0.0")
MAIN = ("main", "app.py", 1)
WORK = ("work", "app.py", 2)
LEAF = ("leaf", "lib.py", 3)


def _inner(depth: int) -> FrameType:
    return _inner(depth - 1) if depth else sys._getframe()


def _here() -> FrameType:
    return sys._getframe()


# -- interning ----------------------------------------------------------------------------------------------------


def test_a_stack_is_root_first_and_met_again_is_the_same_object_made_once() -> None:
    interner = StackInterner()
    frame = _inner(5)
    stack = interner.intern(frame)
    assert [function for function, _, _ in stack[-7:]] == ["test_a_stack_is_root_first_and_met_again_is_the_same_"
                                                            "object_made_once", *["_inner"] * 6]  # fmt: skip
    assert stack[-1][1] == __file__ and stack[-1][2] == frame.f_lineno
    again = [interner.intern(frame) for _ in range(3)]  # (this frame at one instruction: the same stack each time)
    assert again[1] is again[0] and again[2] is again[0] and interner.misses == 2
    assert again[0][:-7] == stack[:-7] and again[0][-6:] == stack[-6:]


def test_equal_stacks_met_through_other_frames_share_one_tuple() -> None:
    interner = StackInterner()
    first, second = _inner(3), _inner(3)  # other frame objects, the same code locations
    assert interner.intern(first) is interner.intern(second)


# -- the sampler ---------------------------------------------------------------------------------------------------


def _sampled(timeline: Timeline, listener: MemoryListener) -> list[tuple[TrackInfo, str, tuple[object, ...]]]:
    timeline.flush(timeout_s=30)
    return [(e.track, e.name, e.args["stack"]) for e in listener.events if e.kind == "sample"]


def test_a_pass_samples_every_other_thread_on_a_track_of_its_own_with_its_task_name() -> None:
    timeline, listener = Timeline(), MemoryListener()
    timeline.add_listener(listener)
    started, stop = threading.Event(), threading.Event()

    async def serving() -> None:
        started.set()
        while not stop.is_set():
            await asyncio.sleep(0)
            threading.Event().wait(0.001)  # (in the task, so that a pass finds it running)

    async def main() -> None:
        await asyncio.create_task(serving(), name="server-task")

    def loop_thread() -> None:
        asyncio.run(main())

    thread = threading.Thread(target=loop_thread, name="looping")
    thread.start()
    started.wait(30)
    sampler = Sampler(timeline, 100)
    try:
        wait_for(lambda: sampler.sample_once() or sampler.samples, timeout_s=30, what="a pass",
                 until=lambda _: any(n == "server-task" for _, n, _ in _sampled(timeline, listener)))  # fmt: skip
    finally:
        stop.set()
        thread.join(30)
    samples = _sampled(timeline, listener)
    looping = [(track, stack) for track, name, stack in samples if track.thread_id == thread.native_id]
    assert looping and all(track.kind == THREAD_TRACK and track.name == "looping samples" for track, _ in looping)
    assert all(track.track_id >= 2**31 for track, _ in looping)  # after any of the thread's own tracks
    assert threading.get_native_id() not in {track.thread_id for track, _, _ in samples}  # the sampling thread
    in_task = [stack for track, name, stack in samples if name == "server-task"]
    assert all(track.thread_id == thread.native_id for track, name, _ in samples if name == "server-task")
    assert all(any(function.endswith("serving") for function, _, _ in stack) for stack in in_task)


def test_ringtrace_threads_are_not_sampled_and_a_thread_taking_an_ended_ones_ident_gets_its_own_track() -> None:
    timeline, listener = Timeline(), MemoryListener()
    timeline.add_listener(listener)
    timeline.instant("the flusher starts")
    ours = background_thread(threading.Event().wait, "ringtrace-test")  # (waits until the process ends: a daemon)
    ours.start()
    sampler = Sampler(timeline, 100)
    met: list[threading.Thread] = []
    for name in ("first", "second"):  # one after the other: the second often gets the first's ident
        release = threading.Event()
        thread = threading.Thread(target=release.wait, args=(60,), name=name)
        thread.start()
        sampler.sample_once()
        sampler.sample_once()
        release.set()
        thread.join(30)
        met.append(thread)
    samples = _sampled(timeline, listener)
    by_thread = {track.thread_id: track.name for track, _, _ in samples}
    assert by_thread[met[0].native_id] == "first samples" and by_thread[met[1].native_id] == "second samples"
    assert len([1 for track, _, _ in samples if track.thread_id == met[1].native_id]) == 2
    mine = [t.native_id for t in threading.enumerate() if is_background_thread(t)]
    assert ours.native_id in mine and not set(mine) & set(by_thread)


def test_start_sampler_is_idempotent_off_at_0_hz_and_stops() -> None:
    timeline, listener = Timeline(), MemoryListener()
    timeline.add_listener(listener)
    assert start_sampler(timeline, 0) is None
    sampler = start_sampler(timeline, 200)
    assert sampler is not None and start_sampler(timeline, 200) is sampler
    try:
        wait_for(lambda: sampler.passes, until=lambda passes: passes >= 5, timeout_s=30, what="5 passes")
        sampling = sampler._thread.native_id if sampler._thread is not None else None
        assert sampling and all(track.thread_id != sampling for track, _, _ in _sampled(timeline, listener))
    finally:
        sampler.stop()
    assert not sampler.running
    again = start_sampler(timeline, 200)
    assert again is not None and again is not sampler
    again.stop()


def test_a_pass_that_fails_is_said_once_and_sampling_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    met: list[int] = []
    clock_of = sampler_module.thread_clock_id

    def no_clock_the_first_time(native_id: int) -> int | None:  # a bug met once, as a thread is first sampled
        met.append(native_id)
        if len(met) == 1:
            raise OSError("no clock for that thread")
        return clock_of(native_id)

    monkeypatch.setattr(sampler_module, "thread_clock_id", no_clock_the_first_time)
    timeline, listener = Timeline(), MemoryListener()
    timeline.add_listener(listener)
    sampler = start_sampler(timeline, 200)
    assert sampler is not None
    try:
        wait_for(lambda: sampler.passes, until=lambda passes: passes >= 5, timeout_s=30, what="5 passes")
        assert sampler.running and sampler.failures.failures == 1
        main = threading.get_native_id()
        assert any(track.thread_id == main for track, _, _ in _sampled(timeline, listener))
    finally:
        sampler.stop()
    said = [r.getMessage() for r in caplog.records if r.name == "ringtrace.client" and r.levelno >= logging.ERROR]
    assert len(said) == 1
    assert "a pass of the sampler's thread failed on an unexpected error (OSError: no clock for that thread)" in said[0]


FORKING = """
import json, os, sys, time
from ringtrace.client import MemoryListener, Timeline
from ringtrace.client.delivery.threads import background_thread, is_background_thread
from ringtrace.client.sampling import start_sampler
timeline = Timeline()
timeline.add_listener(MemoryListener())
sampler = start_sampler(timeline, 200)
while sampler.passes < 3:
    time.sleep(0.01)
pid = os.fork()
if pid == 0:
    import threading
    if sampler.running or any(t.name == "ringtrace-sampler" for t in threading.enumerate()):
        os._exit(4)  # started in the fork handler
    if start_sampler(timeline, 200) is not sampler:
        os._exit(5)  # a second sampler while the first waits to start again
    timeline.instant("child")  # the child's first event: the flusher starts, and the sampler with it
    before = sampler.passes
    deadline = time.monotonic() + 30
    while sampler.passes < before + 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    os._exit(0 if sampler.running and sampler.passes >= before + 5 else 3)
_, status = os.waitpid(pid, 0)
print(json.dumps({"status": status, "parent_running": sampler.running}))
"""


def test_a_forked_child_samples_again_once_it_records_not_in_the_fork_handler() -> None:
    done = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", FORKING], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"status": 0, "parent_running": True}


# -- the stack table of a stream -----------------------------------------------------------------------------------

TRACK = TrackInfo(9, THREAD_TRACK, "worker samples", 4242)


def _records(*stacks: object) -> list[object]:
    records: list[object] = []
    for i, stack in enumerate(stacks):
        records += [SAMPLE, "", 100 + i, 100 + i, stack]
    return records


def _decoded(encoder: StreamEncoder, *batches: list[object]) -> list[tuple[object, ...] | None]:
    data = preamble() + encode(HELLO) + b"".join(encoder.prefix())
    for records in batches:
        batch = encoder.encode(TRACK, records)
        data += b"".join(batch.control) + b"".join(frame for frame, _ in batch.events)
    decoder = SessionDecoder(live=False)
    decoder.receive_data(data)
    stacks = []
    for frame in decoder:
        if isinstance(frame, Events):
            stacks += [decoder.tables.stacks.resolve(args) for _, _, _, _, args in decoder.tables.rows(frame)]
    return stacks


@pytest.mark.parametrize("accelerated", [True, False])
def test_samples_decode_to_their_stacks_declared_before_them(accelerated: bool) -> None:
    from ringtrace.wire.event_packing import ACCELERATED

    if accelerated and not ACCELERATED:
        pytest.skip("the C packer is not built")
    encoder = StreamEncoder(accelerated=accelerated)
    decoded = _decoded(encoder, _records((MAIN, WORK), (MAIN, WORK, LEAF)), _records((MAIN, LEAF), (MAIN, WORK)))
    assert decoded == [(MAIN, WORK), (MAIN, WORK, LEAF), (MAIN, LEAF), (MAIN, WORK)]
    assert len(encoder.stacks) == 4  # main, main>work, main>work>leaf, main>leaf: shared outer frames


def test_a_new_stream_gets_the_whole_table_in_its_prefix() -> None:
    encoder = StreamEncoder()
    encoder.encode(TRACK, _records((MAIN, WORK, LEAF)))
    assert _decoded(encoder, _records((MAIN, WORK, LEAF), (MAIN,))) == [(MAIN, WORK, LEAF), (MAIN,)]


def test_a_full_table_that_does_not_recycle_gives_no_id_and_counts_the_sample_as_clipped() -> None:
    encoder = StreamEncoder()
    encoder.stacks = StackTable(max_stacks=2, max_frames=10)
    assert _decoded(encoder, _records((MAIN, WORK), (MAIN, WORK, LEAF), (MAIN,))) == [(MAIN, WORK), None, (MAIN,)]
    assert encoder.stats(0, 0, 0).clipped_args == 1


def test_a_full_table_that_recycles_starts_again_with_the_strings() -> None:
    encoder = StreamEncoder()
    encoder.stacks = StackTable(max_stacks=2, max_frames=10)
    encoder.strings.recycles = encoder.stacks.recycles = True
    assert _decoded(encoder, _records((MAIN, WORK)), _records((LEAF, WORK))) == [(MAIN, WORK), (LEAF, WORK)]
    assert encoder.stats(0, 0, 0).clipped_args == 0 and encoder.strings.epoch == 1


def test_a_frame_queued_across_a_reset_and_a_reconnect_is_packed_again_with_the_stacks_of_its_time() -> None:
    encoder = StreamEncoder()
    encoder.stacks = StackTable(max_stacks=5, max_frames=10)
    encoder.strings.recycles = encoder.strings.keeps_retired = True
    encoder.stacks.recycles = encoder.stacks.keeps_retired = True
    encoder.prefix()
    encoder.encode(TRACK, _records((LEAF, ("x", "x.py", 1), ("y", "y.py", 2))))  # sent and acknowledged
    queued = encoder.encode(TRACK, _records((MAIN,)))  # queued when the connection breaks
    after = encoder.encode(TRACK, _records((WORK, LEAF)))  # the table is full: it starts again
    assert queued.epoch == 0 and after.epoch == 1 and encoder.stacks.restarted_since(0)
    # The next connection: the prefix, the queued frame packed again, then what was packed after the reset.
    data = preamble() + encode(HELLO) + b"".join(encoder.prefix())
    for frame, _ in queued.events:
        repacked = encoder.repack(frame, queued.epoch)
        data += b"".join(repacked.control) + b"".join(events for events, _ in repacked.events)
    data += b"".join(frame for frame, _ in after.events)
    decoder = SessionDecoder(live=False)
    decoder.receive_data(data)
    stacks = [
        decoder.tables.stacks.resolve(args)
        for frame in decoder
        if isinstance(frame, Events)
        for _, _, _, _, args in decoder.tables.rows(frame)
    ]
    assert stacks == [(MAIN,), (WORK, LEAF)]
    encoder.stacks.keep_epochs({1})  # no frame of epoch 0 queued any more: its table goes
    assert not encoder.stacks.retired


def test_lower_limits_cut_the_table_and_it_then_takes_no_more() -> None:
    table = StackTable()
    assert table.id_of((MAIN, WORK, LEAF)) == 2
    table.limit_to(2, 100)
    assert len(table) == 2 and table.id_of((MAIN, WORK)) == 1
    assert table.id_of((MAIN, WORK, LEAF)) is None and table.id_of((LEAF,)) is None
    assert table.frames() == [Stacks(0, (MAIN, WORK), 0, ((None, 0), (0, 1)))]
    table.limit_to(100, 100)  # a later collector's higher limits: ids past the cut stay unused all the same
    assert table.id_of((LEAF,)) is None and len(table) == 2


def test_texts_are_clipped_with_the_mark_and_bad_stacks_get_no_id() -> None:
    table = StackTable()
    assert table.id_of((("f" * 300, "a.py", None),)) == 0
    ((function, _, line),) = table.frames()[0].frames
    assert len(function) == 256 and function.endswith("…") and line == 0
    assert table.id_of("not a stack") is None and table.id_of(()) is None and table.id_of((("f",),)) is None


def test_a_trace_file_and_an_object_listener_show_samples_with_their_stacks(tmp_path: Path) -> None:
    path = tmp_path / "samples.rttrace"
    timeline, memory, file = Timeline(), MemoryListener(), FileListener(str(path))
    timeline.add_listener(memory)
    timeline.add_listener(file)
    release = threading.Event()
    idle = threading.Thread(target=release.wait, args=(60,), name="idle")
    idle.start()
    sampler = Sampler(timeline, 100)
    sampler.sample_once()
    sampler.sample_once()
    release.set()
    idle.join(30)
    timeline.close(timeout_s=30)
    in_memory = [e.args["stack"] for e in memory.events if e.kind == "sample" and e.track.thread_id == idle.native_id]
    in_file = [e.args["stack"] for e in read_trace_file(path).events if e.kind == "sample"
               and e.track.thread_id == idle.native_id]  # fmt: skip
    assert len(in_memory) == 2 and in_file == in_memory
    assert in_memory[0][-1][0] in ("Event.wait", "Condition.wait")
