"""The ``ringtrace`` command: run a collector, take snapshots, read and convert files.

    ringtrace collect [collector flags]            the same as ringtrace-collector
    ringtrace snapshot URL -o FILE [filters]       a collector's snapshot, to a file
    ringtrace dump FILE|URL [filters]              events as text, one a line, oldest first
    ringtrace convert FILE -o OUT [filters]        a file to Chrome JSON, a snapshot file or a Perfetto trace
    ringtrace tail URL [filters]                   a collector's events as they are stored, one a line
    ringtrace sources URL [--pid --process --host] a collector's processes, threads and sources, as a table
    ringtrace replay FILE --to HOST:PORT [filters] send a file's events to a collector, which serves them as live data

FILE is a trace file (``FileListener``) or a snapshot file, or a recording of another system: a HawkTracer HTDUMP
stream or a GaBIEn TimeLogger stream, recognised by its first bytes (``offline.py``).

A collector that requires a token gets it from ``--token-file FILE`` (or ``RINGTRACE_TOKEN_FILE``, or the token
itself in ``RINGTRACE_TOKEN``): as ``Authorization: Bearer`` over HTTP, in HELLO for ``replay``. An ``https://`` URL
(or ``replay --tls``) is checked against the system's CAs, or the one in ``--cacert FILE`` (``RINGTRACE_CACERT``).

Filters are ``GET /snapshot``'s query parameters as flags (``--since -5s --process 'web-*'``), checked the same way
(``query.py``). Every failure is one line on stderr naming what failed, and a non-zero exit: 2 for a bad argument,
1 for a collector that cannot be reached or answers with an error, a file that cannot be read, is of no format known
or is corrupt.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import json
import os
import shlex
import ssl
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table
from ringtrace.client.options import environment_token, parse_address, read_token_file
from ringtrace.client.wire.errors import ConfigError, ProtocolError
from ringtrace.collector.command.replay import ReplayError, replay
from ringtrace.collector.export.chrome import chrome_trace_chunks, json_bytes
from ringtrace.collector.export.native import native_chunks
from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.foreign.offline import FOREIGN_FORMATS, LoadedFile, load_file
from ringtrace.collector.read.query import (
    FORMATS,
    PROCESS_PARAMETERS,
    STREAM_PARAMETERS,
    QueryError,
    parse_snapshot_query,
)
from ringtrace.collector.read.rows import Row, selected_rows
from ringtrace.collector.service import serve as collector_cli

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
#: The flag of each query parameter the command line takes.
_FLAG_OF: Final = {
    **{name: flag for flag, name, _ in _FILTERS},
    "flush_timeout_s": "--flush-timeout",
    "messages_only": "--messages-only",
}
#: Recordings of other systems that files may be.
_FOREIGN: Final = ", ".join(name for name, _, _ in FOREIGN_FORMATS)
#: Filters whose values may start with "-" (a relative time).
_VALUE_FLAGS: Final = frozenset({"--since", "--until"})
#: What --format writes.
_WRITERS: Final = {"chrome": chrome_trace_chunks, "native": native_chunks, "perfetto": perfetto_chunks}
_FORMAT_HELP: Final = (
    "chrome (Chrome trace JSON), native (a snapshot file) or perfetto (a Perfetto trace); default chrome"
)
_HTTP_TIMEOUT_S: Final = 120.0
_ENDPOINTS: Final = ("/snapshot", "/stream", "/sources")
_CHUNK: Final = 1 << 16
_CACERT_VARIABLE: Final = "RINGTRACE_CACERT"
_TOKEN_HINT: Final = "give it the collector's token: --token-file FILE, or RINGTRACE_TOKEN"
_CACERT_HINT: Final = "for a collector with a private CA or a self-signed certificate: --cacert FILE"


class CommandError(Exception):
    """What stops a subcommand: printed as one line, and the exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(_with_values_joined(sys.argv[1:] if argv is None else list(argv)))
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
    times do (a subcommand's own flags, after ``collect``, are left alone)."""
    joined: list[str] = []
    position = 0
    while position < len(argv):
        token = argv[position]
        if token == "collect" and not joined:
            return argv
        following = argv[position + 1] if position + 1 < len(argv) else None
        if token in _VALUE_FLAGS and following is not None and following.startswith("-") and following != "-":
            joined.append(f"{token}={following}")
            position += 2
        else:
            joined.append(token)
            position += 1
    return joined


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ringtrace", description="ringtrace: run a collector, take snapshots, read and convert trace files."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    collect = commands.add_parser(
        "collect", help="run a collector (the same as ringtrace-collector)", add_help=False, prefix_chars="\0"
    )
    collect.add_argument("flags", nargs=argparse.REMAINDER, help="ringtrace-collector's flags (see --help)")
    collect.set_defaults(run=_collect, parser=collect)

    snapshot = commands.add_parser("snapshot", help="a collector's snapshot, to a file")
    snapshot.add_argument("url", metavar="URL", help="the collector's HTTP address, e.g. http://127.0.0.1:7701")
    snapshot.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write it ('-': stdout)")
    snapshot.add_argument("--format", choices=FORMATS, default="chrome", help=_FORMAT_HELP)
    snapshot.add_argument(
        "--flush-timeout", type=float, default=None, metavar="S", help="how long the collector waits for clients"
    )
    _add_filters(snapshot)
    _add_access(snapshot)
    snapshot.set_defaults(run=_snapshot, parser=snapshot)

    dump = commands.add_parser("dump", help="events as text, one a line")
    dump.add_argument(
        "source",
        metavar="FILE|URL",
        help=f"a trace or snapshot file, a recording ({_FOREIGN}), or a collector's HTTP address",
    )
    dump.add_argument("--newest-first", action="store_true", help="newest event first")
    _add_filters(dump, log_view=True)
    _add_access(dump)
    dump.set_defaults(run=_dump, parser=dump)

    convert = commands.add_parser(
        "convert",
        help=f"a trace or snapshot file, or a recording ({_FOREIGN}), to Chrome JSON, a snapshot file or a Perfetto "
        "trace",
    )
    convert.add_argument(
        "file", metavar="FILE", help=f"a trace file (FileListener), a snapshot file, or a recording ({_FOREIGN})"
    )
    convert.add_argument("-o", "--output", required=True, metavar="OUT", help="where to write it ('-': stdout)")
    convert.add_argument("--format", choices=FORMATS, default="chrome", help=_FORMAT_HELP)
    _add_filters(convert)
    convert.set_defaults(run=_convert, parser=convert)

    tail = commands.add_parser("tail", help="a collector's events as they are stored, one a line (Ctrl-C ends it)")
    tail.add_argument("url", metavar="URL", help="the collector's HTTP address, e.g. http://127.0.0.1:7701")
    _add_filters(tail, STREAM_PARAMETERS, log_view=True)
    _add_access(tail)
    tail.set_defaults(run=_tail, parser=tail)

    sources = commands.add_parser("sources", help="a collector's processes, threads and sources, as a table")
    sources.add_argument("url", metavar="URL", help="the collector's HTTP address, e.g. http://127.0.0.1:7701")
    sources.add_argument("--json", action="store_true", help="the collector's JSON document as it is")
    _add_filters(sources, PROCESS_PARAMETERS)
    _add_access(sources)
    sources.set_defaults(run=_sources, parser=sources)

    replay_ = commands.add_parser(
        "replay", help="send a file's events to a collector, which stores and serves them as live data"
    )
    replay_.add_argument("file", metavar="FILE", help=f"a trace or snapshot file, or a recording ({_FOREIGN})")
    replay_.add_argument("--to", required=True, metavar="HOST:PORT", help="the collector's ingest address")
    _add_filters(replay_)
    _add_access(replay_, ingest=True)
    replay_.set_defaults(run=_replay, parser=replay_)
    return parser


