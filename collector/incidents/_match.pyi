# The rules' first pass over a stored frame in C (_match.c); see frame_match.py.
from array import array

def match_frame(
    payload: bytes | memoryview,
    count: int,
    columns: tuple[int, ...],
    kinds: array[int] | bytes,
    names: tuple[array[int] | bytes, ...],
    /,
) -> bytes | None: ...
