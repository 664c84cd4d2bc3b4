"""``ringtrace spans`` and ``ringtrace top``: a collector's slowest (or newest) spans (``GET /spans``) and its span
durations summed up per name and/or process (``GET /aggregates``), as tables, or the JSON as the collector answers it
(``--json``). Both take the filters of ``ringtrace snapshot`` (but ``--limit``, which counts spans here) and what a
span must be besides: ``--min-duration``, ``--max-duration``, ``--has-error`` / ``--no-error``, ``--arg KEY=VALUE``."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from typing import Any, Final

from rich.console import Console
from rich.table import Table
from ringtrace.collector.command.failure import CommandError
from ringtrace.collector.command.filters import add_filters, as_flags, filter_params
from ringtrace.collector.command.output import cell
from ringtrace.collector.command.remote import Access, add_access, endpoint_url, fetch
from ringtrace.collector.http.query import QueryError
from ringtrace.collector.http.search_query import (
    AGGREGATES_PARAMETERS,
    ARG_PREFIX,
    DEFAULT_SPANS,
    SPANS_PARAMETERS,
    parse_search_query,
)
from ringtrace.collector.read.span_aggregates import GROUPINGS
from ringtrace.collector.read.span_search import MAX_SPANS, SORTS

__all__ = ["add_spans_parser", "add_top_parser"]

#: The flag of each query parameter these commands add to the snapshot's filters.
_FLAGS: Final = {
    "min_duration": "--min-duration",
    "max_duration": "--max-duration",
    "has_error": "--has-error",
    "sort": "--sort",
    "limit": "--limit",
    "by": "--by",
}
#: The widest an args cell is in a table (the JSON has them whole).
_ARGS_CHARS: Final = 60


def add_spans_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    spans = commands.add_parser("spans", help="a collector's slowest (or newest) spans, as a table")
    _common(spans, SPANS_PARAMETERS)
    spans.add_argument("--sort", type=str.lower, choices=SORTS, default=SORTS[0],
                       help="duration: slowest first (the default); start: newest first")  # fmt: skip
    spans.add_argument("--limit", type=int, default=DEFAULT_SPANS, metavar="N",
                       help=f"how many spans, 1 to {MAX_SPANS} (default {DEFAULT_SPANS})")  # fmt: skip
    spans.set_defaults(run=_spans, parser=spans)


def add_top_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    top = commands.add_parser("top", help="a collector's span durations per name and/or process, as a table")
    _common(top, AGGREGATES_PARAMETERS)
    top.add_argument("--by", type=str.lower, default=GROUPINGS[0], metavar="BY",
                     help=f"one of {', '.join(GROUPINGS)} (default {GROUPINGS[0]})")  # fmt: skip
    top.set_defaults(run=_top, parser=top)


def _common(parser: argparse.ArgumentParser, accepted: dict[str, str]) -> None:
    parser.add_argument("url", metavar="URL", help="the collector's HTTP address, e.g. http://127.0.0.1:7701")
    parser.add_argument("--json", action="store_true", help="the collector's JSON document as it is")
    add_filters(parser, {name for name in accepted if name != "limit"})
    group = parser.add_argument_group("what a span must be")
    group.add_argument("--min-duration", metavar="D", help="spans at least this long: 250ms, 1.5s, 800us ...")
    group.add_argument("--max-duration", metavar="D", help="spans at most this long")
    errors = group.add_mutually_exclusive_group()
    errors.add_argument(
        "--has-error",
        action="store_const",
        const="1",
        dest="has_error",
        help="only spans in error: an OTLP status error, a call that raised, an error arg",
    )
    errors.add_argument("--no-error", action="store_const", const="0", dest="has_error", help="only spans not in error")
    arg = "spans whose arg KEY is VALUE (as text; JSON for numbers, true, null); repeatable"
    group.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE", help=arg)
    add_access(parser)


def _params(args: argparse.Namespace, own: list[tuple[str, str]], aggregates: bool) -> list[tuple[str, str]]:
    """The query parameters the flags give, checked by the collector's own rules (a refusal names the flag)."""
    params = [(name, value) for name, value in filter_params(args) if name != "limit"]  # (--limit: of spans here)
    for name in ("min_duration", "max_duration", "has_error"):
        value = getattr(args, name)
        if value is not None:
            params.append((name, value))
    for condition in args.arg:
        key, equals, value = condition.partition("=")
        if not equals or not key:
            raise CommandError(f"--arg must be KEY=VALUE, got {condition!r:.80}", status=2)
        params.append((ARG_PREFIX + key, value))
    params += own
    try:
        parse_search_query(params, now_ns=time.time_ns(), aggregates=aggregates)
    except QueryError as exc:
        raise CommandError(as_flags(str(exc), _FLAGS), status=2) from None
    return params


