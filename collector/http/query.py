"""The HTTP API's query parameters parsed into what they select (``read/selection.py``'s ``EventFilter``), a format
and a flush timeout.

Pure and synchronous, importing no aiohttp: for the HTTP API and the command line (whose filter flags are these
parameters) alike. Every parameter appears at most once; an unknown or
repeated one, or a value that does not parse, raises ``QueryError`` naming the parameter, what it takes and what it
got. Times are wall-clock nanoseconds since the Unix epoch; a query takes them as such, as RFC 3339 text
(``2026-11-22T10:00:00.123456789Z``) or relative to now (``-5s``, ``-1.5m``, ``-250ms``).

Name patterns (``process``, ``host``, ``track``, ``category``, ``name``) are taken as ``Pattern``s: whole text, or a
shell-style glob; a ``[`` that no ``]`` closes is refused.

Values from a fixed list (``format``, ``min_priority``, ``/priority``'s ``priority``) are taken in any case
(``choice``); a yes/no value (``messages_only``) is any of ``1 true yes on`` or ``0 false no off``, in any case
(``flag``). Names stay case-sensitive: they are the program's own.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from ringtrace.collector.export.formats import DEFAULT_FORMAT, FORMATS
from ringtrace.collector.export.table_names import TABLES
from ringtrace.collector.read.selection import EventFilter, Pattern, unclosed_set
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.message_format import PRIORITIES
from ringtrace.wire.parsing import parse_duration_ns

__all__ = [
    "DEFAULT_TAIL_GRACE_S",
    "MAX_TAIL_GRACE_S",
    "POP_PARAMETERS",
    "PROCESS_PARAMETERS",
    "SNAPSHOT_PARAMETERS",
    "STREAM_PARAMETERS",
    "TIMELINE_PARAMETERS",
    "QueryError",
    "SnapshotQuery",
    "accepts_gzip",
    "check_no_params",
    "choice",
    "flag",
    "parse_process_filter",
    "parse_snapshot_query",
    "parse_time",
    "single_values",
    "time_text",
]

#: The most events ``limit`` may ask for.
MAX_LIMIT: Final = 10**9
_MAX_PATTERN_CHARS: Final = 1024
_MAX_PIDS: Final = 1000
_UNITS_NS: Final = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9, "d": 86_400e9}
_RELATIVE: Final = re.compile(r"([-+])(\d+(?:\.\d+)?)(ns|us|ms|s|m|h|d)")
#: RFC 3339 allows any number of fractional digits: past the 9th (below a ns) they are dropped (``parse_time``).
_RFC3339: Final = re.compile(
    r"(\d{4}-\d\d-\d\d)[Tt ](\d\d:\d\d:\d\d)(?:\.(\d+))?([Zz]|[+-]\d\d:\d\d)"
)  # fmt: skip
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
#: What a yes/no parameter takes, in any case.
_YES: Final = ("1", "true", "yes", "on")
_NO: Final = ("0", "false", "no", "off")
_MAX_TIME_NS: Final = 2**63 - 1


class QueryError(ValueError):
    """A query parameter that is unknown, repeated or malformed; the message names it and what it takes."""


@dataclass(frozen=True)
class SnapshotQuery:
    filter: EventFilter
    format: str
    flush_timeout_s: float
    #: For a format of tables (parquet): the table asked for (None: the default, or another format).
    table: str | None = None
    #: For a format of tables: the columns asked for, in the table's order (None: all).
    columns: tuple[str, ...] | None = None
    #: A live tail with ``until`` (``/stream``): how long past it the tail goes on (``grace``).
    grace_s: float = 0.0


#: The format of tables, which ``table`` is for.
_TABLES_FORMAT: Final = FORMATS["parquet"]
#: The parameters ``/snapshot`` takes, and what each takes (for messages).
SNAPSHOT_PARAMETERS: Final = {
    "since": "a time: wall-clock ns, RFC 3339, or relative such as -5s (+30s: from now on)",
    "until": "a time: wall-clock ns, RFC 3339, or relative such as -5s (+30s: from now on)",
    "pid": "process ids, comma-separated",
    "shown_pid": (
        "the pids snapshots and /sources show, comma-separated: those processes alone, not others of the same OS pid"
    ),
    "process": "a process name (or glob)",
    "host": "a host name (or glob)",
    "track": "a thread, task lane, source or counter name (or glob)",
    "category": "a category: a message's, a typed event's class, or span, instant, counter, marker, source, async",
    "name": "an event name (or glob)",
    "min_priority": f"one of {', '.join(PRIORITIES)}",
    "messages_only": f"{', '.join(_YES)} (only messages, the events that carry a priority) or {', '.join(_NO)}",
    "trace_id": (
        "a trace id: 32 hex digits; the events that carry it (spans of a trace, OTLP span events and log records) "
        "and those nested in one of its spans on their thread or task lane"
    ),
    "limit": f"a whole number of events, 1 to {MAX_LIMIT}",
    "format": f"one of {', '.join(FORMATS)}",
    "table": (
        f"with format={_TABLES_FORMAT.name}: one of {', '.join(_TABLES_FORMAT.tables)} "
        f"(default {_TABLES_FORMAT.tables[0]})"
    ),
    "columns": f"with format={_TABLES_FORMAT.name}: the table's columns to write, comma-separated (default all)",
    "flush_timeout_s": "seconds to wait for connected clients to flush",
}


#: How long past its ``until`` a live tail goes on, unless its ``grace`` says otherwise: what was recorded before
#: ``until`` has been stored by then (clients send every 50 ms by default). The collector is not told a client's
#: ``batch_interval_s``: a tail of one that sends less often asks for more grace.
DEFAULT_TAIL_GRACE_S: Final = 2.0
#: The most ``grace`` a tail may ask for.
MAX_TAIL_GRACE_S: Final = 60.0
#: What ``/stream`` takes: the snapshot's filters but those that need the whole store at once, and ``grace``.
STREAM_PARAMETERS: Final = {
    **{
        name: text
        for name, text in SNAPSHOT_PARAMETERS.items()
        if name not in ("limit", "format", "table", "columns", "flush_timeout_s")
    },
    # A tail reads what arrives, with no first pass to find the trace's spans: only what carries the trace id.
    "trace_id": "a trace id: 32 hex digits; the events that carry it (spans of a trace, OTLP span events, log records)",
    "grace": (
        f"with until: how long past it the tail waits for events recorded before it (more than the slowest client's "
        f"batch_interval_s), a duration such as 5s, 0 to {MAX_TAIL_GRACE_S:g}s (default {DEFAULT_TAIL_GRACE_S:g}s)"
    ),
}
#: What ``/timeline`` takes: a snapshot's parameters but its format (it has its own).
TIMELINE_PARAMETERS: Final = {
    name: text for name, text in SNAPSHOT_PARAMETERS.items() if name not in ("format", "table", "columns")
}
#: What ``/pop`` takes: it removes whole processes' segments, so only what selects whole processes.
POP_PARAMETERS: Final = {
    name: SNAPSHOT_PARAMETERS[name] for name in ("pid", "shown_pid", "process", "host", "flush_timeout_s")
}
#: What selects whole processes (``/sources``, ``/clear``, ``/priority``).
PROCESS_PARAMETERS: Final = {name: SNAPSHOT_PARAMETERS[name] for name in ("pid", "shown_pid", "process", "host")}


def parse_process_filter(
    params: Iterable[tuple[str, str]], extra: Mapping[str, str] | None = None
) -> tuple[EventFilter, dict[str, str]]:
    """A filter of processes by ``pid``, ``process`` and ``host``, and the raw values of the ``extra`` parameters
    (each accepted once, and checked by the caller).

    Raises:
        QueryError: a parameter is unknown, repeated or malformed.
    """
    values = single_values(params, {**PROCESS_PARAMETERS, **(extra or {})})
    event_filter = EventFilter(
        pids=_pids("pid", values["pid"]) if "pid" in values else None,
        shown_pids=_pids("shown_pid", values["shown_pid"]) if "shown_pid" in values else None,
        process=_pattern("process", values["process"]) if "process" in values else None,
        host=_pattern("host", values["host"]) if "host" in values else None,
    )
    return event_filter, {name: value for name, value in values.items() if name not in PROCESS_PARAMETERS}


def check_no_params(names: Iterable[str]) -> None:
    """For an endpoint that takes no parameters.

    Raises:
        QueryError: one is given.
    """
    unknown = sorted(set(names))
    if unknown:
        raise QueryError(f"unknown query parameter {unknown[0]!r} (accepted: none)")


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an Accept-Encoding header takes gzip (or anything: ``*``) with a quality above 0."""
    for item in accept_encoding.split(","):
        coding, _, params = item.strip().partition(";")
        if coding.strip().lower() not in ("gzip", "*"):
            continue
        quality = params.strip().lower().removeprefix("q=")
        try:
            return not params or float(quality) > 0
        except ValueError:
            return False
    return False


