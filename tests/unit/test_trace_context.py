"""Trace context in the client: W3C ``traceparent`` read and written by the specification's rules (Hypothesis), the
current span per thread and per asyncio task, trace-aware scopes, and OpenTelemetry's current span joined."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import os
import subprocess
import sys
import threading
import weakref
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ringtrace.client import MemoryListener, SpanContext, Timeline, current_span, extract, inject
from ringtrace.client.recording.trace_context import serving
from ringtrace.client.recording.traceparent import child_of, format_traceparent, new_root, parse_traceparent

HEX = "0123456789abcdef"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{SPAN}-01"

hex_digits = st.text(alphabet=HEX, min_size=1)


def hex_of(length: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=HEX, min_size=length, max_size=length)


# -- traceparent --------------------------------------------------------------------------------------------------


def test_the_specification_example_is_read() -> None:
    assert parse_traceparent(VALID, "congo=t61rcWkgMzE") == SpanContext(TRACE, SPAN, 1, "congo=t61rcWkgMzE")
    assert parse_traceparent(f"00-{TRACE}-{SPAN}-00") == SpanContext(TRACE, SPAN, 0, "")


@given(hex_of(32), hex_of(16), hex_of(2))
def test_a_valid_header_reads_back_as_written(trace_id: str, span_id: str, flags: str) -> None:
    header = f"00-{trace_id}-{span_id}-{flags}"
    context = parse_traceparent(header)
    if set(trace_id) == {"0"} or set(span_id) == {"0"}:
        assert context is None  # all-zero ids are invalid
        return
    assert context == SpanContext(trace_id, span_id, int(flags, 16), "")
    # Flags version 00 does not define are sent as zero.
    assert format_traceparent(context) == f"00-{trace_id}-{span_id}-{int(flags, 16) & 1:02x}"


@pytest.mark.parametrize(
    "header",
    [
        f"00-{TRACE.upper()}-{SPAN}-01",  # uppercase refused
        f"00-{TRACE}-{SPAN.upper()}-01",
        f"00-{TRACE}-{SPAN}-0A",
        f"00-{'0' * 32}-{SPAN}-01",  # all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero parent id
        f"ff-{TRACE}-{SPAN}-01",  # version ff is invalid
        f"00-{TRACE}-{SPAN}-01-extra",  # version 00 is exactly 55 characters
        f"00-{TRACE}-{SPAN}-1",
        f"00-{TRACE[:-1]}-{SPAN}-01",
        f"00-{TRACE}-{SPAN}x01",
        f"0-{TRACE}-{SPAN}-01",
        f"cc-{TRACE}-{SPAN}-01x",  # a later version: what follows the 55 characters starts with a dash
        f"00_{TRACE}-{SPAN}-01",
        "",
        "garbage",
    ],
)
def test_an_invalid_header_names_no_span(header: str) -> None:
    assert parse_traceparent(header) is None


def test_a_tracestate_that_is_no_header_value_is_not_passed_on() -> None:
    assert parse_traceparent(VALID, "a=b\r\nx: y") == SpanContext(TRACE, SPAN, 1, "")
    assert parse_traceparent(VALID, "a=" + "b" * 600) == SpanContext(TRACE, SPAN, 1, "")
    assert inject({}, parse_traceparent(VALID, "a=\x00")) == {"traceparent": VALID}


def test_a_later_version_is_read_for_what_version_00_defines() -> None:
    assert parse_traceparent(f"cc-{TRACE}-{SPAN}-01-what-comes-next") == SpanContext(TRACE, SPAN, 1, "")
    assert parse_traceparent(f"cc-{TRACE}-{SPAN}-01") == SpanContext(TRACE, SPAN, 1, "")


@given(st.one_of(st.text(max_size=80), st.binary(max_size=80), st.integers(), st.none()), st.text(max_size=40))
def test_no_header_raises(header: Any, tracestate: str) -> None:
    context = parse_traceparent(header, tracestate)
    assert context is None or (len(context.trace_id) == 32 and len(context.span_id) == 16)
    assert context is None or context.tracestate.isprintable()
    assert extract({"traceparent": header, "tracestate": tracestate}) == context


@given(hex_of(32), hex_of(16), st.sampled_from(["00", "01"]), st.integers(0, 54), hex_digits)
def test_a_header_damaged_anywhere_never_raises(trace_id: str, span_id: str, flags: str, at: int, junk: str) -> None:
    header = f"00-{trace_id}-{span_id}-{flags}"
    damaged = header[:at] + junk.upper().replace("0", "Z") + header[at + 1 :]
    context = parse_traceparent(damaged)
    # Whatever it reads is what the header says (a damaged version may be a later one, whose fields it reads).
    if context is not None:
        assert (context.trace_id, context.span_id, context.flags) == (
            damaged[3:35],
            damaged[36:52],
            int(damaged[53:55], 16),
        )


def test_new_ids_are_lowercase_hex_of_the_specified_lengths_and_read_back() -> None:
    roots = [new_root() for _ in range(2_000)]
    children = [child_of(root) for root in roots]
    for span in (*roots, *children):
        assert len(span.trace_id) == 32 and len(span.span_id) == 16
        assert set(span.trace_id) <= set(HEX) and set(span.span_id) <= set(HEX)
        assert parse_traceparent(format_traceparent(span)) == span
    assert all(child.trace_id == root.trace_id for root, child in zip(roots, children, strict=True))
    assert len({root.trace_id for root in roots}) == len(roots)  # (192 random bits: a repeat is a broken draw)
    assert len({span.span_id for span in (*roots, *children)}) == 2 * len(roots)


def test_extract_takes_any_mapping_in_any_case() -> None:
    assert extract({"Traceparent": VALID}) == SpanContext(TRACE, SPAN)
    assert extract({"TRACEPARENT": VALID, "TraceState": "a=b"}) == SpanContext(TRACE, SPAN, 1, "a=b")
    assert extract({}) is None
    assert extract(None) is None
    assert extract({1: 2}) is None  # type: ignore[dict-item]


def test_extract_takes_pairs_of_str_or_bytes_and_a_wsgi_environ() -> None:
    assert extract([("Content-Type", "text/plain"), ("TraceParent", VALID)]) == SpanContext(TRACE, SPAN)
    asgi = [(b"host", b"x"), (b"traceparent", VALID.encode()), (b"tracestate", b"a=b")]  # ASGI's scope["headers"]
    assert extract(asgi) == SpanContext(TRACE, SPAN, 1, "a=b")
    assert extract({"HTTP_TRACEPARENT": VALID, "PATH_INFO": "/"}) == SpanContext(TRACE, SPAN)  # a WSGI environ
    assert extract([("traceparent",)]) is None  # type: ignore[list-item]
    assert extract([]) is None


def test_inject_appends_pairs_to_a_list_in_the_list_s_own_type() -> None:
    context = SpanContext(TRACE, SPAN, 1, "a=b")
    assert inject([], context) == [("traceparent", VALID), ("tracestate", "a=b")]
    assert inject([(b"host", b"x")], context) == [(b"host", b"x"), (b"traceparent", VALID.encode()),
                                                  (b"tracestate", b"a=b")]  # fmt: skip
    spans = recorded(lambda tl: _call_and_serve(tl, []))
    assert spans["handle"]["parent_span_id"] == spans["call"]["span_id"]


def _call_and_serve(tl: Timeline, headers: list[tuple[str, str]]) -> None:
    with tl.client_span("call", headers):
        pass
    with tl.server_span("handle", headers):
        pass


# -- trace-aware scopes -------------------------------------------------------------------------------------------


def recorded(record: Any) -> dict[str, dict[str, Any]]:
    """The spans ``record(tl)`` made, by name: their args."""
    listener = MemoryListener()
    tl = Timeline("trace", [listener])
    record(tl)
    tl.close()
    return {event.name: event.args for event in listener.events}


def test_a_callee_continues_the_callers_trace_from_its_headers() -> None:
    headers: dict[str, str] = {}

    def record(tl: Timeline) -> None:
        with tl.client_span("call", headers, url="/a"), tl.scope("plain"):
            pass
        with tl.server_span("handle", dict(headers)), tl.trace_scope("work"):
            pass

    spans = recorded(record)
    call, handle, work = spans["call"], spans["handle"], spans["work"]
    assert headers["traceparent"] == f"00-{call['trace_id']}-{call['span_id']}-01"
    assert call["kind"] == "client" and call["url"] == "/a" and "parent_span_id" not in call
    assert handle == {"trace_id": call["trace_id"], "span_id": handle["span_id"], "parent_span_id": call["span_id"],
                      "kind": "server"}  # fmt: skip
    assert work["parent_span_id"] == handle["span_id"] and work["kind"] == "internal"
    assert spans["plain"] is None  # a plain scope is what it always was


def test_kind_and_headers_given_by_keyword_are_the_span_s_not_args() -> None:
    """As the docs write them (``trace_scope(label, kind="internal", headers=None, **args)``): headers given by
    keyword are read or written, never recorded as an arg (they may hold credentials)."""
    headers: dict[str, str] = {"authorization": "Bearer secret"}

    def record(tl: Timeline) -> None:
        with tl.client_span("call", headers=headers):
            pass
        with tl.trace_scope("handle", kind="server", headers=dict(headers)):
            pass
        with tl.server_span("again", headers=dict(headers)):
            pass

    spans = recorded(record)
    call, handle, again = spans["call"], spans["handle"], spans["again"]
    assert headers["traceparent"] == f"00-{call['trace_id']}-{call['span_id']}-01"
    assert handle["kind"] == "server" and handle["parent_span_id"] == call["span_id"]
    assert again["kind"] == "server" and again["parent_span_id"] == call["span_id"]
    assert not any("headers" in args for args in (call, handle, again))


def test_a_malformed_header_starts_a_new_trace() -> None:
    spans = recorded(
        lambda tl: tl.server_span("handle", {"traceparent": "00-nope"}).__enter__().__exit__(None, None, None)
    )
    assert len(spans["handle"]["trace_id"]) == 32 and "parent_span_id" not in spans["handle"]


def test_the_current_span_is_the_innermost_and_ends_with_its_scope() -> None:
    tl = Timeline("trace")
    assert current_span() is None
    with tl.trace_scope("outer") as outer:
        with tl.trace_scope("inner") as inner:
            assert current_span() == inner.context
            assert inject({}) == {"traceparent": format_traceparent(inner.context)}  # type: ignore[arg-type]
        assert current_span() == outer.context
    assert current_span() is None
    assert inject({}) == {}
    inject(frozenset())  # type: ignore[arg-type]  # headers that cannot be written: left alone
    tl.close()


def test_a_trace_scope_entered_again_inside_itself_leaves_no_current_span_behind() -> None:
    def record(tl: Timeline) -> None:
        span = tl.trace_scope("again")
        with span as outer:
            outer_context = outer.context
            with span as inner:
                assert inner.context != outer_context and current_span() == inner.context
                assert inner.context is not None and inner.context.trace_id == outer_context.trace_id  # type: ignore[union-attr]
            assert current_span() == outer_context and span.context == outer_context
        assert current_span() is None

    listener = MemoryListener()
    tl = Timeline("trace", [listener])
    record(tl)
    tl.close()
    assert [event.name for event in listener.events] == ["again", "again"]  # each entry its span
    inner_args, outer_args = (event.args for event in listener.events)
    assert inner_args["parent_span_id"] == outer_args["span_id"]


def test_a_span_relabelled_is_recorded_under_its_new_label_with_the_args_added() -> None:
    """A name known only once the span began (a server's route): ``relabel`` before it is entered, while it is open,
    and in an entry nested in another of the same span, which keeps its own; a plain scope's ``label`` likewise, and
    one set after it exits changes nothing recorded."""
    listener = MemoryListener()
    tl = Timeline("trace", [listener])
    early = tl.server_span("/items/7", {}, route="/items/7")
    early.relabel("GET /items/{id}", route="/items/{id}")
    with early:
        pass
    with tl.server_span("/items/8", {}, route="/items/8", response={}) as late:
        late.relabel("GET /items/{id}", route="/items/{id}", response={"status": 200})
    span = tl.trace_scope("outer")
    with span, span:
        span.relabel("inner")
    with tl.scope("plain") as plain:
        assert plain.label == "plain"
        plain.label = "renamed"
    plain.label = "after"
    tl.close()
    assert [event.name for event in listener.events] == ["GET /items/{id}"] * 2 + ["inner", "outer", "renamed"]
    early_args, late_args, inner_args, outer_args, plain_args = (event.args for event in listener.events)
    assert early_args["route"] == "/items/{id}" and early_args["kind"] == "server"
    assert late_args["route"] == "/items/{id}" and late_args["response"] == {"status": 200}
    assert inner_args["parent_span_id"] == outer_args["span_id"] and plain_args is None
    with Timeline("nothing listens").scope("kept nowhere") as nowhere:
        nowhere.label = "still nowhere"  # (set, and let go of: it keeps nothing)


def test_threads_and_asyncio_tasks_each_have_their_own_current_span() -> None:
    tl = Timeline("trace")
    seen: dict[str, Any] = {}

    async def request(name: str, gate: asyncio.Event) -> None:
        with tl.server_span(name, {}) as span:
            await gate.wait()  # the other task opens its span meanwhile
            seen[name] = (span.context, current_span())

    async def main() -> None:
        gate = asyncio.Event()
        tasks = [asyncio.create_task(request(name, gate)) for name in ("a", "b")]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert seen["a"][0] == seen["a"][1] and seen["b"][0] == seen["b"][1]
    assert seen["a"][0].trace_id != seen["b"][0].trace_id
    with tl.trace_scope("here"):
        other = threading.Thread(target=lambda: seen.setdefault("thread", current_span()))
        other.start()
        other.join()
    assert seen["thread"] is None
    tl.close()


def test_a_span_exited_in_another_task_is_no_longer_the_current_span_of_the_task_that_opened_it() -> None:
    tl = Timeline("trace")
    seen: dict[str, Any] = {}

    async def main() -> None:
        with tl.trace_scope("request") as request:
            handed_over = tl.trace_scope("handed-over")
            handed_over.__enter__()

            async def finish() -> None:
                handed_over.__exit__(None, None, None)  # (a span another task ends: a stream's last chunk, say)

            await asyncio.create_task(finish())
            seen["current"] = current_span()
            with tl.trace_scope("next") as after:
                seen["next"] = after.context
            seen["request"] = request.context
        seen["outside"] = current_span()

    asyncio.run(main())
    assert seen["current"] == seen["request"]  # the span it was opened in, not the one that ended
    assert seen["next"].trace_id == seen["request"].trace_id
    assert seen["outside"] is None
    tl.close()


# -- OpenTelemetry ------------------------------------------------------------------------------------------------


def test_ringtrace_spans_join_the_current_opentelemetry_span() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("test")
    spans: dict[str, Any] = {}

    def record(tl: Timeline) -> None:
        with tracer.start_as_current_span("otel outer") as otel_outer:
            spans["otel outer"] = otel_outer.get_span_context()
            with tl.trace_scope("ours") as ours:
                with tracer.start_as_current_span("otel inner") as otel_inner:  # began inside ours: the innermost
                    spans["otel inner"] = otel_inner.get_span_context()
                    with tl.trace_scope("under otel inner"):
                        pass
                assert current_span() == ours.context
                with tl.trace_scope("under ours"):
                    pass

    args = recorded(record)
    outer, inner = spans["otel outer"], spans["otel inner"]
    assert args["ours"]["trace_id"] == f"{outer.trace_id:032x}"
    assert args["ours"]["parent_span_id"] == f"{outer.span_id:016x}"
    assert args["under otel inner"]["parent_span_id"] == f"{inner.span_id:016x}"
    assert args["under ours"]["parent_span_id"] == args["ours"]["span_id"]


def test_the_span_processor_records_each_otel_span_on_the_track_it_started_on_with_its_ids() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from ringtrace.client.otel import SpanProcessor

    listener = MemoryListener()
    tl = Timeline("otel", [listener])
    provider = TracerProvider()
    provider.add_span_processor(SpanProcessor(tl))
    tracer = provider.get_tracer("test")

    async def request(name: str) -> None:  # two at once on one event loop: each on its task's lane
        with tracer.start_as_current_span(name, attributes={"route": "/" + name}), tl.scope(f"render {name}"):
            await asyncio.sleep(0.01)

    async def serve() -> None:
        await asyncio.gather(request("a"), request("b"))

    asyncio.run(serve())
    handed = tracer.start_span("handed over")  # started here, ended by another thread
    ender = threading.Thread(target=handed.end)
    ender.start()
    ender.join(timeout=30)
    assert tl.flush(timeout_s=30)
    tl.close()
    by_name = {event.name: event for event in listener.events}
    for name in ("a", "b"):
        span, scope = by_name[name], by_name[f"render {name}"]
        assert span.track == scope.track and span.ts_ns <= scope.ts_ns and scope.dur_ns <= span.dur_ns
        assert span.args["route"] == "/" + name and span.args["kind"] == "internal"
    assert by_name["a"].track != by_name["b"].track
    context = handed.get_span_context()
    assert by_name["handed over"].args == {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}",
                                           "kind": "internal"}  # fmt: skip
    assert by_name["handed over"].track.thread_id == threading.get_native_id()


def test_a_span_that_ends_after_the_task_that_started_it_is_counted_as_dropped_not_drawn_on_its_lane() -> None:
    """The task's lane goes to the next task once it is done (and its buffer away once drained): the span, on it,
    would hold the next task's work as its own, or be lost without a count."""
    from opentelemetry.sdk.trace import TracerProvider
    from ringtrace.client.otel import SpanProcessor

    listener = MemoryListener()
    tl = Timeline("otel", [listener])
    provider = TracerProvider()
    provider.add_span_processor(SpanProcessor(tl))
    tracer = provider.get_tracer("test")

    async def serve() -> None:
        started = []

        async def first() -> None:
            started.append(tracer.start_span("outlives its task"))

        async def second() -> None:
            with tl.scope("the next task's work"):
                await asyncio.sleep(0)

        await asyncio.create_task(first())
        await asyncio.create_task(second())  # on the first one's lane, free again
        started[0].end()
        with tracer.start_as_current_span("ends in its task"):
            pass

    asyncio.run(serve())
    assert not tl.flush(timeout_s=30)  # (a drop since the last flush)
    assert tl.dropped_events == 1
    tl.close()
    assert sorted(event.name for event in listener.events) == ["ends in its task", "the next task's work"]


def test_a_span_the_processor_cannot_read_is_counted_as_dropped_and_nothing_raises() -> None:
    from ringtrace.client.otel import SpanProcessor

    tl = Timeline("otel", [MemoryListener()])
    processor = SpanProcessor(tl)
    processor.on_start(object())
    processor.on_end(object())
    assert not tl.flush(timeout_s=30)  # (flush says so: a drop since the last one)
    assert tl.dropped_events == 1
    tl.close()


def test_a_forked_child_records_spans_though_another_thread_was_in_the_processor_at_the_fork() -> None:
    code = (
        "import os, signal, threading\n"
        "import ringtrace.client as rc\n"
        "from ringtrace.client.otel import SpanProcessor\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "processor = SpanProcessor(rc.Timeline('t', [rc.MemoryListener()]))\n"
        "provider = TracerProvider()\n"
        "provider.add_span_processor(processor)\n"
        "held, release = threading.Event(), threading.Event()\n"
        "def hold():\n"
        "    with processor._lock:\n"  # (another thread of the parent in the processor at the fork: no public way)
        "        held.set()\n"
        "        release.wait()\n"
        "threading.Thread(target=hold).start()\n"
        "held.wait()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    signal.alarm(30)\n"  # a child that hangs is killed: a status other than 0
        "    with provider.get_tracer('t').start_as_current_span('in the child'):\n"
        "        pass\n"
        "    os._exit(0)\n"
        "release.set()\n"
        "assert os.waitpid(pid, 0)[1] == 0\n"
    )
    subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code], check=True, timeout=90)


