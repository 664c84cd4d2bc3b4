"""A background thread's failed passes: the wait before the next grows while they go on, and the log says them at most
once a minute, naming the error and what was lost."""

from __future__ import annotations

import itertools
import logging
import threading

import pytest
from ringtrace.client.delivery.pass_failures import (
    FIRST_DELAY_S,
    MAX_DELAY_S,
    QUIET_S,
    REPEAT_S,
    PassFailures,
    describe,
)


def failures() -> PassFailures:
    return PassFailures("streamer", "dropped_events and internal_error_events")


def lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "ringtrace.client"]


def test_the_wait_doubles_while_passes_fail_up_to_its_most_and_starts_again_after_a_quiet_while() -> None:
    record = failures()
    waits = [record.failed(ValueError("bug"), now=float(i)) for i in range(10)]
    assert waits[:3] == [FIRST_DELAY_S, FIRST_DELAY_S * 2, FIRST_DELAY_S * 4]
    assert waits[-1] == MAX_DELAY_S and all(a <= b for a, b in itertools.pairwise(waits))
    assert record.failed(ValueError("bug"), now=9 + QUIET_S) == FIRST_DELAY_S


def test_a_failure_is_said_at_once_then_at_most_once_a_minute_with_what_was_lost_meanwhile(
    caplog: pytest.LogCaptureFixture,
) -> None:
    record = failures()
    caplog.set_level(logging.ERROR, "ringtrace.client")
    try:
        raise KeyError("frame")
    except KeyError as exc:
        record.failed(exc, now=0.0, lost_events=3)
    (first,) = lines(caplog)
    assert first.levelno == logging.ERROR and first.exc_info is not None  # the traceback, once
    assert "a pass of the streamer's thread failed on an unexpected error (KeyError: 'frame')" in first.getMessage()
    assert "; 3 events lost (counted as dropped_events and internal_error_events); it goes on in 0.05s" in (
        first.getMessage()
    )
    for i in range(1, 100):  # a bug that fails every pass: no flood
        record.failed(KeyError("frame"), now=i * 0.5, lost_events=2)
    assert len(lines(caplog)) == 1
    record.failed(KeyError("frame"), now=REPEAT_S, lost_events=1)
    second = lines(caplog)[1]
    assert "(KeyError: 'frame'), 100 times since the last line; 199 events lost" in second.getMessage()
    assert second.exc_info is None  # (the same error: its traceback was given)
    assert (record.failures, record.lost_events) == (101, 202)


def test_a_logging_handler_that_raises_does_not_stop_the_thread() -> None:
    class Raising(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            raise RuntimeError("handler broken")

        def handleError(self, record: logging.LogRecord) -> None:
            raise RuntimeError("handler broken")

    handler = Raising()
    logger = logging.getLogger("ringtrace.client")
    logger.addHandler(handler)
    try:
        assert failures().failed(ValueError("bug"), now=0.0) == FIRST_DELAY_S
    finally:
        logger.removeHandler(handler)


def test_run_goes_on_after_each_failure_until_the_loop_returns(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, "ringtrace.client")
    attempts: list[int] = []
    recovered: list[str] = []

    def passes() -> None:
        attempts.append(len(attempts))
        if len(attempts) < 3:
            raise OSError(f"attempt {len(attempts)}")

    def recover(exc: Exception) -> int:
        recovered.append(describe(exc))
        return 5

    record = failures()
    record.run(passes, recover, threading.Event())
    assert attempts == [0, 1, 2]
    assert recovered == ["OSError: attempt 1", "OSError: attempt 2"]
    assert (record.failures, record.lost_events) == (2, 10)
    assert len(lines(caplog)) == 1  # the second within the minute: counted, not said


def test_run_ends_when_stop_is_set_during_the_wait_and_raises_what_recovering_raises() -> None:
    stop = threading.Event()

    def failing() -> None:
        raise ValueError("bug")

    def recover_and_stop(exc: Exception) -> int:
        stop.set()
        return 0

    failures().run(failing, recover_and_stop, stop)  # (returns: no second attempt)

    def recover_badly(exc: Exception) -> int:
        raise RuntimeError("recovering failed")

    with pytest.raises(RuntimeError, match="recovering failed"):
        failures().run(failing, recover_badly, threading.Event())


def test_an_error_is_named_by_its_type_and_text() -> None:
    assert describe(ValueError("bad value")) == "ValueError: bad value"
    assert describe(StopIteration()) == "StopIteration"
