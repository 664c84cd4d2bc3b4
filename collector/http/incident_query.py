"""The parameters of ``GET /incidents`` (which incidents, newest first) and ``GET /incidents/{id}`` (the format, and
the filters of ``/snapshot``; or ``format=record``, its record), checked: an unknown, repeated or malformed one is
refused, named (``QueryError``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from ringtrace.collector.export.formats import DEFAULT_FORMAT, FORMATS, TIMELINE, Format
from ringtrace.collector.http.query import (
    MAX_LIMIT,
    SNAPSHOT_PARAMETERS,
    QueryError,
    SnapshotQuery,
    choice,
    parse_snapshot_query,
    parse_time,
    single_values,
)
from ringtrace.collector.read.selection import EventFilter

__all__ = [
    "INCIDENTS_PARAMETERS",
    "INCIDENT_FORMATS",
    "INCIDENT_PARAMETERS",
    "RECORD",
    "IncidentsQuery",
    "newest_first",
    "parse_incident_query",
    "parse_incidents_query",
]

#: What an incident's snapshot is served in: every snapshot format, and the web view's columns.
INCIDENT_FORMATS: Final[dict[str, Format]] = {**FORMATS, TIMELINE.name: TIMELINE}
#: ``GET /incidents/{id}?format=record``: the incident's record (JSON), whatever its status, not its snapshot.
RECORD: Final = "record"
#: Statuses a listed incident has (pending: its ``after`` still runs; listed by the collector capturing it).
_STATUSES: Final = ("pending", "saved", "failed")

INCIDENTS_PARAMETERS: Final = {
    "rule": "a rule's name: only its incidents",
    "status": f"one of {', '.join(_STATUSES)}",
    "since": "incidents whose trigger began at or after it (wall-clock ns, RFC 3339 or relative: -1h)",
    "until": "incidents whose trigger began before it (as since)",
    "limit": f"at most this many, the newest (1 to {MAX_LIMIT})",
}
#: What ``GET /incidents/{id}`` takes: the format, and what ``/snapshot`` takes besides (a table of a format of tables,
#: its columns, the filters), but a flush (it was taken already).
INCIDENT_PARAMETERS: Final = {
    **{name: text for name, text in SNAPSHOT_PARAMETERS.items() if name != "flush_timeout_s"},
    "format": f"one of {', '.join(INCIDENT_FORMATS)} (default {DEFAULT_FORMAT}), or {RECORD} (the record)",
}


@dataclass(frozen=True)
class IncidentsQuery:
    """Which incidents ``GET /incidents`` lists; None: no condition."""

    rule: str | None = None
    status: str | None = None
    since_ns: int | None = None
    until_ns: int | None = None
    limit: int | None = None

    def select(self, records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """The records (newest first) that the query selects, in the same order."""
        selected = []
        for record in records:
            time_ns = record.get("time_ns")
            if self.rule is not None and record.get("rule") != self.rule:
                continue
            if self.status is not None and record.get("status") != self.status:
                continue
            if self.since_ns is not None and not (isinstance(time_ns, int) and time_ns >= self.since_ns):
                continue
            if self.until_ns is not None and not (isinstance(time_ns, int) and time_ns < self.until_ns):
                continue
            selected.append(record)
            if self.limit is not None and len(selected) >= self.limit:
                break
        return selected


def newest_first(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` by their trigger's time (then id), newest first, as ``GET /incidents`` lists them."""

    def age(record: dict[str, Any]) -> tuple[int, str]:
        time_ns = record.get("time_ns")
        return (time_ns if isinstance(time_ns, int) else 0, str(record.get("id")))

    return sorted(records, key=age, reverse=True)


def parse_incidents_query(params: Iterable[tuple[str, str]], now_ns: int) -> IncidentsQuery:
    """``GET /incidents``'s parameters.

    Raises:
        QueryError: one is unknown, repeated or malformed, named with what it takes.
    """
    values = single_values(params, INCIDENTS_PARAMETERS)
    limit = values.get("limit")
    if limit is not None and not (limit.isdigit() and len(limit) <= 10 and 1 <= int(limit) <= MAX_LIMIT):
        raise QueryError(f"query parameter 'limit' must be a whole number from 1 to {MAX_LIMIT}, got {limit!r:.80}")
    status = values.get("status")
    since = values.get("since")
    until = values.get("until")
    return IncidentsQuery(
        rule=values.get("rule"),
        status=choice("status", status, _STATUSES) if status is not None else None,
        since_ns=parse_time("since", since, now_ns) if since is not None else None,
        until_ns=parse_time("until", until, now_ns) if until is not None else None,
        limit=int(limit) if limit is not None else None,
    )


def parse_incident_query(params: Iterable[tuple[str, str]], now_ns: int) -> tuple[Format | None, SnapshotQuery]:
    """``GET /incidents/{id}``'s format (any case; default ``DEFAULT_FORMAT``; None: ``record``) and the rest, as
    ``/snapshot`` parses it: the events it selects, and for a format of tables the table and its columns.

    Raises:
        QueryError: an unknown, repeated or malformed parameter, an unknown format, or a filter with ``record``.
    """
    formats = [value for name, value in params if name == "format"]
    if len(formats) > 1:
        raise QueryError("query parameter 'format' is given more than once (it takes one value)")
    format_ = choice("format", formats[0], (*INCIDENT_FORMATS, RECORD)) if formats else DEFAULT_FORMAT
    filters = [(name, value) for name, value in params if name != "format"]
    if format_ == RECORD:
        if filters:
            raise QueryError(f"query parameter {filters[0][0]!r:.80} does not go with format=record (it is whole)")
        return None, SnapshotQuery(EventFilter(), DEFAULT_FORMAT, 0.0)
    # A snapshot format is /snapshot's, which checks table and columns against it; the web view's columns
    # (timeline) are not, and take neither (refused as with chrome).
    shown = [*filters, ("format", format_)] if format_ in FORMATS else filters
    query = parse_snapshot_query(shown, now_ns=now_ns, accepted=INCIDENT_PARAMETERS)
    return INCIDENT_FORMATS[format_], query
