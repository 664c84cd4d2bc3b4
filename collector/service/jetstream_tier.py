"""The service's side of ``--jetstream``, the store backend the collector composes then (``store/backend.py``): the
connection to the cluster, the stream, the publishing and sealing tasks, and fleet-wide reads from the stream
(snapshots, ``/sources``, ``/stats``, live tails) and purges (``/clear``, ``/pop``).

The collector's own store stays what ingest writes into: a memory store of ``--jetstream-buffer`` bytes under
``discard``, whose segments wait there only until the stream acknowledges them (``jetstream/publisher.py``). What a
snapshot, ``/sources``, ``/stats`` or a live tail reports is read from the stream (``jetstream/fleet.py``,
``fleet_counts.py``, ``fleet_tail.py``), whichever collector stored it; which processes are connected, and their
rates, from every collector's heartbeat (``heartbeats.py``), which this one publishes too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Sized
from typing import Any, Final, Protocol

from ringtrace.collector.export.sources_document import sources_document, sources_totals
from ringtrace.collector.jetstream.cluster import (
    ClusterOptions,
    StreamOptions,
    connect,
    ensure_heartbeat_stream,
    ensure_stream,
)
from ringtrace.collector.jetstream.envelope import CLEARED, MSG_ID, Envelope, cleared_header
from ringtrace.collector.jetstream.fleet import Fleet, StoredMessage, fetch, read_fleet
from ringtrace.collector.jetstream.fleet_counts import fleet_totals
from ringtrace.collector.jetstream.fleet_tail import FleetTail
from ringtrace.collector.jetstream.heartbeats import Heartbeat, Liveness, ProcessLiveness, beat_every, heartbeat_stream
from ringtrace.collector.jetstream.publisher import (
    HEADER_ROOM,
    Publisher,
    Sealing,
    message_segment_bytes,
    seal_every,
)
from ringtrace.collector.jetstream.stream_readiness import Readiness
from ringtrace.collector.jetstream.subjects import process_subject, subject_filter
from ringtrace.collector.read.event_walk import store_counts
from ringtrace.collector.read.frame_walk import ProcessView, SnapshotView
from ringtrace.collector.read.inventory import ProcessFacts, RateSampler, scan_segments
from ringtrace.collector.read.rows import Row
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.read.tail import Tail
from ringtrace.collector.service.config import CollectorConfig
from ringtrace.collector.service.store_log import log_store
from ringtrace.collector.store.accounts import Counts
from ringtrace.collector.store.backend import Flushed, Timer
from ringtrace.collector.store.processes import ProcessRecord, Registry
from ringtrace.collector.store.ring import Store
from ringtrace.wire.model import TrackInfo
from ringtrace.wire.stream_limits import Limits
from ringtrace.wire.version import __version__

__all__ = ["JETSTREAM_MAX_FRAME_BYTES", "STOP_PUBLISH_TIMEOUT_S", "JetStreamTier", "TierParts", "staging_store"]

log = logging.getLogger("ringtrace.collector.jetstream")

#: How long a stopping collector waits for its last segments to be published.
STOP_PUBLISH_TIMEOUT_S: Final = 3.0
#: The payload nats-server allows by default; the connection says the servers' own at start.
DEFAULT_MAX_PAYLOAD: Final = 1024 * 1024
#: How long ``/stats`` waits to read the fleet's counts from the stream (the headers of its messages).
FLEET_STATS_TIMEOUT_S: Final = 10.0
#: How long a stopping collector waits for its heartbeat to be removed (else it is forgotten as a killed one is).
STOP_HEARTBEAT_TIMEOUT_S: Final = 2.0
#: The largest frame a client may send under ``--jetstream`` (at most ``--max-frame-size``; clients adopt it): a
#: segment holding one, with its session frames and headers, stays within the servers' default max payload.
JETSTREAM_MAX_FRAME_BYTES: Final = 256 * 1024


def staging_store(config: CollectorConfig) -> Store:
    """The collector's store under ``--jetstream``: segments on their way to the stream, in memory, refused when
    full (``discard``): nothing waiting to be published is overwritten."""
    segment_bytes = min(config.effective_segment_bytes, message_segment_bytes(DEFAULT_MAX_PAYLOAD))
    buffer = config.jetstream_buffer_bytes
    return Store(
        buffer,
        segment_bytes=segment_bytes,
        process_capacity_bytes=min(config.process_capacity_bytes or buffer, buffer),
        policy="discard",
    )


class TierParts(Protocol):
    """What the tier reads of the collector: the processes connected here, the clients' connections (counted in the
    heartbeat), every connection (the OTLP receiver's loopback ones too, sealed every SEAL_INTERVAL_S), each process's
    receive rate here (for the heartbeat), the limits for reading what is stored, and what ``ts`` 0 means."""

    @property
    def registry(self) -> Registry: ...

    @property
    def connections(self) -> Sized: ...

    @property
    def every_connection(self) -> Iterable[Sealing]: ...

    @property
    def rates(self) -> RateSampler: ...

    @property
    def stored_limits(self) -> Limits: ...

    @property
    def origin_ns(self) -> int: ...


class JetStreamTier:
    """``--jetstream``: see the module docstring.

    Args:
        config: the collector's configuration (``jetstream`` set).
        parts: the collector's parts it reads (``TierParts``).
    """

    def __init__(self, config: CollectorConfig, parts: TierParts) -> None:
        self.config = config
        #: The NATS servers' URLs (``--jetstream``).
        self.nats_urls = config.jetstream or ()
        self.kind = "jetstream"
        #: What ingest writes into: segments on their way to the stream.
        self.store = staging_store(config)
        self.stream_name = config.jetstream_stream
        self.collector_id = uuid.uuid4().hex[:16]
        self._registry = parts.registry
        self.publisher = Publisher(self.store, self._registry, self.stream_name, self.collector_id, DEFAULT_MAX_PAYLOAD)
        self._connections = parts.connections
        self._sealed = parts.every_connection
        self._rates = parts.rates
        self._heartbeat_subject = f"{heartbeat_stream(self.stream_name)}.{self.collector_id}"
        self._unlisted_logged = False
        self._stored_limits = parts.stored_limits
        self._origin_ns = parts.origin_ns
        self._client: Any = None
        self._js: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        #: The processes of every read of the stream, so that each keeps its uid (and trace pid) from read to read, as
        #: a pop needs of what the last one left open; reads take it one at a time (``_reading``).
        self._fleet_registry = Registry()
        self._reading = threading.Lock()
        self._clears = itertools.count(1)
        #: The live tails begun, by the id of their ``Tail`` (each ends with it: ``_tail_gone``).
        self._tails: dict[int, FleetTail] = {}
        self._tail_closes: set[asyncio.Task[None]] = set()
        self.readiness = Readiness(self.stream_name)

    @property
    def jetstream(self) -> Any:
        """The JetStream context of the connection (None until ``start``): the incidents' bucket uses it too."""
        return self._js

    def ingest_limits(self, limits: Limits) -> Limits:
        """A segment, its frame and its session frames are one message: frames up to JETSTREAM_MAX_FRAME_BYTES."""
        return dataclasses.replace(limits, max_frame_bytes=min(limits.max_frame_bytes, JETSTREAM_MAX_FRAME_BYTES))

    def timers(self) -> tuple[Timer, ...]:
        """None: its own tasks (``start``) publish, seal and beat; the stream ages its own messages."""
        return ()

    def log_setup(self, limits: Limits) -> None:
        # (the store is the buffer of what the stream has not acknowledged yet: the stream is --capacity)
        where = "in memory until the JetStream stream acknowledges"
        log_store(self.config, self.store, limits, where, "--jetstream-buffer")

    async def start(self) -> None:
        """Connect, make the stream say what the options say, and start publishing.

        Raises:
            ConfigError: the cluster cannot be reached, or refuses the stream.
        """
        config = self.config
        cluster = ClusterOptions(
            self.nats_urls, config.jetstream_creds, config.jetstream_token, config.jetstream_tls_ca,
            config.jetstream_tls_cert, config.jetstream_tls_key,
        )  # fmt: skip
        self._client = await connect(
            cluster, f"ringtrace-collector {socket.gethostname()} {os.getpid()}", lambda: self._closing
        )
        self._js = self._client.jetstream()
        stream = StreamOptions(
            self.stream_name, config.capacity_bytes, config.policy, config.jetstream_replicas,
            config.jetstream_storage, config.max_age_s,
        )  # fmt: skip
        await ensure_stream(self._js, stream)
        await ensure_heartbeat_stream(self._js, stream)
        max_payload = self._client.max_payload
        self.publisher.max_payload = max_payload
        # (one message a segment: the larger the servers allow, the fewer messages they write and replicate)
        self.store.set_segment_bytes(min(config.effective_segment_bytes, message_segment_bytes(max_payload)))
        largest = min(config.max_frame_bytes, JETSTREAM_MAX_FRAME_BYTES) + HEADER_ROOM
        if largest > max_payload // 2:
            log.warning("the servers' max_payload %d leaves little room for segments (frames up to %d bytes, with "
                        "session frames and headers): a segment larger is refused, counted discarded; raise "
                        "max_payload, or lower --max-frame-size", max_payload, largest - HEADER_ROOM)  # fmt: skip
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self.publisher.run(self._js)),
            loop.create_task(seal_every(self._sealed)),
            loop.create_task(beat_every(self._beat, self.readiness.heartbeat_failed)),
        ]
        log.info("store: JetStream stream %r on %s (%d replicas, %s storage, max_bytes %d, discard %s%s); collector "
                 "id %s", self.stream_name, ",".join(self.nats_urls), config.jetstream_replicas,
                 config.jetstream_storage, config.capacity_bytes, "old" if config.policy == "ring" else "new",
                 f", max_age {config.max_age_s:g}s" if config.max_age_s else "", self.collector_id)  # fmt: skip

    async def stop(self) -> None:
        """Publish what is left (waiting STOP_PUBLISH_TIMEOUT_S at most), then disconnect."""
        deadline = time.monotonic() + STOP_PUBLISH_TIMEOUT_S
        while self.publisher.counters.waiting and time.monotonic() < deadline and self._tasks:
            await asyncio.sleep(0.02)
        counters = self.publisher.counters
        if counters.waiting:  # (never acknowledged to their clients, which count them unacknowledged)
            log.warning("stopping with %d segments (%d events) not published to JetStream stream %r: they are lost",
                        counters.waiting, counters.waiting_events, self.stream_name)  # fmt: skip
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for fleet_tail in list(self._tails.values()):
            await fleet_tail.close()
        self._tails.clear()
        if self._js is not None:  # (the other collectors show its processes gone at once)
            try:
                await asyncio.wait_for(
                    self._js.purge_stream(heartbeat_stream(self.stream_name), subject=self._heartbeat_subject),
                    STOP_HEARTBEAT_TIMEOUT_S,
                )
            except Exception as exc:
                log.debug("removing this collector's heartbeat: %s: %s", type(exc).__name__, exc)
        if self._client is not None:
            self._closing = True
            try:
                await self._client.close()
            except Exception as exc:  # (nats-py writes what it buffered while the cluster was away to a closed socket)
                log.debug("closing the NATS connection: %s: %s", type(exc).__name__, exc)

    async def close(self) -> None:
        """Nothing is held open past ``stop``."""

    # -- the heartbeat ----------------------------------------------------------------------------------------------

    def heartbeat(self) -> Heartbeat:
        """What this collector's heartbeat says now: its connections, and each process connected to it."""
        received = self.store.process_received()
        connected = {
            process_subject(self.stream_name, p.host, p.pid, p.instance_id): ProcessLiveness(
                p.live_connections, self._rates.rate(p.uid, received[p.uid]) if p.uid in received else None
            )
            for p in self._registry.processes.values()
            if p.live_connections and not p.otlp  # (an OTLP process holds no connection: /sources says so)
        }
        return Heartbeat(self.collector_id, len(self._connections), connected)

    def not_ready(self) -> str | None:
        """Why the stream cannot take events now (``stream_readiness.py``); None: it takes them."""
        return self.readiness.not_ready(self._client, self.publisher.counters.failing)

    async def _beat(self) -> None:
        data, unlisted = self.heartbeat().encode(self.publisher.max_payload - HEADER_ROOM)
        if unlisted and not self._unlisted_logged:
            log.warning("%d connected processes do not fit in this collector's heartbeat (the servers' max_payload): "
                        "the other collectors show them gone", unlisted)  # fmt: skip
        self._unlisted_logged = bool(unlisted)
        await self._js.publish(self._heartbeat_subject, data)

    async def liveness(self) -> Liveness:
        """Every live collector's heartbeat (``heartbeats.py``).

        Raises:
            ConnectionError: the heartbeats cannot be read now.
        """
        name = heartbeat_stream(self.stream_name)
        try:
            return Liveness.read(await fetch(self._js, name, f"{name}.*"))
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception as exc:  # nats-py's timeouts and API errors
            raise ConnectionError(f"cannot read JetStream stream {name!r}: {type(exc).__name__}: {exc}") from None

    # -- reading the fleet ------------------------------------------------------------------------------------------

    async def fleet(self, selected: EventFilter | None = None) -> Fleet:
        """What the stream holds of the processes ``selected`` may select, read on a worker thread.

        Raises:
            ConnectionError: the stream cannot be read now (the cluster cannot be reached, say).
        """
        pids = selected.pids if selected is not None else None
        one_pid = next(iter(pids)) if pids is not None and len(pids) == 1 else None
        since = selected.since_ns if selected is not None else None
        try:
            messages = await fetch(self._js, self.stream_name, subject_filter(self.stream_name, pid=one_pid), since)
            if one_pid is not None and not messages:  # (the pid a snapshot shows may be another process's alias)
                messages = await fetch(self._js, self.stream_name, subject_filter(self.stream_name), since)
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception as exc:  # nats-py's timeouts and API errors
            raise ConnectionError(
                f"cannot read JetStream stream {self.stream_name!r}: {type(exc).__name__}: {exc}"
            ) from None
        return await asyncio.get_running_loop().run_in_executor(None, self._read, messages)

    def _read(self, messages: list[StoredMessage]) -> Fleet:
        with self._reading:
            return read_fleet(messages, self._fleet_registry)

    async def view(self, flushed: Flushed, selected: EventFilter | None = None) -> SnapshotView:
        """A snapshot of what the stream holds (after the local clients' flush round trip) of the processes
        ``selected`` may select."""
        return self._view(await self.fleet(selected), *flushed)

    async def pop(self, flushed: Flushed, selected: EventFilter) -> SnapshotView:
        """``POST /pop``: a snapshot of the processes ``selected``, and the messages it read of them purged from the
        stream (counted cleared): what is stored meanwhile stays for the next pop."""
        fleet = await self.fleet(selected)
        view = self._view(fleet, *flushed)
        await self._purge(fleet, [p for p in _processes(fleet) if selected.selects_process(p)])
        return view

    async def clear(self, selected: EventFilter) -> tuple[list[ProcessRecord], int]:
        """``POST /clear``: purge what the stream holds of the processes ``selected`` (counted cleared); returns them
        and the events removed."""
        fleet = await self.fleet(selected)
        processes = [p for p in _processes(fleet) if selected.selects_process(p)]
        removed = await self._purge(fleet, processes)
        if removed:
            log.info("cleared %d events of %d processes from the stream on request", removed, len(processes))
        return processes, removed

    async def _purge(self, fleet: Fleet, processes: list[ProcessRecord]) -> int:
        """Purge each process's subjects up to the newest message ``fleet`` read of it, and leave a note on each
        saying what was purged of it so far (``envelope.CLEARED``). Returns the events purged.

        Raises:
            ConnectionError: the stream cannot be reached.
        """
        held = fleet.store.track_counts()
        removed = 0
        for process in processes:
            tracks = {track: (c.received_events, c.received_bytes) for (uid, track), c in held.items()
                      if uid == process.uid}  # fmt: skip
            for subject, newest in fleet.subjects.get(process.uid, {}).items():
                cleared = dict(fleet.cleared.get(subject, {}))
                for track, (events, nbytes) in tracks.items():
                    before = cleared.get(track, (0, 0))
                    cleared[track] = (before[0] + events, before[1] + nbytes)
                removed += sum(events for events, _ in tracks.values())
                tracks = {}  # (a process has one subject: its host, pid and instance)
                note = {CLEARED: cleared_header(cleared), MSG_ID: f"{self.collector_id}.clear.{next(self._clears)}"}
                try:
                    await self._js.purge_stream(self.stream_name, subject=subject, seq=newest + 1)
                    await self._js.publish(subject, b"", headers=note)
                except Exception as exc:
                    raise ConnectionError(f"cannot purge {subject} from JetStream stream {self.stream_name!r}: "
                                          f"{type(exc).__name__}: {exc}") from None  # fmt: skip
        return removed

    def _view(self, fleet: Fleet, acknowledged: int, asked: int) -> SnapshotView:
        processes = {p.uid: ProcessView.of(p) for p in _processes(fleet)}
        other = {
            "collector_version": __version__,
            "snapshot_wall_ns": time.time_ns(),
            "capacity_bytes": self.config.capacity_bytes,
            "policy": self.config.policy,
            "store": "jetstream",
            "jetstream_stream": self.stream_name,
            "jetstream_messages": fleet.messages,
            "jetstream_unreadable_messages": fleet.unreadable,
            "collectors": len(fleet.collectors),
            "clients_flushed": acknowledged,
            "clients_connected": asked,
        }
        return SnapshotView(
            fleet.store.snapshot(), processes, fleet.counts, other, limits=self._stored_limits,
            origin_ns=self._origin_ns,
        )  # fmt: skip

    async def tail_step(self, tail: Tail) -> list[Row]:
        """``GET /stream``: the rows of the messages stored since the tail's last step (``fleet_tail.py``); the first
        step begins it, at the stream's newest message."""
        fleet_tail = self._tails.get(id(tail))
        if fleet_tail is not None:
            return await fleet_tail.step()
        fleet_tail = FleetTail(tail.selected, self._stored_limits)
        pids = tail.selected.pids
        one_pid = next(iter(pids)) if pids is not None and len(pids) == 1 else None
        await fleet_tail.begin(self._js, self.stream_name, subject_filter(self.stream_name, pid=one_pid))
        self._tails[id(tail)] = fleet_tail
        loop = asyncio.get_running_loop()
        weakref.finalize(tail, loop.call_soon_threadsafe, self._tail_gone, id(tail))
        return []

    def _tail_gone(self, key: int) -> None:
        """A live tail ended (its ``Tail`` is gone): its subscription goes."""
        fleet_tail = self._tails.pop(key, None)
        if fleet_tail is not None and not self._closing:
            task = asyncio.get_running_loop().create_task(fleet_tail.close())
            self._tail_closes.add(task)
            task.add_done_callback(self._tail_closes.discard)

    async def sources(self, selected: EventFilter) -> dict[str, Any]:
        """``GET /sources`` of every process the stream holds that ``selected`` selects, connected (with its rate) if a
        live collector's heartbeat says so; and the fleet's totals (``fleet``)."""
        fleet, liveness = await asyncio.gather(self.fleet(selected), self.liveness())
        processes = [p for p in _processes(fleet) if selected.selects_process(p)]
        live = {p.uid: liveness.of(fleet.subjects.get(p.uid, {})) for p in processes}
        counts = {key: c for key, c in fleet.counts.items() if key[0] in live}
        times = scan_segments(fleet.store.snapshot(owners=set(live)).segments)
        held_tracks: dict[int, dict[int, TrackInfo]] = {}
        for (uid, track), held in times.items():
            if held.info is not None:
                held_tracks.setdefault(uid, {})[track] = held.info
        facts = [_facts(fleet, p, live[p.uid].connections, held_tracks.get(p.uid, {})) for p in processes]
        entries = sources_document(facts, counts, times, {uid: known.rate for uid, known in live.items()})
        totals = sources_totals(entries, liveness.collectors, liveness.connections, self.config.capacity_bytes)
        return {"processes": entries, "fleet": totals}

    async def stats(self) -> dict[str, Any]:
        """``/stats``: what this collector published, and the fleet's totals as the stream holds them."""
        published = {"jetstream": self.publisher.counters.stats(self.stream_name, self.collector_id)}
        try:
            messages = await asyncio.wait_for(
                fetch(self._js, self.stream_name, subject_filter(self.stream_name), headers_only=True),
                FLEET_STATS_TIMEOUT_S,
            )
        except Exception as exc:  # the cluster is away: what this collector knows, and why there is no more
            return {**published, "fleet": {"error": f"cannot read the stream: {type(exc).__name__}: {exc}"}}
        return {**published, "fleet": _fleet_totals(messages)}

    def published_counters(self) -> dict[str, int]:
        """What this collector published, for ``/metrics``."""
        counters = self.publisher.counters
        return {
            "messages": counters.messages,
            "bytes": counters.bytes,
            "events": counters.events,
            "retries": counters.retries,
            "refused_events": counters.refused_events,
            "waiting_events": counters.waiting_events,
            "failing": int(bool(counters.failing)),
        }


