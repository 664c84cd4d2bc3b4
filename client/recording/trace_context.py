"""One request followed across processes: the span of a trace the running code is in, W3C ``traceparent``
propagation (``inject``, ``extract``), and the trace-aware scopes that record a span of a trace.

A plain ``Timeline.scope`` knows nothing of traces and costs what it always did. A trace-aware scope
(``Timeline.trace_scope``, ``server_span``, ``client_span``) is a plain scope whose args carry the span's place in
its trace: ``trace_id``, ``span_id``, ``parent_span_id`` (none for a trace's first span) and ``kind`` (``server``,
``client``, ``producer``, ``consumer``, ``internal``, as OpenTelemetry names them). The collector draws an arrow from a
``client`` or ``producer`` span to the ``server`` or ``consumer`` span whose ``parent_span_id`` it is, in whichever
processes they were recorded, and ``?trace_id=`` selects a trace's spans in every process.

The span a scope opens is the current one until it exits, held in a ``contextvars.ContextVar``: each thread, and each
asyncio task (a server's concurrent requests on one event loop), has its own. A scope's parent is, in order: the
caller's span named by incoming headers (a server or consumer span), the current span, or none (a new trace). Where
the program uses OpenTelemetry, its current span counts as the current span when it began inside ringtrace's (or
there is no ringtrace span): ringtrace's spans then join OpenTelemetry's trace (``otel_bridge.py``).
"""

from __future__ import annotations

import contextvars
import os
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeAlias, TypeVar

from ringtrace.client.accelerator import speedups
from ringtrace.client.recording.otel_bridge import OTEL_TRACE, otel_context, otel_current_span
from ringtrace.client.recording.traceparent import (
    SAMPLED,
    SpanContext,
    child_of,
    format_traceparent,
    new_root,
    parse_traceparent,
)
from ringtrace.wire.recent import Recent

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "KINDS",
    "OpenSpan",
    "TraceScope",
    "close_span",
    "current_span",
    "extract",
    "inject",
    "new_trace_scope",
    "open_span",
    "serving",
]

#: Span kinds, as OpenTelemetry names them.
KINDS: Final = ("internal", "server", "client", "producer", "consumer")
#: Kinds whose headers are the caller's (read), and those whose headers go to the callee (written).
_INCOMING: Final = frozenset(("server", "consumer"))
_OUTGOING: Final = frozenset(("client", "producer"))
#: Headers: a mapping (names in any case), or a sequence of (name, value) pairs of str or bytes.
Headers: TypeAlias = "Mapping[str, Any] | Sequence[tuple[Any, Any]]"
_Headers = TypeVar("_Headers", bound=Headers)
#: A span ``open_span`` began: its plain scope (entered), its args, the token of the current span set to it, and its
#: context.
OpenSpan: TypeAlias = "tuple[Any, dict[str, Any], contextvars.Token[_Active | None], SpanContext]"


class _Active(NamedTuple):
    context: SpanContext
    #: OpenTelemetry's current span when this one began: a different one now began inside this one.
    otel_span: object | None
    #: A server span, or a span inside one: what serves the request (an app inside another, a middleware given under
    #: a recorded server) records no second server span of it (``serving``).
    serving: bool


#: Makes a tuple subclass without the call to its Python-level ``__new__``, and an object without its ``__init__``.
_new = tuple.__new__
_new_object = object.__new__
_modules = sys.modules
_ACTIVE: contextvars.ContextVar[_Active | None] = contextvars.ContextVar("ringtrace_span", default=None)
#: Spans exited in a context other than the one they were entered in (another task, a generator finalised
#: elsewhere), by span id: the span each was entered in, current again where the ended one still is (the context
#: they were entered in cannot be reset from another). The most recent ones: a context that still holds an older
#: one is gone, or has had a span of its own since.
_ENDED_ELSEWHERE_KEPT: Final = 10_000
_ENDED_ELSEWHERE: Final[Recent[str, _Active | None]] = Recent(_ENDED_ELSEWHERE_KEPT)
#: Its dict, asked whether it holds any on every span: ``Recent.__len__`` would be a Python-level call each time.
_ENDED_ELSEWHERE_ENTRIES: Final = _ENDED_ELSEWHERE._entries
#: Whether each type of headers seen is a mapping (``_is_mapping``); a program has a few kinds of headers.
_MAPPING_TYPES_KEPT: Final = 64
_MAPPING_TYPES: Final[dict[type, bool]] = {}


