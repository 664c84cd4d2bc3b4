"""What a snapshot selects, parsed from query parameters: a time window, processes, tracks, kinds of events, a limit.

Pure and synchronous, for the HTTP API and the command line alike. Every parameter appears at most once; an unknown or
repeated one, or a value that does not parse, raises ``QueryError`` naming the parameter, what it takes and what it
got. Times are wall-clock nanoseconds since the Unix epoch; a query takes them as such, as RFC 3339 text
(``2026-11-22T10:00:00.123456789Z``) or relative to now (``-5s``, ``-1.5m``, ``-250ms``).

Name patterns (``process``, ``host``, ``track``, ``category``, ``name``) match the whole text, exactly, unless they hold
``*``, ``?`` or ``[``: then they are shell-style globs (``fnmatch``, case-sensitive).

Values from a fixed list (``format``, ``min_priority``, ``/priority``'s ``priority``) are taken in any case
(``choice``); a yes/no value (``messages_only``) is any of ``1 true yes on`` or ``0 false no off``, in any case
(``flag``). Names stay case-sensitive: they are the program's own.
"""

from __future__ import annotations

import datetime
import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from ringtrace.wire.frames import KindSpec
from ringtrace.wire.message_format import PRIORITIES

__all__ = [
    "EVERYTHING",
    "FORMATS",
    "POP_PARAMETERS",
    "PROCESS_PARAMETERS",
    "STREAM_PARAMETERS",
    "EventFilter",
    "Pattern",
    "QueryError",
    "SnapshotQuery",
    "category_of",
    "choice",
    "flag",
    "parse_process_filter",
    "parse_snapshot_query",
    "parse_time",
]

#: What ``format`` may name: Chrome trace JSON, a snapshot file of the wire format (``wire/PROTOCOL.md``), or
#: Perfetto's protobuf trace format.
FORMATS: Final = ("chrome", "native", "perfetto")
#: The most events ``limit`` may ask for.
MAX_LIMIT: Final = 10**9
_MAX_PATTERN_CHARS: Final = 1024
_MAX_PIDS: Final = 1000
_UNITS_NS: Final = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9, "d": 86_400e9}
_RELATIVE: Final = re.compile(r"-(\d+(?:\.\d+)?)(ns|us|ms|s|m|h|d)")
_RFC3339: Final = re.compile(
    r"(\d{4}-\d\d-\d\d)[Tt ](\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:\d\d)"
)  # fmt: skip
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
#: What a yes/no parameter takes, in any case.
_YES: Final = ("1", "true", "yes", "on")
_NO: Final = ("0", "false", "no", "off")
_MAX_TIME_NS: Final = 2**63 - 1
#: Built-in kinds' categories: one per family (a marker's start, end and instant are all ``marker``).
_BUILTIN_CATEGORIES: Final = {
    "marker_start": "marker",
    "marker_end": "marker",
    "source_open": "source",
    "source_close": "source",
    "async_begin": "async",
    "async_end": "async",
}


