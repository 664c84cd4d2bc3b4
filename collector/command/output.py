"""What the ``ringtrace`` subcommands write: files written in full or not at all, a progress line on a terminal,
events as lines of text, names made inert for a terminal and for rich's tables, sizes."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Final

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from ringtrace.collector.command.failure import CommandError
from ringtrace.collector.export.chrome import json_bytes
from ringtrace.collector.http.query import time_text

__all__ = ["cell", "event_line", "output", "printable", "progress", "size"]

#: What a terminal would act on rather than show (C0 and C1 controls, DEL: colours, a cursor moved, the screen
#: cleared, the window's title set) or break a line at, as escapes that show it.
_UNPRINTABLE: Final = {
    **{code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
    **{ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"},
}


def printable(text: str) -> str:
    """``text`` (a name a traced program chose) as a terminal shows it, whatever it holds: on one line, its control
    characters as escapes (``\\x1b``, ``\\n``)."""
    return text.translate(_UNPRINTABLE)


def cell(text: str) -> str:
    """``text`` as a cell of a rich table: printable, and its brackets shown, not taken for markup."""
    return escape(printable(text))


@contextlib.contextmanager
def output(path: str) -> Iterator[IO[bytes]]:
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
def progress(what: str, events: int | None = None) -> Iterator[Callable[[int, int], None]]:
    """A progress line on stderr while bytes are written (only on a terminal): bytes, or, where the output's events
    can be counted and the collector said how many it holds (``events``), events against that (a filter takes
    fewer: then the line ends short of it). On stderr alone: stdout may be the output itself (``-o -``)."""
    terminal = Console(stderr=True)
    if events is None:
        by_bytes = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
        with Progress(*by_bytes, transient=True, console=terminal, disable=not terminal.is_terminal) as progress:
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
        progress.update(task, advance=shown, size=size(written[0]))

    with Progress(*columns, transient=True, console=terminal, disable=not terminal.is_terminal) as progress:
        task = progress.add_task(what, total=max(events, 1), size=size(0))
        yield advance


def event_line(
    wall_ns: int, process: str, track: str, kind: str, priority: str, name: str, dur_ns: int, args: Any
) -> str:
    """An event as a line: time (UTC), process, track, kind, priority, name, then its duration and args if any."""
    fields = [time_text(wall_ns), process, track, kind, priority or "-", name]
    if dur_ns:
        fields.append(f"dur={dur_ns / 1000:.3f}us")
    if args not in (None, {}, []):
        fields.append(json_bytes(args).decode())
    return printable("  ".join(fields)) + "\n"


def size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:,.0f} {unit}" if unit == "B" else f"{nbytes:,.1f} {unit}"
        nbytes /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")
