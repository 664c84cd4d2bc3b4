"""A span of a trace begun, its parent known: the C recorder's ``begin_span`` against its pure-Python twin,
``trace_context._begin_span``, in one process. The same context (a child keeps its parent's trace, flags and
tracestate; a new trace is sampled), the same args in the same order, the same current span set, and ids that are
lowercase hex of the specified lengths, never all zero, fresh on each call and in a forked child."""

from __future__ import annotations

import os
import random
import re
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ringtrace.client import current_span
from ringtrace.client.accelerator import speedups
from ringtrace.client.recording import trace_context
from ringtrace.client.recording.traceparent import SpanContext

pytestmark = pytest.mark.skipif(speedups is None, reason="the C recorder is not built here (or RINGTRACE_PURE_PYTHON)")

HEX_32 = re.compile(r"[0-9a-f]{32}")
HEX_16 = re.compile(r"[0-9a-f]{16}")
PARENT = SpanContext("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 0, "vendor=x")
Begin = Callable[..., tuple[SpanContext, dict[str, Any], Any]]
TWINS: list[Begin] = [trace_context._begin_span, speedups.begin_span] if speedups is not None else []

args_of = st.dictionaries(st.text(max_size=8), st.one_of(st.none(), st.integers(), st.text(max_size=8)), max_size=6)


def begun(begin: Begin, parent: SpanContext | None, args: dict[str, Any], kind: str) -> tuple[Any, ...]:
    """What ``begin`` gives, its random ids checked and taken out, and the current span while it is set."""
    given_args = dict(args)
    context, with_ids, token = begin(parent, args, kind, None)
    try:
        current = current_span()
    finally:
        trace_context._ACTIVE.reset(token)
    assert args == given_args and with_ids is not args  # (a new dict: the one given is the caller's)
    assert type(context) is SpanContext and current == context and current_span() is None
    assert HEX_32.fullmatch(context.trace_id) and HEX_16.fullmatch(context.span_id)
    assert context.trace_id != "0" * 32 and context.span_id != "0" * 16
    assert with_ids["trace_id"] == context.trace_id and with_ids["span_id"] == context.span_id
    if parent is not None:
        assert context.span_id != parent.span_id
    shape = {k: (v if k not in ("span_id", "trace_id") or (parent is not None and k == "trace_id") else "id")
             for k, v in with_ids.items()}  # fmt: skip
    return context.flags, context.tracestate, list(shape.items()), context.trace_id if parent else None


@given(args=args_of, kind=st.sampled_from(["internal", "server", "client"]), child=st.booleans())
def test_both_twins_begin_the_same_span(args: dict[str, Any], kind: str, child: bool) -> None:
    parent = PARENT if child else None
    python, c = (begun(begin, parent, args, kind) for begin in TWINS)
    assert python == c
    if child:
        assert c[0] == 0 and c[1] == "vendor=x" and c[3] == PARENT.trace_id
        assert dict(c[2])["parent_span_id"] == PARENT.span_id
    else:
        assert c[:2] == (1, "") and "parent_span_id" not in dict(c[2])


@pytest.mark.parametrize("child", [False, True])
def test_from_the_same_generator_state_both_twins_draw_the_same_ids(child: bool) -> None:
    parent = PARENT if child else None
    state = random.getstate()
    try:
        made = []
        for begin in TWINS:
            random.seed(5)
            context, with_ids, token = begin(parent, {"x": 1}, "server", None)
            trace_context._ACTIVE.reset(token)
            made.append((context, list(with_ids.items()), hash(context)))
    finally:
        random.setstate(state)
    assert made[0] == made[1]


def test_ids_are_fresh_on_each_call_and_in_a_forked_child() -> None:
    assert speedups is not None
    ids = set()
    for _ in range(1000):
        context, _, token = speedups.begin_span(None, {}, "internal", None)
        trace_context._ACTIVE.reset(token)
        ids.add(context.trace_id)
    assert len(ids) == 1000
    if not hasattr(os, "fork"):
        return
    random.seed(7)  # (the same state on both sides of the fork, but for the reseeding a child gets)
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, sent back
        os.close(reader)
        context, _, token = speedups.begin_span(None, {}, "internal", None)
        os.write(writer, context.trace_id.encode())
        os._exit(0)
    os.close(writer)
    child = os.read(reader, 64).decode()
    os.close(reader)
    os.waitpid(pid, 0)
    parent_context, _, token = speedups.begin_span(None, {}, "internal", None)
    trace_context._ACTIVE.reset(token)
    assert HEX_32.fullmatch(child) and child != parent_context.trace_id


@pytest.mark.parametrize(
    "arguments",
    [(), (None, {}, "server"), (None, [], "server", None), (("a", "b", 1, ""), {}, "server", None)],
)
def test_begin_span_refuses_what_is_not_a_span_s_parent_and_args(arguments: tuple[Any, ...]) -> None:
    assert speedups is not None
    with pytest.raises(TypeError, match=r"begin_span\(parent, args, kind, otel_span\)"):
        speedups.begin_span(*arguments)
    assert current_span() is None


def test_a_draw_that_fails_leaves_no_current_span_and_raises() -> None:
    assert speedups is not None

    def failing(bits: int) -> int:
        raise OSError(f"no {bits} bits today")

    speedups.configure_spans(SpanContext, trace_context._Active, trace_context._ACTIVE, failing, 1)
    try:
        with pytest.raises(OSError, match="no 192 bits today"):  # (a new trace's ids: one draw)
            speedups.begin_span(None, {}, "internal", None)
    finally:
        speedups.configure_spans(SpanContext, trace_context._Active, trace_context._ACTIVE, random.getrandbits, 1)
    assert current_span() is None and sys.exc_info() == (None, None, None)


@pytest.mark.parametrize(
    ("drawn", "refused", "said"),
    [(2**192, OverflowError, "too big"), (-1, OverflowError, "negative"), (1.5, TypeError, "float, not an int")],
)
def test_a_draw_of_what_is_not_its_bits_is_refused(drawn: object, refused: type[Exception], said: str) -> None:
    """The same exception on every version (3.13 converts ints its own way)."""
    assert speedups is not None
    speedups.configure_spans(SpanContext, trace_context._Active, trace_context._ACTIVE, lambda bits: drawn, 1)
    try:
        with pytest.raises(refused, match=said):
            speedups.begin_span(None, {}, "internal", None)
    finally:
        speedups.configure_spans(SpanContext, trace_context._Active, trace_context._ACTIVE, random.getrandbits, 1)
    assert current_span() is None


def test_a_draw_with_leading_zero_bytes_gives_ids_with_leading_zeros() -> None:
    assert speedups is not None
    drawn = (1 << 64) | 5  # (the trace id 1, the span id 5: most of the 24 bytes zero)
    speedups.configure_spans(SpanContext, trace_context._Active, trace_context._ACTIVE, lambda bits: drawn, 1)
    try:
        context, _, token = speedups.begin_span(None, {}, "internal", None)
        trace_context._ACTIVE.reset(token)
    finally:
        speedups.configure_spans(SpanContext, trace_context._Active, trace_context._ACTIVE, random.getrandbits, 1)
    assert (context.trace_id, context.span_id) == ("0" * 31 + "1", "0" * 15 + "5")
