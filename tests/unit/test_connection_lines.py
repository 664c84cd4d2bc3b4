"""Connection lines at INFO: a burst whole, then a few a second; the others at DEBUG, counted in the next INFO one."""

from __future__ import annotations

from ringtrace.collector.ingest.traffic import CONNECTION_LINES_BURST, CONNECTION_LINES_PER_S, ConnectionLines


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_a_burst_goes_at_info_then_the_rest_is_counted_in_the_next_info_line() -> None:
    clock = Clock()
    lines = ConnectionLines(clock)
    assert [lines.take() for _ in range(CONNECTION_LINES_BURST)] == [0] * CONNECTION_LINES_BURST
    assert [lines.take() for _ in range(7)] == [None] * 7
    clock.now_s += 1 / CONNECTION_LINES_PER_S
    assert lines.take() == 7, "the next INFO line counts those that went at DEBUG"
    assert lines.take() is None
    assert ConnectionLines.since(7) == "; 7 more connections since, logged at DEBUG (a crowd of them)"
    assert ConnectionLines.since(0) == ""


def test_a_quiet_collector_logs_every_connection_at_info() -> None:
    clock = Clock()
    lines = ConnectionLines(clock)
    for _ in range(10 * CONNECTION_LINES_BURST):
        clock.now_s += 1 / CONNECTION_LINES_PER_S
        assert lines.take() == 0


def test_the_burst_refills_to_its_size_and_no_more() -> None:
    clock = Clock()
    lines = ConnectionLines(clock)
    clock.now_s += 3600
    taken = [lines.take() for _ in range(CONNECTION_LINES_BURST + 1)]
    assert taken == [0] * CONNECTION_LINES_BURST + [None]
