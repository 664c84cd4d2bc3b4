"""W3C Trace Context (https://www.w3.org/TR/trace-context/): the ``traceparent`` header read and written, and new ids.

Sans-I/O: a header's text in, a ``SpanContext`` (or None) out, and back. Reading follows the specification's rules:
version ``00`` is exactly 55 characters; a later version (but ``ff``) may be longer, the part after the first 55
characters starting with ``-``; ids and flags are lowercase hex (uppercase is refused); an all-zero trace id or
parent id is invalid. A header that breaks a rule is not an error: ``parse_traceparent`` returns None and the callee
starts a trace of its own, as the specification asks. ``tracestate`` is carried as it came (bounded, printable
ASCII), never parsed.
"""

from __future__ import annotations

import random
from typing import Final, NamedTuple

__all__ = ["SAMPLED", "SpanContext", "child_of", "format_traceparent", "new_root", "parse_traceparent"]

#: The trace flag a caller sets when it records the trace (the only flag of version 00).
SAMPLED: Final = 0x01
_HEX: Final = frozenset("0123456789abcdef")
_V00_LENGTH: Final = 55
#: Longer tracestate values are dropped rather than passed on (the specification's 32 entries fit in 512).
_MAX_TRACESTATE: Final = 512
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16


class SpanContext(NamedTuple):
    """One span's place in a trace: what a ``traceparent`` header carries (ids as lowercase hex)."""

    trace_id: str
    span_id: str
    flags: int = SAMPLED
    #: The caller's ``tracestate`` header, passed on unchanged ("" for none).
    tracestate: str = ""


def parse_traceparent(value: object, tracestate: object = None) -> SpanContext | None:
    """The span a ``traceparent`` header names; None for anything the specification calls invalid."""
    if type(value) is not str:
        return None
    text = value.strip(" \t")
    if len(text) < _V00_LENGTH or not _is_hex(text[:2]):
        return None
    version = text[:2]
    if version == "ff" or (version == "00" and len(text) != _V00_LENGTH):
        return None
    if len(text) > _V00_LENGTH and text[_V00_LENGTH] != "-":  # a later version: more fields after a dash
        return None
    if text[2] != "-" or text[35] != "-" or text[52] != "-":
        return None
    trace_id, span_id, flags = text[3:35], text[36:52], text[53:55]
    if not (_is_hex(trace_id) and _is_hex(span_id) and _is_hex(flags)):
        return None
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    state = tracestate.strip(" \t") if type(tracestate) is str and len(tracestate) <= _MAX_TRACESTATE else ""
    if not (state.isascii() and state.isprintable()):  # passed on as a header: no control characters (CR, LF)
        state = ""
    return SpanContext(trace_id, span_id, int(flags, 16), state)


def format_traceparent(context: SpanContext) -> str:
    """The ``traceparent`` header (version 00) naming ``context`` as the parent; flags this version does not define
    are sent as zero, as the specification asks."""
    return f"00-{context.trace_id}-{context.span_id}-{context.flags & SAMPLED:02x}"


def new_root() -> SpanContext:
    """The first span of a new trace (sampled: ringtrace records it)."""
    return SpanContext(_random_hex(128, 32), _random_hex(64, 16))


def child_of(parent: SpanContext) -> SpanContext:
    """A new span of ``parent``'s trace."""
    return SpanContext(parent.trace_id, _random_hex(64, 16), parent.flags, parent.tracestate)


def _random_hex(bits: int, digits: int) -> str:
    """A random id that is not all zeros. ``random`` is reseeded in a forked child, so parent and child differ."""
    value = 0
    while not value:
        value = random.getrandbits(bits)
    return f"{value:0{digits}x}"


def _is_hex(text: str) -> bool:
    return all(c in _HEX for c in text)
