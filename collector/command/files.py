"""``ringtrace dump``, ``convert`` and ``replay``: the subcommands that read a file (a trace file, a snapshot file, or a
recording of another system, ``foreign/offline.py``) and write its events out: as text, in a snapshot format, or to
a collector."""

from __future__ import annotations

import argparse
import contextlib
import os
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from ringtrace.collector.command.failure import CommandError
from ringtrace.collector.command.filters import add_filters, check_params, filter_params, say_matched
from ringtrace.collector.command.output import event_line, output, progress
from ringtrace.collector.command.remote import (
    CHUNK,
    Access,
    access_token,
    add_access,
    fetch,
    snapshot_url,
    stored_events,
    tls_context,
)
from ringtrace.collector.command.replay import ReplayError, replay
from ringtrace.collector.command.snapshot import add_format, add_table, table_params
from ringtrace.collector.export.formats import FORMATS, formats_phrase
from ringtrace.collector.export.native import native_chunks
from ringtrace.collector.foreign.offline import FOREIGN_FORMATS, LoadedFile, load_file
from ringtrace.collector.http.query import parse_snapshot_query
from ringtrace.collector.read.rows import Row, selected_rows
from ringtrace.wire.errors import ConfigError, ProtocolError
from ringtrace.wire.parsing import parse_address

__all__ = ["add_convert_parser", "add_dump_parser", "add_replay_parser", "dump_line"]


#: Recordings of other systems that files may be.
_FOREIGN: Final = ", ".join(name for name, _, _ in FOREIGN_FORMATS)


def add_dump_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dump = commands.add_parser("dump", help="events as text, one a line")
    dump.add_argument(
        "source",
        metavar="FILE|URL",
        help=f"a trace or snapshot file, a recording ({_FOREIGN}), or a collector's HTTP address",
    )
    dump.add_argument("--newest-first", action="store_true", help="newest event first")
    add_filters(dump, log_view=True)
    add_access(dump)
    dump.set_defaults(run=_dump, parser=dump)


def add_convert_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    convert = commands.add_parser(
        "convert",
        help=f"a trace or snapshot file, or a recording ({_FOREIGN}), to "
        + formats_phrase(lambda format_: format_.help),
    )
    convert.add_argument(
        "file", metavar="FILE", help=f"a trace file (FileListener), a snapshot file, or a recording ({_FOREIGN})"
    )
    convert.add_argument("-o", "--output", required=True, metavar="OUT", help="where to write it ('-': stdout)")
    add_format(convert)
    add_table(convert)
    add_filters(convert)
    convert.set_defaults(run=_convert, parser=convert)


def add_replay_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    replay_ = commands.add_parser(
        "replay", help="send a file's events to a collector, which stores and serves them as live data"
    )
    replay_.add_argument("file", metavar="FILE", help=f"a trace or snapshot file, or a recording ({_FOREIGN})")
    replay_.add_argument("--to", required=True, metavar="HOST:PORT", help="the collector's ingest address")
    add_filters(replay_)
    add_access(replay_, ingest=True)
    replay_.set_defaults(run=_replay, parser=replay_)


def _load(path: str, shown_as: str | None = None) -> LoadedFile:
    """A file read (``shown_as`` names it in messages: a snapshot fetched to a temporary file, say)."""
    name = shown_as or path
    try:
        loaded = load_file(path)
    except OSError as exc:
        raise CommandError(f"cannot read {name}: {exc.strerror or exc}") from None
    except ProtocolError as exc:
        raise CommandError(f"{name}: {exc}") from None
    if loaded.error is not None and not loaded.torn:
        raise CommandError(f"{name} is corrupt: {loaded.error}")
    if loaded.error is not None:
        print(f"ringtrace: {name}: {loaded.error}; read everything before it", file=sys.stderr)
    return loaded


def _undecodable(path: str, loaded: LoadedFile) -> None:
    """After the rest is written: a file some of whose events do not decode is corrupt, said, and exits 1."""
    if loaded.undecodable:
        raise CommandError(
            f"{path} is corrupt: {loaded.undecodable} of its {loaded.events} events do not decode "
            "(the others were read)"
        )


