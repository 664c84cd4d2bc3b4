"""Where the collector keeps what it receives, as its other parts see it (``StoreBackend``): ingest appends each
connection's frames to its ring (``store``); snapshots, pops, ``/sources``, live tails and ``/clear`` read or remove
what it holds; ``/stats`` and ``/metrics`` count it; the service starts it, runs its timers, and stops and closes it.

Two implement it: the collector's own store, in memory or in a data dir (``service/local_store.py``), and a JetStream
stream that every collector on it shares (``service/jetstream_tier.py``), whose ring holds only what the stream has
not acknowledged yet. Where the two differ, the backend decides; the collector asks the same of either.

What a read selects, what it makes and a live tail are the read room's types (``read/``), which this room may not
import: the protocol takes them as parameters (``StoreBackend[EventFilter, SnapshotView, Tail, Row]``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from ringtrace.collector.store.processes import ProcessRecord
from ringtrace.collector.store.ring import Store
from ringtrace.wire.stream_limits import Limits

__all__ = ["Flushed", "StoreBackend", "Timer"]

_Selection = TypeVar("_Selection", contravariant=True)
_View = TypeVar("_View", covariant=True)
_Tail = TypeVar("_Tail", contravariant=True)
_Row = TypeVar("_Row")

#: The connected clients' flush round trip before a read: (acknowledged, asked).
Flushed = tuple[int, int]
#: A loop the collector's housekeeping runs from start to stop.
Timer = Callable[[], Coroutine[Any, Any, None]]


class StoreBackend(Protocol[_Selection, _View, _Tail, _Row]):
    """What ingest, reads, the HTTP API and housekeeping need of where the collector keeps what it receives."""

    @property
    def store(self) -> Store:
        """The ring ingest appends each connection's frames to (its accounting is what ``/stats`` counts)."""
        ...

    @property
    def kind(self) -> str:
        """What ``/stats`` says the store is: ``memory``, ``data dir`` or ``jetstream``."""
        ...

    def ingest_limits(self, limits: Limits) -> Limits:
        """What a client's stream may declare here: ``limits`` (the options'), or less."""
        ...

    async def start(self) -> None:
        """Make what is stored readable (recover it; connect to it). Raises ConfigError if it cannot be."""
        ...

    def timers(self) -> tuple[Timer, ...]:
        """Its loops for the housekeeping to run (syncs, ageing out)."""
        ...

    def log_setup(self, limits: Limits) -> None:
        """Log how it is set up, and warn of each setting that does not do what it seems to."""
        ...

    async def stop(self) -> None:
        """Ingest has ended: keep what is still on its way (nothing more comes)."""
        ...

    async def close(self) -> None:
        """No read is running any more: let go of what it holds open."""
        ...

    async def view(self, flushed: Flushed, selected: _Selection | None = None) -> _View:
        """A snapshot of what is stored (of the processes ``selected`` may select), pinned for reading."""
        ...

    async def pop(self, flushed: Flushed, selected: _Selection) -> _View:
        """A snapshot of the processes ``selected``, and what it holds of them removed (counted as cleared)."""
        ...

    async def clear(self, selected: _Selection) -> tuple[list[ProcessRecord], int]:
        """Remove what the processes ``selected`` hold (counted as cleared); returns them and the events removed."""
        ...

    async def sources(self, selected: _Selection) -> dict[str, Any]:
        """``GET /sources``: the processes ``selected``, their tracks, what they hold and lost."""
        ...

    async def tail_step(self, tail: _Tail) -> list[_Row]:
        """The rows stored since the live tail's last step."""
        ...

    async def stats(self) -> dict[str, Any]:
        """What ``/stats`` adds to the collector's own totals (nothing, or a fleet's)."""
        ...

    def not_ready(self) -> str | None:
        """Why the store cannot take events now (``/readyz`` answers 503 with it); None: it can."""
        ...

    def published_counters(self) -> dict[str, int] | None:
        """What this collector published to where the store replicates to, for ``/metrics``; None: nowhere."""
        ...
