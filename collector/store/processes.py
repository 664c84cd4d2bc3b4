"""Who is sending: processes and their tracks.

A process is known by (host, instance_id), so a reconnect lands on the same process and a reused pid on the same host
does not. Track ids are unique within a client process and stable across its reconnects, so (process, track id) names
a track for loss accounting. (String tables and kinds are scoped to a connection; the store's segments carry them.)

A process with no connection and nothing stored is forgotten after a grace period (``forget``), so a collector that
serves short-lived clients for months does not grow. Its client-reported counters are cumulative, and a client may
reconnect after being forgotten: the counters last seen of recently forgotten processes are remembered (a bounded
number of them), and a process that comes back reports only what it lost since.

Clocks: which offset places each process's events is the business of ``ClockDomains`` (clocks.py); a process's
offset is fixed when its record is made, so what is stored of it never moves.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field, fields
from typing import Final

from ringtrace.collector.store.clocks import Arrival, ClockDomains
from ringtrace.wire.frames import Stats
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import TrackInfo

__all__ = ["ProcessRecord", "Registry", "stats_delta", "stats_sum"]

log = logging.getLogger("ringtrace.collector.sessions")

#: How many forgotten processes' last counters are remembered (about 100 bytes each).
FORGOTTEN_REMEMBERED: Final = 10_000
#: Names of ended tracks remembered per process (a process that starts a thread per task ends many).
ENDED_TRACKS_REMEMBERED: Final = 1000
#: The most a client's loss counter may say (2**40: a million events a second for 12 days).
MAX_CLIENT_COUNTER: Final = 2**40
#: Trace pids of processes that share an OS pid: the pid plus a multiple of this, above any real pid (pid_max).
_ALIAS_STEP: Final = 1 << 22
#: How the HELLO of a stream of OTLP data names its client (``ingest/otlp/resources.py``).
OTLP_CLIENT_PREFIX: Final = "otlp "
_STATS_FIELDS: Final = tuple(f.name for f in fields(Stats))


def stats_delta(now: Stats, before: Stats) -> Stats:
    return Stats(*(max(getattr(now, name) - getattr(before, name), 0) for name in _STATS_FIELDS))


def stats_sum(a: Stats, b: Stats) -> Stats:
    return Stats(*(getattr(a, name) + getattr(b, name) for name in _STATS_FIELDS))


@dataclass(eq=False, slots=True)
class ProcessRecord:
    uid: int
    #: The pid shown in traces: the real pid, unless another known process already shows it (but for OTLP data of the
    #: same OS process, which shows the same: ``Registry._trace_pid``).
    trace_pid: int
    pid: int
    host: str
    name: str
    instance_id: str
    clock_offset_ns: int
    boot_id: str = ""
    #: Its data came as OTLP (an OpenTelemetry SDK's resource), not from a ringtrace client.
    otlp: bool = False
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
    #: Wall-clock ns when it was last heard of here: a connection opened or ended, or (OTLP) a request's data stored;
    #: 0 if never (a process known from what is stored only: a data dir's, a stream's).
    last_seen_wall_ns: int = 0

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

    def __init__(self, own_boot: str = "") -> None:
        """``own_boot``: the collector's own boot id (``clocks.own_boot_id``), none for a registry of files."""
        self.clocks = ClockDomains(own_boot)
        self.processes: dict[tuple[str, str], ProcessRecord] = {}
        self.by_uid: dict[int, ProcessRecord] = {}
        #: Processes showing each trace pid (more than one: OTLP data of the same OS process as another's).
        self._trace_pids: dict[int, int] = {}
        #: The processes known of each OS process (host, pid) by uid, latest last, to show OTLP data of it as that
        #: process (while any of them is known).
        self._os_processes: dict[tuple[str, int], dict[int, ProcessRecord]] = {}
        #: Per OS pid shown by more than one process: the next multiple of ``_ALIAS_STEP`` to try.
        self._next_alias: dict[int, int] = {}
        self._uids = itertools.count(1)
        #: Client counters of forgotten processes, summed.
        self.forgotten_stats = Stats(0, 0)
        self.forgotten_processes = 0
        self._last_stats: OrderedDict[tuple[str, str], Stats] = OrderedDict()

    def hello(self, hello: Hello, arrival: Arrival) -> ProcessRecord:
        """The process a new connection speaks for (created on its first connection; ``arrival``: when and how its
        HELLO arrived, which places its events if it is new)."""
        process = self.known(hello, arrival)
        process.live_connections += 1
        process.last_seen_wall_ns = time.time_ns()
        return process

    def disconnected(self, process: ProcessRecord) -> None:
        process.live_connections -= 1
        process.disconnected_at = time.monotonic()
        if not process.otlp:  # (an OTLP stream closes when idle: its process was last seen at its last request)
            process.last_seen_wall_ns = time.time_ns()
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
        same = self._os_processes.get((process.host, process.pid))
        if same is not None:  # (the others of its OS process still show OTLP data of it as theirs)
            same.pop(process.uid, None)
            if not same:
                del self._os_processes[(process.host, process.pid)]
        showing = self._trace_pids.pop(process.trace_pid, 1) - 1
        if showing:  # another process shows it still
            self._trace_pids[process.trace_pid] = showing
        elif process.trace_pid != process.pid:  # its alias may be shown again
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

    def known(self, hello: Hello, arrival: Arrival | None = None) -> ProcessRecord:
        """The record of the process that said ``hello`` (created if new), without counting a connection; ``arrival``:
        it said so just now (a connection, not a stored segment or a file), so its clocks can be checked."""
        key = (hello.host, hello.instance_id)
        process = self.processes.get(key)
        if process is None:
            who = f"process {hello.process_name!r:.100} (pid {hello.pid}) on {hello.host!r:.100}"
            offset = self.clocks.offset(hello, arrival, who)
            otlp = hello.client_version.startswith(OTLP_CLIENT_PREFIX)
            trace_pid = self._trace_pid(hello, otlp)
            self._trace_pids[trace_pid] = self._trace_pids.get(trace_pid, 0) + 1
            process = ProcessRecord(
                uid=next(self._uids),
                trace_pid=trace_pid,
                pid=hello.pid,
                host=hello.host,
                name=hello.process_name,
                instance_id=hello.instance_id,
                clock_offset_ns=offset,
                boot_id=hello.boot_id,
                otlp=otlp,
                stats_baseline=self._last_stats.pop(key, Stats(0, 0)),
            )
            if hello.host and hello.pid:
                self._os_processes.setdefault((hello.host, hello.pid), {})[process.uid] = process
            process.client_stats = process.stats_baseline
            self.processes[key] = process
            self.by_uid[process.uid] = process
        elif hello.process_name != process.name and (arrival is not None or not process.live_connections):
            # connect() again, with another name: the latest, as the segments its events are now stored in say (read
            # back oldest first: a file, a recovery, a stream's tail); while connected here, its connection's.
            process.name = hello.process_name
        return process

    def _trace_pid(self, hello: Hello, otlp: bool) -> int:
        """The pid a new process shows: its own, unless a known process shows it; then its own plus the next multiple
        of ``_ALIAS_STEP`` (above any real pid, so it cannot clash with a real pid seen later) not yet taken. Constant
        time however many processes share the pid (containers all run pid 1).

        But OTLP data and a ringtrace client (or other OTLP data) of one OS process, the same host and pid (an
        OpenTelemetry resource's ``host.name`` and ``process.pid``), show the same pid: every viewer draws them as
        one process, each of its tracks beside the other's."""
        pid = hello.pid
        if pid not in self._trace_pids:
            return pid
        known = self._os_processes.get((hello.host, pid)) if hello.host and pid else None
        same = next(reversed(known.values())) if known else None
        if same is not None and (otlp or same.otlp):
            return same.trace_pid
        step = self._next_alias.get(pid, 1)
        while pid + step * _ALIAS_STEP in self._trace_pids:
            step += 1
        self._next_alias[pid] = step + 1
        return pid + step * _ALIAS_STEP