def _convert(args: argparse.Namespace) -> int:
    params = filter_params(args)
    if table_params(args):
        params += [("format", args.format), *table_params(args)]
    check_params(params)
    query = parse_snapshot_query(params, now_ns=time.time_ns())
    format_ = FORMATS[args.format]
    missing = format_.missing() if format_.missing is not None else None
    if missing is not None:  # (here, not the collector: the same extra)
        raise CommandError(missing.replace("in the collector", "here"))
    _not_the_input(args.file, args.output)
    loaded = _load(args.file)
    with output(args.output) as out, progress(f"convert {args.file}") as advance:
        for chunk in format_.chunks(loaded.view, query.filter, query.table, query.columns):
            out.write(chunk)
            advance(len(chunk), 0)
    _undecodable(args.file, loaded)
    return 0


def _not_the_input(path: str, output_path: str) -> None:
    """Writing the output over the file being read would replace the trace with its conversion: refused."""
    with contextlib.suppress(OSError):
        if output_path != "-" and os.path.samefile(path, output_path):
            raise CommandError(f"-o {output_path} is the input file: write the conversion to another file")


def _dump(args: argparse.Namespace) -> int:
    params = filter_params(args)
    check_params(params)
    source: str = args.source
    if source.startswith(("http://", "https://")) or "://" in source:
        url = snapshot_url(source, [*params, ("format", "native")])
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory, "snapshot" + FORMATS["native"].suffix)
            with fetch(url, Access(args)) as response, path.open("wb") as out:
                while chunk := response.read(CHUNK):
                    out.write(chunk)
            loaded = _load(str(path), shown_as=f"the snapshot from {source}")
            rows = list(selected_rows(loaded.view))
    else:
        selected = parse_snapshot_query(params, now_ns=time.time_ns()).filter
        loaded = _load(source)
        rows = list(selected_rows(loaded.view, selected))
    rows.sort(key=lambda row: row.wall_ns, reverse=args.newest_first)
    for row in rows:
        sys.stdout.write(dump_line(row))
    sys.stdout.flush()
    if params:
        stored = stored_events(source, Access(args)) if source.startswith(("http://", "https://")) else loaded.events
        say_matched("dump", params, len(rows), stored)
    _undecodable(source, loaded)
    return 0


def dump_line(row: Row) -> str:
    """One event as a line: time (UTC), process[pid], track, category (the kind, for a member of a built-in family:
    ``source_open``, ``marker_end`` ...), priority, name, duration, args."""
    label = f"{row.process.name}[{row.process.pid}]"
    return event_line(row.wall_ns, label, row.track, row.kind, row.priority, row.name, row.dur_ns, row.args)


def _replay(args: argparse.Namespace) -> int:
    params = filter_params(args)
    check_params(params)
    try:
        host, port = parse_address(args.to)
    except ConfigError as exc:
        raise CommandError(f"--to: {exc}", 2) from None
    token = access_token(args)
    tls = None
    if args.tls or args.cacert is not None:  # RINGTRACE_CACERT alone says whom to trust, not to use TLS
        tls = tls_context(args) or ssl.create_default_context()
    selected = parse_snapshot_query(params, now_ns=time.time_ns()).filter
    loaded = _load(args.file)
    try:
        done = replay(native_chunks(loaded.view, selected), host, port, token=token, tls=tls)
    except ReplayError as exc:
        raise CommandError(str(exc)) from None
    streams = f"{done.streams} stream{'s' if done.streams != 1 else ''}"
    print(f"replayed {done.events} events in {done.frames} frames ({streams}) to {args.to}")
    if params:
        say_matched("replay", params, done.events, loaded.events)
    _undecodable(args.file, loaded)
    if done.refused:
        raise CommandError(f"the collector's store refused {done.refused} of them (its --policy or a process cap)")
    return 0
