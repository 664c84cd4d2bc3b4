# The C packer (built from packer/); see event_packing.py.
from array import array
from collections.abc import Callable
from typing import Any

from ringtrace.wire.string_table import StringTable

class Keywords:
    def as_dict(self) -> dict[str, Any]: ...

def tracked(records: list[Any], /) -> list[Any]: ...
def pack_columns(records: list[Any], table: StringTable, /) -> tuple[bytes, int, int, list[Any] | None]: ...
def pack_args(
    records: list[Any],
    converters: dict[int, Callable[[Any], tuple[list[Any], int]]],
    values_converter: Callable[[Any], tuple[list[Any], int]],
    pack_other: Callable[[Any, Any], bytes | None],
    /,
) -> tuple[bytes | None, list[int]]: ...
def pack_events(
    records: list[Any],
    table: StringTable,
    converters: dict[int, Callable[[Any], tuple[list[Any], int]]],
    values_converter: Callable[[Any], tuple[list[Any], int]],
    track_id: int,
    max_frame_bytes: int,
    /,
) -> bytes | None: ...
def pack_calls(
    records: bytes,
    first: int,
    count: int,
    names: array[int],
    stacks: array[int],
    overflow_id: int,
    track_id: int,
    max_frame_bytes: int,
    /,
) -> list[int] | tuple[bytes | None, int, int]: ...
def pack_records(
    records: bytes,
    offset: int,
    max_count: int,
    names: array[int],
    overflow_id: int,
    track_id: int,
    max_frame_bytes: int,
    /,
) -> list[int] | tuple[bytes | None, int, int, int]: ...

MAX_ARG_ITEMS: int
MAX_ARG_TEXT: int
WIRE_CONSTANTS: dict[str, int]
