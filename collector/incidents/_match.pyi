# The rules' first pass over a stored frame in C (_match.c); see frame_match.py.
from array import array

def match_frame(
    payload: bytes | memoryview,
    count: int,
    columns: tuple[int, ...],
    track: int,
    kinds: array[int] | bytes,
    names: tuple[array[int] | bytes, ...],
    counters: array[int] | bytes,
    thresholds: array[float] | bytes,
    state: array[int] | bytearray,
    /,
) -> bytes | None: ...
def match_run(
    buffer: bytes | bytearray | memoryview,
    size: int,
    entries: int,
    entry: int,
    position: int,
    end: int,
    columns: tuple[int, ...],
    kinds: array[int] | bytes,
    names: tuple[array[int] | bytes, ...],
    counters: array[int] | bytes,
    thresholds: array[float] | bytes,
    state: array[int] | bytearray,
    /,
) -> tuple[bytes, int, int, int]: ...