def test_a_span_ended_after_the_thread_that_started_it_is_counted_as_dropped_not_lost_unseen() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from ringtrace.client.otel import SpanProcessor

    listener = MemoryListener()
    tl = Timeline("otel", [listener])
    provider = TracerProvider()
    provider.add_span_processor(SpanProcessor(tl))
    tracer = provider.get_tracer("test")
    started: list[Any] = []
    starter = threading.Thread(target=lambda: started.append(tracer.start_span("outlived thread")))
    starter.start()
    starter.join(timeout=30)

    async def start_in_a_task() -> None:
        started.append(tracer.start_span("outlived task"))

    async def serve() -> None:
        await asyncio.create_task(start_in_a_task())
        assert tl.flush(timeout_s=30)  # the flusher has seen the thread and the task end: their tracks are retired
        for span in started:
            span.end()

    asyncio.run(serve())
    assert not tl.flush(timeout_s=30)  # (flush says so: drops since the last one)
    assert tl.dropped_events == 2
    tl.close()
    assert not {"outlived thread", "outlived task"} & {event.name for event in listener.events}


def test_importing_the_client_and_tracing_imports_no_opentelemetry() -> None:
    code = (
        "import sys, ringtrace.client as rc, ringtrace.client.otel\n"
        "tl = rc.Timeline('t', [rc.MemoryListener()])\n"
        "with tl.client_span('call', {}) as s: rc.inject({}); rc.current_span()\n"
        "tl.close()\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_span_s_args_pointing_back_at_it_after_it_ended_are_still_collected() -> None:
    """A span's args hold the caller's values: a dict of the caller's that later points back at the span makes a
    cycle through them, which the garbage collector must still find (a span never leaves args it shares untracked)."""

    class Marker:
        pass

    listener = MemoryListener()
    tl = Timeline("cycles", [listener])
    meta: dict[str, Any] = {}
    span = tl.trace_scope("op", meta=meta)
    with span:
        pass
    marker = Marker()
    meta["owner"], meta["marker"] = span, marker
    gone = weakref.ref(marker)
    tl.close()
    assert [event.name for event in listener.events] == ["op"]  # (recorded: its args in the buffer, then the listener)
    del span, meta, marker, tl, listener
    gc.collect()
    assert gone() is None


def test_a_server_span_and_the_spans_inside_it_are_serving_and_nothing_else_is() -> None:
    """What the HTTP integrations' servers ask before they record a request's span: inside a server span (an
    integration's or the program's own), and in any span begun inside one (the request's client calls), an app
    inside another records no second span of the request."""
    tl = Timeline("serving", [MemoryListener()])
    seen = [serving()]
    with tl.client_span("outside", []):
        seen.append(serving())
    with tl.server_span("handle", {}):
        seen.append(serving())
        with tl.client_span("call", []), tl.trace_scope("work"):
            seen.append(serving())
        seen.append(serving())
    seen.append(serving())
    assert seen == [False, False, True, True, True, False]


def test_a_wsgi_thread_serves_each_request_in_a_span_of_its_own_whatever_became_of_the_body_before() -> None:
    """A WSGI server's thread keeps its context from one request to the next: a body closed by another thread (the
    span then ends in another context), or let go of and never closed, must leave neither the span current nor the
    thread serving, or its next requests would go unrecorded, or be recorded inside the last one."""
    from ringtrace.client.integrations.wsgi_server import WSGIMiddleware

    listener = MemoryListener()
    tl = Timeline("wsgi", [listener])

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        start_response("200 OK", [])
        return iter([b"streamed"])

    served = WSGIMiddleware(app, tl)

    def requests() -> list[bool]:
        seen = []
        body = served({"REQUEST_METHOD": "GET", "PATH_INFO": "/closed-elsewhere"}, lambda *_: None)
        closer = threading.Thread(target=lambda: (list(body), body.close()))  # type: ignore[attr-defined]
        closer.start()
        closer.join(60)
        seen.append(serving())
        body = served({"REQUEST_METHOD": "GET", "PATH_INFO": "/never-closed"}, lambda *_: None)
        del body  # (the server let go of it unread)
        seen.append(serving())
        body = served({"REQUEST_METHOD": "GET", "PATH_INFO": "/last"}, lambda *_: None)
        assert list(body) == [b"streamed"]
        body.close()  # type: ignore[attr-defined]
        seen.append(serving())
        return seen

    assert contextvars.copy_context().run(requests) == [False, False, False]
    tl.flush(10)
    spans = {e.name: e.args for e in listener.events if e.kind == "span"}
    assert sorted(spans) == ["GET /closed-elsewhere", "GET /last", "GET /never-closed"]
    assert all("parent_span_id" not in args for args in spans.values())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")
def test_a_child_forked_inside_a_server_span_keeps_its_span_but_serves_no_more() -> None:
    """What the child does is part of the request (its spans are the span's children), but a server it runs serves
    requests of its own: they must each be recorded."""
    tl = Timeline("forked", [MemoryListener()])

    def fork_inside() -> tuple[str, str]:
        with tl.server_span("handle", {}):
            span = current_span()
            assert span is not None and serving()
            reader, writer = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: what it sees, sent back
                try:
                    child_span = current_span()
                    os.write(writer, f"{serving()} {child_span == span}".encode())
                finally:
                    os._exit(0)
            os.close(writer)
            with os.fdopen(reader) as pipe:
                seen = pipe.read()
            os.waitpid(pid, 0)
            return seen, f"{serving()} {current_span() == span}"

    assert contextvars.copy_context().run(fork_inside) == ("False True", "True True")