def _add_access(parser: argparse.ArgumentParser, ingest: bool = False) -> None:
    group = parser.add_argument_group("a collector with a token or TLS")
    group.add_argument(
        "--token-file",
        metavar="FILE",
        help="the collector's token, in FILE (default: the file RINGTRACE_TOKEN_FILE names, or RINGTRACE_TOKEN)",
    )
    if ingest:
        group.add_argument("--tls", action="store_true", help="connect with TLS (--cacert implies it)")
    group.add_argument(
        "--cacert",
        metavar="FILE",
        help="trust the collector's certificate if the CA in FILE (PEM) signed it, as for a self-signed one "
        "(default: RINGTRACE_CACERT, else the system's CAs)",
    )


def _token(args: argparse.Namespace) -> str | None:
    """The token the flags or the environment give, if any."""
    try:
        return read_token_file(args.token_file) if args.token_file is not None else environment_token()
    except ConfigError as exc:
        raise CommandError(str(exc), 2) from None


def _tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """A client TLS context trusting ``--cacert`` (or ``RINGTRACE_CACERT``); None: the system's CAs, if need be."""
    cacert = args.cacert if args.cacert is not None else os.environ.get(_CACERT_VARIABLE) or None
    if cacert is None:
        return None
    try:
        return ssl.create_default_context(cafile=cacert)
    except (OSError, ssl.SSLError) as exc:
        raise CommandError(f"--cacert: cannot load the CA certificates in {cacert}: {exc.strerror or exc}", 2) from None


