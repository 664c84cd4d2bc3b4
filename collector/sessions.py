"""Who is sending: processes and their tracks.

A process is known by (host, instance_id), so a reconnect lands on the same process and a reused pid on the same host
does not. Track ids are unique within a client process and stable across its reconnects, so (process, track id) names
a track for loss accounting. (String tables and kinds are scoped to a connection; the store's segments carry them.)

A process with no connection and nothing stored is forgotten after a grace period (``forget``), so a collector that
serves short-lived clients for months does not grow. Its client-reported counters are cumulative, and a client may
reconnect after being forgotten: the counters last seen of recently forgotten processes are remembered (a bounded
number of them), and a process that comes back reports only what it lost since.

Clocks: all processes of one boot of one host share the monotonic clock, so the first HELLO of a clock domain
(host, boot id) fixes that domain's monotonic-to-wall offset, and every process of the domain uses it: their events
line up to the nanosecond, whatever the jitter of the wall-clock readings. A process with no boot id gets its own.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from dataclasses import dataclass, field, fields
from typing import Final

from ringtrace.client.model import TrackInfo
from ringtrace.client.protocol import Hello, Stats

__all__ = ["ProcessRecord", "Registry", "stats_delta", "stats_sum"]

#: How many forgotten processes' last counters are remembered (about 100 bytes each).
FORGOTTEN_REMEMBERED: Final = 10_000
_STATS_FIELDS: Final = tuple(f.name for f in fields(Stats))


def stats_delta(now: Stats, before: Stats) -> Stats:
    return Stats(*(max(getattr(now, name) - getattr(before, name), 0) for name in _STATS_FIELDS))


def stats_sum(a: Stats, b: Stats) -> Stats:
    return Stats(*(getattr(a, name) + getattr(b, name) for name in _STATS_FIELDS))


@dataclass(eq=False, slots=True)
class ProcessRecord:
    uid: int
    #: The pid shown in traces: the real pid, unless another known process already shows it.
    trace_pid: int
    pid: int
    host: str
    name: str
    instance_id: str
    clock_offset_ns: int
    boot_id: str = ""
    live_connections: int = 0
    #: The client's own loss counters, from its latest STATS frame (cumulative since the process started).
    client_stats: Stats = field(default_factory=lambda: Stats(0, 0))
    #: What of ``client_stats`` was already counted when an earlier record of this process was forgotten.
    stats_baseline: Stats = field(default_factory=lambda: Stats(0, 0))
    #: Latest declaration of each track (a TRACK frame may rename one).
    tracks: dict[int, TrackInfo] = field(default_factory=dict)
    #: ``time.monotonic()`` when its last connection ended.
    disconnected_at: float = field(default_factory=time.monotonic)

    @property
    def reported_stats(self) -> Stats:
        """The client's counters this record accounts for."""
        return stats_delta(self.client_stats, self.stats_baseline)


class Registry:
    """Every process that has said HELLO (or left segments in the data dir) and is not forgotten."""

    def __init__(self) -> None:
        self.processes: dict[tuple[str, str], ProcessRecord] = {}
        self.by_uid: dict[int, ProcessRecord] = {}
        self._clock_offsets: dict[tuple[str, str], int] = {}
        self._trace_pids: set[int] = set()
        self._uids = itertools.count(1)
        #: Client counters of forgotten processes, summed.
        self.forgotten_stats = Stats(0, 0)
        self.forgotten_processes = 0
        self._last_stats: OrderedDict[tuple[str, str], Stats] = OrderedDict()

    def hello(self, hello: Hello) -> ProcessRecord:
        """The process a new connection speaks for (created on its first connection)."""
        process = self.known(hello)
        process.live_connections += 1
        return process

    def disconnected(self, process: ProcessRecord) -> None:
        process.live_connections -= 1
        process.disconnected_at = time.monotonic()

    def forget(self, process: ProcessRecord) -> None:
        """Drop a process (the caller checked that it has no connection and nothing stored)."""
        key = (process.host, process.instance_id)
        del self.processes[key]
        del self.by_uid[process.uid]
        self._trace_pids.discard(process.trace_pid)
        self.forgotten_stats = stats_sum(self.forgotten_stats, process.reported_stats)
        self.forgotten_processes += 1
        self._last_stats[key] = process.client_stats
        while len(self._last_stats) > FORGOTTEN_REMEMBERED:
            self._last_stats.popitem(last=False)

    def idle(self, grace_s: float) -> list[ProcessRecord]:
        """Processes without a connection since at least ``grace_s``."""
        cutoff = time.monotonic() - grace_s
        return [p for p in self.processes.values() if p.live_connections == 0 and p.disconnected_at <= cutoff]

    def known(self, hello: Hello) -> ProcessRecord:
        """The record of the process that said ``hello`` (created if new), without counting a connection."""
        key = (hello.host, hello.instance_id)
        process = self.processes.get(key)
        if process is None:
            offset = hello.wall_ns - hello.monotonic_ns
            if hello.boot_id:
                offset = self._clock_offsets.setdefault((hello.host, hello.boot_id), offset)
            trace_pid = hello.pid
            while trace_pid in self._trace_pids:
                trace_pid += 1 << 22  # above any real pid_max, so it cannot clash with a real pid seen later
            self._trace_pids.add(trace_pid)
            process = ProcessRecord(
                uid=next(self._uids),
                trace_pid=trace_pid,
                pid=hello.pid,
                host=hello.host,
                name=hello.process_name,
                instance_id=hello.instance_id,
                clock_offset_ns=offset,
                boot_id=hello.boot_id,
                stats_baseline=self._last_stats.pop(key, Stats(0, 0)),
            )
            process.client_stats = process.stats_baseline
            self.processes[key] = process
            self.by_uid[process.uid] = process
        return process
