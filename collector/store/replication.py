"""Where a store's sealed segments may be replicated to (a JetStream stream: ``collector/jetstream``), as the store and
the ingest see it: a FLUSH is acknowledged once everything its stream sealed before it is replicated."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from ringtrace.collector.store.streams import Stream

__all__ = ["Replication"]


class Replication(Protocol):
    """What replicates a store's sealed segments."""

    def settled(self, stream: Stream) -> Awaitable[int]:
        """Done once every segment ``stream`` sealed so far is replicated or refused there; its result is the events
        refused (0: all of them replicated)."""
        ...
