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
import re
from typing import Final, NamedTuple

__all__ = ["SAMPLED", "SpanContext", "child_of", "format_traceparent", "new_root", "parse_traceparent"]

#: The trace flag a caller sets when it records the trace (the only flag of version 00).
SAMPLED: Final = 0x01
#: version, trace id, parent id, flags, and what a later version may add after a dash.
_TRACEPARENT: Final = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.DOTALL)
#: Longer tracestate values are dropped rather than passed on (the specification's 32 entries fit in 512).
_MAX_TRACESTATE: Final = 512
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16
_random_bits = random.getrandbits
#: Makes a ``SpanContext`` without the call to its Python-level ``__new__`` (a good part of a span's cost).
_new = tuple.__new__


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
    match = _TRACEPARENT.fullmatch(value.strip(" \t"))
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):  # version 00 is exactly 55 characters
        return None
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    state = ""
    if type(tracestate) is str and tracestate and len(tracestate) <= _MAX_TRACESTATE:
        state = tracestate.strip(" \t")
        if not (state.isascii() and state.isprintable()):  # passed on as a header: no control characters (CR, LF)
            state = ""
    return _new(SpanContext, (trace_id, span_id, int(flags, 16), state))


def format_traceparent(context: SpanContext) -> str:
    """The ``traceparent`` header (version 00) naming ``context`` as the parent; flags this version does not define
    are sent as zero, as the specification asks."""
    return f"00-{context.trace_id}-{context.span_id}-{context.flags & SAMPLED:02x}"


def new_root() -> SpanContext:
    """The first span of a new trace (sampled: ringtrace records it)."""
    ids = _random_ids(24)
    trace_id, span_id = ids[:32], ids[32:]
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:  # (all zeros are invalid: draw again)
        return new_root()
    return _new(SpanContext, (trace_id, span_id, SAMPLED, ""))


def child_of(parent: SpanContext) -> SpanContext:
    """A new span of ``parent``'s trace."""
    span_id = _random_ids(8)
    if span_id == _ZERO_SPAN:
        return child_of(parent)
    return _new(SpanContext, (parent.trace_id, span_id, parent.flags, parent.tracestate))


def _random_ids(size: int) -> str:
    """``size`` random bytes as hex digits (through bytes: an int's hex format costs twice as much). ``random`` is
    reseeded in a forked child, so parent and child draw apart."""
    return _random_bits(size * 8).to_bytes(size, "big").hex()
