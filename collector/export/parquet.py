"""A snapshot's typed tables (``table_rows.py``) as Parquet files, one table a file, streamed: a row group per
batch of rows, written as it is made, so memory holds one batch however large the store.

pyarrow is the ``tables`` extra's (``pip install 'ringtrace[tables]'``): this module imports it when a table is
written, never at import, and ``missing_pyarrow()`` says what to install where it is not. The file's key-value
metadata ``ringtrace`` holds, as JSON, what a Chrome snapshot's ``otherData`` holds beside its events: the loss
counters (``report``), the window read (``capture``) and ``clock_origin_wall_ns``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import orjson
from ringtrace.collector.export.table_columns import ColumnBuffers
from ringtrace.collector.export.table_names import DEFAULT_TABLE, EXTRA, TABLES, missing_pyarrow
from ringtrace.collector.export.table_rows import Columns, TableRows
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.selection import EVERYTHING, EventFilter

__all__ = ["EXTRA", "METADATA_KEY", "missing_pyarrow", "parquet_chunks", "table_parquet_chunks", "table_schema"]

#: The optional extra that brings pyarrow to the collector.
#: The Parquet file's key-value metadata key holding the snapshot's report.
METADATA_KEY: Final = b"ringtrace"

_STRING: Final = ("process", "host", "track", "name", "category", "args", "trace_id", "span_id", "parent_span_id")
_INT64: Final = ("pid", "start_ns", "duration_ns", "end_ns", "ts_ns")
#: The columns of few distinct values, which Parquet stores as a dictionary of them (a stack's are its frames'). The
#: rest (times, args, ids, texts) are mostly distinct: a dictionary of them, given up when it grows past a page, took
#: more than half of the writing time, for no smaller a file.
_DICTIONARY: Final = (
    *("process", "pid", "host", "track", "name", "category", "kind", "priority", "series", "task", "leaf"),
    *(f"stack.list.element.{field}" for field in ("function", "file", "line")),
)


def table_schema(table: str, columns: tuple[str, ...] | None = None) -> Any:
    """The Arrow schema of ``table`` (a ``pyarrow.Schema``), of ``columns`` only (None: all), in the table's order:
    times and durations int64 ns, args JSON text, a counter's value a double, a sample's stack a list of (function,
    file, line) structs, root first."""
    import pyarrow as pa

    frame = pa.struct([("function", pa.string()), ("file", pa.string()), ("line", pa.int64())])
    types = {
        **dict.fromkeys(_STRING, pa.string()),
        **dict.fromkeys(_INT64, pa.int64()),
        "kind": pa.string(),
        "async_id": pa.string(),
        "priority": pa.string(),
        "text": pa.string(),
        "series": pa.string(),
        "value": pa.float64(),
        "task": pa.string(),
        "leaf": pa.string(),
        "stack": pa.list_(frame),
    }
    return pa.schema([(name, types[name]) for name in TABLES[table] if columns is None or name in columns])


class _Sink:
    """What the Parquet writer writes, kept until the next chunk is yielded."""

    def __init__(self) -> None:
        self.closed = False
        self._chunks: list[bytes] = []

    def write(self, data: Any) -> int:
        self._chunks.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        taken = b"".join(self._chunks)
        self._chunks.clear()
        return taken


def table_parquet_chunks(
    view: SnapshotView, selected: EventFilter, table: str, columns: tuple[str, ...] | None
) -> Iterator[bytes]:
    """``parquet_chunks`` of ``table``, of ``columns`` only (None: all): the format's table writer."""
    return parquet_chunks(view, selected, table, columns=columns)


def parquet_chunks(
    view: SnapshotView,
    selected: EventFilter = EVERYTHING,
    table: str = DEFAULT_TABLE,
    *,
    accelerated: bool = True,
    columns: tuple[str, ...] | None = None,
) -> Iterator[bytes]:
    """Yield the pieces of one Parquet file holding ``table``'s rows among the events ``selected``: of ``columns``
    only (None: all; the rows are the same), in the table's order.

    Raises:
        ValueError: ``table`` is none of ``TABLES``, or a column is none of its.
        ModuleNotFoundError: pyarrow is not installed (``missing_pyarrow()`` says so first).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    unknown = sorted(set(columns or ()) - set(TABLES.get(table, ())))
    if unknown and table in TABLES:
        raise ValueError(f"{table} has no column {unknown[0]!r:.80}")
    if columns is not None and not columns:
        raise ValueError("columns must name at least one column")
    rows = TableRows(view, selected, table, accelerated=accelerated, columns=columns)
    schema = table_schema(table, columns)
    sink = _Sink()
    # Snappy: zstd made the file half the size (still a twentieth of Chrome JSON's) at 1.5 times the writing time.
    writer = pq.ParquetWriter(
        pa.PythonFile(sink, mode="w"), schema, compression="snappy", use_dictionary=list(_DICTIONARY)
    )
    try:
        for batch in rows.batches():
            if isinstance(batch, ColumnBuffers):
                writer.write_batch(_wrapped_batch(pa, batch, schema))
            elif batch is not None:
                writer.write_batch(_record_batch(pa, batch, schema))
            yield sink.take()
        writer.add_key_value_metadata({METADATA_KEY: orjson.dumps(rows.metadata())})
    finally:
        writer.close()
    yield sink.take()


def _record_batch(pa: Any, batch: Columns, schema: Any) -> Any:
    arrays = [
        # (args come as UTF-8 bytes: taken as binary and checked as text by Arrow, not decoded one by one)
        pa.array(batch[field.name], pa.binary()).cast(field.type)
        if field.name == "args"
        else pa.array(batch[field.name], field.type)
        for field in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _wrapped_batch(pa: Any, batch: ColumnBuffers, schema: Any) -> Any:
    """The C writer's rows (``table_columns.py``), its buffers wrapped as Arrow arrays without a copy."""
    rows = batch.rows
    ints = dict(zip(batch.table.ints, batch.ints, strict=True))
    strings = dict(zip(batch.table.strings, batch.strings, strict=True))
    floats = dict.fromkeys(batch.table.floats, batch.floats)
    arrays = []
    for field in schema:
        name = field.name
        if name in ints:
            arrays.append(pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(ints[name])]))
        elif name in strings:
            valid, offsets, data = strings[name]
            buffers = [None if valid is None else pa.py_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)]
            arrays.append(pa.Array.from_buffers(pa.string(), rows, buffers))
        elif floats.get(name) is not None:
            valid, data = floats[name]  # type: ignore[misc]
            buffers = [None if valid is None else pa.py_buffer(valid), pa.py_buffer(data)]
            arrays.append(pa.Array.from_buffers(pa.float64(), rows, buffers))
        elif name in batch.table.stacks and batch.stacks is not None:
            arrays.append(_stack_array(pa, rows, batch.stacks, field.type))
        else:  # (category: no span the C writer takes has one)
            arrays.append(pa.nulls(rows, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _stack_array(pa: Any, rows: int, stacks: Any, list_type: Any) -> Any:
    """The C writer's stacks (``ColumnBuffers.stacks``) as a list of (function, file, line) structs, without a copy."""
    offsets, (function_offsets, functions), (file_offsets, files), lines = stacks
    count = len(lines) // 8
    frame = list_type.value_type
    fields = [
        pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(function_offsets), pa.py_buffer(functions)]),
        pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(file_offsets), pa.py_buffer(files)]),
        pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(lines)]),
    ]
    frames = pa.StructArray.from_arrays(fields, fields=list(frame))
    return pa.Array.from_buffers(list_type, rows, [None, pa.py_buffer(offsets)], children=[frames])
