"""The service's side of ``--data-dir``: recovering what it holds at start, and syncing all of it (``--fsync
interval`` and at stop) on a worker thread."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from ringtrace.collector.store.processes import Registry
from ringtrace.collector.store.ring import Store
from ringtrace.collector.store.segments import SYNC_INTERVAL_S, DataDir
from ringtrace.wire.decoder import Limits

__all__ = ["DataDirSync", "recover"]

log = logging.getLogger("ringtrace.collector")


def recover(data_dir: DataDir, registry: Registry, store: Store, limits: Limits) -> None:
    """Adopt every segment found in ``data_dir`` into ``store``, its process into ``registry``; log what was found
    and what did not fit."""
    started = time.monotonic()
    segments = events = cut = 0
    for recovered in data_dir.recover(limits):
        process = registry.known(recovered.hello)
        if recovered.stats is not None:  # segments come oldest first: the last one seen is the latest
            process.report(recovered.stats)
        store.adopt(recovered, process.uid)
        segments += 1
        events += sum(count for _, _, _, count, _, _ in recovered.entries)
        cut += recovered.why_cut is not None
    store.skip_to(data_dir.highest_seq + 1)  # never reuse the name of a file found there
    totals = store.totals()
    overwritten = totals.overwritten_events + totals.capped_events
    if overwritten:
        log.warning(
            "%d of the %d events recovered were overwritten at once: the data dir held more than "
            "--capacity (%d bytes) or --process-capacity allows",
            overwritten,
            events,
            store.capacity_bytes,
        )
    if segments:
        log.info(
            "recovered %d segments, %d events of %d processes from %s in %.2fs (%d with a tail cut)",
            segments,
            events,
            len(registry.processes),
            Path(data_dir.path),
            time.monotonic() - started,
            cut,
        )


class DataDirSync:
    """Syncs of everything the store holds in the data dir, one at a time, each on a worker thread."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._running: asyncio.Future[None] | None = None

    async def every_interval(self) -> None:
        """``--fsync interval``: every SYNC_INTERVAL_S, what was written since the last sync, on a worker thread."""
        while True:
            await asyncio.sleep(SYNC_INTERVAL_S)
            await self.sync()

    async def sync(self) -> None:
        """Make everything stored in the data dir durable, on a worker thread; a failure is logged (what was
        acknowledged stays in the page cache, not known to be on the disk). A sync running is waited for first: a
        task cancelled while it waits leaves the sync running to its end."""
        if self._running is not None:
            await asyncio.wait([self._running])
        job = self._store.sync_all_job()
        if job is None:
            return
        running = self._running = asyncio.get_running_loop().run_in_executor(None, job.run)
        running.add_done_callback(self._synced)
        await asyncio.wait([running])

    def _synced(self, running: asyncio.Future[None]) -> None:
        if self._running is running:
            self._running = None
        error = None if running.cancelled() else running.exception()
        if isinstance(error, OSError):
            log.error("cannot sync the data dir: %s; what was acknowledged since the last sync may not survive a "
                      "power loss", error)  # fmt: skip
        elif error is not None:
            log.error("syncing the data dir failed", exc_info=error)
