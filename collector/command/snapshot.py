"""``ringtrace snapshot``: a collector's snapshot, to a file, with a progress line and, for a filter, how many events
it matched."""

from __future__ import annotations

import argparse
import json
from typing import Final

from ringtrace.collector.command.filters import add_filters, check_params, filter_params, say_matched
from ringtrace.collector.command.output import output, progress
from ringtrace.collector.command.remote import CHUNK, Access, add_access, fetch, snapshot_url, stored_events
from ringtrace.collector.export.formats import DEFAULT_FORMAT, FORMATS, format_help

__all__ = ["add_format", "add_snapshot_parser", "add_table", "table_params"]


def add_format(parser: argparse.ArgumentParser) -> None:
    """``--format``: what ``FORMATS`` holds, in any case."""
    parser.add_argument("--format", type=str.lower, choices=tuple(FORMATS), default=DEFAULT_FORMAT, help=format_help())


def add_table(parser: argparse.ArgumentParser) -> None:
    """``--table`` and ``--columns``: which table of a format of tables (``--format parquet``), and which of its
    columns (``/snapshot``'s ``table`` and ``columns``, checked by the same rules)."""
    tables = FORMATS["parquet"].tables
    parser.add_argument(
        "--table",
        type=str.lower,
        choices=tables,
        help=f"with --format parquet: which table, one a file (default {tables[0]}; docs/snapshots.md, Tables)",
    )
    parser.add_argument(
        "--columns",
        metavar="C,C",
        help="with --format parquet: the table's columns to write, comma-separated, in the table's order (default all)",
    )


def table_params(args: argparse.Namespace) -> list[tuple[str, str]]:
    """``--table`` and ``--columns`` as the query parameters ``table`` and ``columns`` (those given)."""
    return [(name, value) for name in ("table", "columns") if (value := getattr(args, name)) is not None]


def add_snapshot_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    snapshot = commands.add_parser("snapshot", help="a collector's snapshot, to a file")
    snapshot.add_argument("url", metavar="URL", help="the collector's HTTP address, e.g. http://127.0.0.1:7701")
    snapshot.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write it ('-': stdout)")
    add_format(snapshot)
    add_table(snapshot)
    snapshot.add_argument(
        "--flush-timeout", type=float, default=None, metavar="S", help="how long the collector waits for clients"
    )
    add_filters(snapshot)
    add_access(snapshot)
    snapshot.set_defaults(run=_snapshot, parser=snapshot)


def _snapshot(args: argparse.Namespace) -> int:
    filters = filter_params(args)
    params = [*filters, ("format", args.format), *table_params(args)]
    if args.flush_timeout is not None:
        params.append(("flush_timeout_s", str(args.flush_timeout)))
    check_params(params)
    url = snapshot_url(args.url, params)
    access = Access(args)
    stored = stored_events(args.url, access)  # (what the progress line counts towards)
    chrome = FORMATS[args.format].counts_events
    report = _ChromeReport() if chrome else None
    with (
        fetch(url, access) as response,
        output(args.output) as out,
        progress(f"snapshot from {args.url}", stored if chrome else None) as advance,
    ):
        while chunk := response.read(CHUNK):
            out.write(chunk)
            advance(len(chunk), _events_in(chunk) if chrome else 0)
            if report is not None:
                report.feed(chunk)
    if filters:
        say_matched("snapshot", filters, report.shown_events() if report is not None else None, stored)
    return 0


#: The phases of Chrome JSON entries that are no stored event: the metadata naming processes and threads, and the
#: flow arrows between the spans of a trace.
_NOT_EVENTS: Final = (b'"ph":"M"', b'"ph":"s"', b'"ph":"t"', b'"ph":"f"')


def _events_in(chunk: bytes) -> int:
    """How many of a Chrome JSON chunk's entries are events (each entry has one phase)."""
    return chunk.count(b'"ph":') - sum(chunk.count(phase) for phase in _NOT_EVENTS)


class _ChromeReport:
    """The ``otherData`` at the end of a Chrome JSON snapshot, caught as it streams by."""

    _MARK: Final = b'],"displayTimeUnit":"ns","otherData":'

    def __init__(self) -> None:
        self._tail = b""
        self._other: bytearray | None = None

    def feed(self, chunk: bytes) -> None:
        if self._other is not None:
            self._other += chunk
            return
        data = self._tail + chunk  # the mark may straddle two chunks (it cannot occur inside a JSON string)
        found = data.find(self._MARK)
        if found >= 0:
            self._other = bytearray(data[found + len(self._MARK) :])
        else:
            self._tail = data[-len(self._MARK) :]

    def shown_events(self) -> int | None:
        try:
            other = json.loads(bytes(self._other or b"").removesuffix(b"}"))
            return int(other["capture"]["shown_events"])
        except (ValueError, KeyError, TypeError):  # a collector from before it said so
            return None