def serving() -> bool:
    """Whether the running code is inside a server span (ringtrace's: an integration's or the program's own): the
    HTTP integrations' servers record no second span of the request they serve."""
    active = _active()
    return active is not None and active.serving


def _serving_no_more() -> None:
    """In a child forked inside a server span: its current span goes on (what it does is part of the request), but it
    serves none of its parent's requests: a server it runs records its own."""
    active = _active()
    if active is not None and active.serving:
        _ACTIVE.set(_new(_Active, (active.context, active.otel_span, False)))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_serving_no_more)


def current_span() -> SpanContext | None:
    """The span of a trace the running code is in (ringtrace's or OpenTelemetry's, the innermost); None outside
    any trace."""
    return _current_span(otel_current_span())


def _current_span(otel_span: object | None) -> SpanContext | None:
    """``current_span()``, OpenTelemetry's current span being ``otel_span``."""
    active = _active()
    if active is not None and (otel_span is None or otel_span is active.otel_span):
        return active.context
    return otel_context(otel_span) if otel_span is not None else None


def _active() -> _Active | None:
    """ringtrace's current span: ``_ACTIVE``'s, or where that one ended in another context (a WSGI body closed by
    another thread), the one it was begun in."""
    active = _ACTIVE.get()
    if _ENDED_ELSEWHERE_ENTRIES:
        while active is not None:
            outer = _ENDED_ELSEWHERE.get(active.context.span_id, active)
            if outer is active:  # not ended elsewhere (or forgotten meanwhile, by another thread)
                break
            active = outer
    return active


def inject(headers: _Headers, context: SpanContext | None = None) -> _Headers:
    """Write ``traceparent`` (and ``tracestate``, if the trace has one) naming ``context`` (default: the current
    span) into outgoing ``headers``, and return them: a mapping, or a list of (name, value) pairs, which gets pairs
    appended (bytes if its first pair is, as ASGI's are). Outside any trace, writes nothing. Never raises: headers
    that cannot be written (an immutable mapping) are left as they are."""
    if context is None:
        context = current_span()
    if context is not None:
        try:
            fields = [("traceparent", format_traceparent(context))]
            if context.tracestate:
                fields.append(("tracestate", context.tracestate))
            if isinstance(headers, list):
                raw = bool(headers) and isinstance(headers[0][0], bytes)
                headers.extend((k.encode(), v.encode()) if raw else (k, v) for k, v in fields)
            else:
                for name, value in fields:
                    headers[name] = value  # type: ignore[index]
        except Exception:
            pass
    return headers


def extract(headers: Headers | None) -> SpanContext | None:
    """The caller's span named by incoming ``headers``: any mapping, the names in any case (a WSGI environ's
    ``HTTP_TRACEPARENT`` too), or a sequence of (name, value) pairs, of str or of bytes (ASGI's ``scope["headers"]``).
    None when they name none, or a ``traceparent`` the specification calls invalid (the callee then starts a trace
    of its own). Never raises."""
    if headers is None:
        return None
    try:
        if not _is_mapping(headers):
            pairs: Sequence[tuple[Any, Any]] = headers  # type: ignore[assignment]
            traceparent = _pair_value(pairs, "traceparent")
            return None if traceparent is None else parse_traceparent(traceparent, _pair_value(pairs, "tracestate"))
        mapping: Mapping[str, Any] = headers  # type: ignore[assignment]  # (both looked up here: calls cost)
        traceparent = mapping.get("traceparent")
        if traceparent is None and isinstance(mapping, dict):
            traceparent = _scanned(mapping, "traceparent")
        if traceparent is None:
            return None
        tracestate = mapping.get("tracestate")
        if tracestate is None and isinstance(mapping, dict):
            tracestate = _scanned(mapping, "tracestate")
        return parse_traceparent(traceparent, tracestate)
    except Exception:
        return None


def _pair_value(headers: Sequence[tuple[Any, Any]], name: str) -> object:
    """The value of the first (name, value) pair named ``name`` in any case."""
    for key, value in headers:
        if isinstance(key, bytes):
            key = key.decode("latin-1")
        if isinstance(key, str) and key.lower() == name:
            return value.decode("latin-1") if isinstance(value, bytes) else value
    return None


