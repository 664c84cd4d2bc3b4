"""Who is sending: processes, their tracks, and what decoding each stored frame needs.

A process is known by (host, instance_id), so a reconnect lands on the same process and a reused pid on the same host
does not. String tables and kinds are scoped to a connection, as the protocol says; every stored frame keeps a
``FrameContext``: its process, its track, and its connection's ``StreamTables``, which is all decoding it needs.
Track ids are unique within a client process and stable across its reconnects, so (process, track id) names a
track for loss accounting.

Clocks: all processes of one boot of one host share the monotonic clock, so the first HELLO of a clock domain
(host, boot id) fixes that domain's monotonic-to-wall offset, and every process of the domain uses it: their events
line up to the nanosecond, whatever the jitter of the wall-clock readings. A process with no boot id gets its own.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ringtrace.client.model import TrackInfo
from ringtrace.client.protocol import Hello, Stats
from ringtrace.client.session import StreamTables

__all__ = ["FrameContext", "ProcessRecord", "Registry"]


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
    live_connections: int = 0
    #: The client's own loss counters, from its latest STATS frame.
    client_stats: Stats = field(default_factory=lambda: Stats(0, 0))
    #: Latest declaration of each track (a TRACK frame may rename one).
    tracks: dict[int, TrackInfo] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class FrameContext:
    """What decoding a stored frame needs: its process and track, and its connection's tables."""

    process: ProcessRecord
    track: TrackInfo
    tables: StreamTables
    #: Identity of the track across reconnects, for loss accounting.
    key: tuple[int, int] = field(init=False)

    def __post_init__(self) -> None:
        self.key = (self.process.uid, self.track.track_id)


class Registry:
    """Every process that has said HELLO since the collector started."""

    def __init__(self) -> None:
        self.processes: dict[tuple[str, str], ProcessRecord] = {}
        self._clock_offsets: dict[tuple[str, str], int] = {}
        self._trace_pids: set[int] = set()
        self._uids = itertools.count(1)

    def hello(self, hello: Hello) -> ProcessRecord:
        """The process a new connection speaks for (created on its first connection)."""
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
            )
            self.processes[key] = process
        process.live_connections += 1
        return process
