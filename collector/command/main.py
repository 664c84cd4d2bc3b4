"""The ``ringtrace`` command: run a collector, take snapshots, read and convert files.

    ringtrace collect [collector flags]            the same as ringtrace-collector
    ringtrace snapshot URL -o FILE [filters]       a collector's snapshot, to a file
    ringtrace dump FILE|URL [filters]              events as text, one a line, oldest first
    ringtrace convert FILE -o OUT [filters]        a file to Chrome JSON, a snapshot file or a Perfetto trace
    ringtrace tail URL [filters]                   a collector's events as they are stored, one a line
    ringtrace sources URL [--pid --process --host] a collector's processes, threads and sources, as a table
    ringtrace spans URL [filters]                  a collector's slowest (or newest) spans, as a table
    ringtrace top URL [--by name,process] [filters] span durations per name and/or process: count, p50 ... max
    ringtrace replay FILE --to HOST:PORT [filters] send a file's events to a collector, which serves them as live data
    ringtrace incidents [list|fetch|open|delete]   a collector's saved incidents (--url: where it answers HTTP)
    ringtrace query "SQL" [--url URL] [filters]    SQL over a collector's events, run here with DuckDB

FILE is a trace file (``FileListener``) or a snapshot file, or a recording of another system: a HawkTracer HTDUMP
stream or a GaBIEn TimeLogger stream, recognised by its first bytes (``foreign/offline.py``).

A collector that requires a token gets it from ``--token-file FILE`` (or ``RINGTRACE_TOKEN_FILE``, or the token
itself in ``RINGTRACE_TOKEN``): as ``Authorization: Bearer`` over HTTP, in HELLO for ``replay``. An ``https://`` URL
(or ``replay --tls``) is checked against the system's CAs, or the one in ``--cacert FILE`` (``RINGTRACE_CACERT``).

Filters are ``GET /snapshot``'s query parameters as flags (``--since -5s --process 'web-*'``), checked the same way
(``http/query.py``). Every failure is one line on stderr naming what failed, and a non-zero exit: 2 for a bad argument,
1 for a collector that cannot be reached or answers with an error, a file that cannot be read, is of no format known
or is corrupt.

This module is the parser and the dispatch; each group of subcommands is a module of its own: ``snapshot.py``,
``files.py`` (dump, convert, replay), ``live.py`` (tail, sources), ``search_commands.py`` (spans, top),
``incident_commands.py`` (incidents) and ``sql.py`` (query), imported when one of its subcommands runs
(``_SUBCOMMANDS``; ``--help`` imports them all).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Final

from ringtrace.collector.command.failure import CommandError
from ringtrace.collector.command.filters import VALUE_FLAGS
from ringtrace.collector.short_usage import ShortUsageParser

__all__ = ["CommandError", "main"]

#: Each subcommand (but ``collect``), in the order ``--help`` lists them: the module that adds its parser, and how.
#: A run imports only its own subcommand's module: the others' imports (the export writers, the file readers, rich)
#: made ``ringtrace query --help`` take 0.42 s rather than 0.23 s (medians of 10, a loaded 2-core machine).
_SUBCOMMANDS: Final = {
    "snapshot": ("snapshot", "add_snapshot_parser"),
    "dump": ("files", "add_dump_parser"),
    "convert": ("files", "add_convert_parser"),
    "tail": ("live", "add_tail_parser"),
    "sources": ("live", "add_sources_parser"),
    "spans": ("search_commands", "add_spans_parser"),
    "top": ("search_commands", "add_top_parser"),
    "replay": ("files", "add_replay_parser"),
    "incidents": ("incident_commands", "add_incidents_parser"),
    "query": ("sql", "add_query_parser"),
}


def main(argv: Sequence[str] | None = None) -> int:
    given = _with_values_joined(sys.argv[1:] if argv is None else list(argv))
    parser = build_parser(next((token for token in given if not token.startswith("-")), None))
    args, unknown = parser.parse_known_args(given)
    if unknown:  # said with the usage of the command they were given to, not the top level's
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except CommandError as exc:
        print(f"ringtrace {args.command}: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # ``ringtrace dump ... | head``: the reader has seen enough
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - so that the interpreter's final flush is quiet
        return 0
    except (http.client.HTTPException, ConnectionError, TimeoutError) as exc:  # the collector went away mid-answer
        print(f"ringtrace {args.command}: the collector's answer broke off: {exc!r:.200}", file=sys.stderr)
        return 1


def _with_values_joined(argv: list[str]) -> list[str]:
    """``--since -5s`` as ``--since=-5s``: argparse takes a value that starts with ``-`` for a flag, and relative
    times do, as a negative duration does (``VALUE_FLAGS``; a subcommand's own flags, after ``collect``, are left
    alone)."""
    joined: list[str] = []
    position = 0
    while position < len(argv):
        token = argv[position]
        if token == "collect" and not joined:
            return argv
        following = argv[position + 1] if position + 1 < len(argv) else None
        if token in VALUE_FLAGS and following is not None and following.startswith("-") and following != "-":
            joined.append(f"{token}={following}")
            position += 2
        else:
            joined.append(token)
            position += 1
    return joined


def build_parser(subcommand: str | None = None) -> argparse.ArgumentParser:
    """The command's parser: of ``subcommand`` alone, if it is one (the first word given), else of them all."""
    parser = ShortUsageParser(  # (its subcommands' parsers are of its class)
        prog="ringtrace",
        allow_abbrev=False,
        description="ringtrace: run a collector, take snapshots, read and convert trace files.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    collect = commands.add_parser(
        "collect", help="run a collector (the same as ringtrace-collector)", add_help=False, prefix_chars="\0"
    )
    collect.add_argument("flags", nargs=argparse.REMAINDER, help="ringtrace-collector's flags (see --help)")
    collect.set_defaults(run=_collect, parser=collect)
    for name, (module, adder) in _SUBCOMMANDS.items():
        if name == subcommand or subcommand not in (*_SUBCOMMANDS, "collect"):
            getattr(importlib.import_module(f"ringtrace.collector.command.{module}"), adder)(commands)
    for command in commands.choices.values():
        command.allow_abbrev = False  # (a flag's start would be taken for it: "--token X" for --token-file X)
    return parser


def _collect(args: argparse.Namespace) -> int:
    # Imported here, not above: the service (aiohttp, 0.6 s of imports) loads for the one subcommand that runs it.
    from ringtrace.collector.service import serve as collector_cli

    return collector_cli.main(args.flags, prog="ringtrace collect")
