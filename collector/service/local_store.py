"""The collector's own store, in memory or in a data dir (``--data-dir``), as the backend the collector composes
(``store/backend.py``): snapshots, pops and live tails read its segments pinned (``snapshots.py``), ``/clear`` removes
from it (``process_control.py``), a data dir is recovered at start and synced (``data_dir.py``), and ``--max-age``
removes what aged out."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any, Final, Protocol

from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.rows import Row
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.read.tail import Tail
from ringtrace.collector.service.config import CollectorConfig
from ringtrace.collector.service.data_dir import DataDirSync, recover
from ringtrace.collector.service.process_control import ProcessControl
from ringtrace.collector.service.snapshots import Snapshots
from ringtrace.collector.service.store_log import log_store
from ringtrace.collector.store.backend import Flushed, Timer
from ringtrace.collector.store.processes import ProcessRecord, Registry
from ringtrace.collector.store.ring import Store
from ringtrace.collector.store.segment_files import DataDir
from ringtrace.wire.stream_limits import Limits

__all__ = ["MAX_AGE_SWEEP_S", "LocalParts", "LocalStore"]

log = logging.getLogger("ringtrace.collector")

#: How often ``--max-age`` removes what aged out.
MAX_AGE_SWEEP_S: Final = 1.0


class Sealable(Protocol):
    """A connection whose open segment can be sealed (``IngestProtocol.seal_segment``)."""

    def seal_segment(self, opened_before_ns: int | None = None) -> None: ...


class LocalParts(Protocol):
    """What the local store reads of the collector: its data dir, the known processes, every connection (sealed as
    ``--max-age`` says) and the limits for reading what is stored; and, when it is read, the pinned views
    (``snapshots``) and the process control, which are made over its ring after it."""

    @property
    def data_dir(self) -> DataDir | None: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def every_connection(self) -> Iterable[Sealable]: ...

    @property
    def stored_limits(self) -> Limits: ...

    @property
    def snapshots(self) -> Snapshots: ...

    @property
    def process_control(self) -> ProcessControl: ...


class LocalStore:
    """The store of ``--capacity`` bytes under ``--policy``, in memory or in ``--data-dir``.

    Args:
        config: the collector's configuration.
        parts: the collector's parts it reads (``LocalParts``).

    Raises:
        ConfigError: the capacity cannot hold two segments of the largest frame.
    """

    def __init__(self, config: CollectorConfig, parts: LocalParts) -> None:
        self._config = config
        self._parts = parts
        self.store = Store(
            config.capacity_bytes,
            segment_bytes=config.effective_segment_bytes,
            process_capacity_bytes=config.process_capacity_bytes,
            policy=config.policy,
            buffers=parts.data_dir,
        )
        self.kind = "data dir" if config.data_dir else "memory"
        self._data_dir_sync = DataDirSync(self.store)

    def ingest_limits(self, limits: Limits) -> Limits:
        return limits

    async def start(self) -> None:
        """Adopt what the data dir holds, if there is one."""
        data_dir = self._parts.data_dir
        if data_dir is not None:
            recover(data_dir, self._parts.registry, self.store, self._parts.stored_limits)

    def timers(self) -> tuple[Timer, ...]:
        """``--fsync interval``: a sync every interval; ``--max-age``: a sweep every second."""
        config = self._config
        interval_syncs = self._parts.data_dir is not None and config.fsync == "interval"
        return (
            *([self._data_dir_sync.every_interval] if interval_syncs else []),
            *([self._expire_every_second] if config.max_age_s is not None else []),
        )

    def log_setup(self, limits: Limits) -> None:
        config = self._config
        where = f"data dir {config.data_dir} (fsync {config.fsync})" if config.data_dir else "in memory"
        log_store(config, self.store, limits, where, "--capacity")

    async def stop(self) -> None:
        """Nothing is on its way elsewhere: what ingest stored is stored."""

    async def close(self) -> None:
        """Sync the data dir (unless ``--fsync never``) and close it."""
        data_dir = self._parts.data_dir
        if data_dir is not None:
            if self._config.fsync != "never":
                await self._data_dir_sync.sync()
            data_dir.close()

    async def _expire_every_second(self) -> None:
        """``--max-age``: every second, seal the open segments opened a quarter of it ago, and remove what was sealed
        longer ago than it (counted overwritten)."""
        assert self._config.max_age_s is not None
        max_age_ns = int(self._config.max_age_s * 1e9)
        while True:
            await asyncio.sleep(MAX_AGE_SWEEP_S)
            self._expire(max_age_ns)

    def _expire(self, max_age_ns: int) -> None:
        # Not in the coroutine: its loop variable would keep the last connection alive while it sleeps.
        now = time.monotonic_ns()
        for connection in list(self._parts.every_connection):
            connection.seal_segment(opened_before_ns=now - max_age_ns // 4)
        self.store.expire(now - max_age_ns)

    # -- reads and removals --------------------------------------------------------------------------------------

    async def view(self, flushed: Flushed, selected: EventFilter | None = None) -> SnapshotView:
        """Everything stored now, pinned (the export selects from it)."""
        return self._parts.snapshots.freeze(*flushed)

    async def pop(self, flushed: Flushed, selected: EventFilter) -> SnapshotView:
        """Everything stored now, pinned, and what the processes ``selected`` hold removed at the same instant: nothing
        stored in between is lost, and nothing is popped twice."""
        view = self._parts.snapshots.freeze(*flushed)
        self._parts.process_control.clear(selected)
        return view

    async def clear(self, selected: EventFilter) -> tuple[list[ProcessRecord], int]:
        return self._parts.process_control.clear(selected)

    async def sources(self, selected: EventFilter) -> dict[str, Any]:
        """Every known process ``selected`` and its tracks (``inventory.py``)."""
        return {"processes": await self._parts.snapshots.sources(self._parts.process_control.matching(selected))}

    async def tail_step(self, tail: Tail) -> list[Row]:
        return await self._parts.snapshots.tail_step(tail)

    async def stats(self) -> dict[str, Any]:
        """Nothing beyond the collector's own totals."""
        return {}

    def not_ready(self) -> str | None:
        """None: memory and a data dir take events as long as the collector runs (what they cannot keep, counted)."""
        return None

    def published_counters(self) -> dict[str, int] | None:
        """None: nothing is published elsewhere."""
        return None
