"""Who is sending: processes, their threads, and the per-connection tables needed to decode their frames.

A process is known by (host, instance_id), so a reconnect lands on the same process and a reused pid on the same host
does not. String tables and event kinds are scoped to a connection, as the protocol says; every stored frame keeps a
reference to the ``SourceContext`` of the connection it came on, which is all that decoding it needs.

Clocks: all processes of one boot of one host share the monotonic clock, so the first HELLO of a clock domain
(host, boot id) fixes that domain's monotonic-to-wall offset, and every process of the domain uses it: their events
line up to the nanosecond, whatever the jitter of the wall-clock readings. A process with no boot id gets its own.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ringtrace.client.protocol import Hello

__all__ = ["ProcessRecord", "Registry", "SourceContext"]


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
    client_dropped_events: int = 0
    client_dropped_frames: int = 0
    #: Latest name of each OS thread id that declared a source.
    thread_names: dict[int, str] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class SourceContext:
    """What decoding a stored frame needs: its process and thread, and its connection's tables."""

    process: ProcessRecord
    thread_id: int
    strings: dict[int, str]
    kinds: dict[int, str]
    #: Identity of the source across reconnects, for loss accounting.
    key: tuple[int, int] = field(init=False)

    def __post_init__(self) -> None:
        self.key = (self.process.uid, self.thread_id)


class Registry:
    """Every process that has said HELLO since the collector started."""

    def __init__(self) -> None:
        self.processes: dict[tuple[str, str], ProcessRecord] = {}
        self._by_uid: dict[int, ProcessRecord] = {}
        self._clock_offsets: dict[tuple[str, str], int] = {}
        self._trace_pids: set[int] = set()
        self._uids = itertools.count(1)

    def by_uid(self, uid: int) -> ProcessRecord | None:
        return self._by_uid.get(uid)

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
            self._by_uid[process.uid] = process
        process.live_connections += 1
        return process
