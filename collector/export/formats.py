"""The snapshot formats, declared once: what ``GET /snapshot?format=``, ``ringtrace snapshot --format`` and
``ringtrace convert --format`` take, the content type each is served as, the writer that makes it, its help, and the
docs' table of them all come from ``FORMATS``. Adding a format is one entry (and its writer).

A format of tables (``parquet``) writes one table of a snapshot at a time: its ``tables`` name them, the first the
default, and its ``table_writer`` takes the one asked for (``chunks``). Its writer may need an optional extra:
``missing`` says what to install when it is not (the HTTP API answers 501 with that, before any work).

``TIMELINE`` is the web view's own format (``GET /timeline``): served as a snapshot is, never a value of ``format``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ringtrace.collector.export.table_names import DEFAULT_TABLE, TABLES, missing_pyarrow
from ringtrace.collector.read.selection import EventFilter
from ringtrace.wire.doc_blocks import marked_block, with_marked_block

if TYPE_CHECKING:
    from ringtrace.collector.read.frame_walk import SnapshotView

__all__ = [
    "DEFAULT_FORMAT",
    "FLAME_GRAPH",
    "FORMATS",
    "FORMATS_END",
    "FORMATS_START",
    "TIMELINE",
    "Format",
    "format_help",
    "formats_block",
    "formats_markdown",
    "formats_phrase",
    "with_formats_markdown",
]

#: What makes a format's bytes: the pieces of one document holding the events a filter selects, streamed.
Writer = Callable[["SnapshotView", EventFilter], Iterator[bytes]]
#: What makes one table of a format of tables: as ``Writer``, the table's name, and its columns (None: all).
TableWriter = Callable[["SnapshotView", EventFilter, str, tuple[str, ...] | None], Iterator[bytes]]


def _imported_on_use(module: str, name: str) -> Any:
    """The writer ``name`` of ``ringtrace.collector.export.<module>``, imported at its first call: the command line
    checks a format's name on every run, and importing every writer took it about 0.4 s before it did anything."""
    found: list[Callable[..., Iterator[bytes]]] = []

    def write(*args: Any) -> Iterator[bytes]:
        if not found:
            found.append(getattr(importlib.import_module(f"ringtrace.collector.export.{module}"), name))
        return found[0](*args)

    return write


@dataclass(frozen=True)
class Format:
    """One format a snapshot can be written in."""

    #: The value of ``format`` (and ``--format``) that asks for it: lower case.
    name: str
    content_type: str
    writer: Writer
    #: What it is, in a few words: the command line's help and the ``/`` listing say it so.
    help: str
    #: What it is, for the docs' table (Markdown).
    doc: str
    #: The file name suffix its files usually take ("" for none).
    suffix: str = ""
    #: Whether its end tells how many events it shows (Chrome JSON's ``otherData.capture.shown_events``), and each
    #: event holds ``"ph":`` once: the command line then counts them as they come and says how many matched.
    counts_events: bool = False
    #: For a format of tables: their names, the default first (``writer`` writes that one).
    tables: tuple[str, ...] = ()
    #: For a format of tables: what writes the one asked for.
    table_writer: TableWriter | None = None
    #: What says what to install for its writer where it is missing here (None: nothing it needs can be).
    missing: Callable[[], str | None] | None = None

    def chunks(
        self,
        view: SnapshotView,
        selected: EventFilter,
        table: str | None = None,
        columns: tuple[str, ...] | None = None,
    ) -> Iterator[bytes]:
        """The writer's pieces: of ``table`` (None: the default) for a format of tables, only ``columns`` of it
        (None: all)."""
        if self.table_writer is None or (table is None and columns is None):
            return self.writer(view, selected)
        return self.table_writer(view, selected, table or self.tables[0], columns)


