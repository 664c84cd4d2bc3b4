# The C writer of the typed tables' Arrow buffers (_tables.c); see table_columns.py.
from typing import Any

def builder(table: int, /) -> Any: ...
def add_rows(
    builder: Any,
    payload: bytes | memoryview,
    count: int,
    columns: tuple[int, ...],
    first_ts_ns: int,
    offset_ns: int,
    since_ns: int | None,
    until_ns: int | None,
    kinds: bytes,
    names: bytes | bytearray,
    spans: Any,
    process: bytes,
    pid: int,
    host: bytes,
    track: bytes,
    wanted: int,
    templates: bytes = ...,
    template_spans: Any = ...,
    parents: Any = ...,
    leaves: Any = ...,
    frame_texts: bytes | bytearray = ...,
    frame_spans: Any = ...,
    /,
) -> tuple[int, int, bytes | None] | None: ...
def take_rows(
    builder: Any, /
) -> tuple[int, tuple[bytes, ...], tuple[tuple[bytes | None, bytes, bytes], ...], tuple[Any, ...] | None]: ...
