"""``ringtrace incidents``: a collector's incidents, as a table (``GET /incidents``; a pending one with when it will
be ready), one fetched to a file in a snapshot format (``GET /incidents/{id}``; a pending one says when it will be
ready, or is waited for with ``--wait``), opened in the web view, or deleted (``DELETE /incidents/{id}``).

    ringtrace incidents [list] [--rule R --status S --since T --until T --limit N] [--json]
    ringtrace incidents fetch ID [--format F] [-o FILE] [--wait] [filters]
    ringtrace incidents open ID
    ringtrace incidents delete ID

Each takes ``--url`` (the collector's HTTP address; default ``DEFAULT_URL``) and the token and TLS flags of the other
subcommands.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import sys
import time
import webbrowser
from collections.abc import Iterator
from typing import Any, Final

from rich.console import Console
from rich.table import Table
from ringtrace.collector.command.failure import CommandError
from ringtrace.collector.command.filters import add_filters, as_flags, filter_params
from ringtrace.collector.command.output import cell, output, progress, size
from ringtrace.collector.command.remote import CHUNK, Access, add_access, endpoint_url, fetch
from ringtrace.collector.command.snapshot import add_table, table_params
from ringtrace.collector.export.formats import DEFAULT_FORMAT
from ringtrace.collector.http.incident_query import (
    INCIDENT_FORMATS,
    INCIDENT_PARAMETERS,
    INCIDENTS_PARAMETERS,
    RECORD,
    parse_incident_query,
    parse_incidents_query,
)
from ringtrace.collector.http.query import QueryError
from ringtrace.collector.incidents.incident_files import valid_id

__all__ = ["DEFAULT_URL", "add_incidents_parser"]

#: Where a collector started with its defaults answers HTTP.
DEFAULT_URL: Final = "http://127.0.0.1:7701"
_COMMON: Final = ("url", "token_file", "cacert")
_LIST_FLAGS: Final = ("rule", "status", "since", "until", "limit")
_LIST_DESTS: Final = tuple(f"list_{name}" for name in _LIST_FLAGS)
#: ``fetch --wait``: how often a pending incident's record is asked for, and how long past its ready time it waits.
_WAIT_STEP_S: Final = 1.0
_WAIT_PAST_READY_S: Final = 60.0


def add_incidents_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    incidents = commands.add_parser(
        "incidents", help="a collector's incidents: list (the default), fetch, open or delete one"
    )
    # ``list`` is the default action: its flags are the command's too (``incidents --status saved``), or argparse
    # would take their values for an action.
    _add_common(incidents)
    _add_list_flags(incidents)
    incidents.set_defaults(run=_list, parser=incidents)
    actions = incidents.add_subparsers(dest="action", metavar="ACTION")

    listing = actions.add_parser("list", help="the incidents (pending, saved, failed) as a table, newest first")
    _add_list_flags(listing, below=True)
    _add_common(listing, below=True)
    listing.set_defaults(run=_list, parser=listing)

    fetching = actions.add_parser("fetch", help="an incident's snapshot, to a file")
    fetching.add_argument("id", metavar="ID", help="the incident's id (as the list shows it)")
    fetching.add_argument(
        "--format",
        type=str.lower,
        choices=(*INCIDENT_FORMATS, RECORD),
        default=DEFAULT_FORMAT,
        help=f"the snapshot's format (default {DEFAULT_FORMAT}); {RECORD}: its record (JSON)",
    )
    add_table(fetching)
    fetching.add_argument("-o", "--output", metavar="FILE", help="where to write it ('-': stdout; default: ID.suffix)")
    fetching.add_argument(
        "--wait", action="store_true", help="if it is still being captured (pending), wait until it is saved"
    )
    add_filters(fetching, INCIDENT_PARAMETERS)
    _add_common(fetching, below=True)
    fetching.set_defaults(run=_fetch, parser=fetching)

    opening = actions.add_parser("open", help="open the web view at an incident (and print its URL)")
    opening.add_argument("id", metavar="ID", help="the incident's id")
    _add_common(opening, below=True)
    opening.set_defaults(run=_open, parser=opening)

    deleting = actions.add_parser("delete", help="remove an incident from the collector")
    deleting.add_argument("id", metavar="ID", help="the incident's id")
    _add_common(deleting, below=True)
    deleting.set_defaults(run=_delete, parser=deleting)


def _add_list_flags(parser: argparse.ArgumentParser, below: bool = False) -> None:
    """``list``'s flags, before the action (or without one) or after ``list`` (``below``: as ``_add_common``)."""
    for name in _LIST_FLAGS:  # (a dest of their own: fetch's --since and --until are other flags of the same names)
        parser.add_argument(f"--{name}", dest=f"list_{name}", metavar=name.upper(), help=INCIDENTS_PARAMETERS[name])
    parser.add_argument("--json", action="store_true", help="the collector's JSON document as it is")
    if below:
        for action in parser._actions:
            if action.dest in (*_LIST_DESTS, "json"):
                action.default = argparse.SUPPRESS