def _scanned(headers: dict[Any, Any], name: str) -> object:
    """A plain dict's ``name`` header where it is not under ``name`` itself: its keys as the sender spelled them, or
    WSGI's (``HTTP_TRACEPARENT``)."""
    if type(headers) is dict:  # (a subclass may iterate its own way)
        # No key holds the name in any case: none, without the scan (a Python-level call per key). The keys'
        # lowercase in one call holds each key's (the name's characters are all ASCII; a str subclass is read
        # as its characters, as any lower() of its own that is a lowercase reads it).
        try:
            keys = " ".join(headers).lower()
        except TypeError:  # a key that is not a str: the scan below skips it
            keys = name
        if name not in keys:
            return None
    wsgi = "http_" + name
    return next((v for k, v in headers.items() if isinstance(k, str) and k.lower() in (name, wsgi)), None)


class TraceScope:
    """A span of a trace (see the module's docstring): a plain scope with the span's ids as args, and the current
    span while it is open. ``context`` is the span's ``SpanContext`` once entered.

    ``new_trace_scope`` makes one without calling ``__init__`` (a call into a Python-level ``__init__`` is a good part
    of the cost of a span); the two set the same state."""

    __slots__ = ("_args", "_outer", "_scope", "_token", "_what", "context")

    def __init__(
        self,
        make_scope: Callable[[object, dict[str, Any]], Any],
        label: object,
        kind: str,
        headers: Any,
        args: dict[str, Any],
    ) -> None:
        #: ``make_scope(label, args)`` makes the plain scope (keeping ``args``, a dict made for it), and the rest.
        self._what = (make_scope, label, kind, headers, args)
        self._scope: Any = None
        self._token: Any = None
        #: The args of the open entry's plain scope (``relabel`` adds to them).
        self._args: dict[str, Any] | None = None
        #: What an entry still open holds while the same scope is entered again inside it (a stack).
        self._outer: list[tuple[Any, Any, SpanContext | None, dict[str, Any] | None]] | None = None
        self.context: SpanContext | None = None

    def __enter__(self) -> TraceScope:
        make_scope, label, kind, headers, args = self._what
        if self._scope is not None:  # entered again while open: a span of its own, the open one kept to come back to
            self._outer = [*(self._outer or ()), (self._token, self._scope, self.context, self._args)]
        self._scope, self._args, self._token, self.context = open_span(make_scope, label, kind, headers, args)
        return self

    def relabel(self, label: object, /, **args: Any) -> None:
        """Name the span ``label`` and add ``args`` to its args, from now until it exits (and for any later entry):
        for a name known only once the span began, as a server's route is, matched inside the framework."""
        make_scope, _, kind, headers, given = self._what
        self._what = (make_scope, label, kind, headers, given)
        if args:
            given.update(args)  # (the dict made for this span: each entry's scope has a copy, made as it is entered)
        scope = self._scope
        if scope is not None:
            scope.label = label
            if args:
                self._args.update(args)  # type: ignore[union-attr]  # (entered: set with the scope)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        scope = self._scope
        if scope is None:  # exited without being entered: nothing to record
            return
        self._scope = None
        token, context = self._token, self.context
        if self._outer:  # the entry this one was nested in is open again
            self._token, self._scope, self.context, self._args = self._outer.pop()
        close_span(scope, token, context, exc_type, exc, tb)


def open_span_in_python(
    make_scope: Callable[[object, dict[str, Any]], Any], label: object, kind: str, headers: Any, args: dict[str, Any]
) -> OpenSpan:
    """``open_span`` in Python (the C recorder's is its twin): a span of a trace begun and entered (``TraceScope``'s
    entry, for an integration that begins and ends a span in one place: no object kept but the tuple): the plain scope
    entered, its args (``args`` with the span's ids: add to them before it ends, a relabel's), the token of the current
    span set to it, and its context. End it with ``close_span``."""
    # OpenTelemetry's span, read once: it is both the parent's candidate and what the span began in (the module
    # looked for here: most programs have none, and a call is a good part of a span's cost).
    otel_span = None if _modules.get(OTEL_TRACE) is None else otel_current_span()
    parent = extract(headers) if headers is not None and kind in _INCOMING else None
    if parent is None:
        if otel_span is None and not _ENDED_ELSEWHERE_ENTRIES:  # _current_span(None), inlined for the usual case
            active = _ACTIVE.get()
            parent = None if active is None else active.context
        else:
            parent = _current_span(otel_span)
    context, args, token = _begin(parent, args, kind, otel_span)
    try:
        if headers is not None and kind in _OUTGOING:
            inject(headers, context)
        scope = make_scope(label, args)
        scope.__enter__()
    except BaseException:  # the span never began: the current span is again the one it would have begun in
        _ACTIVE.reset(token)
        raise
    return scope, args, token, context


