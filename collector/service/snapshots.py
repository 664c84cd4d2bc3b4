"""Pinned views of the store: snapshots and pops after a flush round trip with the connected clients, a live tail's
steps and ``/sources``, and the counts that bound how many of them run at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Container, Set
from dataclasses import replace
from typing import Any, Protocol

from ringtrace.collector.export.sources_document import sources_document
from ringtrace.collector.read.frame_walk import ProcessView, SnapshotView
from ringtrace.collector.read.inventory import ProcessFacts, RateSampler, scan_segments
from ringtrace.collector.read.pairing import Pairing
from ringtrace.collector.read.rows import Row
from ringtrace.collector.read.tail import Tail
from ringtrace.collector.store.pinned_read import read_pinned
from ringtrace.collector.store.processes import ProcessRecord, Registry
from ringtrace.collector.store.ring import Store, StoreSnapshot
from ringtrace.wire.stream_limits import Limits
from ringtrace.wire.version import __version__

__all__ = ["FlushingClient", "Snapshots"]


class FlushingClient(Protocol):
    """What a flush round trip needs of a connection (``IngestProtocol.request_flush``), and whose it is."""

    @property
    def process(self) -> ProcessRecord | None: ...

    def request_flush(self) -> asyncio.Future[bool]: ...


class Snapshots:
    """What is stored, pinned for reading while ingest goes on: a snapshot freezes it after asking the connected
    clients to flush (at most ``flush_timeout_s``); tails and ``/sources`` read only what they select.

    Args:
        store: the store whose segments are pinned.
        registry: the known processes, whose facts each view copies.
        connections: the connected clients, asked to flush before a snapshot (the collector's live set).
        rates: each process's recent totals, from which ``/sources`` tells its rate.
        stored_limits: the limits for reading what is stored (checked on the way in, perhaps by another run).
        origin_ns: what ``ts`` 0 means in every snapshot.
        max_snapshots: how many snapshots may be served at once (``running`` counts them; the HTTP API checks).
    """

    def __init__(
        self,
        store: Store,
        registry: Registry,
        connections: Set[FlushingClient],
        rates: RateSampler,
        stored_limits: Limits,
        origin_ns: int,
        max_snapshots: int,
    ) -> None:
        self._store = store
        self._registry = registry
        self._connections = connections
        self._rates = rates
        self.stored_limits = stored_limits
        self.origin_ns = origin_ns
        self.max_snapshots = max_snapshots
        #: Snapshots being served (``GET /snapshot``, ``POST /pop``).
        self.running = 0
        #: Live tails (``GET /stream``) that have begun.
        self.tails_running = 0
        #: What the last pop left open for the next (``POST /pop``); one pop at a time.
        self.pop_left_open = Pairing()
        self.pop_lock = asyncio.Lock()

    def begin_snapshot(self) -> bool:
        """Take a slot for a snapshot being served; False: all ``max_snapshots`` are taken (the caller says busy)."""
        if self.running >= self.max_snapshots:
            return False
        self.running += 1
        return True

    def end_snapshot(self) -> None:
        """A snapshot's slot is free again."""
        self.running -= 1

    def tail_begun(self) -> None:
        self.tails_running += 1

    def tail_ended(self) -> None:
        self.tails_running -= 1

    def keep_left_open(self, left_open: Pairing) -> None:
        """What a pop delivered whole left open, for the next pop (``POST /pop``)."""
        self.pop_left_open = left_open

    async def snapshot(self, flush_timeout_s: float) -> SnapshotView:
        """Ask connected clients to flush (waiting at most ``flush_timeout_s``), then freeze what is stored."""
        return self.freeze(*await self.flush_clients(flush_timeout_s))

    async def flush_clients(self, flush_timeout_s: float, owners: Container[int] | None = None) -> tuple[int, int]:
        """Ask connected clients (of the processes ``owners``, if given) to flush and wait, at most
        ``flush_timeout_s``; (acknowledged, asked)."""
        connections = [c for c in list(self._connections) if owners is None or _of(c, owners)]
        flushes = [c.request_flush() for c in connections] if flush_timeout_s > 0 else []
        if flushes:
            await asyncio.wait(flushes, timeout=flush_timeout_s)
        acknowledged = sum(1 for f in flushes if f.done() and f.result())
        for future in flushes:
            if not future.done():
                future.cancel()
        return acknowledged, len(flushes)

    def freeze(self, acknowledged: int, asked: int) -> SnapshotView:
        """What is stored now, pinned, with the facts a snapshot reports."""
        return self.view_of(self._store.snapshot(asyncio.get_running_loop().call_soon_threadsafe), acknowledged, asked)

    def view_of(self, frames: StoreSnapshot, acknowledged: int, asked: int) -> SnapshotView:
        """A snapshot of the segments ``frames`` pinned (everything stored, or an incident's window), with the facts
        a snapshot reports."""
        store, registry = self._store, self._registry
        processes = {p.uid: ProcessView.of(p) for p in registry.processes.values()}
        # Frozen before export starts on a worker thread: ingest goes on changing the live records.
        other = {
            "collector_version": __version__,
            "snapshot_wall_ns": time.time_ns(),
            "capacity_bytes": store.capacity_bytes,
            "process_capacity_bytes": store.process_capacity_bytes,
            "policy": store.policy,
            "clients_flushed": acknowledged,
            "clients_connected": asked,
            "forgotten_processes": registry.forgotten_processes,
        }
        return SnapshotView(
            frames,
            processes,
            store.track_counts(),
            other,
            limits=self.stored_limits,
            forgotten=replace(store.forgotten),
            forgotten_client=registry.forgotten_stats,
            origin_ns=self.origin_ns,
        )

    def forget_left_open(self, uids: set[int]) -> None:
        """Forgotten processes' pairs left open by the last pop go, unless a pop runs now (its worker copies them;
        the next sweep catches up)."""
        if not self.pop_lock.locked():
            self.pop_left_open.forget(uids)

    async def sources(self, processes: list[ProcessRecord]) -> list[dict[str, Any]]:
        """``GET /sources``: the ``processes`` and their tracks (``inventory.py``). The stored segments' indexes are
        read on a worker thread, pinned meanwhile."""
        store = self._store
        facts = [ProcessFacts.of(p, store.process_held_bytes(p.uid)) for p in processes]
        uids = {p.view.uid for p in facts}
        counts = {key: c for key, c in store.track_counts().items() if key[0] in uids}
        received = store.process_received()
        rates = {uid: self._rates.rate(uid, received[uid]) if uid in received else None for uid in uids}
        with_frames = store.snapshot(owners=uids)
        times = await read_pinned(with_frames, lambda: scan_segments(with_frames.segments))
        return sources_document(facts, counts, times, rates)

    async def tail_step(self, tail: Tail) -> list[Row]:
        """The rows stored since the tail's last step (``tail.py``), read on a worker thread."""
        # Only what the tail selects is copied and pinned: a step runs every 200 ms, for each tail.
        selected = tail.selected.selects_process
        processes = {uid: ProcessView.of(p) for uid, p in self._registry.by_uid.items() if selected(p)}
        frames = self._store.snapshot(owners=processes)
        segments = [(processes[segment.owner], segment) for segment in frames.segments]
        kept = self._store.kept_events(processes)
        cleared = self._store.cleared_segments(processes, tail.cleared_floor)
        return await read_pinned(frames, lambda: tail.step(segments, kept, cleared))


def _of(connection: FlushingClient, owners: Container[int]) -> bool:
    process = connection.process
    return process is not None and process.uid in owners
