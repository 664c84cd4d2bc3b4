"""The tables a snapshot can be written as (``format=parquet&table=``) and their columns, declared once: what the
query parameters are checked against and what the writers fill. Apart from the writers (``table_rows.py``,
``parquet.py``) so that checking a query (the command line, on every run) imports none of them."""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_TABLE", "EXTRA", "TABLES", "WHERE_COLUMNS", "missing_pyarrow"]

#: The extra that installs what the tables are written with.
EXTRA: Final = "tables"

#: Every row's first columns: who recorded it, and where.
WHERE_COLUMNS: Final = ("process", "pid", "host", "track")

#: Every table and its columns, in order (``parquet.py`` gives their types).
TABLES: Final = {
    "spans": (
        *WHERE_COLUMNS,
        "name",
        "category",
        "start_ns",
        "duration_ns",
        "end_ns",
        "args",
        "trace_id",
        "span_id",
        "parent_span_id",
    ),
    "instants": (*WHERE_COLUMNS, "name", "kind", "ts_ns", "args", "trace_id", "async_id"),
    "messages": (*WHERE_COLUMNS, "ts_ns", "category", "priority", "text", "args", "trace_id"),
    "counters": (*WHERE_COLUMNS, "name", "ts_ns", "series", "value"),
    "samples": (*WHERE_COLUMNS, "ts_ns", "task", "leaf", "stack"),
}
#: What ``table`` is when not given.
DEFAULT_TABLE: Final = "spans"


def missing_pyarrow() -> str | None:
    """What to install for Parquet, if pyarrow is not importable here; None if it is."""
    try:
        import pyarrow.parquet  # noqa: F401 - (imported once: then a lookup in sys.modules)
    except ImportError:
        return f"format=parquet needs pyarrow in the collector: pip install 'ringtrace[{EXTRA}]'"
    return None
