"""A connection's syncs under ``--fsync flush|always``, or its segments' replication (JetStream), and the FLUSH_ACKs
that wait for them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ringtrace.collector.store.ring import SyncJob

__all__ = ["ReplicatedAcks", "Syncer"]

log = logging.getLogger("ringtrace.collector.ingest")


class Syncer:
    """A connection's syncs under ``--fsync flush|always``: run one after another on a worker thread, so that a slow
    disk stalls this connection's FLUSH_ACKs, not the event loop; each FLUSH_ACK goes out once the sync that follows
    its FLUSH is done, in order. Requests that arrive while a sync runs share the next one.

    Args:
        sync_job: what must be synced now (``SegmentWriter.sync_job``).
        acknowledge: sends the FLUSH_ACK of a token.
        abort: closes the connection at once (a sync failed).
        who: the connection, as log lines name it.
    """

    def __init__(
        self,
        sync_job: Callable[[], SyncJob | None],
        acknowledge: Callable[[int], None],
        abort: Callable[[], None],
        who: str,
    ) -> None:
        self._sync_job, self._acknowledge, self._abort, self._who = sync_job, acknowledge, abort, who
        self._waiting: list[int | None] = []  # FLUSH tokens, or None for a sync after a batch (fsync always)
        self._task: asyncio.Task[None] | None = None

    def request(self, token: int | None) -> None:
        self._waiting.append(token)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiting:
                tokens, self._waiting = self._waiting, []
                job = self._sync_job()
                if job is not None:
                    try:
                        await loop.run_in_executor(None, job.run)
                    except OSError as exc:
                        # Not durable, and a retry proves nothing (the kernel marks the pages clean after an error):
                        # no acknowledgement; the client's flush() fails, and it sends again on a new connection.
                        log.error("cannot sync the data dir for %s: %s; closing its connection", self._who, exc)
                        self._waiting.clear()
                        self._abort()
                        return
                for token in tokens:
                    if token is not None:
                        self._acknowledge(token)
        finally:
            self._task = None


class ReplicatedAcks:
    """A connection's FLUSH_ACKs when the store replicates (JetStream: ``Store.replication``): a FLUSH seals the
    stream's open segment at once, and its FLUSH_ACK goes out once the replica acknowledged every segment sealed up
    to then, in order; if some of those were refused there, a REFUSED with their events goes first (the client's
    flush() then says False). While the replica cannot be reached, no FLUSH_ACK goes out: the client's flush() times
    out, False.

    Args:
        settle: seals the stream's open segment; returns what is done once the replica settled everything sealed
            (its result: the events refused).
        acknowledge: sends the FLUSH_ACK of a token.
        refuse: sends a REFUSED of so many events.
    """

    def __init__(
        self, settle: Callable[[], Awaitable[int]], acknowledge: Callable[[int], None], refuse: Callable[[int], None]
    ) -> None:
        self._settle, self._acknowledge, self._refuse = settle, acknowledge, refuse
        #: The FLUSH_ACK sent last, or in line to be: the next waits for it (they go out in order).
        self._last: asyncio.Task[None] | None = None

    def request(self, token: int) -> None:
        settled = self._settle()
        self._last = asyncio.get_running_loop().create_task(self._acknowledge_after(self._last, settled, token))

    async def _acknowledge_after(
        self, previous: asyncio.Task[None] | None, settled: Awaitable[int], token: int
    ) -> None:
        refused = await settled
        if previous is not None:
            await previous
        if refused:
            self._refuse(refused)
        self._acknowledge(token)
