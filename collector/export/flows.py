"""Flow arrows from a caller's span to its callee's, across processes: what a span's args say of its trace.

A span of a trace carries ``trace_id`` (32 lowercase hex digits), ``span_id`` (16), ``kind`` and, but for a trace's
first span, ``parent_span_id``, whether a ringtrace client recorded it (``client/trace_context.py``) or it came as
OTLP. An arrow leaves each ``client`` or ``producer`` span and ends at each ``server`` or ``consumer`` span whose
``parent_span_id`` it is, and at each span that links to it (OTLP ``links``: ``"TRACE_ID/SPAN_ID"`` strings).

The two ends are written by different processes into different segments, perhaps snapshots apart; they meet by
their flow id alone, which both derive from the leaving span's trace id and span id: FNV-1a (64 bits) over the 16
bytes of the trace id then the 8 of the span id (0 becomes 1: Perfetto takes 0 as no flow). ``_msgpack_read.h``
computes the same for the C writers; tests hold them equal.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ["flow_id", "span_flows"]

_LEAVING: Final = frozenset(("client", "producer"))
_ARRIVING: Final = frozenset(("server", "consumer"))
_TRACE_ID: Final = re.compile(r"[0-9a-f]{32}")
_SPAN_ID: Final = re.compile(r"[0-9a-f]{16}")
_LINK: Final = re.compile(r"([0-9a-f]{32})/([0-9a-f]{16})")
_FNV_OFFSET: Final = 0xCBF29CE484222325
_FNV_PRIME: Final = 0x100000001B3
_MASK: Final = (1 << 64) - 1


def flow_id(trace_id: str, span_id: str) -> int:
    """The flow id of the arrow leaving span ``span_id`` of trace ``trace_id`` (both lowercase hex)."""
    h = _FNV_OFFSET
    for byte in bytes.fromhex(trace_id + span_id):
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h or 1


def span_flows(args: dict[str, Any]) -> tuple[int | None, list[int]]:
    """The flow leaving a span with these args (None: none) and those arriving at it."""
    kind = args.get("kind")
    if type(kind) is not str:
        kind = None
    links = args.get("links")
    if kind not in _LEAVING and kind not in _ARRIVING and links is None:
        return None, []
    trace_id = args.get("trace_id")
    if type(trace_id) is not str or not _TRACE_ID.fullmatch(trace_id):
        return None, []
    leaving = None
    arriving = []
    if kind in _LEAVING:
        span_id = args.get("span_id")
        if type(span_id) is str and _SPAN_ID.fullmatch(span_id):
            leaving = flow_id(trace_id, span_id)
    elif kind in _ARRIVING:
        parent = args.get("parent_span_id")
        if type(parent) is str and _SPAN_ID.fullmatch(parent):
            arriving.append(flow_id(trace_id, parent))
    if type(links) is list:
        for link in links:
            match = _LINK.fullmatch(link) if type(link) is str else None
            if match is not None:
                arriving.append(flow_id(match[1], match[2]))
    return leaving, arriving
