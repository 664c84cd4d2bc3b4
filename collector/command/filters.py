"""The filters of the ``ringtrace`` subcommands: ``GET /snapshot``'s query parameters as flags (``--since -5s
--process 'web-*'``), checked by the collector's own rules (``http/query.py``) before anything is asked of it, with
messages that name the flag."""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import time
from collections.abc import Container, Mapping
from typing import Final

from ringtrace.collector.command.failure import CommandError
from ringtrace.collector.http.query import QueryError, parse_snapshot_query

__all__ = [
    "FILTERS",
    "VALUE_FLAGS",
    "add_filters",
    "as_flags",
    "check_params",
    "described",
    "filter_params",
    "say_matched",
]


#: (flag, query parameter, help)
FILTERS: Final = (
    (
        "--since",
        "since",
        "events that overlap the window from this: a span that ends after it, a point at or after it; "
        "wall-clock ns, RFC 3339, or relative (-5s, -2m; +30s: from now on)",
    ),
    ("--until", "until", "events that start before this (same forms as --since)"),
    ("--pid", "pid", "processes by pid, comma-separated"),
    ("--process", "process", "processes by name (a glob with * ? [ ])"),
    ("--host", "host", "processes by host name (or glob)"),
    ("--track", "track", "a thread, task lane, source or counter track by name (or glob)"),
    ("--category", "category", "a message category, a typed event's class, or span, instant, counter, marker, ..."),
    ("--name", "name", "events by name as shown; messages by their rendered text (or glob)"),
    ("--min-priority", "min_priority", "messages at this priority or more important (fatal ... trace+++)"),
    (
        "--trace-id",
        "trace_id",
        "the events of one trace across every process (32 hex digits; spans of a trace carry them), and those nested "
        "in its spans on their thread or task lane",
    ),
    ("--limit", "limit", "only the newest N events"),
)


#: The flag of each query parameter the command line takes.
_FLAG_OF: Final = {
    **{name: flag for flag, name, _ in FILTERS},
    "flush_timeout_s": "--flush-timeout",
    "messages_only": "--messages-only",
    "table": "--table",
    "columns": "--columns",
    "grace": "--grace",
}


#: Flags whose values may start with "-": a relative time, and a duration given negative (``spans --min-duration
#: -5ms``), which is refused in one line saying so rather than taken by argparse for a flag ("expected one argument").
VALUE_FLAGS: Final = frozenset({"--since", "--until", "--min-duration", "--max-duration", "--grace"})


def add_filters(
    parser: argparse.ArgumentParser, accepted: Container[str] | None = None, *, log_view: bool = False
) -> None:
    """The filters as flags; ``log_view``: a command that prints events as lines (``dump``, ``tail``), where
    ``--min-priority`` means the messages at that priority (other events carry none) unless ``--with-other-events``."""
    group = parser.add_argument_group("filters (as GET /snapshot's query parameters)")
    for flag, name, text in FILTERS:
        if accepted is None or name in accepted:
            if log_view and name == "min_priority":
                text = "only messages at this priority or more important (fatal ... trace+++)"
            if name == "trace_id" and accepted is not None and "limit" not in accepted:  # a live tail's
                text = "the events that carry this trace id, across every process (32 hex digits)"
            group.add_argument(flag, metavar="VALUE", help=text)
    if accepted is None or "messages_only" in accepted:
        only = "only messages (the events that carry a priority)"
        group.add_argument("--messages-only", action="store_true", help=only)
    if log_view:
        group.add_argument(
            "--with-other-events",
            action="store_true",
            help="with --min-priority, keep the events that carry no priority (spans, instants ...) too",
        )


def filter_params(args: argparse.Namespace) -> list[tuple[str, str]]:
    params = []
    for flag, name, _ in FILTERS:
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is not None:
            params.append((name, value))
    priorities = getattr(args, "with_other_events", None) is False and getattr(args, "min_priority", None) is not None
    if getattr(args, "messages_only", False) or priorities:
        params.append(("messages_only", "1"))
    return params


def check_params(params: list[tuple[str, str]], accepted: Mapping[str, str] | None = None) -> None:
    """Refuse what the collector would refuse before asking it: the same rules, and a message that names the flag."""
    try:
        if accepted is None:
            parse_snapshot_query(params, now_ns=time.time_ns())
        else:
            parse_snapshot_query(params, now_ns=time.time_ns(), accepted=accepted)
    except QueryError as exc:
        raise CommandError(as_flags(str(exc)), status=2) from None


def as_flags(message: str, extra: Mapping[str, str] | None = None) -> str:
    """A ``QueryError``'s message with each query parameter named by its flag (``extra``: a command's own, by
    parameter)."""
    for name, flag in {**(extra or {}), **_FLAG_OF}.items():
        message = message.replace(f"query parameter {name!r}", flag)
        # (a parameter named bare, as in "'since' must be before 'until'"; not a value: "got 'host'")
        message = re.sub(rf"(?<!got ){re.escape(repr(name))}", flag, message)
    return message


def described(params: list[tuple[str, str]]) -> str:
    """The filters given, as the flags that give them (``--process 'web-*' (messages only)``)."""
    return " ".join(
        "(messages only)" if name == "messages_only" else f"{_FLAG_OF.get(name, name)} {shlex.quote(value)}"
        for name, value in params
    )


def say_matched(command: str, params: list[tuple[str, str]], matched: int | None, stored: int | None) -> None:
    """On stderr: how many events the filters matched of how many there were, and which filters they were."""
    given = described(params)
    if matched is None:  # (a Perfetto trace or a snapshot file does not say)
        to = f" to {stored:,} events" if stored is not None else ""
        counted = f"filters applied{to} (this format does not count what they matched; ringtrace dump does):"
    else:
        of = f" of {stored:,}" if stored is not None else ""
        counted = f"{matched:,}{of} events matched"
    sys.stderr.write(f"ringtrace {command}: {counted} {given}\n")
