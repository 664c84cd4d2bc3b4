# The C writer of Perfetto packets (_perfetto.c); see perfetto_frames.py.
from collections.abc import Callable

def frame_packets(
    payload: bytes | memoryview,
    count: int,
    columns: tuple[int, ...],
    first_ts_ns: int,
    offset_ns: int,
    since_ns: int | None,
    until_ns: int | None,
    kinds: bytes,
    enter: Callable[[], tuple[bytes, bytes]],
    name: Callable[[int], bytes],
    annotation: Callable[[str], bytes],
    counter: Callable[[int, str], bytes],
    /,
) -> tuple[int, int, int, bytes | None, bytes] | None: ...
