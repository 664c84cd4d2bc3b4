# The C scan of EVENTS frames (_scan.c); see scan.py.
import mmap
from collections.abc import Container

def scan_events(
    buffer: bytearray | mmap.mmap, position: int, end: int, max_frame_bytes: int, tracks: Container[int], top: int, /
) -> tuple[bytes, int, dict[int, list[int]], int] | None: ...
