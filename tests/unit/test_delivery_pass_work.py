"""What a small delivery pass does, whatever it carries (an always-on integration's few spans, 20 times a second):
the flusher asks its listeners for its interval once a wait, the streamer thread reads its wake-up in one call, and
takes its lock through one object, not one made each time."""

from __future__ import annotations

import select
import threading
import time
from typing import Any

from alone import run_alone
from ringtrace.client import MemoryListener, Timeline
from ringtrace.client.delivery.flusher import Drained
from ringtrace.client.delivery.streaming.hand_over_pass import HandOverPass
from ringtrace.client.delivery.streaming.wake_pair import WakePair


class PacedMemoryListener(MemoryListener):
    """A listener that sets the flusher's pace (``flusher.Paced``) and counts how often it is asked."""

    def __init__(self) -> None:
        super().__init__()
        self.interval_reads = 0

    @property
    def batch_interval_s(self) -> float:
        self.interval_reads += 1
        return 0.002

    @property
    def exit_timeout_s(self) -> float:
        return 0.0


class CountedTimeline(Timeline):
    """A timeline that counts the flusher's passes over it (each drains it once)."""

    drains = 0

    def drain(self) -> Drained:
        self.drains += 1
        return super().drain()


def wait_for(condition: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


def test_the_flusher_asks_the_listeners_its_interval_once_a_pass() -> None:
    run_alone(__file__, "interval_asked_once_a_pass")  # (it waits on the flusher's thread: test_flusher_thread.py)


def interval_asked_once_a_pass() -> None:
    listener = PacedMemoryListener()
    timeline = CountedTimeline("paced", [listener])
    try:
        timeline.instant("starts the flusher")
        wait_for(lambda: timeline.drains >= 5, "the flusher thread never swept")
        reads, drains = listener.interval_reads, timeline.drains
        wait_for(lambda: timeline.drains >= drains + 40, "the flusher thread stopped sweeping")
        reads, drains = listener.interval_reads - reads, timeline.drains - drains
        # One read a wait (each ends in a pass), give or take the wait under way at either end (it asked twice).
        assert reads <= drains + 2, f"{reads} reads of the interval in {drains} passes"
    finally:
        timeline.close(timeout_s=0)


class CountingReader:
    """The wake-up pair's reading end, counting its reads."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.reads = 0

    def recv(self, size: int) -> bytes:
        self.reads += 1
        return bytes(self.sock.recv(size))

    def fileno(self) -> int:
        return int(self.sock.fileno())


def test_a_wake_up_is_read_in_one_call_and_the_next_one_is_sent_again() -> None:
    pair = WakePair()
    reader = CountingReader(pair.reader)
    pair.reader = reader  # type: ignore[assignment]
    try:
        for wake_up in range(3):
            pair.wake()
            assert select.select([reader], [], [], 60)[0], f"wake-up {wake_up} never arrived"
            reads = reader.reads
            pair.drain()
            assert reader.reads - reads == 1
            assert not select.select([reader], [], [], 0)[0]  # all of it read
    finally:
        pair.reader = reader.sock
        pair.close()


def test_the_streamer_s_lock_is_taken_through_one_object_that_waits_for_the_pass_to_end() -> None:
    handover = HandOverPass()
    lock = threading.Lock()
    held = handover.locked(lock)
    assert handover.locked(lock) is held
    with held:
        assert lock.locked()
    assert not lock.locked()

    # During a pass, with the lock held by the flusher, it takes the lock once the pass ends and the flusher lets go.
    handover.begins()
    lock.acquire()
    took = threading.Event()

    def streamer_thread() -> None:
        with held:
            took.set()

    thread = threading.Thread(target=streamer_thread, daemon=True)
    thread.start()
    handover.ends()
    lock.release()
    assert took.wait(60)
    thread.join(60)
    assert not lock.locked()


class _WakeLandingBeforeClear:
    """The flusher's wake-up event, where a recording thread's ``wake()`` lands right before the flusher thread
    clears it (the flusher thread lets the GIL go between any two of its bytecodes)."""

    def __init__(self, flusher: Any) -> None:
        self.flusher, self.flag, self.landed = flusher, True, False

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + min(timeout, 60.0)
        while not self.flag and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.flag

    def is_set(self) -> bool:
        return self.flag

    def set(self) -> None:
        self.flag = True

    def clear(self) -> None:
        if not self.landed:
            self.landed = True
            self.flusher.wake()  # (finds the event set: sets nothing)
        self.flag = False


def test_a_wake_up_landing_before_the_flusher_clears_its_event_is_not_lost() -> None:
    from ringtrace.client.delivery.flusher import Flusher

    flusher = Flusher(interval_s=60.0)
    flusher._wake = _WakeLandingBeforeClear(flusher)  # type: ignore[assignment]  # set, as a register() leaves it
    waited = threading.Thread(target=flusher._wait_for_sweep, daemon=True)
    waited.start()
    waited.join(20)  # (far less than the interval: the sweep asked for comes first)
    assert not waited.is_alive(), "the sweep asked for waited for the end of the interval"
