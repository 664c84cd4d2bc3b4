"""The ``ringtrace`` command: run a collector, take snapshots, read and convert files.

    ringtrace collect [collector flags]            the same as ringtrace-collector
    ringtrace snapshot URL -o FILE [filters]       a collector's snapshot, to a file
    ringtrace dump FILE|URL [filters]              events as text, one a line, oldest first
    ringtrace convert FILE -o OUT [filters]        a trace or snapshot file to Chrome JSON, a snapshot file or a
                                                   Perfetto trace

Filters are ``GET /snapshot``'s query parameters as flags (``--since -5s --process 'web-*'``), checked the same way
(``query.py``). Every failure is one line on stderr naming what failed, and a non-zero exit: 2 for a bad argument,
1 for a collector that cannot be reached or answers with an error, a file that cannot be read or is not a ringtrace
file.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Final

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from ringtrace.client.errors import ProtocolError

from . import cli as collector_cli
from .export import Row, chrome_trace_chunks, native_chunks, selected_rows
from .offline import LoadedFile, load_file
from .perfetto import perfetto_chunks
from .query import FORMATS, QueryError, parse_snapshot_query

__all__ = ["CommandError", "main"]

#: (flag, query parameter, help)
_FILTERS: Final = (
    ("--since", "since", "events that start at or after this: wall-clock ns, RFC 3339, or relative (-5s, -2m)"),
    ("--until", "until", "events that start before this (same forms as --since)"),
    ("--pid", "pid", "processes by pid, comma-separated"),
    ("--process", "process", "processes by name (a glob with * ? [ ])"),
    ("--host", "host", "processes by host name (or glob)"),
    ("--track", "track", "a thread, task lane, source or counter track by name (or glob)"),
    ("--category", "category", "a message category, a typed event's class, or span, instant, counter, marker, ..."),
    ("--name", "name", "events by name as shown; messages by their rendered text (or glob)"),
    ("--min-priority", "min_priority", "messages at this priority or more important (fatal ... trace+++)"),
    ("--limit", "limit", "only the newest N events"),
)
#: What --format writes.
_WRITERS: Final = {"chrome": chrome_trace_chunks, "native": native_chunks, "perfetto": perfetto_chunks}
_FORMAT_HELP: Final = (
    "chrome (Chrome trace JSON), native (a snapshot file) or perfetto (a Perfetto trace); default chrome"
)
_HTTP_TIMEOUT_S: Final = 120.0
_CHUNK: Final = 1 << 16


class CommandError(Exception):
    """What stops a subcommand: printed as one line, and the exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ringtrace", description="ringtrace: run a collector, take snapshots, read and convert trace files."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    collect = commands.add_parser(
        "collect", help="run a collector (the same as ringtrace-collector)", add_help=False, prefix_chars="\0"
    )
    collect.add_argument("flags", nargs=argparse.REMAINDER, help="ringtrace-collector's flags (see --help)")
    collect.set_defaults(run=_collect)

    snapshot = commands.add_parser("snapshot", help="a collector's snapshot, to a file")
    snapshot.add_argument("url", metavar="URL", help="the collector's HTTP address, e.g. http://127.0.0.1:7701")
    snapshot.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write it ('-': stdout)")
    snapshot.add_argument("--format", choices=FORMATS, default="chrome", help=_FORMAT_HELP)
    snapshot.add_argument(
        "--flush-timeout", type=float, default=None, metavar="S", help="how long the collector waits for clients"
    )
    _add_filters(snapshot)
    snapshot.set_defaults(run=_snapshot)

    dump = commands.add_parser("dump", help="events as text, one a line")
    dump.add_argument("source", metavar="FILE|URL", help="a trace or snapshot file, or a collector's HTTP address")
    dump.add_argument("--newest-first", action="store_true", help="newest event first")
    _add_filters(dump)
    dump.set_defaults(run=_dump)

    convert = commands.add_parser(
        "convert", help="a trace or snapshot file to Chrome JSON, a snapshot file or a Perfetto trace"
    )
    convert.add_argument("file", metavar="FILE", help="a trace file (FileListener) or a snapshot file")
    convert.add_argument("-o", "--output", required=True, metavar="OUT", help="where to write it ('-': stdout)")
    convert.add_argument("--format", choices=FORMATS, default="chrome", help=_FORMAT_HELP)
    _add_filters(convert)
    convert.set_defaults(run=_convert)
    return parser


