"""Giving freed memory back to the OS.

glibc's malloc keeps what Python frees in its heap for reuse: a connection's tables are many objects of a few hundred
bytes, and once they are freed the pages they were on stay with the collector (measured: 120 connections at every
table limit left 0.7 to 2.0 GB behind them once they closed and their processes were forgotten, with nothing held in
the store). ``malloc_trim(0)`` returns every free page of every arena. It walks the heap, so it is called only once
enough was freed to be worth it: ``HeapTrimmer.freed`` adds to a tally, and ``trim_if_due`` (on a timer) trims once
the tally reaches ``TRIM_THRESHOLD_BYTES``. Where there is no glibc, nothing is trimmed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
from collections.abc import Callable
from typing import Final

__all__ = ["TRIM_THRESHOLD_BYTES", "HeapTrimmer", "malloc_trim"]

log = logging.getLogger("ringtrace.collector.heap")

#: Bytes freed (as estimated by the callers) before a trim is worth its walk of the heap.
TRIM_THRESHOLD_BYTES: Final = 4 * 1024 * 1024


def _load_malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim  # glibc only (musl has none)
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_malloc_trim = _load_malloc_trim()


def malloc_trim() -> bool:
    """Give every free page of the C heap back to the OS; False where that cannot be done (no glibc)."""
    if _malloc_trim is None:
        return False
    _malloc_trim(0)
    return True


class HeapTrimmer:
    """A tally of memory freed since the last trim (see the module docstring)."""

    __slots__ = ("_freed",)

    def __init__(self) -> None:
        self._freed = 0

    def freed(self, nbytes: int) -> None:
        """About ``nbytes`` of many small objects were just freed (a connection's tables, a process's records)."""
        self._freed += nbytes

    def trim_if_due(self) -> bool:
        """Trim if enough was freed since the last trim; returns whether it did."""
        if self._freed < TRIM_THRESHOLD_BYTES:
            return False
        self._freed = 0
        malloc_trim()
        return True
