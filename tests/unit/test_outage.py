"""What the log says while events cannot reach the collector (``Outage``, sans-I/O: times are given)."""

from __future__ import annotations

import math
import socket

from ringtrace.client.delivery.streaming.outage import Outage, connect_failure


def test_one_event_queued_is_said_as_one_event() -> None:
    outage = Outage(grace_s=2.0, repeat_s=60.0)
    outage.failed("connection refused", 100.0, dropped=0)
    first = outage.report(102.0, 1, 0)
    assert first is not None and "retrying, 1 event queued (" in first
    later = outage.report(162.0, 1, 0)
    assert later is not None and "; 1 event queued, 0 dropped since" in later


def test_an_outage_is_warned_of_after_its_grace_then_once_a_minute_and_its_end_once() -> None:
    outage = Outage(grace_s=2.0, repeat_s=60.0)
    assert outage.report(0.0, 0, 0) is None and outage.next_report == math.inf
    outage.failed("connection refused", 100.0, dropped=7)
    outage.failed("connection refused again", 101.0, dropped=7)  # the outage began at 100
    assert outage.report(101.9, 5, 7) is None
    first = outage.report(102.0, 5, 7)
    assert first is not None and "connection refused again" in first and "5 events queued" in first
    assert outage.report(150.0, 9, 10) is None and outage.next_report == 162.0
    later = outage.report(162.0, 9, 10)
    assert later is not None and "after 62s" in later and "9 events queued, 3 dropped since" in later
    resumed = outage.resumed(170.0, dropped=12)
    assert resumed is not None and "after 70.0s (5 dropped meanwhile)" in resumed
    assert outage.report(500.0, 0, 12) is None and outage.next_report == math.inf


def test_an_outage_that_ends_within_its_grace_is_not_logged() -> None:
    outage = Outage(grace_s=2.0)
    outage.failed("the collector closed the connection", 10.0, dropped=0)
    assert outage.resumed(11.0, dropped=0) is None
    assert outage.report(20.0, 0, 0) is None


def test_connect_failures_say_what_to_check() -> None:
    address = "collector:7700"
    refused = connect_failure(address, ConnectionRefusedError(111, "refused"), 1.0)
    assert refused == "connection to collector:7700 refused (is the collector running, on that port?)"
    unknown = connect_failure(address, socket.gaierror(-2, "Name or service not known"), 1.0)
    assert unknown == "cannot resolve the host of collector:7700 (Name or service not known)"
    assert connect_failure(address, TimeoutError(), 1.5) == "connecting to collector:7700 timed out after 1.5s"
    assert connect_failure(address, OSError(113, "No route to host"), 1.0).endswith("No route to host")


def test_a_failure_waiting_will_not_mend_is_warned_of_at_once() -> None:
    outage = Outage(grace_s=2.0)
    outage.failed("TLS failed", 5.0, dropped=0, at_once=True)
    warning = outage.report(5.0, 1, 0)
    assert warning is not None and "TLS failed" in warning
    outage.failed("TLS failed", 6.0, dropped=0, at_once=True)
    assert outage.report(6.0, 1, 0) is None  # the next a minute on
