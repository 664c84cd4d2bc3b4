"""A span of a trace opened and closed, and an aiohttp request's server span begun and ended: the C recorder's
``open_span``, ``close_span``, ``begin_server_span`` and ``end_server_span`` against their pure-Python twins
(``trace_context.open_span_in_python`` and ``close_span_in_python``, ``aiohttp_server.begin_in_python`` and
``end_in_python``, which open and close the span through ``open_span`` and ``close_span``: the C ones where they are
built, held to their own twins below). The twins must record the same span (label, args, the exception it ends
with), leave the same current span (and so the same ``serving()``), call the program's objects in the same order,
and raise the same exceptions; a request that cannot be read is served unrecorded, never raised into the program
(but a ``BaseException`` that is not an ``Exception`` goes on, as it came)."""

from __future__ import annotations

import contextvars
import gc
import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.client import current_span
from ringtrace.client.accelerator import speedups
from ringtrace.client.integrations import aiohttp_server
from ringtrace.client.recording import trace_context
from ringtrace.client.recording.trace_context import serving
from ringtrace.client.recording.traceparent import SpanContext, format_traceparent

pytestmark = pytest.mark.skipif(speedups is None, reason="the C recorder is not built here (or RINGTRACE_PURE_PYTHON)")

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
IDS = ("trace_id", "span_id")


class Answer(Exception):
    """What aiohttp's ``HTTPException`` is to the server span: raised, a response with its ``status``."""

    def __init__(self, status: object) -> None:
        super().__init__(f"answered {status!r}")
        self.status = status


class Scope:
    """A plain scope that notes what is done to it (``make_scope``'s)."""

    def __init__(self, calls: list[Any], label: object, args: dict[str, Any]) -> None:
        self.calls, self._label, self.args = calls, label, args
        calls.append(("made", label))

    @property
    def label(self) -> object:
        return self._label

    @label.setter
    def label(self, label: object) -> None:
        self.calls.append(("label", label))
        self._label = label

    def __enter__(self) -> Scope:
        self.calls.append(("enter", current_span() is not None))
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self.calls.append(("exit", exc_type and exc_type.__name__, str(exc) if exc else None, tb is not None))
        return False


class Route:
    def __init__(self, canonical: str | None) -> None:
        self.resource = None if canonical is None else type("Resource", (), {"canonical": canonical})()


class Request:
    """An aiohttp request as the server span reads it; ``raising`` names the attribute that raises, and what."""

    def __init__(
        self, calls: list[Any], route: Route | None, headers: dict[str, str], raising: tuple[str, type] | None
    ) -> None:
        self.calls, self._route, self._headers, self._raising = calls, route, headers, raising

    def _read(self, name: str, value: Any) -> Any:
        self.calls.append(("read", name))
        if self._raising is not None and self._raising[0] == name:
            raise self._raising[1](f"no {name} today")
        return value

    @property
    def path(self) -> str:
        return self._read("path", "/users/7")  # type: ignore[no-any-return]

    @property
    def method(self) -> str:
        return self._read("method", "GET")  # type: ignore[no-any-return]

    @property
    def headers(self) -> dict[str, str]:
        return self._read("headers", self._headers)  # type: ignore[no-any-return]

    @property
    def match_info(self) -> Any:
        return self._read("match_info", type("MatchInfo", (), {"route": self._route})())


class Result:
    def __init__(self, calls: list[Any], status: object, raising: type | None) -> None:
        self.calls, self._status, self._raising = calls, status, raising

    @property
    def status(self) -> object:
        self.calls.append(("read", "status"))
        if self._raising is not None:
            raise self._raising("no status today")
        return self._status


Begin = Callable[..., Any]
End = Callable[..., None]
SERVER_TWINS: list[tuple[Begin, End]] = [(aiohttp_server.begin_in_python, aiohttp_server.end_in_python)]
if speedups is not None:
    SERVER_TWINS.append((speedups.begin_server_span, speedups.end_server_span))
TWIN_NAMES = ["python", "c"][: len(SERVER_TWINS)]


def shown(args: dict[str, Any], from_caller: bool) -> list[tuple[str, Any]]:
    """A span's args in order, its random ids as "id" (the trace's id is the caller's where there is one)."""
    return [(k, "id" if k in IDS and not (from_caller and k == "trace_id") else v) for k, v in args.items()]


