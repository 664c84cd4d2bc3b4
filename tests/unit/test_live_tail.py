"""The live tail's document (``GET /stream``) as Server-Sent Events, from the rows the tail reads."""

from __future__ import annotations

import orjson
from ringtrace.collector.export import live_tail
from ringtrace.collector.read.frame_walk import ProcessView
from ringtrace.collector.read.rows import Row
from ringtrace.wire.frames import Stats

PROCESS = ProcessView(7, 1007, 1007, "box", "web", 0, Stats(0, 0), {})


def row(i: int) -> Row:
    return Row(PROCESS, "main", "net", "info", f"sent {i}", 10**18 + i, 5, {"n": i, "raw": b"\x01"}, "net")


def events(payload: bytes) -> list[tuple[str, object]]:
    """(event name, data) of each Server-Sent Event in ``payload``."""
    out = []
    for block in payload.decode().split("\n\n")[:-1]:
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((lines.get("event", "message"), orjson.loads(lines["data"])))
    return out


def test_a_step_with_nothing_read_writes_nothing() -> None:
    assert live_tail.step_events([], 0) == b""


def test_each_row_is_one_data_event_with_its_fields_by_name() -> None:
    written = events(live_tail.step_events([row(1), row(2)], 0))
    assert [name for name, _ in written] == ["message", "message"]
    first = written[0][1]
    assert first == {
        "wall_ns": 10**18 + 1, "pid": 1007, "os_pid": 1007, "host": "box", "process": "web", "track": "main",
        "category": "net", "kind": "net", "priority": "info", "name": "sent 1", "dur_ns": 5,
        "args": {"n": 1, "raw": "01"},  # bytes as hex, as snapshots show them
    }  # fmt: skip


def test_events_removed_before_the_tail_read_them_are_told_before_the_rows() -> None:
    written = events(live_tail.step_events([row(1)], 12))
    assert written[0][0] == "cleared"
    assert written[0][1] == {"events": 12, "reason": "removed by POST /clear or POST /pop before this tail read them"}
    assert [name for name, _ in written[1:]] == ["message"]
    assert events(live_tail.step_events([], 3))[0] == ("cleared", written[0][1] | {"events": 3})


def test_the_error_and_end_events_say_why_the_tail_ends() -> None:
    assert events(live_tail.error_event("fell behind: 9 events")) == [("error", {"reason": "fell behind: 9 events"})]
    assert events(live_tail.END) == [("end", {"reason": "the collector is stopping"})]
    for comment in (live_tail.BANNER, live_tail.KEEPALIVE):
        assert comment.startswith(b": ") and comment.endswith(b"\n\n")