class _Access:
    """How to reach a collector's HTTP API: its token, and the TLS context for an https:// URL."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.token = _token(args)
        self.context = _tls_context(args)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A collector never redirects: a redirect is answered as an error, so that the token goes nowhere else."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _add_filters(
    parser: argparse.ArgumentParser, accepted: Container[str] | None = None, *, log_view: bool = False
) -> None:
    """The filters as flags; ``log_view``: a command that prints events as lines (``dump``, ``tail``), where
    ``--min-priority`` means the messages at that priority (other events carry none) unless ``--with-other-events``."""
    group = parser.add_argument_group("filters (as GET /snapshot's query parameters)")
    for flag, name, text in _FILTERS:
        if accepted is None or name in accepted:
            if log_view and name == "min_priority":
                text = "only messages at this priority or more important (fatal ... trace+++)"
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


def _filter_params(args: argparse.Namespace) -> list[tuple[str, str]]:
    params = []
    for flag, name, _ in _FILTERS:
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is not None:
            params.append((name, value))
    priorities = getattr(args, "with_other_events", None) is False and getattr(args, "min_priority", None) is not None
    if getattr(args, "messages_only", False) or priorities:
        params.append(("messages_only", "1"))
    return params


# -- collect ---------------------------------------------------------------------------------------------------------


def _collect(args: argparse.Namespace) -> int:
    return collector_cli.main(args.flags, prog="ringtrace collect")


# -- snapshot --------------------------------------------------------------------------------------------------------


def _snapshot(args: argparse.Namespace) -> int:
    filters = _filter_params(args)
    params = [*filters, ("format", args.format)]
    if args.flush_timeout is not None:
        params.append(("flush_timeout_s", str(args.flush_timeout)))
    _check_params(params)
    url = _snapshot_url(args.url, params)
    access = _Access(args)
    stored = _stored_events(args.url, access)  # (what the progress line counts towards)
    chrome = args.format == "chrome"
    report = _ChromeReport() if chrome else None
    with (
        _fetch(url, access) as response,
        _output(args.output) as out,
        _progress(f"snapshot from {args.url}", stored if chrome else None) as advance,
    ):
        while chunk := response.read(_CHUNK):
            out.write(chunk)
            advance(len(chunk), chunk.count(b'"ph":') if chrome else 0)  # (each Chrome event has one phase)
            if report is not None:
                report.feed(chunk)
    if filters:
        _say_matched("snapshot", filters, report.shown_events() if report is not None else None, stored)
    return 0


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


def _stored_events(url: str, access: _Access) -> int | None:
    """How many events the collector at ``url`` holds in all (None if it does not say)."""
    try:
        with _fetch(_endpoint_url(url, "/stats", []), access) as response:
            return int(json.loads(response.read())["stored_events"])
    except (CommandError, ValueError, KeyError, TypeError):
        return None


def _say_matched(command: str, params: list[tuple[str, str]], matched: int | None, stored: int | None) -> None:
    """On stderr: how many events the filters matched of how many there were, and which filters they were."""
    given = " ".join(
        "(messages only)" if name == "messages_only" else f"{_FLAG_OF.get(name, name)} {shlex.quote(value)}"
        for name, value in params
    )
    of = f" of {stored:,}" if stored is not None else ""
    if matched is None:  # (a Perfetto trace or a snapshot file does not say)
        counted = f"filters applied{of}" + (" events" if of else "") + ":"
    else:
        counted = f"{matched:,}{of} events matched"
    sys.stderr.write(f"ringtrace {command}: {counted} {given}\n")


def _check_params(params: list[tuple[str, str]], accepted: Mapping[str, str] | None = None) -> None:
    """Refuse what the collector would refuse before asking it: the same rules, and a message that names the flag."""
    try:
        if accepted is None:
            parse_snapshot_query(params, now_ns=time.time_ns())
        else:
            parse_snapshot_query(params, now_ns=time.time_ns(), accepted=accepted)
    except QueryError as exc:
        raise CommandError(_as_flags(str(exc)), status=2) from None


def _as_flags(message: str) -> str:
    for name, flag in _FLAG_OF.items():
        message = message.replace(f"query parameter {name!r}", flag).replace(f"{name!r}", flag)
    return message


def _snapshot_url(base: str, params: list[tuple[str, str]]) -> str:
    return _endpoint_url(base, "/snapshot", params)


def _endpoint_url(base: str, endpoint: str, params: list[tuple[str, str]]) -> str:
    """``endpoint`` of the collector at ``base`` (an HTTP address, perhaps with a path before it), with ``params``."""
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CommandError(f"URL must be a collector's HTTP address such as http://127.0.0.1:7701, got {base!r}", 2)
    path = parts.path.rstrip("/")
    for known in _ENDPOINTS:  # the address of another endpoint of the same collector will do
        path = path.removesuffix(known)
    path += endpoint
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True) + params  # the URL's own go first
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, urllib.parse.urlencode(query), ""))


#: What OpenSSL says of a peer that answers TLS in plain text (3.2 and newer say the second).
_NOT_TLS: Final = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE")


@contextlib.contextmanager
def _fetch(url: str, access: _Access) -> Iterator[Any]:
    request = urllib.request.Request(url)
    if access.token is not None:
        request.add_header("Authorization", f"Bearer {access.token}")
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=access.context), _NoRedirect)
    try:
        response = opener.open(request, timeout=_HTTP_TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        with exc:
            detail = exc.read(2000).decode("utf-8", "replace").strip()
        hint = f" ({_TOKEN_HINT})" if exc.code == 401 and access.token is None else ""
        raise CommandError(f"the collector answered {exc.code}: {detail}{hint}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        hint = ""
        if isinstance(reason, ssl.SSLCertVerificationError):
            hint = f" ({_CACERT_HINT})"
        elif isinstance(reason, ssl.SSLError) and reason.reason in _NOT_TLS:  # no TLS at the other end
            hint = " (the collector speaks plain HTTP there: use an http:// URL, or give it --tls-cert and --tls-key)"
        elif isinstance(reason, http.client.RemoteDisconnected) and url.startswith("http://"):  # a TLS listener
            hint = " (does the collector use TLS, --tls-cert? then use an https:// URL)"
        raise CommandError(f"cannot reach {urllib.parse.urlsplit(url).netloc}: {reason}{hint}") from None
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
        try:
            os.replace(temporary, target)
        except OSError as exc:  # a directory there, say
            raise CommandError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def _progress(what: str, events: int | None = None) -> Iterator[Callable[[int, int], None]]:
    """A progress line on stderr while bytes are written (only on a terminal): bytes, or, where the output's events
    can be counted and the collector said how many it holds (``events``), events against that (a filter takes
    fewer: then the line ends short of it)."""
    if events is None:
        by_bytes = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
        with Progress(*by_bytes, transient=True, disable=not sys.stderr.isatty()) as progress:
            task = progress.add_task(what, total=None)
            yield lambda nbytes, _: progress.advance(task, nbytes)
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,.0f} of {task.total:,.0f} events stored"),
        TextColumn("{task.fields[size]}"),
        TimeRemainingColumn(),
    )
    written = [0]

    def advance(nbytes: int, shown: int) -> None:
        written[0] += nbytes
        progress.update(task, advance=shown, size=_size(written[0]))

    with Progress(*columns, transient=True, disable=not sys.stderr.isatty()) as progress:
        task = progress.add_task(what, total=max(events, 1), size=_size(0))
        yield advance


# -- files -----------------------------------------------------------------------------------------------------------


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
    params = _filter_params(args)
    _check_params(params)
    selected = parse_snapshot_query(params, now_ns=time.time_ns()).filter
    loaded = _load(args.file)
    write = _WRITERS[args.format]
    with _output(args.output) as out, _progress(f"convert {args.file}") as advance:
        for chunk in write(loaded.view, selected):
            out.write(chunk)
            advance(len(chunk), 0)
    _undecodable(args.file, loaded)
    return 0


def _dump(args: argparse.Namespace) -> int:
    params = _filter_params(args)
    _check_params(params)
    source: str = args.source
    if source.startswith(("http://", "https://")) or "://" in source:
        url = _snapshot_url(source, [*params, ("format", "native")])
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory, "snapshot.rttrace")
            with _fetch(url, _Access(args)) as response, path.open("wb") as out:
                while chunk := response.read(_CHUNK):
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
        stored = _stored_events(source, _Access(args)) if source.startswith(("http://", "https://")) else loaded.events
        _say_matched("dump", params, len(rows), stored)
    _undecodable(source, loaded)
    return 0


def dump_line(row: Row) -> str:
    """One event as a line: time (UTC), process[pid], track, category (the kind, for a member of a built-in family:
    ``source_open``, ``marker_end`` ...), priority, name, duration, args."""
    label = f"{row.process.name}[{row.process.pid}]"
    return _line(row.wall_ns, label, row.track, row.kind, row.priority, row.name, row.dur_ns, row.args)


def _line(wall_ns: int, process: str, track: str, kind: str, priority: str, name: str, dur_ns: int, args: Any) -> str:
    when = datetime.datetime.fromtimestamp(wall_ns // 10**9, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    fields = [f"{when}.{wall_ns % 10**9:09d}Z", process, track, kind, priority or "-", name]
    if dur_ns:
        fields.append(f"dur={dur_ns / 1000:.3f}us")
    if args not in (None, {}, []):
        fields.append(json_bytes(args).decode())
    return "  ".join(field.replace("\n", "\\n") for field in fields) + "\n"


# -- tail, sources, replay -------------------------------------------------------------------------------------------


def _tail(args: argparse.Namespace) -> int:
    params = _filter_params(args)
    _check_params(params, STREAM_PARAMETERS)
    event = "message"
    with _fetch(_endpoint_url(args.url, "/stream", params), _Access(args)) as response:
        for raw in _lines_until_reset(response):
            if raw.startswith(b"event: "):
                event = raw[7:].strip().decode("utf-8", "replace")
            elif raw.startswith(b"data: "):
                document = json.loads(raw[6:])
                if event == "cleared":
                    sys.stderr.write(f"ringtrace: {document['events']} events were {document['reason']}\n")
                elif event != "message":
                    raise CommandError(f"the collector ended the tail: {document.get('reason', document)}")
                else:
                    sys.stdout.write(_tail_line(document))
                    sys.stdout.flush()
                event = "message"
    raise _broke_off()


def _broke_off() -> CommandError:
    return CommandError("the connection to the collector broke off: the collector was killed (a stop says so)")


def _lines_until_reset(response: Any) -> Iterator[bytes]:
    """The tail's lines. A collector cuts a tail it waited on too long off with a reset (and says so in its log);
    one that was killed leaves its answer unfinished."""
    try:
        yield from response
    except ConnectionResetError:
        raise CommandError("the collector cut the tail off: this side did not read fast enough") from None
    except http.client.IncompleteRead:
        raise _broke_off() from None


def _tail_line(event: dict[str, Any]) -> str:
    label = f"{event['process']}[{event['os_pid']}]"
    return _line(
        event["wall_ns"], label, event["track"], event["kind"], event["priority"], event["name"], event["dur_ns"],
        event["args"],
    )  # fmt: skip


def _sources(args: argparse.Namespace) -> int:
    params = _filter_params(args)
    _check_params(params, PROCESS_PARAMETERS)
    with _fetch(_endpoint_url(args.url, "/sources", params), _Access(args)) as response:
        body = response.read()
    if args.json:
        sys.stdout.write(body.decode() + "\n")
        return 0
    table = Table(box=None, pad_edge=False)
    for column in _SOURCE_COLUMNS:
        table.add_column(column, justify="right" if column in _NUMERIC_COLUMNS else "left", no_wrap=True)
    for process in json.loads(body)["processes"]:
        rate = process["events_per_s"]
        table.add_row(
            str(process["pid"]), f"[bold]{process['process_name']}[/bold]", "process", process["host"],
            str(process["connections"]), f"{process['stored_events']:,}", _size(process["stored_bytes"]),
            f"{_lost(process):,}", "-" if rate is None else f"{rate:,.0f}", _clock(process["first_wall_ns"]),
            _clock(process["last_wall_ns"]),
        )  # fmt: skip
        for track in process["tracks"]:
            table.add_row(
                "", f"  {track['name'] or track['track']}", track["kind"] or "?", "", "",
                f"{track['stored_events']:,}", _size(track["stored_bytes"]), f"{_lost(track):,}", "",
                _clock(track["first_wall_ns"]), _clock(track["last_wall_ns"]),
            )  # fmt: skip
    # On a terminal, as wide as it is; into a pipe or file, whole lines.
    Console(highlight=False, width=None if sys.stdout.isatty() else 1000).print(table)
    return 0


_SOURCE_COLUMNS: Final = ("pid", "process / track", "kind", "host", "conn", "events", "bytes", "lost", "ev/s",
                          "first (UTC)", "last (UTC)")  # fmt: skip
_NUMERIC_COLUMNS: Final = ("pid", "conn", "events", "bytes", "lost", "ev/s")


def _lost(counts: dict[str, Any]) -> int:
    """Every kind of loss of a process or track (what was cleared on request is not lost)."""
    names = ("overwritten_events", "capped_events", "discarded_events", "client_dropped_events", "rejected_events")
    return sum(int(counts.get(name, 0)) for name in names)


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:,.0f} {unit}" if unit == "B" else f"{nbytes:,.1f} {unit}"
        nbytes /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def _clock(wall_ns: int | None) -> str:
    if wall_ns is None:
        return "-"
    when = datetime.datetime.fromtimestamp(wall_ns / 1e9, datetime.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _replay(args: argparse.Namespace) -> int:
    params = _filter_params(args)
    _check_params(params)
    try:
        host, port = parse_address(args.to)
    except ConfigError as exc:
        raise CommandError(f"--to: {exc}", 2) from None
    token = _token(args)
    tls = None
    if args.tls or args.cacert is not None:  # RINGTRACE_CACERT alone says whom to trust, not to use TLS
        tls = _tls_context(args) or ssl.create_default_context()
    selected = parse_snapshot_query(params, now_ns=time.time_ns()).filter
    loaded = _load(args.file)
    try:
        done = replay(native_chunks(loaded.view, selected), host, port, token=token, tls=tls)
    except ReplayError as exc:
        raise CommandError(str(exc)) from None
    streams = f"{done.streams} stream{'s' if done.streams != 1 else ''}"
    print(f"replayed {done.events} events in {done.frames} frames ({streams}) to {args.to}")
    if params:
        _say_matched("replay", params, done.events, loaded.events)
    _undecodable(args.file, loaded)
    if done.refused:
        raise CommandError(f"the collector's store refused {done.refused} of them (its --policy or a process cap)")
    return 0
