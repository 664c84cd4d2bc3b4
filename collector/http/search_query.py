"""The query parameters of ``GET /spans`` and ``GET /aggregates``: the snapshot's filters (``query.py``; ``limit`` is
of spans here, not events) and what a span must be besides (``read/span_walk.py``'s ``SpanFilter``).

Pure and synchronous, for the HTTP API and the command line alike; every refusal is a ``QueryError`` that names the
parameter, what it takes and what it got. ``arg.KEY=VALUE`` may be given more than once (every one must hold); every
other parameter at most once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from ringtrace.collector.http.query import SNAPSHOT_PARAMETERS, QueryError, choice, flag, parse_snapshot_query
from ringtrace.collector.incidents.incident_files import valid_id
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.read.span_aggregates import GROUPINGS
from ringtrace.collector.read.span_search import MAX_SPANS, SORTS
from ringtrace.collector.read.span_walk import SpanFilter
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.parsing import parse_duration_ns

__all__ = [
    "AGGREGATES_PARAMETERS",
    "ARG_PREFIX",
    "DEFAULT_SPANS",
    "SPANS_PARAMETERS",
    "SearchQuery",
    "parse_search_query",
]

#: What an arg condition's parameter starts with: ``arg.http.status=500`` is the arg ``http.status``.
ARG_PREFIX: Final = "arg."
#: How many spans ``/spans`` answers with when ``limit`` does not say.
DEFAULT_SPANS: Final = 100
_MAX_ARGS: Final = 32
_MAX_ARG_CHARS: Final = 1024

_FILTERS: Final = {
    name: text for name, text in SNAPSHOT_PARAMETERS.items() if name not in ("limit", "format", "table", "columns")
}
#: What the two take besides the snapshot's filters (and ``arg.KEY``).
_SPAN_FILTERS: Final = {
    "min_duration": "a duration: a number and a unit (ns, us, ms, s, m, h), like 250ms",
    "max_duration": "a duration: a number and a unit (ns, us, ms, s, m, h), like 2s",
    "has_error": "1, true, yes, on (only spans in error) or 0, false, no, off (only those not)",
}
#: Where the two search, when not the live store (the store, or with ``--jetstream`` the stream).
_SOURCES: Final = {
    "incident": "a saved incident's id: its snapshot is searched, not the live store (no flush_timeout_s with it)",
}
#: What ``/spans`` takes (and ``arg.KEY=VALUE``, repeatable).
SPANS_PARAMETERS: Final = {
    **_FILTERS,
    **_SPAN_FILTERS,
    **_SOURCES,
    "sort": f"one of {', '.join(SORTS)}",
    "limit": f"a whole number of spans, 1 to {MAX_SPANS} (default {DEFAULT_SPANS})",
}
#: What ``/aggregates`` takes (and ``arg.KEY=VALUE``, repeatable).
AGGREGATES_PARAMETERS: Final = {**_FILTERS, **_SPAN_FILTERS, **_SOURCES, "by": f"one of {', '.join(GROUPINGS)}"}


@dataclass(frozen=True)
class SearchQuery:
    filter: EventFilter
    spans: SpanFilter
    flush_timeout_s: float
    sort: str = SORTS[0]
    limit: int = DEFAULT_SPANS
    by: str = GROUPINGS[0]
    #: The saved incident whose snapshot is searched (None: the live store).
    incident: str | None = None


def parse_search_query(
    params: Iterable[tuple[str, str]],
    *,
    now_ns: int,
    aggregates: bool = False,
    flush_timeout_s: float = 1.0,
    max_flush_timeout_s: float = 60.0,
) -> SearchQuery:
    """A ``/spans`` query (``/aggregates``, with ``aggregates``) from its parameters, in order, repeats included.

    Raises:
        QueryError: a parameter is unknown, repeated or malformed.
    """
    accepted = AGGREGATES_PARAMETERS if aggregates else SPANS_PARAMETERS
    args: list[tuple[str, str]] = []
    own: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for key, value in params:
        if key.startswith(ARG_PREFIX):
            args.append((_arg_key(key), value))
        elif key in _SPAN_FILTERS or key in _SOURCES or key in ("sort", "limit", "by"):
            if key not in accepted:
                raise QueryError(f"unknown query parameter {key!r} (accepted: {', '.join(accepted)}, arg.KEY)")
            if key in own:
                raise QueryError(f"query parameter {key!r} is given more than once (it takes one value)")
            own[key] = value
        elif key not in _FILTERS:
            raise QueryError(f"unknown query parameter {key!r:.80} (accepted: {', '.join(accepted)}, arg.KEY)")
        else:
            rest.append((key, value))
    incident = own.get("incident")
    if incident is not None:
        if not valid_id(incident):
            raise QueryError(
                "query parameter 'incident' must be an incident's id (1 to 200 of A-Z a-z 0-9 _ -), "
                f"got {incident!r:.80}"
            )
        if any(key == "flush_timeout_s" for key, _ in rest):
            raise QueryError("query parameter 'flush_timeout_s' does not go with 'incident' (its snapshot was taken)")
    if len(args) > _MAX_ARGS:
        raise QueryError(f"at most {_MAX_ARGS} arg.KEY parameters are taken, got {len(args)}")
    snapshot = parse_snapshot_query(
        rest,
        now_ns=now_ns,
        flush_timeout_s=flush_timeout_s,
        max_flush_timeout_s=max_flush_timeout_s,
        accepted=_FILTERS,
    )
    low = _duration("min_duration", own["min_duration"]) if "min_duration" in own else None
    high = _duration("max_duration", own["max_duration"]) if "max_duration" in own else None
    if low is not None and high is not None and low > high:
        raise QueryError(f"query parameter 'min_duration' ({low} ns) must not be more than 'max_duration' ({high} ns)")
    spans = SpanFilter(
        min_duration_ns=low,
        max_duration_ns=high,
        has_error=flag("has_error", own["has_error"]) if "has_error" in own else None,
        args=tuple(args),
    )
    return SearchQuery(
        snapshot.filter,
        spans,
        snapshot.flush_timeout_s,
        sort=choice("sort", own["sort"], SORTS) if "sort" in own else SORTS[0],
        limit=_limit(own["limit"]) if "limit" in own else DEFAULT_SPANS,
        by=_grouping(own["by"]) if "by" in own else GROUPINGS[0],
        incident=incident,
    )


def _arg_key(key: str) -> str:
    name = key[len(ARG_PREFIX) :]
    if not name or len(name) > _MAX_ARG_CHARS:
        raise QueryError(f"query parameter {key!r:.80} must name an arg: arg.KEY=VALUE, KEY 1 to {_MAX_ARG_CHARS} "
                         f"characters, got {len(name)}")  # fmt: skip
    return name


def _duration(name: str, text: str) -> int:
    try:
        return parse_duration_ns(text.strip())
    except (ConfigError, ValueError) as exc:
        raise QueryError(f"query parameter {name!r}: {exc}") from None


def _limit(text: str) -> int:
    if not (text.isdigit() and len(text) <= 10 and 1 <= int(text) <= MAX_SPANS):
        raise QueryError(f"query parameter 'limit' must be a whole number from 1 to {MAX_SPANS}, got {text!r:.80}")
    return int(text)


def _grouping(text: str) -> str:
    parts = [part.strip().lower() for part in text.split(",")]
    if len(parts) == 2 and parts == ["process", "name"]:
        parts.reverse()  # (the same grouping)
    return choice("by", ",".join(parts), GROUPINGS)