#: Every value of ``format``, the default first.
FORMATS: Final = {
    format_.name: format_
    for format_ in (
        Format(
            "chrome",
            "application/json",
            _imported_on_use("chrome", "chrome_trace_chunks"),
            help="Chrome trace JSON",
            doc="Chrome trace event JSON (the default), which Perfetto UI and chrome://tracing open",
            suffix=".json",
            counts_events=True,
        ),
        Format(
            "native",
            "application/octet-stream",
            _imported_on_use("native", "native_chunks"),
            help="a snapshot file",
            doc=(
                "the store's own format, a stream per segment (`ringtrace.client.read_trace_streams` reads it; "
                '`wire/PROTOCOL.md`, "Snapshot file": see [Protocol](protocol.md)); `ringtrace dump`, '
                "`convert` and `replay` read it"
            ),
            suffix=".rtsnap",
        ),
        Format(
            "perfetto",
            "application/octet-stream",
            _imported_on_use("perfetto", "perfetto_chunks"),
            help="a Perfetto trace",
            doc="Perfetto's protobuf trace format ([below](#perfetto)), which Perfetto UI opens natively",
            suffix=".pftrace",
        ),
        Format(
            "pprof",
            "application/octet-stream",
            _imported_on_use("pprof", "pprof_chunks"),
            help="the samples as a pprof profile",
            doc=(
                "the samples' stacks as a pprof profile, gzip-compressed, counted per stack, thread and asyncio task "
                "([below](#samples)), which `go tool pprof`, speedscope and Perfetto UI open"
            ),
            suffix=".pb.gz",
        ),
        Format(
            "parquet",
            "application/vnd.apache.parquet",
            _imported_on_use("parquet", "parquet_chunks"),
            help="one table of typed rows (table=spans by default)",
            doc=(
                f"one typed table of the events, as Apache Parquet: `table=` one of {', '.join(TABLES)} (default "
                f"{DEFAULT_TABLE}; [below](#tables)), which DuckDB, pandas and Polars read and `ringtrace query` "
                "runs SQL over; needs `pip install 'ringtrace[tables]'` in the collector"
            ),
            suffix=".parquet",
            tables=tuple(TABLES),
            table_writer=_imported_on_use("parquet", "table_parquet_chunks"),
            missing=missing_pyarrow,
        ),
    )
}
#: What a snapshot is written in when ``format`` is not given.
DEFAULT_FORMAT: Final = "chrome"
#: The web view's columns (``timeline_columns.py``), served by ``GET /timeline``.
TIMELINE: Final = Format(
    "timeline",
    "application/json",
    _imported_on_use("timeline_columns", "timeline_chunks"),
    help="the web view's columns",
    doc="the selected events as compact columnar JSON, for the web view",
)

#: The samples' stacks merged into one tree (``flame_graph.py``), served by ``GET /flamegraph``.
FLAME_GRAPH: Final = Format(
    "flamegraph",
    "application/json",
    _imported_on_use("flame_graph", "flame_graph_chunks"),
    help="the web view's flame graph",
    doc="the selected samples' stacks merged into one tree, for the web view's flame graph",
)

FORMATS_START: Final = "<!-- formats:start -->"
FORMATS_END: Final = "<!-- formats:end -->"


def formats_phrase(describe: Callable[[Format], str]) -> str:
    """The formats in a sentence, each as ``describe`` says it: ``a, b or c``."""
    said = [describe(format_) for format_ in FORMATS.values()]
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} or {said[-1]}"


def format_help() -> str:
    """The command line's help of ``--format``."""
    return f"{formats_phrase(lambda format_: f'{format_.name} ({format_.help})')}; default {DEFAULT_FORMAT}"


def formats_markdown() -> str:
    """The docs' table of formats (Markdown, ``format | content type | file suffix | what it is``)."""
    lines = ["| `format` | content type | file suffix | what it is |", "|---|---|---|---|"]
    for format_ in FORMATS.values():
        suffix = f"`{format_.suffix}`" if format_.suffix else ""
        lines.append(f"| `{format_.name}` | `{format_.content_type}` | {suffix} | {format_.doc} |")
    return "\n".join(lines) + "\n"


def formats_block(text: str) -> str | None:
    """What ``text`` holds between ``FORMATS_START`` and ``FORMATS_END`` (None: no such block), without the blank lines
    around it."""
    return marked_block(text, FORMATS_START, FORMATS_END)


def with_formats_markdown(text: str) -> str:
    """``text`` (a docs page) with ``formats_markdown()`` between its markers.

    Raises:
        ValueError: ``text`` has no ``FORMATS_START`` ... ``FORMATS_END`` block.
    """
    return with_marked_block(text, FORMATS_START, FORMATS_END, formats_markdown())