def single_values(params: Iterable[tuple[str, str]], accepted: Mapping[str, str]) -> dict[str, str]:
    """Each parameter's one value; unknown and repeated parameters are refused."""
    values: dict[str, str] = {}
    for key, value in params:
        if key not in accepted:
            raise QueryError(f"unknown query parameter {key!r:.80} (accepted: {', '.join(accepted)})")
        if key in values:
            raise QueryError(f"query parameter {key!r} is given more than once (it takes one value)")
        values[key] = value
    return values


def parse_time(name: str, text: str, now_ns: int) -> int:
    """A time as wall-clock ns: digits are ns since the epoch, RFC 3339 text an instant (truncated to the ns: a
    fraction's digits past the 9th are dropped), ``-5s`` that long before ``now_ns`` and ``+5s`` that long after it
    (units ns, us, ms, s, m, h, d).

    Raises:
        QueryError: none of these.
    """
    if text.isdigit() and len(text) <= 20:
        return _in_range(name, text, int(text))
    relative = _RELATIVE.fullmatch(text)
    if relative:
        sign, amount, unit = relative.groups()
        span_ns = float(amount) * _UNITS_NS[unit]
        if span_ns >= 2**64:
            return _in_range(name, text, -1)
        return _in_range(name, text, now_ns - round(span_ns) if sign == "-" else now_ns + round(span_ns))
    rfc = _RFC3339.fullmatch(text)
    if rfc:
        date, clock, fraction, zone = rfc.groups()
        try:
            when = datetime.datetime.fromisoformat(f"{date}T{clock}{'+00:00' if zone in 'Zz' else zone}")
        except ValueError as exc:
            raise QueryError(f"query parameter {name!r} is not a valid time: {text!r:.80} ({exc})") from None
        ns = (when - _EPOCH) // datetime.timedelta(seconds=1) * 10**9 + int((fraction or "0")[:9].ljust(9, "0"))
        return _in_range(name, text, ns)
    raise QueryError(
        f"query parameter {name!r} must be wall-clock ns, RFC 3339 (2026-11-22T10:00:00Z) or relative "
        f"(-5s, -1.5m, +30s), got {text!r:.80}"
    )


