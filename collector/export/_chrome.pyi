# The C writer of Chrome JSON (_chrome.c); see chrome_frames.py.
from array import array

def events_json(
    payload: bytes | memoryview,
    count: int,
    columns: tuple[int, ...],
    first_ts_ns: int,
    offset_ns: int,
    origin_ns: int,
    since_ns: int | None,
    until_ns: int | None,
    kinds: bytes,
    names: bytearray,
    spans: array[int],
    ids: bytes,
    counter_ids: bytes,
    /,
) -> tuple[bytes, bytes | None, int, int, int] | None: ...
