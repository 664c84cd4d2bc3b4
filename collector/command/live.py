"""``ringtrace tail`` and ``sources``: what a collector holds now, as it comes (``GET /stream``) and as a table of
its processes, threads and sources (``GET /sources``)."""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any, Final

from rich.console import Console
from rich.table import Table
from ringtrace.collector.command.failure import CommandError
from ringtrace.collector.command.filters import add_filters, check_params, described, filter_params
from ringtrace.collector.command.output import cell, event_line, size
from ringtrace.collector.command.remote import Access, add_access, endpoint_url, fetch
from ringtrace.collector.export import live_tail
from ringtrace.collector.http.query import (
    DEFAULT_TAIL_GRACE_S,
    MAX_TAIL_GRACE_S,
    PROCESS_PARAMETERS,
    STREAM_PARAMETERS,
    time_text,
)

__all__ = ["add_sources_parser", "add_tail_parser"]


def add_tail_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tail = commands.add_parser("tail", help="a collector's events as they are stored, one a line (Ctrl-C ends it)")
    tail.add_argument("url", metavar="URL", help="the collector's HTTP address, e.g. http://127.0.0.1:7701")
    add_filters(tail, STREAM_PARAMETERS, log_view=True)
    tail.add_argument(
        "--grace",
        metavar="DURATION",
        help=f"with --until: how long past it to wait for events recorded before it, more than the slowest client's "
        f"batch_interval_s (default {DEFAULT_TAIL_GRACE_S:g}s, at most {MAX_TAIL_GRACE_S:g}s)",
    )
    add_access(tail)
    tail.set_defaults(run=_tail, parser=tail)


def add_sources_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sources = commands.add_parser("sources", help="a collector's processes, threads and sources, as a table")
    sources.add_argument("url", metavar="URL", help="the collector's HTTP address, e.g. http://127.0.0.1:7701")
    sources.add_argument("--json", action="store_true", help="the collector's JSON document as it is")
    add_filters(sources, PROCESS_PARAMETERS)
    add_access(sources)
    sources.set_defaults(run=_sources, parser=sources)


def _tail(args: argparse.Namespace) -> int:
    params = filter_params(args) + ([("grace", args.grace)] if args.grace is not None else [])
    check_params(params, STREAM_PARAMETERS)
    with fetch(endpoint_url(args.url, "/stream", params), Access(args)) as response:
        for event, document in _server_sent_events(_lines_until_reset(response)):
            if event == _BEGUN:
                _say_begun(endpoint_url(args.url, "/stream", []), params, args.grace)
            elif event == "done":  # all that was asked for is shown
                sys.stderr.write(f"ringtrace tail: done: {_done_reason(document, args.until)}\n")
                return 0
            else:
                _show(event, document)
    raise _broke_off()


def _done_reason(document: dict[str, Any], given: str | None) -> str:
    """Why the tail is done, with its until as it was given (``+30s``) and as the time it stood for, in UTC; the
    collector's reason as it is if it does not say the until in ns (an older one)."""
    until_ns = document.get("until_ns")
    if not isinstance(until_ns, int) or given is None:
        return str(document.get("reason", document))
    when = time_text(until_ns)
    return f"its until ({when if given == when else f'{given}: {when}'}) has passed"


#: What ``_server_sent_events`` yields for the tail's banner: the collector has begun the tail.
_BEGUN: Final = "begun"


def _say_begun(url: str, params: list[tuple[str, str]], grace: str | None) -> None:
    """On stderr (stdout carries the events alone, for a pipe): the tail is open, what it shows, and how long past its
    until it waits (``grace``: no filter)."""
    filters = [(name, value) for name, value in params if name != "grace"]
    shown = "every event stored from now on"
    if filters:
        shown = f"events stored from now on that match {described(filters)}"
    if grace is not None:
        shown += f", waiting {grace} past its until"
    sys.stderr.write(f"ringtrace tail: tailing {url}, {shown}; Ctrl-C to stop\n")
    sys.stderr.flush()


def _server_sent_events(lines: Iterable[bytes]) -> Iterator[tuple[str, Any]]:
    """(event, its data decoded) of each event the collector sends: ``message`` unless it names another; and
    ``_BEGUN`` for the banner the collector writes once the tail has begun (what is stored from then on is shown)."""
    event = "message"
    for raw in lines:
        if raw.startswith(live_tail.BANNER.rstrip()):
            yield _BEGUN, None
        elif raw.startswith(b"event: "):
            event = raw[7:].strip().decode("utf-8", "replace")
        elif raw.startswith(b"data: "):
            yield event, json.loads(raw[6:])
            event = "message"


def _show(event: str, document: Any) -> None:
    """One event of the tail as a line on stdout; a clearing said on stderr; any other event ends the tail."""
    if event == "cleared":
        sys.stderr.write(f"ringtrace: {document['events']} events were {document['reason']}\n")
    elif event != "message":
        raise CommandError(f"the collector ended the tail: {document.get('reason', document)}")
    else:
        sys.stdout.write(_tail_line(document))
        sys.stdout.flush()


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
    return event_line(
        event["wall_ns"], label, event["track"], event["kind"], event["priority"], event["name"], event["dur_ns"],
        event["args"],
    )  # fmt: skip


def _sources(args: argparse.Namespace) -> int:
    params = filter_params(args)
    check_params(params, PROCESS_PARAMETERS)
    with fetch(endpoint_url(args.url, "/sources", params), Access(args)) as response:
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
            str(process["pid"]), f"[bold]{cell(process['process_name'])}[/bold]", "process", cell(process["host"]),
            _connections(process), f"{process['stored_events']:,}", size(process["stored_bytes"]),
            f"{_lost(process):,}", "-" if rate is None else f"{rate:,.0f}", _clock(process["first_wall_ns"]),
            _clock(process["last_wall_ns"]),
        )  # fmt: skip
        for track in process["tracks"]:
            table.add_row(
                "", f"  {cell(track['name'] or str(track['track']))}", track["kind"] or "?", "", "",
                f"{track['stored_events']:,}", size(track["stored_bytes"]), f"{_lost(track):,}", "",
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


def _connections(process: dict[str, Any]) -> str:
    """A client's connections; ``otlp`` for an OTLP service, which holds none (it sends requests now and then)."""
    return "otlp" if process.get("via") == "otlp" else str(process["connections"])


def _clock(wall_ns: int | None) -> str:
    if wall_ns is None:
        return "-"
    when = datetime.datetime.fromtimestamp(wall_ns / 1e9, datetime.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