def time_text(wall_ns: int) -> str:
    """Wall-clock ns as RFC 3339 text in UTC, to the ns (``2026-11-22T10:00:00.123456789Z``): what ``parse_time``
    takes back as the same ns, and how the command's event lines show times."""
    when = datetime.datetime.fromtimestamp(wall_ns // 10**9, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{when}.{wall_ns % 10**9:09d}Z"


def _in_range(name: str, text: str, ns: int) -> int:
    """A time a snapshot can hold: from the epoch to 2262 (nanoseconds in 63 bits)."""
    if not 0 <= ns <= _MAX_TIME_NS:
        raise QueryError(
            f"query parameter {name!r} must be a time from 1970-01-01 to 2262-04-11 (0 to {_MAX_TIME_NS} ns), "
            f"got {text!r:.80}"
        )
    return ns


def _pattern(name: str, text: str) -> Pattern:
    if not text or len(text) > _MAX_PATTERN_CHARS:
        raise QueryError(f"query parameter {name!r} must be 1 to {_MAX_PATTERN_CHARS} characters, got {len(text)}")
    unclosed = unclosed_set(text)
    if unclosed is not None:  # fnmatch would take it as the character itself: most likely a typo
        raise QueryError(
            f"query parameter {name!r} has a '[' at character {unclosed + 1} that no ']' closes, got {text!r:.80} "
            "(a glob's [ ] is a set of characters; '[[]' is the character '[' itself)"
        )
    return Pattern(text)


def flag(name: str, text: str) -> bool:
    """A yes/no parameter: ``1 true yes on`` or ``0 false no off``, in any case.

    Raises:
        QueryError: anything else, named with what it takes.
    """
    folded = text.lower()
    if folded not in _YES and folded not in _NO:
        raise QueryError(
            f"query parameter {name!r} must be one of {', '.join(_YES)} (yes) or {', '.join(_NO)} (no), in any case, "
            f"got {text!r:.80}"
        )
    return folded in _YES


def choice(name: str, text: str, choices: tuple[str, ...]) -> str:
    """A value from ``choices`` (lower-case), given in any case; returns it as ``choices`` spell it.

    Raises:
        QueryError: none of them, named with what it takes.
    """
    folded = text.lower()
    if folded not in choices:
        raise QueryError(f"query parameter {name!r} must be one of {', '.join(choices)} (any case), got {text!r:.80}")
    return folded


def _pids(name: str, text: str) -> frozenset[int]:
    items = text.split(",")
    if len(items) > _MAX_PIDS or not all(item.strip().isdigit() and len(item.strip()) <= 10 for item in items):
        raise QueryError(f"query parameter {name!r} must be up to {_MAX_PIDS} comma-separated pids, got {text!r:.80}")
    return frozenset(int(item) for item in items)


def _limit(text: str) -> int:
    if not (text.isdigit() and len(text) <= 10 and 1 <= int(text) <= MAX_LIMIT):
        raise QueryError(f"query parameter 'limit' must be a whole number from 1 to {MAX_LIMIT}, got {text!r:.80}")
    return int(text)


def _priority(text: str) -> int:
    return PRIORITIES.index(choice("min_priority", text, PRIORITIES))


def _flush_timeout(text: str, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise QueryError(f"query parameter 'flush_timeout_s' must be a number, got {text!r:.80}") from None
    if not 0 <= value <= high:  # also refuses nan
        raise QueryError(f"query parameter 'flush_timeout_s' must be between 0 and {high}, got {text!r:.80}")
    return value


def parse_snapshot_query(
    params: Iterable[tuple[str, str]],
    *,
    now_ns: int,
    flush_timeout_s: float = 1.0,
    max_flush_timeout_s: float = 60.0,
    accepted: Mapping[str, str] = SNAPSHOT_PARAMETERS,
) -> SnapshotQuery:
    """A snapshot's query from its parameters (every (name, value) pair, in order, repeats included).

    Raises:
        QueryError: a parameter is unknown, repeated or malformed, or ``since`` is not before ``until``.
    """
    values = single_values(params, accepted)
    since = parse_time("since", values["since"], now_ns) if "since" in values else None
    until = parse_time("until", values["until"], now_ns) if "until" in values else None
    if since is not None and until is not None and since >= until:
        raise QueryError(f"query parameter 'since' ({since} ns) must be before 'until' ({until} ns)")
    names = ("process", "host", "track", "category", "name")
    patterns = {name: _pattern(name, values[name]) for name in names if name in values}
    event_filter = EventFilter(
        since_ns=since,
        until_ns=until,
        pids=_pids("pid", values["pid"]) if "pid" in values else None,
        shown_pids=_pids("shown_pid", values["shown_pid"]) if "shown_pid" in values else None,
        max_priority_level=_priority(values["min_priority"]) if "min_priority" in values else None,
        messages_only=flag("messages_only", values["messages_only"]) if "messages_only" in values else False,
        limit=_limit(values["limit"]) if "limit" in values else None,
        trace_id=_trace_id(values["trace_id"]) if "trace_id" in values else None,
        **patterns,
    )
    format_ = choice("format", values["format"], tuple(FORMATS)) if "format" in values else DEFAULT_FORMAT
    table = _table(FORMATS[format_].tables, values["table"]) if "table" in values else None
    columns = _columns(FORMATS[format_].tables, table, values["columns"]) if "columns" in values else None
    timeout = _flush_timeout(values["flush_timeout_s"], max_flush_timeout_s) if "flush_timeout_s" in values else None
    grace_s = _grace(values["grace"], until) if "grace" in values else DEFAULT_TAIL_GRACE_S
    return SnapshotQuery(
        event_filter, format_, flush_timeout_s if timeout is None else timeout, table, columns, grace_s
    )


def _grace(text: str, until_ns: int | None) -> float:
    if until_ns is None:
        raise QueryError("query parameter 'grace' goes with 'until' only (a tail without one never ends by itself)")
    try:
        grace_ns = parse_duration_ns(text.strip())
    except (ConfigError, ValueError) as exc:
        raise QueryError(f"query parameter 'grace': {exc}") from None
    if grace_ns > MAX_TAIL_GRACE_S * 10**9:
        raise QueryError(f"query parameter 'grace' must be at most {MAX_TAIL_GRACE_S:g}s, got {text!r:.80}")
    return grace_ns / 1e9


def _table(tables: tuple[str, ...], text: str) -> str:
    if not tables:
        formats = ", ".join(name for name, format_ in FORMATS.items() if format_.tables)
        raise QueryError(f"query parameter 'table' is for format={formats} only (one table per request)")
    return choice("table", text, tables)


def _columns(tables: tuple[str, ...], table: str | None, text: str) -> tuple[str, ...]:
    if not tables:
        formats = ", ".join(name for name, format_ in FORMATS.items() if format_.tables)
        raise QueryError(f"query parameter 'columns' is for format={formats} only")
    named = table or tables[0]
    columns = TABLES[named]
    asked = {column.strip().lower() for column in text.split(",")} - {""}
    if not asked:
        raise QueryError(f"query parameter 'columns' must name at least one of {named}'s columns")
    unknown = sorted(asked - set(columns))
    if unknown:
        raise QueryError(
            f"query parameter 'columns': {named} has no column {unknown[0]!r:.80} (its columns: {', '.join(columns)})"
        )
    return tuple(column for column in columns if column in asked)


def _trace_id(text: str) -> str:
    trace_id = text.strip().lower()
    if len(trace_id) != 32 or any(c not in "0123456789abcdef" for c in trace_id):
        raise QueryError(f"query parameter 'trace_id' must be 32 hex digits, got {text!r:.80}")
    return trace_id
