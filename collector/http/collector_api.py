"""What the HTTP handlers need of the collector: read through methods, never another object's counters set."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from typing import Any, Protocol

from aiohttp import web
from ringtrace.collector.http.guard import HttpGuard
from ringtrace.collector.http.metrics import CollectorMetrics
from ringtrace.collector.incidents.incident_store import IncidentStore
from ringtrace.collector.incidents.rules import Scope
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.pairing import Pairing
from ringtrace.collector.read.rows import Row
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.read.tail import Tail
from ringtrace.collector.store.processes import ProcessRecord
from ringtrace.wire.stream_limits import Limits

__all__ = ["COLLECTOR", "CollectorAPI"]


class CollectorAPI(Protocol):
    """What the HTTP handlers need of the collector."""

    @property
    def snapshot_flush_timeout_s(self) -> float: ...

    @property
    def metrics(self) -> CollectorMetrics: ...

    @property
    def max_snapshots(self) -> int: ...

    def begin_snapshot(self) -> bool: ...

    def end_snapshot(self) -> None: ...

    @property
    def http_guard(self) -> HttpGuard: ...

    @property
    def readers(self) -> Executor: ...

    @property
    def incident_files(self) -> IncidentStore: ...

    @property
    def pop_left_open(self) -> Pairing: ...

    def keep_pop_left_open(self, left_open: Pairing) -> None: ...

    @property
    def pop_lock(self) -> asyncio.Lock: ...

    async def pop(self, flush_timeout_s: float, selected: EventFilter) -> SnapshotView: ...

    def tail_begun(self) -> None: ...

    def tail_ended(self) -> None: ...

    async def snapshot(self, flush_timeout_s: float, selected: EventFilter | None = None) -> SnapshotView: ...

    def health(self) -> dict[str, Any]: ...

    def not_ready(self) -> str | None: ...

    def stats(self) -> dict[str, Any]: ...

    async def fleet_stats(self) -> dict[str, Any]: ...

    async def sources(self, selected: EventFilter) -> dict[str, Any]: ...

    def set_priority(self, selected: EventFilter, priority: str, timeline: str = "") -> list[ProcessRecord]: ...

    async def clear(self, selected: EventFilter) -> tuple[list[ProcessRecord], int]: ...

    @property
    def stored_limits(self) -> Limits: ...

    async def tail_step(self, tail: Tail) -> list[Row]: ...

    async def fire_incident(
        self,
        reason: str,
        *,
        scope: Scope,
        before_ns: int,
        after_ns: int,
        selected: EventFilter | None,
        args: dict[str, Any] | None = None,
    ) -> str: ...

    def incidents_under_way(self) -> dict[str, dict[str, Any]]: ...


#: Where the handlers find the collector in their application.
COLLECTOR: web.AppKey[CollectorAPI] = web.AppKey("collector")