def _document(args: argparse.Namespace, endpoint: str, params: list[tuple[str, str]]) -> Any | None:
    """The endpoint's answer to ``params``; None once it is written out as it came (``--json``)."""
    with fetch(endpoint_url(args.url, endpoint, params), Access(args)) as response:
        body: bytes = response.read()
    if args.json:
        sys.stdout.write(body.decode() + "\n")
        return None
    return json.loads(body)


def _spans(args: argparse.Namespace) -> int:
    params = _params(args, [("sort", args.sort), ("limit", str(args.limit))], aggregates=False)
    document = _document(args, "/spans", params)
    if document is None:
        return 0
    table = Table(box=None, pad_edge=False)
    for column in ("duration", "start (UTC)", "process", "pid", "track", "name", "trace id", "args"):
        table.add_column(column, justify="right" if column in ("duration", "pid") else "left", no_wrap=True)
    for span in document["spans"]:
        table.add_row(
            _span_duration(span), _clock(span["start_ns"]), cell(span["process"]), str(span["pid"]),
            cell(span["track"]), cell(span["name"]), cell(span["trace_id"] or "-"), cell(_args_text(span["args"])),
        )  # fmt: skip
    _print(table)
    _say_lost(document, f"ringtrace spans: {len(document['spans'])} spans")
    return 0


def _top(args: argparse.Namespace) -> int:
    params = _params(args, [("by", args.by)], aggregates=True)
    document = _document(args, "/aggregates", params)
    if document is None:
        return 0
    table = Table(box=None, pad_edge=False)
    grouped = [column for column in ("name", "process") if column in args.by.split(",")]
    numbers = ("count", "total", "mean", "p50", "p90", "p99", "max")
    for column in (*grouped, *numbers):
        table.add_column(column, justify="right" if column in numbers else "left", no_wrap=True)
    for row in document["rows"]:
        table.add_row(
            *(cell(str(row[column])) for column in grouped), _count_text(row),
            *(duration_text(row[f"{name}_ns"]) for name in ("total", "mean", "p50", "p90", "p99", "max")),
        )  # fmt: skip
    _print(table)
    messages = ", ".join(f"{count:,} {priority}" for priority, count in document["messages"].items()) or "none"
    found = f"ringtrace top: {len(document['rows'])} rows; {document['instants']:,} instants; messages: {messages}"
    _say_lost(document, found)
    return 0


def _span_duration(span: dict[str, Any]) -> str:
    """A span's duration, marked ``(open)`` for one begun and not ended (its duration so far)."""
    text = duration_text(span["duration_ns"])
    return f"{text} (open)" if span.get("open") else text


def _count_text(row: dict[str, Any]) -> str:
    """A row's count, with how many of them are open (begun, not ended) if any."""
    opened = row.get("open", 0)
    return f"{row['count']:,} ({opened:,} open)" if opened else f"{row['count']:,}"


def duration_text(ns: int) -> str:
    """A duration for a person: in the unit that keeps it between 1 and 1000 (``12.5 ms``), ns below 1 us."""
    for unit, size in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns >= size:
            return f"{ns / size:,.3f} {unit}"
    return f"{ns} ns"


def _args_text(args: dict[str, Any]) -> str:
    if not args:
        return ""
    text = json.dumps(args, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= _ARGS_CHARS else text[: _ARGS_CHARS - 3] + "..."


def _clock(wall_ns: int) -> str:
    when = datetime.datetime.fromtimestamp(wall_ns // 10**9, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{when}.{wall_ns % 10**9 // 10**6:03d}"


def _print(table: Table) -> None:
    # On a terminal, as wide as it is; into a pipe or file, whole lines.
    Console(highlight=False, width=None if sys.stdout.isatty() else 1000).print(table)


def _say_lost(document: dict[str, Any], what: str) -> None:
    """On stderr: what was found, what the processes selected lost (the results may lack it), and apart, if any,
    what processes forgotten lost (the collector keeps their sums, not whether the filters select them)."""
    losses = _losses_text(document["lost"]) or "nothing"
    forgotten = _losses_text(document.get("lost_by_forgotten_processes") or {})
    apart = f"; apart, processes forgotten lost: {forgotten}" if forgotten else ""
    sys.stderr.write(f"{what}; lost: {losses}{apart}\n")


def _losses_text(lost: dict[str, int]) -> str:
    return ", ".join(f"{count:,} {name}" for name, count in lost.items() if count)