def serve(
    twin: tuple[Begin, End],
    route: Route | None,
    caller: bool,
    raising: tuple[str, type] | None,
    outcome: tuple[str, object],
    requests: int,
    named: dict[Any, Any] | None = None,
) -> list[Any]:
    """What a twin does with ``requests`` requests alike, each begun, answered with ``outcome`` and ended, in a
    context of its own: the calls made to the program's objects, the spans' labels and args, and the state left."""
    begin, end = twin
    calls: list[Any] = []
    seen: list[Any] = []

    def make_scope(label: object, args: dict[str, Any]) -> Scope:
        return Scope(calls, label, args)

    spans = aiohttp_server.ServerSpans(make_scope, Answer, {} if named is None else dict(named))

    def one() -> None:
        request = Request(calls, route, {"traceparent": CALLER} if caller else {}, raising)
        try:
            span = begin(spans, request)
        except BaseException as exc:  # (what the twin let go of, compared)
            seen.append(("begin raised", type(exc).__name__, serving(), current_span()))
            return
        if span is None:
            seen.append(("unrecorded", serving(), current_span()))
            return
        scope, args, _, context = span
        seen.append(("begun", serving(), current_span() == context, shown(args, caller)))
        kind, value = outcome
        result = Result(calls, value, raising[1] if raising and raising[0] == "status" else None)
        exc = None if kind == "result" else Answer(value) if kind == "answer" else ValueError(f"broke {value}")
        try:
            end(spans, span, request, result, exc)
        except BaseException as raised:
            seen.append(("end raised", type(raised).__name__))
        now = current_span()
        left = "none" if now is None else "this span" if now == context else "another"  # (not closed: the same)
        seen.append(("ended", serving(), left, scope.label, shown(scope.args, caller)))

    for _ in range(requests):
        contextvars.copy_context().run(one)
    return [calls, seen, sorted(spans.named.items())]


raisings = st.one_of(
    st.none(),
    st.tuples(
        st.sampled_from(["path", "method", "headers", "match_info", "status"]),
        st.sampled_from([ValueError, KeyboardInterrupt]),
    ),
)
outcomes = st.one_of(
    st.tuples(st.just("result"), st.sampled_from([200, 201, None, "OK"])),
    st.tuples(st.just("answer"), st.sampled_from([404, 302, 500, 503, "404", None, True])),
    st.tuples(st.just("error"), st.just(1)),
)


@settings(max_examples=300)
@given(
    route=st.sampled_from([None, Route(None), Route("/users/{id}")]),
    caller=st.booleans(),
    raising=raisings,
    outcome=outcomes,
    requests=st.integers(1, 2),
)
def test_both_twins_record_a_request_s_span_alike(
    route: Route | None, caller: bool, raising: tuple[str, type] | None, outcome: tuple[str, object], requests: int
) -> None:
    python, c = (serve(twin, route, caller, raising, outcome, requests) for twin in SERVER_TWINS)
    assert python == c


def test_a_request_s_span_as_recorded() -> None:
    """Not only alike: right. The route's label is kept for its next request, a raised answer below 500 is a status,
    an error is its text and type, and nothing is left set."""
    for twin in SERVER_TWINS:
        calls, seen, named = serve(twin, Route("/users/{id}"), True, None, ("answer", 404), 2)
        begun, ended = seen[0], seen[1]
        assert begun[:3] == ("begun", True, True)
        assert dict(begun[3])["trace_id"] == CALLER.split("-")[1] and dict(begun[3])["parent_span_id"] == CALLER[36:52]
        assert ended[:4] == ("ended", False, "none", "GET /users/{id}")
        assert dict(ended[4])["response"] == {"status": 404} and dict(ended[4])["route"] == "/users/{id}"
        assert ("exit", None, None, False) in calls
        assert len(named) == 1 and named[0][1] == ("GET /users/{id}", "/users/{id}")
        assert calls.count(("read", "match_info")) == 2  # (the second request's label is the one kept)
        _, seen, _ = serve(twin, Route(None), False, None, ("error", 1), 1)
        assert dict(seen[1][4])["response"] == {"error": "broke 1"} and seen[1][3] == "GET /users/7"
        calls, seen, _ = serve(twin, None, False, ("path", ValueError), ("result", 200), 1)
        assert seen == [("unrecorded", False, None)] and not any(c[0] == "made" for c in calls)
        _, seen, _ = serve(twin, None, False, ("path", KeyboardInterrupt), ("result", 200), 1)
        assert seen == [("begin raised", "KeyboardInterrupt", False, None)]


ROUTE = Route("/users/{id}")


@pytest.mark.parametrize(
    ("status", "response_kept", "tracked"), [(200, False, False), ([200], False, True), (200, True, True)]
)
def test_the_c_server_span_leaves_its_ended_args_to_no_collection(
    status: object, response_kept: bool, tracked: bool
) -> None:
    """Its args (a dict holding the response dict, so tracked) wait in a buffer until the next drain: C leaves them
    untracked once the span ends holding nothing a cycle could pass through, so that a busy server's collections do
    not walk them, nor promote them to the older generations. Args holding a container (an odd status), or a
    response dict held elsewhere too (which could later point back at them), stay tracked."""
    assert speedups is not None
    spans = aiohttp_server.ServerSpans(lambda label, args: Scope([], label, args), Answer, {})
    request = Request([], ROUTE, {}, None)

    def one() -> tuple[bool, bool]:
        span = speedups.begin_server_span(spans, request)
        args = span[1]
        kept = args["response"] if response_kept else None
        begun = gc.is_tracked(args)
        speedups.end_server_span(spans, span, request, Result([], status, None), None)
        assert kept is None or kept == {"status": 200}
        return begun, gc.is_tracked(args)

    assert contextvars.copy_context().run(one) == (True, tracked)


