"""``POST /incidents``: an incident by hand, now, whatever the rules say: ``reason`` (required), ``scope``
(process, host, trace, fleet; default process), ``before`` and ``after`` (durations: 30s and 5s by default), the
processes by ``pid``, ``process``, ``host``, and ``trace_id`` (what a ``trace`` scope follows). Answers 202 with the
incident's id: it is listed once ``after`` has run. A parameter that is unknown, repeated or malformed is a 400 naming
it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Final, Protocol

from aiohttp import web
from ringtrace.collector.http.query import QueryError, choice, parse_process_filter
from ringtrace.collector.incidents.engine import CapturesBusy
from ringtrace.collector.incidents.rules import DEFAULT_AFTER_NS, DEFAULT_BEFORE_NS, SCOPES, Scope
from ringtrace.collector.read.selection import EventFilter
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.parsing import parse_duration_ns

__all__ = ["INCIDENT_PARAMETERS", "IncidentPoster", "IncidentRequest", "parse_incident_request", "post_incident"]

#: The parameters ``POST /incidents`` takes, beside those that select processes (``pid``, ``process``, ``host``).
INCIDENT_PARAMETERS: Final = {
    "reason": "why (the record's reason and its trigger event's name)",
    "scope": f"what it keeps: {', '.join(SCOPES)} (default: process if pid, process or host is given, else fleet)",
    "before": "how long before now it keeps (default 30s)",
    "after": "how long after now it keeps (default 5s)",
    "trace_id": "the trace a scope of trace follows (32 hex digits)",
}
#: At most this much of a window on either side, as a rule's (``rule_file.py``).
MAX_WINDOW_NS: Final = 3600 * 10**9
MAX_REASON_CHARS: Final = 1000


@dataclass(frozen=True, slots=True)
class IncidentRequest:
    reason: str
    scope: Scope
    before_ns: int
    after_ns: int
    #: The processes chosen (None: none named) and the trace, if given.
    selected: EventFilter | None


def parse_incident_request(params: Iterable[tuple[str, str]]) -> IncidentRequest:
    """What ``POST /incidents`` asks for.

    Raises:
        QueryError: a parameter unknown, repeated, missing (``reason``) or malformed, named.
    """
    selected, values = parse_process_filter(params, INCIDENT_PARAMETERS)
    reason = values.get("reason", "").strip()
    if not reason:
        raise QueryError("query parameter 'reason' is required: why the incident is taken")
    if len(reason) > MAX_REASON_CHARS:
        raise QueryError(f"query parameter 'reason' is {len(reason)} characters, more than {MAX_REASON_CHARS}")
    named = selected.pids is not None or selected.process is not None or selected.host is not None
    # (by default, the processes named; none named: every one, not whichever came first)
    default: Scope = "process" if named else "fleet"
    scope: Scope = choice("scope", values["scope"], SCOPES) if "scope" in values else default  # type: ignore[assignment]
    before_ns = _window("before", values.get("before"), DEFAULT_BEFORE_NS)
    after_ns = _window("after", values.get("after"), DEFAULT_AFTER_NS)
    if before_ns + after_ns == 0:
        raise QueryError("query parameters 'before' and 'after' are both 0: an incident keeps a window of some length")
    if "trace_id" in values:
        trace_id = values["trace_id"].strip().lower()
        if len(trace_id) != 32 or any(c not in "0123456789abcdef" for c in trace_id):
            raise QueryError(f"query parameter 'trace_id' must be 32 hex digits, got {values['trace_id']!r:.80}")
        selected = replace(selected, trace_id=trace_id)
    elif scope == "trace":
        raise QueryError("query parameter 'trace_id' is required with scope=trace: the trace it follows")
    return IncidentRequest(reason, scope, before_ns, after_ns, selected if named or "trace_id" in values else None)


def _window(name: str, text: str | None, default_ns: int) -> int:
    if text is None:
        return default_ns
    try:
        ns = parse_duration_ns(text.strip())
    except ConfigError as exc:
        raise QueryError(f"query parameter {name!r}: {exc}") from None
    if not 0 <= ns <= MAX_WINDOW_NS:
        raise QueryError(f"query parameter {name!r} must be from 0 to 1h, got {text!r:.80}")
    return ns


class IncidentPoster(Protocol):
    """What ``POST /incidents`` needs of the collector (``Collector.fire_incident``)."""

    async def fire_incident(
        self, reason: str, *, scope: Scope, before_ns: int, after_ns: int, selected: EventFilter | None
    ) -> str: ...


def post_incident(collector: IncidentPoster) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The handler of ``POST /incidents`` over ``collector``."""

    async def handler(request: web.Request) -> web.Response:
        params = list(request.query.items())
        if request.can_read_body and request.content_type == "application/x-www-form-urlencoded":
            form = await request.post()
            params += [(name, value) for name, value in form.items() if isinstance(value, str)]
        try:
            asked = parse_incident_request(params)
        except QueryError as exc:
            raise web.HTTPBadRequest(text=f"{exc}\n") from None
        try:
            incident_id = await collector.fire_incident(
                asked.reason,
                scope=asked.scope,
                before_ns=asked.before_ns,
                after_ns=asked.after_ns,
                selected=asked.selected,
            )
        except CapturesBusy as exc:
            raise web.HTTPServiceUnavailable(text=f"{exc}\n", headers={"Retry-After": "1"}) from None
        except ConfigError as exc:  # no process to take
            raise web.HTTPNotFound(text=f"{exc}\n") from None
        return web.json_response({"id": incident_id}, status=202)

    return handler