def _add_common(parser: argparse.ArgumentParser, below: bool = False) -> None:
    """``--url`` and the access flags, before the action or after it (``below``: given there, they win; not given,
    they leave what was given before it)."""
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the collector's HTTP address (default {DEFAULT_URL})")
    add_access(parser)
    if below:  # (argparse copies a subparser's defaults over the parent's values: it has none)
        for action in parser._actions:
            if action.dest in _COMMON:
                action.default = argparse.SUPPRESS


def _list(args: argparse.Namespace) -> int:
    params = [
        (name, str(getattr(args, f"list_{name}"))) for name in _LIST_FLAGS if getattr(args, f"list_{name}") is not None
    ]
    try:  # (refused here, as the collector would, with exit status 2: a bad argument)
        parse_incidents_query(params, now_ns=time.time_ns())
    except QueryError as exc:
        raise CommandError(as_flags(str(exc), {name: f"--{name}" for name in _LIST_FLAGS}), status=2) from None
    body = _get(args, "/incidents", params)
    if args.json:
        sys.stdout.write(body.decode() + "\n")
        return 0
    records = json.loads(body)["incidents"]
    if not records:
        print("no incidents" + (" match" if params else ""), file=sys.stderr)
        return 0
    table = Table(box=None, pad_edge=False)
    for column in _COLUMNS:
        table.add_column(column, justify="right" if column in ("events", "bytes") else "left", no_wrap=True)
    for record in records:
        table.add_row(*(cell(text) for text in _row(record)))
    # On a terminal, as wide as it is; into a pipe or file, whole lines.
    Console(highlight=False, width=None if sys.stdout.isatty() else 1000).print(table)
    return 0


_COLUMNS: Final = ("id", "rule", "time (UTC)", "processes", "events", "bytes", "status")


def _row(record: dict[str, Any]) -> tuple[str, ...]:
    processes = record.get("processes") or []
    names = ", ".join(str(process.get("name") or process.get("pid")) for process in processes[:3])
    if len(processes) > 3:
        names += f" +{len(processes) - 3}"
    status = str(record.get("status", "?"))
    if status == "failed" and record.get("failure"):
        status += f": {record['failure']}"
    elif status == "pending":
        status += f": ready {_clock(record.get('ready_wall_ns'))}"
    events = record.get("events")
    return (
        str(record.get("id")),
        str(record.get("rule", "")),
        _clock(record.get("time_ns")),
        names or "-",
        f"{events:,}" if isinstance(events, int) else "-",
        size(record["bytes"]) if isinstance(record.get("bytes"), int) and status == "saved" else "-",
        status,
    )