@pytest.mark.parametrize(
    ("kept", "label"),
    [(None, "GET /users/{id}"), (["GET /kept", "/kept"], "GET /kept"), (("GET /kept",), "/users/7"), ("ab", "a")],
)
def test_both_twins_read_a_kept_label_alike(kept: object, label: str) -> None:
    """None is no label kept; a label kept as another sequence is unpacked; one that does not unpack is left."""
    python, c = (serve(twin, ROUTE, False, None, ("result", 200), 1, {("GET", ROUTE): kept}) for twin in SERVER_TWINS)
    assert python == c
    assert c[1][-1][3] == label


@pytest.mark.parametrize("twin", SERVER_TWINS, ids=TWIN_NAMES)
def test_a_span_whose_scope_cannot_be_made_leaves_no_current_span(twin: tuple[Begin, End]) -> None:
    begin, _ = twin

    def no_scope(label: object, args: dict[str, Any]) -> Any:
        raise LookupError("no scope today")

    def request() -> None:
        assert begin(aiohttp_server.ServerSpans(no_scope, Answer, {}), Request([], None, {}, None)) is None
        assert current_span() is None and serving() is False

    contextvars.copy_context().run(request)


def test_an_open_span_of_another_shape_is_served_unrecorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where OpenTelemetry is in the program, the C twin has the Python one open the span: what that gives is
    checked, not trusted."""
    assert speedups is not None
    tc = trace_context
    monkeypatch.setitem(sys.modules, tc.OTEL_TRACE, types.ModuleType(tc.OTEL_TRACE))

    def configure(open_span: Any) -> None:
        speedups.configure_open_span(tc._modules, tc.OTEL_TRACE, tc._ENDED_ELSEWHERE_ENTRIES, tc._INCOMING,
                                     tc._OUTGOING, tc.extract, tc._current_span, tc.inject, tc._ended_elsewhere,
                                     open_span, tc.serving)  # fmt: skip

    configure(lambda *_: (1,))
    try:
        spans = aiohttp_server.ServerSpans(lambda label, args: Scope([], label, args), Answer, {})
        assert speedups.begin_server_span(spans, Request([], None, {}, None)) is None
        assert serving() is False
    finally:
        configure(tc.open_span_in_python)


@pytest.mark.parametrize("twin", SERVER_TWINS, ids=TWIN_NAMES)
def test_a_span_ended_in_another_context_leaves_its_own_current_where_it_still_is(twin: tuple[Begin, End]) -> None:
    begin, end = twin
    spans = aiohttp_server.ServerSpans(lambda label, args: Scope([], label, args), Answer, {})

    def request() -> None:
        span = begin(spans, Request([], None, {}, None))
        contextvars.copy_context().run(end, spans, span, Request([], None, {}, None), Result([], 200, None), None)
        # (this context's current span is the ended one's outer, none, as another context ended it)
        assert current_span() is None
        assert span[0].calls[-1] == ("exit", None, None, False)
        # (nor is it serving: the next request served here has a span of its own)
        assert serving() is False
        assert begin(spans, Request([], None, {}, None)) is not None

    contextvars.copy_context().run(request)


def test_the_twins_refuse_what_is_not_theirs() -> None:
    assert speedups is not None
    spans = aiohttp_server.ServerSpans(lambda label, args: Scope([], label, args), Answer, {})
    with pytest.raises(TypeError, match=r"\(scope_of, answers, named\)"):
        speedups.begin_server_span(("not", "spans"), Request([], None, {}, None))
    with pytest.raises(TypeError, match="begin_server_span\\(\\)'s span"):
        speedups.end_server_span(spans, (1, 2), None, None, None)
    with pytest.raises(TypeError, match="takes 5 arguments"):
        speedups.open_span(None)
    assert serving() is False and current_span() is None


OPEN_TWINS = [
    (trace_context.open_span_in_python, trace_context.close_span_in_python),
    (getattr(speedups, "open_span", None), getattr(speedups, "close_span", None)),
]
KIND = st.sampled_from(trace_context.KINDS)
HEADERS = st.sampled_from(["none", "empty", "caller", "bad", "pairs", "bytes pairs"])


def headers_of(kind: str) -> Any:
    return {
        "none": None,
        "empty": {},
        "caller": {"traceparent": CALLER},
        "bad": {"traceparent": "00-nothing"},
        "pairs": [("TraceParent", CALLER)],
        "bytes pairs": [(b"accept", b"*/*")],
    }[kind]


def opened(twin: Any, kind: str, headers_kind: str, in_trace: bool, failing: str) -> list[Any]:
    """What a twin does opening a span of ``kind`` and closing it, in a context of its own."""
    open_span, close_span = twin
    calls: list[Any] = []

    def make_scope(label: object, args: dict[str, Any]) -> Any:
        if failing == "make_scope":
            raise LookupError("no scope today")
        return Scope(calls, label, args)

    def run() -> list[Any]:
        outer = None
        if in_trace:
            outer = trace_context.open_span_in_python(lambda label, args: Scope([], label, args), "outer", "internal",
                                                      None, {})  # fmt: skip
        headers = headers_of(headers_kind)
        try:
            scope, args, token, context = open_span(make_scope, "work", kind, headers, {"n": 1})
        except LookupError as exc:
            assert current_span() == (outer[3] if outer is not None else None)  # (as it was: the span never began)
            return ["raised", str(exc)]
        parent = outer[3] if outer is not None else None
        from_caller = headers_kind in ("caller", "pairs") and kind in ("server", "consumer")
        assert current_span() == context
        injected = headers if kind in ("client", "producer") and headers is not None else None
        if injected is not None:
            wanted = format_traceparent(context)
            pairs = injected.items() if isinstance(injected, dict) else injected
            injected = [(k, "injected" if v in (wanted, wanted.encode()) else v) for k, v in pairs]
        close_span(scope, token, context, KeyError if failing == "exit" else None, None, None)
        names = {CALLER.split("-")[1]: "caller's", CALLER.split("-")[2]: "caller's"}
        if parent is not None:
            names.update({parent.trace_id: "outer's", parent.span_id: "outer's"})
        return [
            [(k, names.get(v, "id") if k.endswith("_id") else v) for k, v in args.items()],
            from_caller,
            type(context) is SpanContext,
            context.trace_id == (parent.trace_id if parent else context.trace_id),
            injected,
            current_span() == parent,
        ]

    return [contextvars.copy_context().run(run), calls]


@settings(max_examples=200)
@given(kind=KIND, headers_kind=HEADERS, in_trace=st.booleans(), failing=st.sampled_from(["", "make_scope", "exit"]))
def test_both_twins_open_and_close_a_span_alike(kind: str, headers_kind: str, in_trace: bool, failing: str) -> None:
    python, c = (opened(twin, kind, headers_kind, in_trace, failing) for twin in OPEN_TWINS)
    assert python == c


class Shortcut:
    """An object with a property whose getter returns an attribute, as aiohttp's do (``path`` is ``_path``); the
    property counts its reads."""

    method = "GET"

    def __init__(self, value: str, kept: str) -> None:
        self.reads, self._value, self._kept = 0, value, kept
        self.headers: dict[str, str] = {}

    @property
    def path(self) -> str:
        self.reads += 1
        return self._value


@pytest.mark.parametrize(("kept", "reads"), [("/users/7", 1), ("/elsewhere", 3)])
def test_the_c_twin_reads_a_known_property_s_attribute_in_its_place_once_it_read_the_same(
    kept: str, reads: int
) -> None:
    """aiohttp's properties a span reads (``request.path``...) are read in C as the attribute each one's getter
    returns: no Python frame a request. Its first read goes through the property too: where the attribute does not
    give the same (an aiohttp whose getter changed), every read goes through the property, and the span still has
    what the property gives."""
    assert speedups is not None
    no = ("_none",)
    speedups.configure_aiohttp_reads((Shortcut.__dict__["path"], None, None, None), (("_kept",), no, no, no))
    try:
        spans = aiohttp_server.ServerSpans(lambda label, args: Scope([], label, args), Answer, {})
        request = Shortcut("/users/7", kept)

        def one() -> object:
            span = speedups.begin_server_span(spans, request)
            return span[1]["path"]

        assert [contextvars.copy_context().run(one) for _ in range(3)] == ["/users/7"] * 3
        assert request.reads == reads
    finally:
        speedups.configure_aiohttp_reads(*aiohttp_server._aiohttp_reads())


def test_configure_aiohttp_reads_refuses_what_is_not_its_shape() -> None:
    assert speedups is not None
    with pytest.raises(TypeError, match="two tuples of 4"):
        speedups.configure_aiohttp_reads((None,) * 4, (("_a",),) * 3)
    with pytest.raises(TypeError, match="tuples of attribute names"):
        speedups.configure_aiohttp_reads((None,) * 4, (("_a",), (), ("_a",), ("_a",)))
