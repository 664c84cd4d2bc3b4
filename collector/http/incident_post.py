"""``POST /incidents``: an incident by hand, now, whatever the rules say: ``reason`` (required), ``scope``
(process, host, trace, fleet; default process), ``before`` and ``after`` (durations: 30s and 5s by default), the
processes by ``pid``, ``process``, ``host``, and ``trace_id`` (what a ``trace`` scope follows); its body, if any, a
JSON object: the args of its trigger event, as ``tl.incident(reason, **args)`` gives them (``parse_incident_args``).
Answers 202 with the incident's id: it is listed as pending at once, and saved once ``after`` has run. A parameter
that is unknown, repeated or malformed, or an arg past its bounds, is a 400 naming it."""

from __future__ import annotations

import json
import math
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

from aiohttp import web
from ringtrace.collector.http.query import QueryError, choice, parse_process_filter
from ringtrace.collector.incidents.engine import CapturesBusy
from ringtrace.collector.incidents.rules import DEFAULT_AFTER_NS, DEFAULT_BEFORE_NS, SCOPES, Scope
from ringtrace.collector.read.selection import EventFilter
from ringtrace.wire.errors import ConfigError, OutOfRange
from ringtrace.wire.parsing import parse_duration_ns

__all__ = [
    "INCIDENT_PARAMETERS",
    "MAX_ARGS",
    "MAX_ARGS_BYTES",
    "IncidentPoster",
    "IncidentRequest",
    "parse_incident_args",
    "parse_incident_request",
    "post_incident",
]

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
#: The args of a body: at most this much JSON (what a record's trigger event keeps whole: ``MAX_TRIGGER_ARGS_BYTES``),
MAX_ARGS_BYTES: Final = 4096
#: at most this many, each named by 1 to ``MAX_ARG_NAME_CHARS`` characters (no control characters),
MAX_ARGS: Final = 32
MAX_ARG_NAME_CHARS: Final = 100
#: each a JSON string, number (an integer within 64 bits), true, false or null, as an event's arg is.
_INT64: Final = 2**63


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
    named = any(value is not None for value in (selected.pids, selected.shown_pids, selected.process, selected.host))
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


def parse_incident_args(body: bytes) -> dict[str, Any]:
    """The args a ``POST /incidents`` body gives its trigger event: a JSON object of at most ``MAX_ARGS`` names, each
    of a scalar value, ``MAX_ARGS_BYTES`` in all (an empty body: none).

    Raises:
        QueryError: the body is past its bounds, not a JSON object, or an arg is not one an event carries (named).
    """
    if len(body) > MAX_ARGS_BYTES:
        raise QueryError(f"the body (the incident's args) is more than {MAX_ARGS_BYTES} bytes")
    if not body.strip():
        return {}
    try:
        args = json.loads(body)
    except ValueError as exc:
        raise QueryError(f"the body (the incident's args) is not JSON: {exc}") from None
    if not isinstance(args, dict):
        raise QueryError(f"the body (the incident's args) must be a JSON object, not {_JSON_TYPES[type(args)]}")
    if len(args) > MAX_ARGS:
        raise QueryError(f"the body holds {len(args)} args, more than {MAX_ARGS}")
    for name, value in args.items():
        if not name or len(name) > MAX_ARG_NAME_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in name):
            raise QueryError(f"arg {name!r:.120}: a name is 1 to {MAX_ARG_NAME_CHARS} characters, no control ones")
        if isinstance(value, dict | list):
            raise QueryError(f"arg {name!r} is a JSON {'object' if isinstance(value, dict) else 'array'}: an arg is a "
                             "string, a number, true, false or null")  # fmt: skip
        if isinstance(value, int) and not isinstance(value, bool) and not -_INT64 <= value < _INT64:
            raise QueryError(f"arg {name!r} is {value}: an integer arg fits in 64 bits")
        if isinstance(value, float) and not math.isfinite(value):
            raise QueryError(f"arg {name!r} is {value}: a number arg is finite")
    return args


async def _body(request: web.Request) -> bytes:
    """The body, up to one byte past ``MAX_ARGS_BYTES`` whatever Content-Length says: read until its end, as a read
    answers with what has arrived so far (a body sent in parts would be cut short)."""
    body = b""
    while len(body) <= MAX_ARGS_BYTES:
        part = await request.content.read(MAX_ARGS_BYTES + 1 - len(body))
        if not part:
            break
        body += part
    return body


def _form(body: bytes) -> list[tuple[str, str]]:
    """The parameters of a form body, as the query string's."""
    if len(body) > MAX_ARGS_BYTES:
        raise QueryError(f"the form body is past {MAX_ARGS_BYTES} bytes")
    try:
        return urllib.parse.parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise QueryError("the form body is not UTF-8") from None


#: What JSON calls a value of each type ``json.loads`` makes.
_JSON_TYPES: Final = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
                      type(None): "null"}  # fmt: skip


def _window(name: str, text: str | None, default_ns: int) -> int:
    if text is None:
        return default_ns
    try:
        ns = parse_duration_ns(text.strip())
    except OutOfRange:
        ns = -1  # (negative, or past 64 bits of ns: said with this parameter's own range below)
    except ConfigError as exc:
        raise QueryError(f"query parameter {name!r}: {exc}") from None
    if not 0 <= ns <= MAX_WINDOW_NS:
        raise QueryError(f"query parameter {name!r} must be from 0 to 1h, got {text!r:.80}")
    return ns


class IncidentPoster(Protocol):
    """What ``POST /incidents`` needs of the collector (``Collector.fire_incident``)."""

    async def fire_incident(
        self,
        reason: str,
        *,
        scope: Scope,
        before_ns: int,
        after_ns: int,
        selected: EventFilter | None,
        args: dict[str, Any] | None = None,
    ) -> str: ...


def post_incident(collector: IncidentPoster) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The handler of ``POST /incidents`` over ``collector``."""

    async def handler(request: web.Request) -> web.Response:
        params, args = list(request.query.items()), {}
        try:
            if request.can_read_body and request.content_type == "application/x-www-form-urlencoded":
                body = await _body(request)
                if body.lstrip().startswith(b"{"):  # (curl -d sends JSON as a form unless told otherwise)
                    args = parse_incident_args(body)
                else:
                    params += _form(body)
            elif request.can_read_body:
                body = await _body(request)
                if body and request.content_type != "application/json":
                    raise QueryError(f"the body is the incident's args, a JSON object (Content-Type: application/json),"
                                     f" not {request.content_type:.80}")  # fmt: skip
                args = parse_incident_args(body)
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
                args=args,
            )
        except CapturesBusy as exc:
            raise web.HTTPServiceUnavailable(text=f"{exc}\n", headers={"Retry-After": "1"}) from None
        except ConfigError as exc:  # no process to take
            raise web.HTTPNotFound(text=f"{exc}\n") from None
        return web.json_response({"id": incident_id}, status=202)

    return handler
