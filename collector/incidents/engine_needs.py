"""What the incidents' engine needs of the rest of the collector: the watch of the rules over what is stored, and the
service's pinned views (their implementations are ``watch.RuleWatch`` and ``service.snapshots.Snapshots``)."""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import Protocol

from ringtrace.collector.incidents.firing import Firing
from ringtrace.collector.incidents.rules import RuleSet
from ringtrace.collector.read.frame_walk import ProcessView, SnapshotView
from ringtrace.collector.store.views import SegmentView, StoreSnapshot

__all__ = ["Viewer", "Watch"]


class Watch(Protocol):
    """The rules checked on what is stored (``watch.RuleWatch``)."""

    @property
    def unread_events(self) -> int: ...

    @property
    def behind(self) -> bool: ...

    def begin(
        self, segments: Iterable[tuple[ProcessView, SegmentView]], kept: Mapping[int, int] | None = None
    ) -> None: ...

    def step(
        self, segments: Iterable[tuple[ProcessView, SegmentView]], kept: Mapping[int, int] | None = None
    ) -> list[Firing]: ...

    def with_rules(self, rules: RuleSet) -> Watch: ...

    def take_surplus(self) -> dict[str, int]: ...

    def unread_of(self, seq: int, events: int) -> int: ...

    def to_read(self, segments: Iterable[tuple[int, int]]) -> set[int]: ...


class Viewer(Protocol):
    """What a capture needs of the service's pinned views (``Snapshots``)."""

    async def flush_clients(self, flush_timeout_s: float, owners: Container[int] | None = None) -> tuple[int, int]: ...

    def view_of(self, frames: StoreSnapshot, acknowledged: int, asked: int) -> SnapshotView: ...
