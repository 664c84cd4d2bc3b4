"""The flusher after an unexpected error (a bug of a listener's, say): nothing raises into the thread that flushes, the
runs the failure lost are counted by each listener they were meant for, and the log says it at most once a minute."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from ringtrace.client import FileListener, MemoryListener, Timeline, read_trace_file
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.delivery.pass_failures import PassFailures
from ringtrace.wire.call_records import CallRun
from ringtrace.wire.model import TrackInfo


class ReceivesNothing(MemoryListener):
    """A listener with a bug: each run it receives raises."""

    def receive(self, track: TrackInfo, records: list[Any] | CallRun) -> None:
        raise ValueError("this listener is broken")


class BrokenProperty(MemoryListener):
    """A listener whose ``packs_keywords`` (read by each sweep) raises while ``broken``."""

    broken = True

    @property
    def packs_keywords(self) -> bool:
        if self.broken:
            raise RuntimeError("a listener's property is broken")
        return False


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ringtrace.client" and r.levelno >= logging.ERROR]


def test_a_listener_that_fails_in_receive_counts_each_run_as_lost_and_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken, working = ReceivesNothing(), MemoryListener()
    timeline = Timeline("test", [broken, working])
    try:
        with FLUSHER.sweeping():  # (one run a flush: the flusher's thread takes none meanwhile)
            for i in range(3):
                for _ in range(i + 1):
                    timeline.instant("recorded")
                FLUSHER.sweep(timeline)
        assert broken.dropped_events == 6  # 1 + 2 + 3: every run meant for it
        assert len(working.events) == 6 and working.dropped_events == 0
        (said,) = errors(caplog)
        assert "a call of ReceivesNothing.receive() failed on an unexpected error (ValueError: this listener" in said
        assert "1 event lost (counted as dropped_events and internal_error_events by that listener)" in said
    finally:
        timeline.close(timeout_s=0)


def test_a_sweep_that_fails_raises_nothing_into_flush_and_its_runs_are_counted_lost_by_every_listener(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost_as = FLUSHER.failures.lost_as
    monkeypatch.setattr(FLUSHER, "failures", PassFailures("flusher", lost_as))  # (none said before, in this process)
    memory, file = BrokenProperty(), FileListener(tmp_path / "trace.rt")
    timeline = Timeline("test", [memory, file])
    try:
        with FLUSHER.sweeping():
            for i in range(5):
                timeline.instant("lost", i=i)
            assert timeline.flush(timeout_s=60) is False  # (and no exception)
            assert (memory.dropped_events, file.dropped_events, file.internal_error_events) == (5, 5, 5)
            BrokenProperty.broken = False
            timeline.instant("after")
            assert timeline.flush(timeout_s=60)
    finally:
        BrokenProperty.broken = True
        timeline.close(timeout_s=0)
    assert [e.name for e in memory.events] == ["after"]
    read = read_trace_file(tmp_path / "trace.rt")
    assert [e.name for e in read.events] == ["after"]
    assert read.stats is not None and (read.stats.dropped_events, read.stats.internal_error_events) == (5, 5)
    (said,) = errors(caplog)
    assert "a pass of the flusher's thread failed on an unexpected error (RuntimeError: a listener's prop" in said
    assert "5 events lost (counted as dropped_events and internal_error_events by their listeners)" in said


class DrainsNothing:
    """A timeline whose drain fails on a bug, every time (what the flusher sweeps: ``Sweepable``)."""

    listeners = (MemoryListener(),)
    max_buffered_events = 1000

    def drain(self) -> Any:
        raise RuntimeError("this timeline's drain fails, a bug")

    def renamed_threads(self) -> list[Any]:
        return []

    def after_fork_in_child(self, replacements: dict[int, Any]) -> None:
        pass

    def close(self, timeout_s: float = 2.0) -> bool:
        return True


def test_a_timeline_whose_sweep_fails_keeps_no_other_timelines_events_from_their_listeners(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lost_as = FLUSHER.failures.lost_as
    monkeypatch.setattr(FLUSHER, "failures", PassFailures("flusher", lost_as))  # (none said before, in this process)
    broken = DrainsNothing()
    FLUSHER.register(broken)  # (swept first: registered first)
    memory = MemoryListener()
    timeline = Timeline("test", [memory])
    try:
        with FLUSHER.sweeping():  # (the flusher's thread sweeps nothing meanwhile)
            timeline.instant("delivered all the same")
            assert FLUSHER.sweep_all() is False  # (the broken one's failure is said and counted, not raised)
            assert [event.name for event in memory.events] == ["delivered all the same"]
            assert FLUSHER.failures.failures == 1
    finally:
        FLUSHER.unregister(broken)
        timeline.close()