def _clock(time_ns: Any) -> str:
    if not isinstance(time_ns, int):
        return "-"
    when = datetime.datetime.fromtimestamp(time_ns // 10**9, datetime.UTC)
    return f"{when:%Y-%m-%d %H:%M:%S}.{time_ns // 10**6 % 1000:03d}"


def _fetch(args: argparse.Namespace) -> int:
    incident_id = _checked_id(args.id)
    _without_list_flags(args)
    format_ = INCIDENT_FORMATS.get(args.format)
    params = [("format", args.format), *filter_params(args), *table_params(args)]
    try:  # (the collector's own rules: a bad value is refused here, exit status 2)
        parse_incident_query(params, time.time_ns())
    except QueryError as exc:
        raise CommandError(as_flags(str(exc)), status=2) from None
    suffix = (format_.suffix or ".json") if format_ is not None else ".record.json"
    path = args.output or f"{incident_id}{suffix}"
    if format_ is not None:
        _wait_until_captured(args, incident_id)
    url = _url(args, f"/incidents/{incident_id}", params)
    with (
        _reaching(args),
        fetch(url, Access(args)) as response,
        output(path) as out,
        progress(f"incident {incident_id}") as advance,
    ):
        while chunk := response.read(CHUNK):
            out.write(chunk)
            advance(len(chunk), 0)
    if path != "-":
        print(f"incident {incident_id}: written to {path}", file=sys.stderr)
    return 0


def _wait_until_captured(args: argparse.Namespace, incident_id: str) -> None:
    """Return once the incident is no longer pending; a pending one without ``--wait`` stops with when it will be
    ready. An unknown one returns: the fetch says so."""
    deadline_s: float | None = None
    while True:
        try:
            record = json.loads(_get(args, f"/incidents/{incident_id}", [("format", RECORD)]))
        except CommandError as exc:
            if " 404:" in str(exc):
                return
            raise
        if record.get("status") != "pending":
            return
        ready_ns = record.get("ready_wall_ns")
        ready_ns = ready_ns if isinstance(ready_ns, int) else time.time_ns()
        in_s = max(0.0, (ready_ns - time.time_ns()) / 1e9)
        when = f"ready at {_clock(ready_ns)} UTC (in {in_s:.0f} s)"
        if not args.wait:
            raise CommandError(f"incident {incident_id} is still being captured: {when}; fetch it then, or with --wait")
        if deadline_s is None:
            print(f"incident {incident_id} is still being captured: {when}; waiting", file=sys.stderr)
            deadline_s = time.monotonic() + in_s + _WAIT_PAST_READY_S
        elif time.monotonic() > deadline_s:
            raise CommandError(f"incident {incident_id} is still pending {_WAIT_PAST_READY_S:.0f} s after its window")
        time.sleep(min(_WAIT_STEP_S, max(0.1, in_s)))


def _open(args: argparse.Namespace) -> int:
    incident_id = _checked_id(args.id)
    _without_list_flags(args)
    records = json.loads(_get(args, "/incidents", []))["incidents"]
    record = next((record for record in records if record.get("id") == incident_id), None)
    if record is None:
        raise CommandError(f"no incident {incident_id!r} at {args.url}")
    if record.get("status") == "pending":  # (the web view opens it once it is saved)
        raise CommandError(f"incident {incident_id} is still being captured: ready at "
                           f"{_clock(record.get('ready_wall_ns'))} UTC")  # fmt: skip
    url = _url(args, "/", [("incident", incident_id)])
    print(url)
    webbrowser.open(url)  # (without a browser, it does nothing: the URL is printed)
    return 0


def _delete(args: argparse.Namespace) -> int:
    incident_id = _checked_id(args.id)
    _without_list_flags(args)
    with _reaching(args), fetch(_url(args, f"/incidents/{incident_id}", []), Access(args), "DELETE") as response:
        response.read()
    print(f"incident {incident_id}: deleted", file=sys.stderr)
    return 0


def _without_list_flags(args: argparse.Namespace) -> None:
    """``list``'s flags given before another action would be left unused: refused, named (``incidents --since 5m
    fetch ID``: fetch's own ``--since`` goes after it)."""
    given = [
        f"--{name}"
        for name, dest in (*zip(_LIST_FLAGS, _LIST_DESTS, strict=True), ("json", "json"))
        if getattr(args, dest, None) not in (None, False)
    ]
    if given:
        raise CommandError(f"{given[0]} goes with list (or no action), not {args.action}", 2)


def _checked_id(incident_id: str) -> str:
    if not valid_id(incident_id):
        raise CommandError(f"an incident id is letters, digits, '_' and '-', not {incident_id!r:.80}", 2)
    return incident_id


def _get(args: argparse.Namespace, endpoint: str, params: list[tuple[str, str]]) -> bytes:
    with _reaching(args), fetch(_url(args, endpoint, params), Access(args)) as response:
        body: bytes = response.read()
    return body


def _url(args: argparse.Namespace, endpoint: str, params: list[tuple[str, str]]) -> str:
    return endpoint_url(args.url, endpoint, params)


@contextlib.contextmanager
def _reaching(args: argparse.Namespace) -> Iterator[None]:
    """A collector that cannot be reached is said with a hint of where it was looked for."""
    try:
        yield
    except CommandError as exc:
        if not str(exc).startswith("cannot reach "):
            raise
        raise CommandError(f"{exc} (is a collector running there? --url says where)", exc.status) from None
