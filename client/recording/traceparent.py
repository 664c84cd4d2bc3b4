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
#: The usual header, exactly as version 00 has it (its length, then the whole of it), read without ``_TRACEPARENT``'s
#: groups, strip and checks (the cost of a span of a server). Anything else is ``_TRACEPARENT``'s to judge.
_LENGTH_00: Final = 55
_VERSION_00: Final = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}").fullmatch
#: Each two-digit flags field, as its number.
_FLAGS: Final = {f"{bits:02x}": bits for bits in range(256)}
#: The flags field version 00 sends, by its one flag (an int's format costs twice as much).
_SENT_FLAGS: Final = ("00", "01")
#: Random ids are drawn as bits and written as hex digits through bytes (an int's hex format costs twice as much),
#: in the functions that need them (a call of its own is a good part of a span's cost). ``random`` is reseeded in a
#: forked child, so parent and child draw apart.
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
    if len(value) == _LENGTH_00 and _VERSION_00(value) is not None:  # the usual form: no groups, no strip
        trace_id, span_id, flags = value[3:35], value[36:52], _FLAGS[value[53:]]
    else:
        match = _TRACEPARENT.fullmatch(value.strip(" \t"))
        if match is None:
            return None
        version, trace_id, span_id, flag_digits, rest = match.groups()
        if version == "ff" or (version == "00" and rest is not None):  # version 00 is exactly 55 characters
            return None
        flags = int(flag_digits, 16)
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    state = ""
    if type(tracestate) is str and tracestate and len(tracestate) <= _MAX_TRACESTATE:
        state = tracestate.strip(" \t")
        if not (state.isascii() and state.isprintable()):  # passed on as a header: no control characters (CR, LF)
            state = ""
    return _new(SpanContext, (trace_id, span_id, flags, state))


def format_traceparent(context: SpanContext) -> str:
    """The ``traceparent`` header (version 00) naming ``context`` as the parent; flags this version does not define
    are sent as zero, as the specification asks."""
    return f"00-{context.trace_id}-{context.span_id}-{_SENT_FLAGS[context.flags & SAMPLED]}"


def new_root() -> SpanContext:
    """The first span of a new trace (sampled: ringtrace records it)."""
    ids = _random_bits(192).to_bytes(24, "big").hex()
    trace_id, span_id = ids[:32], ids[32:]
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:  # (all zeros are invalid: draw again)
        return new_root()
    return _new(SpanContext, (trace_id, span_id, SAMPLED, ""))


def child_of(parent: SpanContext) -> SpanContext:
    """A new span of ``parent``'s trace."""
    span_id = _random_bits(64).to_bytes(8, "big").hex()
    if span_id == _ZERO_SPAN:
        return child_of(parent)
    return _new(SpanContext, (parent.trace_id, span_id, parent.flags, parent.tracestate))
