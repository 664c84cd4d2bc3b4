"""Delivery goes on after an unexpected error in a pass of the client's own threads: what the failed pass had in hand
is lost and counted (``internal_error_events``, reported to the collector: the snapshot's client stats), the error is
said once, and what is recorded after it arrives.

The failures are real ones, brought about through what a program may do, never by patching our network code: a
logging handler of the program's that raises on a record the streamer logs (its thread called it; or on every line,
those of recovering too), and a listener of the program's whose ``packs_keywords`` raises (the flusher's sweep read
it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from collector_process import CollectorProcess, events
from ringtrace.client import MemoryListener, Streamer, StreamerOptions, Timeline
from waiting import wait_for


@pytest.fixture
def client_log() -> Iterator[logging.Logger]:
    """The client's logger at DEBUG (as a program that wants to see its connections would set it), as it was after."""
    logger = logging.getLogger("ringtrace.client")
    level, handlers = logger.level, list(logger.handlers)
    logger.setLevel(logging.DEBUG)
    yield logger
    logger.setLevel(level)
    for handler in logger.handlers[:]:
        if handler not in handlers:
            logger.removeHandler(handler)


class BrokenOnConnect(logging.Handler):
    """A program's log handler with a bug: the record of the streamer's first connection raises (once the test has
    queued events behind it: ``queued``), after it has said it came (``connecting``)."""

    def __init__(self) -> None:
        super().__init__()
        self.connecting, self.queued = threading.Event(), threading.Event()
        self.raised = 0
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            self.errors.append(record.getMessage())
        if record.getMessage().startswith("ringtrace connected to") and not self.raised:
            self.raised += 1
            self.connecting.set()
            self.queued.wait(30)
            raise RuntimeError("the program's log handler is broken")


def client_stats(collector: CollectorProcess) -> dict[str, Any]:
    other: dict[str, Any] = collector.snapshot()["otherData"]
    return other


def test_a_streamer_pass_that_fails_loses_what_was_in_flight_counted_and_streaming_goes_on(
    collector: CollectorProcess, client_log: logging.Logger
) -> None:
    handler = BrokenOnConnect()
    client_log.addHandler(handler)
    streamer = Streamer(collector.tcp_address, StreamerOptions(process_name="failing-pass"))
    timeline = Timeline("test", [streamer])
    try:
        timeline.instant("in flight")  # its sweep starts the streamer's thread, which connects
        assert handler.connecting.wait(30), "the streamer never connected"
        for i in range(5):  # queued behind the HELLO, waiting for the WELCOME the streamer will not read
            timeline.instant("in flight", i=i)
        assert not timeline.flush(timeout_s=0.5)  # (handed over to the streamer; not acknowledged, of course)
        assert streamer.queued_events == 6
        handler.queued.set()  # the handler raises: the pass fails
        wait_for(lambda: streamer.internal_error_events, timeout_s=30, what="the failed pass's loss counted")
        for i in range(5):
            timeline.instant("after", i=i)
        assert not timeline.flush(timeout_s=30)  # delivered, and says that events were lost since the last flush
        assert timeline.flush(timeout_s=30)
        assert (streamer.internal_error_events, streamer.dropped_events) == (6, 6)
        trace = collector.snapshot()
        assert sorted(e["args"]["i"] for e in events(trace, "i") if e["name"] == "after") == list(range(5))
        assert [e for e in events(trace, "i") if e["name"] == "in flight"] == []
        stats = client_stats(collector)
        assert (stats["client_internal_error_events"], stats["client_dropped_events"]) == (6, 6)
        assert handler.raised == 1 and streamer.connects == 2
        (said,) = handler.errors  # once, naming the error and what it lost
        assert "a pass of the streamer's thread failed on an unexpected error (RuntimeError: the program's log" in said
        assert "6 events lost (counted as dropped_events and internal_error_events)" in said
    finally:
        handler.queued.set()
        timeline.close(timeout_s=0)


class RaisesOnEveryLine(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        raise RuntimeError("the program's log handler is broken")


def test_a_log_handler_that_raises_on_every_line_fails_passes_but_never_ends_the_streamer(
    collector: CollectorProcess, client_log: logging.Logger
) -> None:
    handler = RaisesOnEveryLine()  # (the lines of recovering from a failed pass raise too)
    client_log.addHandler(handler)
    streamer = Streamer(collector.tcp_address, StreamerOptions(process_name="raising-handler"))
    timeline = Timeline("test", [streamer])
    try:
        timeline.instant("recorded")
        wait_for(lambda: streamer.connects, until=lambda n: n >= 3, timeout_s=60, what="connections after failures")
        client_log.removeHandler(handler)
        # (a line the streamer's thread was handing the handler as it went still raised, and failed the pass that
        # would have carried "after": a flush with nothing lost first, then "after")
        wait_for(lambda: timeline.flush(timeout_s=5), timeout_s=60, what="a flush with nothing lost since the last")
        timeline.instant("after")
        wait_for(lambda: timeline.flush(timeout_s=5), timeout_s=60, what="a flush with nothing lost since the last")
        assert "after" in [e["name"] for e in events(collector.snapshot(), "i")]
        lost = streamer.internal_error_events
        assert lost == streamer.dropped_events == client_stats(collector)["client_internal_error_events"]
    finally:
        client_log.removeHandler(handler)
        timeline.close(timeout_s=0)


class ListenerWithABrokenProperty(MemoryListener):
    """A program's listener whose ``packs_keywords`` (read by each sweep) raises while ``broken`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = threading.Event()
        self.read_while_broken = 0

    @property
    def packs_keywords(self) -> bool:
        if self.broken.is_set():
            self.read_while_broken += 1
            raise RuntimeError("a listener's property is broken")
        return False


def test_a_sweep_that_fails_counts_its_runs_as_lost_by_every_listener_and_the_next_sweeps_deliver(
    collector: CollectorProcess,
) -> None:
    streamer = Streamer(collector.tcp_address, StreamerOptions(process_name="failing-sweep"))
    listener = ListenerWithABrokenProperty()
    timeline = Timeline("test", [streamer, listener])
    try:
        timeline.instant("before")
        assert timeline.flush(timeout_s=30)
        listener.broken.set()
        for i in range(4):
            timeline.instant("lost", i=i)
        assert not timeline.flush(timeout_s=30)  # the sweep failed, its runs counted as lost: the flush says so
        assert listener.read_while_broken >= 1
        listener.broken.clear()
        for i in range(3):
            timeline.instant("after", i=i)
        assert timeline.flush(timeout_s=30)
        assert (streamer.internal_error_events, streamer.dropped_events, listener.dropped_events) == (4, 4, 4)
        trace = collector.snapshot()
        assert sorted(e["name"] for e in events(trace, "i")) == ["after", "after", "after", "before"]
        stats = client_stats(collector)
        assert (stats["client_internal_error_events"], stats["client_dropped_events"]) == (4, 4)
        assert [e.name for e in listener.events] == ["before", "after", "after", "after"]
    finally:
        timeline.close(timeout_s=0)
