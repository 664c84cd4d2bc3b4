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
What a client says of its clocks is checked, so that no process can move another's events: a live HELLO (not one
read back from a segment or a file, nor a recorded stream sent again: ``Hello.recorded``) whose wall clock is more
than ``MAX_CLOCK_SKEW_NS`` off the collector's is paired with the collector's own clock when it arrived instead (the
process's events then line up with the others' to within that HELLO's delivery time; the HELLO stored says so), and
a process whose pairing disagrees with its domain's by more than ``MAX_DOMAIN_DRIFT_NS`` keeps its own offset (a
domain's first process may have lied). Either is logged once per process, naming it and how far off it was.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field, fields
from typing import Final

from ringtrace.client.model import TrackInfo
from ringtrace.client.protocol import Hello, Stats

__all__ = ["ProcessRecord", "Registry", "stats_delta", "stats_sum"]

log = logging.getLogger("ringtrace.collector.sessions")

#: How many forgotten processes' last counters are remembered (about 100 bytes each).
FORGOTTEN_REMEMBERED: Final = 10_000
#: Names of ended tracks remembered per process (a process that starts a thread per task ends many).
ENDED_TRACKS_REMEMBERED: Final = 1000
#: The most a client's loss counter may say (2**40: a million events a second for 12 days).
MAX_CLIENT_COUNTER: Final = 2**40
#: A HELLO's wall clock this far from the collector's is not believed.
MAX_CLOCK_SKEW_NS: Final = 60 * 10**9
#: A process's own clock pairing this far from its domain's does not join the domain.
MAX_DOMAIN_DRIFT_NS: Final = 10**9
#: Trace pids of processes that share an OS pid: the pid plus a multiple of this, above any real pid (pid_max).
_ALIAS_STEP: Final = 1 << 22
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
    #: Tracks it ended, the latest ``ENDED_TRACKS_REMEMBERED`` (their counts outlive what is stored of them).
    ended_tracks: OrderedDict[int, TrackInfo] = field(default_factory=OrderedDict)
    #: ``time.monotonic()`` when its last connection ended.
    disconnected_at: float = field(default_factory=time.monotonic)

    def report(self, stats: Stats) -> str | None:
        """Take a STATS frame's counters: each may only grow, and to at most ``MAX_CLIENT_COUNTER`` (a client could
        otherwise forge the totals of every snapshot). Returns why a value was not taken as it came, if one was not."""
        taken, why = [], None
        for name in _STATS_FIELDS:
            before, now = getattr(self.client_stats, name), getattr(stats, name)
            value = min(max(before, now), MAX_CLIENT_COUNTER)
            if value != now and why is None:
                why = f"'{name}' went from {before} to {now}" + (
                    f" (more than MAX_CLIENT_COUNTER={MAX_CLIENT_COUNTER})" if now > MAX_CLIENT_COUNTER else " (down)"
                )
            taken.append(value)
        self.client_stats = Stats(*taken)
        return why

    def end_track(self, track_id: int) -> None:
        """Its track ``track_id`` ended: its name is kept a while for ``/sources``."""
        info = self.tracks.pop(track_id, None)
        if info is not None:
            self.ended_tracks[track_id] = info
            self.ended_tracks.move_to_end(track_id)
            while len(self.ended_tracks) > ENDED_TRACKS_REMEMBERED:
                self.ended_tracks.popitem(last=False)

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
        #: Per OS pid shown by more than one process: the next multiple of ``_ALIAS_STEP`` to try.
        self._next_alias: dict[int, int] = {}
        self._uids = itertools.count(1)
        #: Client counters of forgotten processes, summed.
        self.forgotten_stats = Stats(0, 0)
        self.forgotten_processes = 0
        self._last_stats: OrderedDict[tuple[str, str], Stats] = OrderedDict()

    def hello(self, hello: Hello) -> ProcessRecord:
        """The process a new connection speaks for (created on its first connection)."""
        process = self.known(hello, live=True)
        process.live_connections += 1
        return process

    def disconnected(self, process: ProcessRecord) -> None:
        process.live_connections -= 1
        process.disconnected_at = time.monotonic()
        if not process.live_connections:
            # Its tracks end with it (a reconnect declares them again), so that what a process leaves behind until
            # it is forgotten is bounded: up to 10,000 tracks a connection, kept while any of its events are stored.
            for track_id in list(process.tracks):
                process.end_track(track_id)

    def forget(self, process: ProcessRecord) -> None:
        """Drop a process (the caller checked that it has no connection and nothing stored)."""
        key = (process.host, process.instance_id)
        del self.processes[key]
        del self.by_uid[process.uid]
        self._trace_pids.discard(process.trace_pid)
        if process.trace_pid != process.pid:  # its alias may be shown again
            step = (process.trace_pid - process.pid) // _ALIAS_STEP
            self._next_alias[process.pid] = min(self._next_alias.get(process.pid, step), step)
        self.forgotten_stats = stats_sum(self.forgotten_stats, process.reported_stats)
        self.forgotten_processes += 1
        self._last_stats[key] = process.client_stats
        while len(self._last_stats) > FORGOTTEN_REMEMBERED:
            self._last_stats.popitem(last=False)

    def idle(self, grace_s: float) -> list[ProcessRecord]:
        """Processes without a connection since at least ``grace_s``."""
        cutoff = time.monotonic() - grace_s
        return [p for p in self.processes.values() if p.live_connections == 0 and p.disconnected_at <= cutoff]

    def known(self, hello: Hello, *, live: bool = False) -> ProcessRecord:
        """The record of the process that said ``hello`` (created if new), without counting a connection; ``live``:
        it said so just now (a connection, not a stored segment or a file), so its wall clock can be checked."""
        key = (hello.host, hello.instance_id)
        process = self.processes.get(key)
        if process is None:
            offset = self._clock_offset(hello, live)
            trace_pid = self._trace_pid(hello.pid)
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

    def _clock_offset(self, hello: Hello, live: bool) -> int:
        """The process's monotonic-to-wall offset (see the module docstring)."""
        now_ns = time.time_ns()
        offset = hello.wall_ns - hello.monotonic_ns
        who = f"process {hello.process_name!r:.100} (pid {hello.pid}) on {hello.host!r:.100}"
        skew_ns = hello.wall_ns - now_ns
        if live and not hello.recorded and abs(skew_ns) > MAX_CLOCK_SKEW_NS:
            log.warning(
                "%s: its wall clock is %.3f s off the collector's (more than %d s): its events are placed by the "
                "collector's clock when its HELLO arrived",
                who, skew_ns / 1e9, MAX_CLOCK_SKEW_NS // 10**9,
            )  # fmt: skip
            offset = now_ns - hello.monotonic_ns
        if not hello.boot_id:
            return offset
        domain = self._clock_offsets.setdefault((hello.host, hello.boot_id), offset)
        if abs(domain - offset) > MAX_DOMAIN_DRIFT_NS:
            log.warning(
                "%s: its clocks pair %.3f s away from the other processes of boot %r: it keeps its own pairing",
                who, (offset - domain) / 1e9, hello.boot_id[:100],
            )  # fmt: skip
            return offset
        return domain

    def _trace_pid(self, pid: int) -> int:
        """The pid a new process shows: its own, unless a known process shows it; then its own plus the next multiple
        of ``_ALIAS_STEP`` (above any real pid, so it cannot clash with a real pid seen later) not yet taken. Constant
        time however many processes share the pid (containers all run pid 1)."""
        if pid not in self._trace_pids:
            return pid
        step = self._next_alias.get(pid, 1)
        while pid + step * _ALIAS_STEP in self._trace_pids:
            step += 1
        self._next_alias[pid] = step + 1
        return pid + step * _ALIAS_STEP
