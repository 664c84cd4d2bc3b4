"""Reading pinned segments on a worker thread: the pins go once the read ends, not when its caller stops waiting
(a cancelled caller leaves the read going, and the segments it reads must stay)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from ringtrace.collector.store.views import StoreSnapshot

__all__ = ["read_pinned"]

_R = TypeVar("_R")


async def read_pinned(frames: StoreSnapshot, read: Callable[[], _R]) -> _R:
    """``read()`` on a worker thread, with ``frames`` pinned until it ends (even if the caller is cancelled
    meanwhile)."""
    future = asyncio.get_running_loop().run_in_executor(None, read)
    try:
        return await asyncio.shield(future)
    finally:
        if future.done():
            frames.close()
        else:
            future.add_done_callback(lambda _: frames.close())
