"""The live tail's document (``GET /stream``): Server-Sent Events, one ``data: {json}`` per event stored, a
``cleared`` event with the count of those removed on request before the tail read them, an ``error`` event for a
reader that fell behind, a ``done`` event when the clock has passed the tail's ``until``, an ``end`` event when the
collector stops, and comment lines (a banner, keepalives).

Pure functions over the rows the tail reads (``read/tail.py``, ``read/rows.py``).
"""

from __future__ import annotations

from typing import Any, Final

import orjson
from ringtrace.collector.export.chrome import json_bytes
from ringtrace.collector.read.rows import Row

__all__ = ["BANNER", "END", "KEEPALIVE", "done_event", "error_event", "row_document", "step_events"]

#: The first line of a tail, a comment.
BANNER: Final = b": ringtrace live tail\n\n"
#: What is written while nothing comes, now and then.
KEEPALIVE: Final = b": keepalive\n\n"
#: The last event of a tail the collector ends when it stops: the reader is told so, not left guessing.
END: Final = b"event: end\ndata: " + orjson.dumps({"reason": "the collector is stopping"}) + b"\n\n"
_CLEARED: Final = "removed by POST /clear or POST /pop before this tail read them"


def step_events(rows: list[Row], cleared: int) -> bytes:
    """What one step of the tail read: the rows, after a ``cleared`` event if some were removed on request before
    it read them (the tail goes on); b"" for nothing."""
    payload = b"".join(b"data: " + json_bytes(row_document(row)) + b"\n\n" for row in rows)
    if cleared:
        notice = {"events": cleared, "reason": _CLEARED}
        payload = b"event: cleared\ndata: " + orjson.dumps(notice) + b"\n\n" + payload
    return payload


def error_event(reason: str) -> bytes:
    """The last event of a tail that ends for ``reason`` (it fell behind)."""
    return b"event: error\ndata: " + orjson.dumps({"reason": reason}) + b"\n\n"


def done_event(reason: str, until_ns: int) -> bytes:
    """The last event of a tail that has shown all it was asked for (``reason``: its ``until`` has passed, said as a
    time; ``until_ns``, the same in ns, for a program)."""
    return b"event: done\ndata: " + orjson.dumps({"reason": reason, "until_ns": until_ns}) + b"\n\n"


def row_document(row: Row) -> dict[str, Any]:
    """One event of a live tail, as JSON."""
    process = row.process
    return {
        "wall_ns": row.wall_ns,
        "pid": process.trace_pid,
        "os_pid": process.pid,
        "host": process.host,
        "process": process.name,
        "track": row.track,
        "category": row.category,
        "kind": row.kind,
        "priority": row.priority,
        "name": row.name,
        "dur_ns": row.dur_ns,
        "args": row.args,
    }
