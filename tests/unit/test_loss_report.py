"""What the log says of events lost: counts said as a sentence says them, one event or many."""

from __future__ import annotations

from ringtrace.client.delivery.streaming.loss_report import LossReport, undelivered_at_close


def test_one_event_lost_is_said_as_one_event() -> None:
    at_close = undelivered_at_close("c:7700", queued=1, unreported=0, unanswered=0, timeout_s=2.0, connected=False)
    assert at_close is not None and at_close.startswith("ringtrace: 1 event recorded by this process never reached")
    dropped = LossReport().report(10.0, 1, 1, address="c:7700", outage=False)
    assert dropped is not None and "1 event dropped" in dropped and "could not store 1 event (" in dropped


def test_many_events_lost_are_said_as_events() -> None:
    at_close = undelivered_at_close("c:7700", queued=2, unreported=3, unanswered=0, timeout_s=2.0, connected=True)
    assert at_close is not None and at_close.startswith("ringtrace: 5 events recorded by this process never reached")
    dropped = LossReport().report(10.0, 12_345, 2, address="c:7700", outage=False)
    assert dropped is not None and "12,345 events dropped" in dropped and "could not store 2 events (" in dropped


def test_the_line_at_close_says_why_the_collector_was_not_reached_and_that_closing_did_not_wait() -> None:
    refused = "connection to c:7700 refused (is the collector running, on that port?)"
    at_close = undelivered_at_close(
        "c:7700", queued=4, unreported=0, unanswered=0, timeout_s=2.0, connected=False, failure=refused, at_once=True
    )
    assert at_close == (
        "ringtrace: 4 events recorded by this process never reached the collector at c:7700: 4 still queued when "
        f"closing gave up at once (not connected), 0 dropped before and not reported; {refused}"
    )
    connected = undelivered_at_close(
        "c:7700", queued=4, unreported=0, unanswered=0, timeout_s=2.0, connected=True, failure="an old one"
    )
    assert connected is not None and "gave up after 2.0s (connected)" in connected and "old" not in connected


def test_the_line_at_close_says_the_streamer_had_stopped_and_nothing_was_waited_for() -> None:
    stopped = "AttributeError: no attribute 'SSLSocket'"
    at_close = undelivered_at_close(
        "c:7700", queued=0, unreported=8, unanswered=0, timeout_s=30.0, connected=False, stopped=stopped
    )
    assert at_close == (
        "ringtrace: 8 events recorded by this process never reached the collector at c:7700: 0 still queued when "
        f"closing gave up at once (its streamer had stopped: {stopped}), 8 dropped before and not reported"
    )