def close_span_in_python(
    scope: Any,
    token: contextvars.Token[_Active | None],
    context: SpanContext | None,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
) -> None:
    """``close_span`` in Python (the C recorder's is its twin): end the span ``open_span`` began (its scope, token and
    context): the current span is again the one it began in, and its plain scope exits with the exception it ends
    with, if any."""
    try:
        _ACTIVE.reset(token)
    except (ValueError, RuntimeError):  # exited in another context (another task, a generator finalised elsewhere)
        _ended_elsewhere(context, token)
    scope.__exit__(exc_type, exc, tb)


def _begin_span(
    parent: SpanContext | None, args: dict[str, Any], kind: str, otel_span: object | None
) -> tuple[SpanContext, dict[str, Any], contextvars.Token[_Active | None]]:
    """A span begun, its parent known: its context (a child of ``parent``, or the first span of a new trace),
    ``args`` with its ids and kind (a new dict), and the token of ``_ACTIVE`` set to it, begun in ``otel_span`` (and
    serving where it is a server span or begins inside one). The C recorder's ``begin_span`` is the same in one call."""
    if parent is None:
        context = new_root()
        args = {**args, "trace_id": context.trace_id, "span_id": context.span_id, "kind": kind}
    else:
        context = child_of(parent)
        args = {
            **args,
            "trace_id": context.trace_id,
            "span_id": context.span_id,
            "parent_span_id": parent.span_id,
            "kind": kind,
        }
    outer = _active()
    serving = kind == "server" or (outer is not None and outer.serving)
    return context, args, _ACTIVE.set(_new(_Active, (context, otel_span, serving)))


if speedups is None:
    _begin = _begin_span
else:
    speedups.configure_spans(SpanContext, _Active, _ACTIVE, random.getrandbits, SAMPLED)
    _begin = speedups.begin_span


def new_trace_scope(
    make_scope: Callable[[object, dict[str, Any]], Any], label: object, kind: str, headers: Any, args: dict[str, Any]
) -> TraceScope:
    """``TraceScope(make_scope, label, kind, headers, args)`` without the call to ``__init__``."""
    scope: TraceScope = _new_object(TraceScope)
    scope._what = (make_scope, label, kind, headers, args)
    scope._scope = scope._token = scope._args = scope._outer = scope.context = None
    return scope


def _ended_elsewhere(span: SpanContext | None, token: contextvars.Token[_Active | None]) -> None:
    """``span``, made current by ``token``, ended in another context: where it is still current, the span it was
    entered in is."""
    if span is None:
        return
    outer = token.old_value
    _ENDED_ELSEWHERE.put(span.span_id, None if outer is contextvars.Token.MISSING else outer)


def _is_mapping(headers: object) -> bool:
    """``isinstance(headers, Mapping)``, known by type after the first (the ABC's check costs more than a request's
    header lookup: a server span asks it for every request)."""
    kind = type(headers)
    known = _MAPPING_TYPES.get(kind)
    if known is None:
        known = isinstance(headers, Mapping)
        if len(_MAPPING_TYPES) < _MAPPING_TYPES_KEPT:
            _MAPPING_TYPES[kind] = known
    return known


#: The twins: in C where the recorder is built (a server's every request opens and closes a span).
open_span: Callable[..., OpenSpan] = open_span_in_python
close_span: Callable[..., None] = close_span_in_python
if speedups is not None:
    # What is rare, the C twins ask of the Python side: OpenTelemetry in the program, a caller's traceparent, a span
    # ended in another context, the current span where one has been.
    speedups.configure_open_span(
        _modules,
        OTEL_TRACE,
        _ENDED_ELSEWHERE_ENTRIES,
        _INCOMING,
        _OUTGOING,
        extract,
        _current_span,
        inject,
        _ended_elsewhere,
        open_span_in_python,
        serving,
    )
    open_span, close_span = speedups.open_span, speedups.close_span