def _processes(fleet: Fleet) -> list[ProcessRecord]:
    """The processes the messages read hold, oldest first."""
    present = fleet.present
    return [p for p in fleet.registry.processes.values() if p.uid in present]


def _facts(fleet: Fleet, process: ProcessRecord, connections: int, tracks: dict[int, TrackInfo]) -> ProcessFacts:
    """A process read from the stream, as ``/sources`` shows it: ``connections`` to the live collectors; the
    tracks of one connected are those the stream holds (``tracks``: which of them ended, it does not tell)."""
    facts = ProcessFacts.of(process, fleet.store.process_held_bytes(process.uid))
    if not connections:
        return facts
    view = dataclasses.replace(facts.view, tracks=tracks)
    return dataclasses.replace(
        facts, view=view, connections=connections, live=True, last_seen_wall_ns=time.time_ns()
    )  # (connected: seen now)


def _fleet_totals(messages: list[StoredMessage]) -> dict[str, Any]:
    """``/stats``: the fleet's totals, from the headers of the stream's ``messages``."""
    processes = fleet_totals(messages)
    total = Counts()
    for process in processes:
        total.add(process.counts)
    return {
        "collectors": len({e.collector for m in messages if (e := Envelope.read(m.headers)) is not None}),
        "messages": len(messages),
        **store_counts(total),
        "processes": [
            {"pid": p.pid, "host": p.host, "process_name": p.name, **store_counts(p.counts)} for p in processes
        ],
    }
