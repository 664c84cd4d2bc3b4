"""What the collector does to the processes it knows: select them, send them SET_PRIORITY, clear what they hold, and
forget the idle ones that hold nothing (so that its bookkeeping stays bounded)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Set

from ringtrace.collector.ingest.connection import IngestProtocol
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.store.heap import HeapTrimmer
from ringtrace.collector.store.processes import ProcessRecord, Registry
from ringtrace.collector.store.ring import Store

__all__ = ["FORGOTTEN_PROCESS_BYTES", "ProcessControl"]

log = logging.getLogger("ringtrace.collector")

#: About what a process's records take (the registry's and the store's), freed when it is forgotten.
FORGOTTEN_PROCESS_BYTES = 4096


class ProcessControl:
    """The known processes (``registry``), what they hold (``store``) and their connections, acted on together.

    Args:
        forget_after_s: how long a process with no connection and nothing stored is kept.
        forgotten: called with the uid of each process forgotten (what a pop left open of it goes too).
    """

    def __init__(
        self,
        registry: Registry,
        store: Store,
        connections: Set[IngestProtocol],
        heap: HeapTrimmer,
        forget_after_s: float,
        forgotten: Callable[[set[int]], None],
    ) -> None:
        self._registry = registry
        self._store = store
        self._connections = connections
        self._heap = heap
        self._forget_after_s = forget_after_s
        self._forgotten = forgotten

    def matching(self, selected: EventFilter) -> list[ProcessRecord]:
        """The known processes ``selected`` (by pid, name, host), oldest first."""
        return [p for p in self._registry.processes.values() if selected.selects_process(p)]

    def set_priority(self, selected: EventFilter, priority: str, timeline: str = "") -> list[ProcessRecord]:
        """Send SET_PRIORITY to every connection of the processes ``selected``; returns the processes it reached."""
        reached = {}
        for connection in list(self._connections):
            process = connection.process
            if process is None or not selected.selects_process(process):
                continue
            if connection.set_priority(priority, timeline):
                reached[process.uid] = process
        return list(reached.values())

    def clear(self, selected: EventFilter) -> tuple[list[ProcessRecord], int]:
        """Remove what the processes ``selected`` hold (counted as cleared); returns them and the events removed."""
        processes = self.matching(selected)
        removed = self._store.clear(p.uid for p in processes)
        if removed:
            log.info("cleared %d events of %d processes on request", removed, len(processes))
        return processes, removed

    def forget_idle(self) -> int:
        """Forget every process idle past ``forget_after_s`` that holds nothing; returns how many."""
        forgotten = 0
        for process in self._registry.idle(self._forget_after_s):
            if not self._store.holds(process.uid):
                self._registry.forget(process)
                self._store.forget(process.uid)
                self._heap.freed(FORGOTTEN_PROCESS_BYTES)
                self._forgotten({process.uid})
                forgotten += 1
        return forgotten