def _add_filters(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("filters (as GET /snapshot's query parameters)")
    for flag, _, text in _FILTERS:
        group.add_argument(flag, metavar="VALUE", help=text)


def _filter_params(args: argparse.Namespace) -> list[tuple[str, str]]:
    params = []
    for flag, name, _ in _FILTERS:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None:
            params.append((name, value))
    return params


# -- collect ---------------------------------------------------------------------------------------------------------


def _collect(args: argparse.Namespace) -> int:
    return collector_cli.main(args.flags, prog="ringtrace collect")


# -- snapshot --------------------------------------------------------------------------------------------------------


def _snapshot(args: argparse.Namespace) -> int:
    params = [*_filter_params(args), ("format", args.format)]
    if args.flush_timeout is not None:
        params.append(("flush_timeout_s", str(args.flush_timeout)))
    _check_params(params)
    url = _snapshot_url(args.url, params)
    with _fetch(url) as response, _output(args.output) as out, _progress(f"snapshot from {args.url}") as advance:
        while chunk := response.read(_CHUNK):
            out.write(chunk)
            advance(len(chunk))
    return 0


def _check_params(params: list[tuple[str, str]]) -> None:
    """Refuse what the collector would refuse before asking it: the same rules, and a message that names the flag."""
    try:
        parse_snapshot_query(params, now_ns=time.time_ns())
    except QueryError as exc:
        raise CommandError(_as_flags(str(exc)), status=2) from None


def _as_flags(message: str) -> str:
    for flag, name, _ in _FILTERS:
        message = message.replace(f"query parameter {name!r}", flag).replace(f"{name!r}", flag)
    return message


def _snapshot_url(base: str, params: list[tuple[str, str]]) -> str:
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CommandError(f"URL must be a collector's HTTP address such as http://127.0.0.1:7701, got {base!r}", 2)
    path = parts.path.rstrip("/")
    if not path.endswith("/snapshot"):
        path += "/snapshot"
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True) + params  # the URL's own go first
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, urllib.parse.urlencode(query), ""))


@contextlib.contextmanager
def _fetch(url: str) -> Iterator[Any]:
    try:
        response = urllib.request.urlopen(url, timeout=_HTTP_TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        with exc:
            detail = exc.read(2000).decode("utf-8", "replace").strip()
        raise CommandError(f"the collector answered {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise CommandError(f"cannot reach {urllib.parse.urlsplit(url).netloc}: {reason}") from None
    with response:
        yield response


@contextlib.contextmanager
def _output(path: str) -> Iterator[IO[bytes]]:
    """A file written in full or not at all (a temporary file renamed at the end), or stdout for '-'."""
    if path == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    target = Path(path)
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # as an ordinary new file (mkstemp makes it private)
        with os.fdopen(fd, "wb") as out:
            yield out
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def _progress(what: str) -> Iterator[Callable[[int], None]]:
    """A progress line on stderr while bytes are written (only on a terminal)."""
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, transient=True, disable=not sys.stderr.isatty()) as progress:
        task = progress.add_task(what, total=None)
        yield lambda nbytes: progress.advance(task, nbytes)


# -- files -----------------------------------------------------------------------------------------------------------


def _load(path: str) -> LoadedFile:
    try:
        loaded = load_file(path)
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ProtocolError as exc:
        raise CommandError(f"{path}: {exc}") from None
    if loaded.error is not None and not loaded.torn:
        raise CommandError(f"{path} is corrupt: {loaded.error}")
    if loaded.error is not None:
        print(f"ringtrace: {path}: {loaded.error}; read everything before it", file=sys.stderr)
    return loaded


def _convert(args: argparse.Namespace) -> int:
    params = _filter_params(args)
    _check_params(params)
    selected = parse_snapshot_query(params, now_ns=time.time_ns()).filter
    loaded = _load(args.file)
    write = _WRITERS[args.format]
    with _output(args.output) as out, _progress(f"convert {args.file}") as advance:
        for chunk in write(loaded.view, selected):
            out.write(chunk)
            advance(len(chunk))
    return 0


def _dump(args: argparse.Namespace) -> int:
    params = _filter_params(args)
    _check_params(params)
    source: str = args.source
    if source.startswith(("http://", "https://")) or "://" in source:
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory, "snapshot.rttrace")
            with _fetch(_snapshot_url(source, [*params, ("format", "native")])) as response, path.open("wb") as out:
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
            rows = list(selected_rows(_load(str(path)).view))
    else:
        selected = parse_snapshot_query(params, now_ns=time.time_ns()).filter
        rows = list(selected_rows(_load(source).view, selected))
    rows.sort(key=lambda row: row.wall_ns, reverse=args.newest_first)
    for row in rows:
        sys.stdout.write(dump_line(row))
    sys.stdout.flush()
    return 0


def dump_line(row: Row) -> str:
    """One event as a line: time (UTC), process[pid], track, category, priority, name, duration, args."""
    when = datetime.datetime.fromtimestamp(row.wall_ns // 10**9, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    fields = [
        f"{when}.{row.wall_ns % 10**9:09d}Z",
        f"{row.process.name}[{row.process.pid}]",
        row.track,
        row.category,
        row.priority or "-",
        row.name,
    ]
    if row.dur_ns:
        fields.append(f"dur={row.dur_ns / 1000:.3f}us")
    if row.args not in (None, {}, []):
        fields.append(json.dumps(row.args, default=repr, ensure_ascii=False, separators=(",", ":")))
    return "  ".join(field.replace("\n", "\\n") for field in fields) + "\n"