class _Process(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def trace_pid(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def host(self) -> str: ...


class QueryError(ValueError):
    """A query parameter that is unknown, repeated or malformed; the message names it and what it takes."""


def category_of(kind: KindSpec) -> str:
    """An event's category: a message's category, a typed event's class name, or its built-in family (``span``,
    ``instant``, ``counter``, ``marker``, ``source``, ``async``)."""
    return _BUILTIN_CATEGORIES.get(kind.name, kind.name)


class Pattern:
    """A name to match: the whole text exactly, or a shell-style glob if it holds *, ? or [."""

    __slots__ = ("_exact", "_regex", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        glob = any(c in text for c in "*?[")
        self._exact = None if glob else text
        self._regex = re.compile(fnmatch.translate(text)) if glob else None

    def __call__(self, value: str) -> bool:
        if self._regex is None:
            return value == self._exact
        return self._regex.match(value) is not None

    def __repr__(self) -> str:
        return repr(self.text)


@dataclass(frozen=True)
class EventFilter:
    """Which events a snapshot holds. Every condition given must hold; None means no condition.

    An event is in the window when it starts there (``since_ns <= start < until_ns``), and ``limit`` keeps the newest
    events by start time (of those ties at the oldest one kept, the first arrived).
    """

    since_ns: int | None = None
    until_ns: int | None = None
    #: OS pids, or the pids a snapshot shows (they differ when two processes had the same pid).
    pids: frozenset[int] | None = None
    process: Pattern | None = None
    host: Pattern | None = None
    #: A thread's, task lane's, source's or counter track's name.
    track: Pattern | None = None
    category: Pattern | None = None
    #: An event's name as shown: a message's rendered text.
    name: Pattern | None = None
    #: Messages up to this level of ``PRIORITIES`` (0 is ``fatal``); other events carry no priority and pass.
    max_priority_level: int | None = None
    #: Only messages (the events that carry a priority): a log's view rather than a timeline's.
    messages_only: bool = False
    limit: int | None = None
    #: Only events of this trace (32 lowercase hex digits): those whose ``trace_id`` arg or field is it (ringtrace's
    #: spans of a trace, OTLP spans, their events and log records carry theirs) and, in a snapshot, those nested in
    #: one of its spans on their track (``trace_spans.py``; a live tail has no first pass to find them).
    trace_id: str | None = None

    @property
    def selects_everything(self) -> bool:
        return self == EVERYTHING

    @property
    def by_event(self) -> bool:
        """Whether events must be decoded to be selected (not only their processes, tracks and frames' times)."""
        return (
            self.since_ns is not None
            or self.until_ns is not None
            or self.category is not None
            or self.name is not None
            or self.max_priority_level is not None
            or self.messages_only
            or self.trace_id is not None
        )

    def selects_process(self, process: _Process) -> bool:
        """Whether the process (a record, a view: anything with its pids, name and host) is selected."""
        return self.process_matches(process.pid, process.trace_pid, process.name, process.host)

    def process_matches(self, pid: int, trace_pid: int, name: str, host: str) -> bool:
        return (
            (self.pids is None or pid in self.pids or trace_pid in self.pids)
            and (self.process is None or self.process(name))
            and (self.host is None or self.host(host))
        )

    def track_matches(self, name: str) -> bool:
        return self.track is None or self.track(name)

    def overlaps(self, first_ns: int, last_ns: int) -> bool:
        """Whether a frame whose events start from ``first_ns`` to ``last_ns`` (wall clock) may hold any selected."""
        since, until = self.since_ns, self.until_ns
        return (since is None or last_ns >= since) and (until is None or first_ns < until)

    def kind_matches(self, kind: KindSpec) -> bool:
        if self.messages_only and kind.shape != "message":
            return False
        if self.category is not None and not self.category(category_of(kind)):
            return False
        if self.max_priority_level is not None and kind.shape == "message" and kind.priority:
            return PRIORITIES.index(kind.priority) <= self.max_priority_level if kind.priority in PRIORITIES else False
        return True

    def in_window(self, ts_ns: int) -> bool:
        return (self.since_ns is None or ts_ns >= self.since_ns) and (self.until_ns is None or ts_ns < self.until_ns)

    def describe(self) -> dict[str, object]:
        """The conditions given, for a snapshot's ``otherData``."""
        out: dict[str, object] = {}
        for name in ("since_ns", "until_ns", "limit"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.pids is not None:
            out["pid"] = sorted(self.pids)
        for name in ("process", "host", "track", "category", "name"):
            pattern = getattr(self, name)
            if pattern is not None:
                out[name] = pattern.text
        if self.max_priority_level is not None:
            out["min_priority"] = PRIORITIES[self.max_priority_level]
        if self.messages_only:
            out["messages_only"] = True
        if self.trace_id is not None:
            out["trace_id"] = self.trace_id
        return out

    def trace_matches(self, kind: KindSpec | None, args: object) -> bool:
        """Whether an event with these args (a map, or a typed kind's values) is of the trace selected."""
        if isinstance(args, dict):
            return args.get("trace_id") == self.trace_id
        if isinstance(args, list) and kind is not None:
            names = [name for name, _ in kind.fields]
            return (
                "trace_id" in names
                and names.index("trace_id") < len(args)
                and (args[names.index("trace_id")] == self.trace_id)
            )
        return False


EVERYTHING: Final = EventFilter()


@dataclass(frozen=True)
class SnapshotQuery:
    filter: EventFilter
    format: str
    flush_timeout_s: float


#: The parameters ``/snapshot`` takes, and what each takes (for messages).
SNAPSHOT_PARAMETERS: Final = {
    "since": "a time: wall-clock ns, RFC 3339, or relative such as -5s",
    "until": "a time: wall-clock ns, RFC 3339, or relative such as -5s",
    "pid": "process ids, comma-separated",
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
    "flush_timeout_s": "seconds to wait for connected clients to flush",
}


#: What ``/stream`` takes: the snapshot's filters but those that need the whole store at once.
STREAM_PARAMETERS: Final = {
    **{name: text for name, text in SNAPSHOT_PARAMETERS.items() if name not in ("limit", "format", "flush_timeout_s")},
    # A tail reads what arrives, with no first pass to find the trace's spans: only what carries the trace id.
    "trace_id": "a trace id: 32 hex digits; the events that carry it (spans of a trace, OTLP span events, log records)",
}
#: What ``/pop`` takes: it removes whole processes' segments, so only what selects whole processes.
POP_PARAMETERS: Final = {name: SNAPSHOT_PARAMETERS[name] for name in ("pid", "process", "host", "flush_timeout_s")}
#: What selects whole processes (``/sources``, ``/clear``, ``/priority``).
PROCESS_PARAMETERS: Final = {name: SNAPSHOT_PARAMETERS[name] for name in ("pid", "process", "host")}


def parse_process_filter(
    params: Iterable[tuple[str, str]], extra: Mapping[str, str] | None = None
) -> tuple[EventFilter, dict[str, str]]:
    """A filter of processes by ``pid``, ``process`` and ``host``, and the raw values of the ``extra`` parameters
    (each accepted once, and checked by the caller).

    Raises:
        QueryError: a parameter is unknown, repeated or malformed.
    """
    values = _single(params, {**PROCESS_PARAMETERS, **(extra or {})})
    event_filter = EventFilter(
        pids=_pids(values["pid"]) if "pid" in values else None,
        process=_pattern("process", values["process"]) if "process" in values else None,
        host=_pattern("host", values["host"]) if "host" in values else None,
    )
    return event_filter, {name: value for name, value in values.items() if name not in PROCESS_PARAMETERS}


def _single(params: Iterable[tuple[str, str]], accepted: Mapping[str, str]) -> dict[str, str]:
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
    """A time as wall-clock ns: digits are ns since the epoch, RFC 3339 text an instant, ``-5s`` that long before
    ``now_ns`` (units ns, us, ms, s, m, h, d).

    Raises:
        QueryError: none of these.
    """
    if text.isdigit() and len(text) <= 20:
        return _in_range(name, text, int(text))
    relative = _RELATIVE.fullmatch(text)
    if relative:
        amount, unit = relative.groups()
        ago_ns = float(amount) * _UNITS_NS[unit]
        return _in_range(name, text, now_ns - round(ago_ns) if ago_ns < 2**64 else -1)
    rfc = _RFC3339.fullmatch(text)
    if rfc:
        date, clock, fraction, zone = rfc.groups()
        try:
            when = datetime.datetime.fromisoformat(f"{date}T{clock}{'+00:00' if zone in 'Zz' else zone}")
        except ValueError as exc:
            raise QueryError(f"query parameter {name!r} is not a valid time: {text!r:.80} ({exc})") from None
        ns = (when - _EPOCH) // datetime.timedelta(seconds=1) * 10**9 + int((fraction or "0").ljust(9, "0"))
        return _in_range(name, text, ns)
    raise QueryError(
        f"query parameter {name!r} must be wall-clock ns, RFC 3339 (2026-11-22T10:00:00Z) or relative "
        f"(-5s, -1.5m, -250ms), got {text!r:.80}"
    )


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
    unclosed = _unclosed_set(text)
    if unclosed is not None:  # fnmatch would take it as the character itself: most likely a typo
        raise QueryError(
            f"query parameter {name!r} has a '[' at character {unclosed + 1} that no ']' closes, got {text!r:.80} "
            "(a glob's [ ] is a set of characters; '[[]' is the character '[' itself)"
        )
    return Pattern(text)


def _unclosed_set(text: str) -> int | None:
    """Where a glob's ``[`` that no ``]`` closes is, if any (``[!]...]`` and ``[]...]`` read as fnmatch reads them)."""
    start = text.find("[")
    while start >= 0:
        end = start + 1
        end += text.startswith("!", end)
        end += text.startswith("]", end)
        close = text.find("]", end)
        if close < 0:
            return start
        start = text.find("[", close + 1)
    return None


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


def _pids(text: str) -> frozenset[int]:
    items = text.split(",")
    if len(items) > _MAX_PIDS or not all(item.strip().isdigit() and len(item.strip()) <= 10 for item in items):
        raise QueryError(f"query parameter 'pid' must be up to {_MAX_PIDS} comma-separated pids, got {text!r:.80}")
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
    values = _single(params, accepted)
    since = parse_time("since", values["since"], now_ns) if "since" in values else None
    until = parse_time("until", values["until"], now_ns) if "until" in values else None
    if since is not None and until is not None and since >= until:
        raise QueryError(f"query parameter 'since' ({since} ns) must be before 'until' ({until} ns)")
    names = ("process", "host", "track", "category", "name")
    patterns = {name: _pattern(name, values[name]) for name in names if name in values}
    event_filter = EventFilter(
        since_ns=since,
        until_ns=until,
        pids=_pids(values["pid"]) if "pid" in values else None,
        max_priority_level=_priority(values["min_priority"]) if "min_priority" in values else None,
        messages_only=flag("messages_only", values["messages_only"]) if "messages_only" in values else False,
        limit=_limit(values["limit"]) if "limit" in values else None,
        trace_id=_trace_id(values["trace_id"]) if "trace_id" in values else None,
        **patterns,
    )
    format_ = choice("format", values["format"], FORMATS) if "format" in values else "chrome"
    timeout = _flush_timeout(values["flush_timeout_s"], max_flush_timeout_s) if "flush_timeout_s" in values else None
    return SnapshotQuery(event_filter, format_, flush_timeout_s if timeout is None else timeout)


def _trace_id(text: str) -> str:
    trace_id = text.strip().lower()
    if len(trace_id) != 32 or any(c not in "0123456789abcdef" for c in trace_id):
        raise QueryError(f"query parameter 'trace_id' must be 32 hex digits, got {text!r:.80}")
    return trace_id
