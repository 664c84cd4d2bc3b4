"""The ``ringtrace`` command's entry point, in the base install (msgpack alone).

``ringtrace run`` is the client's and works with no extra installed. Every other subcommand (``collect``,
``snapshot``, ``dump``, ...) is the collector's: it is handed to ``ringtrace.collector.command.entry`` by importlib,
only when asked for (the client imports nothing of the collector), and without the ``collector`` extra says in one
line which install brings it, with status 1. ``ringtrace --help`` works in both installs.

    ringtrace run [--collector HOST:PORT] [options] script.py [args]
    ringtrace run [--collector HOST:PORT] [options] -m module [args]
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Final

from ringtrace.client.launch.launch_options import OPTIONS, settings_from
from ringtrace.client.launch.program import RUNNING_CODE, CannotOpen, check_program, run_program
from ringtrace.client.launch.recording_start import start_recording
from ringtrace.client.launch.run_arguments import USAGE, parse_run_arguments, run_help
from ringtrace.client.sampling.stack_capture import leave_out_callers_of
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.version import __version__

__all__ = ["COLLECTOR_SUBCOMMANDS", "main"]

#: The collector's subcommands (a test holds them to its parser), for ``--help`` where the collector is not installed.
COLLECTOR_SUBCOMMANDS: Final = (
    ("collect", "run a collector (the same as ringtrace-collector)"),
    ("snapshot", "a collector's snapshot, to a file"),
    ("dump", "events of a file or a collector as text, one a line"),
    ("convert", "a file to Chrome JSON, a snapshot file or a Perfetto trace"),
    ("tail", "a collector's events as they are stored, one a line"),
    ("sources", "a collector's processes, threads and sources, as a table"),
    ("spans", "a collector's slowest (or newest) spans, as a table"),
    ("top", "span durations per name and/or process: count, p50 ... max"),
    ("replay", "send a file's events to a collector, which serves them as live data"),
    ("incidents", "a collector's saved incidents: list, fetch, open or delete one"),
    ("query", "SQL over a collector's events, run here with DuckDB"),
)
_COLLECTOR_ENTRY = "ringtrace.collector.command.entry"
#: ``RINGTRACE_PROCESS_NAME``: read by ``run``, never handed to the program's children.
_PROCESS_NAME_VARIABLE: Final = next(option.variable for option in OPTIONS if option.field == "process_name")


def main(argv: Sequence[str] | None = None) -> int:
    """``ringtrace ARGS`` (``argv``, by default ``sys.argv[1:]``); returns the exit status (``run``: the program's)."""
    given = list(sys.argv[1:] if argv is None else argv)
    if not given or given[0] in ("-h", "--help"):
        print(_top_help(), file=sys.stdout if given else sys.stderr)
        return 0 if given else 2
    if given[0] in ("-V", "--version"):
        print(f"ringtrace {__version__}")
        return 0
    if given[0] == "run":
        return _run(given[1:])
    if given[0].startswith("-"):  # (no flag comes before the command: each command has its own)
        print(f"ringtrace: unrecognized option {given[0]}: the command comes first: ringtrace --help", file=sys.stderr)
        return 2
    entry = importlib.import_module(_COLLECTOR_ENTRY)  # needs nothing of the extra: it says what is missing
    status: int = entry.command(given)
    return status


def _run(argv: list[str]) -> int:
    try:
        arguments = parse_run_arguments(argv)
        if arguments.help:
            print(run_help())
            return 0
        settings = settings_from(arguments.given, os.environ)
    except ConfigError as exc:
        print(f"ringtrace run: {exc}", file=sys.stderr)
        return 2
    program = arguments.program
    assert program is not None  # (parse_run_arguments gives one, or --help)
    try:
        check_program(program)
    except CannotOpen as exc:
        print(f"ringtrace run: {exc}", file=sys.stderr)
        return 2
    # Children (subprocesses, multiprocessing's spawn and forkserver children) record with the same settings; the
    # process name is this process's alone, even where it came from the environment: each child is named after its own
    # program (or, in multiprocessing, its parent and itself), as without it.
    os.environ.update(settings.children_environment())
    os.environ.pop(_PROCESS_NAME_VARIABLE, None)
    leave_out_callers_of(*RUNNING_CODE)  # (samples show the program's stacks as under python)
    start_recording(settings, settings.process_name or program.name)
    try:
        return run_program(program)
    except CannotOpen as exc:  # (gone since it was checked)
        print(f"ringtrace run: {exc}", file=sys.stderr)
        return 2


def _top_help() -> str:
    lines = [
        "usage: ringtrace COMMAND [args]",
        "",
        "ringtrace: record a program with no code change, run a collector, take snapshots, read and convert trace "
        "files.",
        "",
        "commands:",
        "  run".ljust(14) + "run a Python program recording it (" + USAGE.removeprefix("usage: ") + ")",
    ]
    lines += [f"  {name}".ljust(14) + summary for name, summary in COLLECTOR_SUBCOMMANDS]
    lines += [
        "",
        "Every command but run needs the collector extra: pip install 'ringtrace[collector]'.",
        "ringtrace COMMAND --help says more; ringtrace --version, which version this is.",
    ]
    return "\n".join(lines)
