"""What the flusher's own thread does, with no flush(): it sweeps when woken, and at its listeners' pace.

These tests wait for the one flusher thread of the process, which every other test of a test process shares; so each
runs in a Python process of its own (``run_alone``), on a thread no other test used. Twice in CI, at the end of a long
run, this thread swept nothing for a minute in a test process, and only tests of this kind failed (every other test
flushes on its own thread). The cause was not found, so a test whose sweep does not come says where the thread was
(``ringtrace_threads``).
"""

from __future__ import annotations

import pytest
from alone import run_alone
from recording_calls import record_by
from ringtrace.client import MemoryListener, Timeline
from ringtrace.client.delivery.flusher import FLUSHER
from waiting import ringtrace_threads, wait_for

CALLS = ["instant", "compact", "scope", "push", "message", "marker", "async_begin"]
BOUND = 1000
#: The calls that record through ``Timeline._events_with_room``, which wakes the flusher before the event is added.
WAKE_BEFORE_APPEND = frozenset(("message", "marker", "async_begin"))


class PacedMemoryListener(MemoryListener):
    """A memory listener that sets the flusher's pace while it listens, as a streamer does from its options."""

    def __init__(self, batch_interval_s: float, exit_timeout_s: float = 2.0) -> None:
        super().__init__()
        self.batch_interval_s, self.exit_timeout_s = batch_interval_s, exit_timeout_s


def swept(listener: MemoryListener, events: int, what: str, missed: int = 0) -> None:
    """Wait until the flusher's thread has handed ``listener`` its first ``events`` events (less at most ``missed``
    of the last)."""
    wait_for(
        lambda: len(listener.events),
        until=lambda n: events - missed <= n <= events,
        timeout_s=30,
        what=what,
        interval_s=0.005,
        explain=ringtrace_threads,
    )


@pytest.mark.parametrize("call", CALLS)
def test_a_buffer_half_full_wakes_the_flusher_before_its_interval_ends(call: str) -> None:
    run_alone(__file__, "half_full_wakes", call)


def half_full_wakes(call: str) -> None:
    memory = PacedMemoryListener(batch_interval_s=3600.0)  # the flusher waits an hour between sweeps
    timeline = Timeline("woken", [memory], max_buffered_events=BOUND)
    try:
        timeline.instant("sync")
        FLUSHER.wake()  # (a flusher that starts now would first wait an hour)
        swept(memory, 1, "the sweep")  # then it waits an hour
        for i in range(BOUND // 2 + 1):  # the last one finds the buffer half full: the flusher wakes
            record_by(call, timeline, i, [])
        # Not in an hour. The calls written in Python wake it before they append (``_events_with_room``): a sweep
        # the machine runs at once, in between, leaves that last event to the next.
        swept(memory, 2 + BOUND // 2, "the half-full buffer swept", missed=int(call in WAKE_BEFORE_APPEND))
    finally:
        timeline.close()


def test_the_flushers_pace_is_its_listeners_own_while_they_listen() -> None:
    run_alone(__file__, "listeners_pace")


def listeners_pace() -> None:
    quick, patient = PacedMemoryListener(0.001), PacedMemoryListener(1.0, exit_timeout_s=600.0)
    timelines = [Timeline("quick", [quick]), Timeline("patient", [patient])]
    try:
        # The shortest interval and the longest exit timeout of the listeners of the timelines it sweeps.
        assert (FLUSHER.interval_s, FLUSHER.exit_timeout_s) == (0.001, 600.0)
        timelines[0].instant("swept soon")
        swept(quick, 1, "the flusher's own sweep")  # no flush
    finally:
        for timeline in timelines:
            timeline.close()
    assert FLUSHER.interval_s > 0.001 and FLUSHER.exit_timeout_s < 600.0  # theirs no more


def test_a_flusher_left_waiting_long_reads_its_interval_again_when_a_timeline_comes() -> None:
    run_alone(__file__, "interval_read_again_as_a_timeline_comes")


def interval_read_again_as_a_timeline_comes() -> None:
    slow = PacedMemoryListener(3600.0)
    hourly = Timeline("hourly", [slow])
    try:
        hourly.instant("sync")
        FLUSHER.wake()  # (a flusher that starts now would first wait an hour)
        swept(slow, 1, "a sweep")  # then it waits an hour
        quick = PacedMemoryListener(0.01)
        timeline = Timeline("quick", [quick])
        try:
            timeline.instant("swept within the new interval")
            swept(quick, 1, "a sweep within the new interval")
        finally:
            timeline.close()
    finally:
        hourly.close()


def test_a_flusher_left_waiting_long_reads_its_interval_again_when_the_listener_that_set_it_goes() -> None:
    run_alone(__file__, "interval_read_again_as_a_listener_goes")


def interval_read_again_as_a_listener_goes() -> None:
    slow, memory = PacedMemoryListener(3600.0), MemoryListener()
    timeline = Timeline("paced", [slow, memory])
    try:
        timeline.instant("sync")
        FLUSHER.wake()  # (a flusher that starts now would first wait an hour)
        swept(memory, 1, "a sweep")  # then an hour
        timeline.remove_listener(slow)  # the pace is the flusher's own again
        timeline.instant("swept within the flusher's own interval")
        swept(memory, 2, "a sweep without the slow one")
    finally:
        timeline.close()


def test_a_listener_whose_pace_cannot_be_read_leaves_the_flusher_sweeping() -> None:
    run_alone(__file__, "unreadable_pace")


def unreadable_pace() -> None:
    class Unreadable(MemoryListener):
        @property
        def batch_interval_s(self) -> float:
            raise RuntimeError("not configured")

        @property
        def exit_timeout_s(self) -> float:
            return float("nan")  # not a pace either

    memory = MemoryListener()
    timelines = [Timeline("unreadable", [Unreadable()]), Timeline("swept", [memory])]
    try:
        assert (FLUSHER.interval_s, FLUSHER.exit_timeout_s) == (0.05, 2.0)  # the flusher's own
        FLUSHER.wake()
        timelines[1].instant("swept by the flusher")
        swept(memory, 1, "the flusher's sweep")
    finally:
        for timeline in timelines:
            timeline.close()
