"""Publishing sealed segments to a JetStream stream: each one message, retried until the stream acknowledges or
refuses it, and then gone from the collector's memory.

Theory of operation
-------------------
The store (a memory store under ``--policy discard``, of ``--jetstream-buffer`` bytes) calls ``sealed`` with every
segment it seals that holds events: when it fills, when its connection ends, at a FLUSH (``ReplicatedAcks``) and
every ``SEAL_INTERVAL_S`` while a connection sends (``seal_every``). The segment is pinned, its message's headers
written at once (``envelope.py``: the counts as of the seal), and it waits in line. Up to ``MAX_IN_FLIGHT`` messages
are published at once, each a request the stream answers once its replicas hold it. Each has a message id
(``Nats-Msg-Id``: this collector's id and the message's number): a retry after a lost answer is stored once (within
the stream's duplicate window, ``DUPLICATE_WINDOW_S``).

- Acknowledged: the segment leaves the store, its events still counted stored (``Store.published``).
- Refused by the stream (full under ``discard new``; larger than the server's max payload): the segment leaves,
  its events counted discarded (``Store.refused``), and the FLUSHes waiting for it send REFUSED first.
- No answer (the cluster cannot be reached, a leader is being elected): retried, with a backoff up to
  ``MAX_BACKOFF_S``, for as long as it takes. Meanwhile the segments wait in the store, which refuses new frames once
  it is full (counted discarded; the clients' flushes return False): memory stays within ``--jetstream-buffer``
  plus ``MAX_IN_FLIGHT`` messages being sent. Once the cluster answers again, the line drains and ingest goes on.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from ringtrace.collector.jetstream.envelope import (
    COLLECTOR,
    COUNTS,
    EVENT_BYTES,
    EVENTS,
    FIRST_NS,
    LAST_NS,
    MSG_ID,
    PROCESS,
    RECORD,
    SEQ,
    counts_header,
    segment_span,
)
from ringtrace.collector.jetstream.stream_readiness import publish_failure
from ringtrace.collector.jetstream.subjects import process_subject
from ringtrace.collector.store.accounts import Counts
from ringtrace.collector.store.processes import Registry
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store, Stream
from ringtrace.collector.store.segments import Segment

__all__ = [
    "DUPLICATE_WINDOW_S",
    "HEADER_ROOM",
    "MAX_IN_FLIGHT",
    "SEAL_INTERVAL_S",
    "PublishCounters",
    "Publisher",
    "Sealing",
    "message_segment_bytes",
    "seal_every",
]

log = logging.getLogger("ringtrace.collector.jetstream")

#: Messages being published at once.
MAX_IN_FLIGHT: Final = 16
#: How long one publish waits for the stream's answer before it is retried.
PUBLISH_TIMEOUT_S: Final = 2.0
MAX_BACKOFF_S: Final = 1.0
#: How often a connection's open segment is sealed (and so published) while it holds events.
SEAL_INTERVAL_S: Final = 0.2
#: The stream's duplicate window: a retried message within it is stored once.
DUPLICATE_WINDOW_S: Final = 120.0
#: Room a message keeps for its headers (the counts of a process's tracks grow with their number).
HEADER_ROOM: Final = 64 * 1024


def message_segment_bytes(max_payload: int) -> int:
    """The size a segment may grow to so that it and its headers are one message within the servers' max payload:
    the largest power of two within ``max_payload`` less HEADER_ROOM (512 KiB for nats-server's default 1 MiB, 4 MiB
    for 8 MiB), and MIN_SEGMENT_BYTES at least. Each message is a write, a replication and an acknowledgement on each
    server, whatever its size (though what the servers spend goes mostly with bytes: docs/jetstream.md, Measured)."""
    room = max(max_payload - HEADER_ROOM, MIN_SEGMENT_BYTES)
    return max(1 << (room.bit_length() - 1), MIN_SEGMENT_BYTES)


class JetStreamApi(Protocol):
    """What the publisher needs of nats-py's JetStream context."""

    async def publish(
        self, subject: str, payload: bytes = b"", timeout: float | None = None, stream: str | None = None,
        headers: dict[str, Any] | None = None,
    ) -> Any: ...  # fmt: skip


class Sealing(Protocol):
    """A connection whose open segment can be sealed (``IngestProtocol.seal_segment``)."""

    def seal_segment(self, opened_before_ns: int | None = None) -> None: ...


@dataclass(slots=True)
class _Outgoing:
    segment: Segment
    stream: Stream
    subject: str
    headers: dict[str, str]
    #: The events refused (0: stored) once the stream answered.
    done: asyncio.Future[int]


@dataclass(slots=True)
class PublishCounters:
    """What the publisher did, for ``/stats``."""

    messages: int = 0
    bytes: int = 0
    events: int = 0
    retries: int = 0
    refused_messages: int = 0
    refused_events: int = 0
    #: Messages sealed and not yet answered (waiting in line or being sent), and their events.
    waiting: int = 0
    waiting_events: int = 0
    #: What the last error of a publish being retried means (``stream_readiness.py``; "" once one succeeds again).
    failing: str = ""
    since: float = field(default=0.0)

    def stats(self, stream_name: str, collector_id: str) -> dict[str, Any]:
        """``/stats``: what this collector published to the stream."""
        return {
            "stream": stream_name,
            "collector_id": collector_id,
            "published_messages": self.messages,
            "published_bytes": self.bytes,
            "published_events": self.events,
            "publish_retries": self.retries,
            "refused_messages": self.refused_messages,
            "refused_events": self.refused_events,
            "waiting_messages": self.waiting,
            "waiting_events": self.waiting_events,
            "failing": self.failing or None,
        }


class Publisher:
    """Publishes the store's sealed segments to stream ``stream_name``; see the module docstring.

    Args:
        store: the collector's store (its ``on_sealed`` hook and ``replication`` are set here).
        registry: the processes, whose host, pid and instance name each message's subject.
        stream_name: the stream (and the first token of its subjects).
        collector_id: this collector's id in message ids and headers (unique per run).
        max_payload: the most a message may hold (the servers' max payload), headers included.
    """

    def __init__(self, store: Store, registry: Registry, stream_name: str, collector_id: str, max_payload: int) -> None:
        self._store = store
        self._registry = registry
        self.stream_name = stream_name
        self.collector_id = collector_id
        self.max_payload = max_payload
        self._numbers = itertools.count(1)
        self._line: deque[_Outgoing] = deque()
        self._outstanding: dict[Stream, list[asyncio.Future[int]]] = {}
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._sending: set[asyncio.Task[None]] = set()
        self.counters = PublishCounters()
        self._js: JetStreamApi | None = None
        store.on_sealed(self.sealed)
        store.replication = self

    # -- from the store, on the event loop --------------------------------------------------------------------------

    def sealed(self, stream: Stream, segment: Segment) -> None:
        """A segment was sealed: pinned until the stream answers, its message's headers as of now."""
        store = self._store
        store.pin(segment)
        process = self._registry.by_uid[segment.owner]
        number = next(self._numbers)
        first, last = segment_span(segment)
        offset = process.clock_offset_ns
        headers = {
            MSG_ID: f"{self.collector_id}.{number}",
            COLLECTOR: self.collector_id,
            RECORD: str(segment.owner),
            SEQ: str(number),
            PROCESS: process.name[:200],
            EVENTS: str(segment.events),
            EVENT_BYTES: str(sum(nbytes for _, nbytes in segment.tracks.values())),
            FIRST_NS: str(first + offset),
            LAST_NS: str(last + offset),
            COUNTS: counts_header(self._handed(segment.owner)),
        }
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        subject = process_subject(self.stream_name, process.host, process.pid, process.instance_id)
        self._line.append(_Outgoing(segment, stream, subject, headers, done))
        self._outstanding.setdefault(stream, []).append(done)
        self.counters.waiting += 1
        self.counters.waiting_events += segment.events
        self._wake.set()

    def _handed(self, owner: int) -> dict[int, Counts]:
        """The process's counts per track with received as handed to the stream: less what its open segments hold."""
        unsealed = self._store.unsealed_tracks(owner)
        handed = {}
        for track_id, counts in self._store.process_counts_of(owner).items():
            held_events, held_bytes = unsealed.get(track_id, (0, 0))
            handed[track_id] = Counts(
                counts.received_events - held_events,
                counts.received_bytes - held_bytes,
                capped_events=counts.capped_events,
                capped_bytes=counts.capped_bytes,
                discarded_events=counts.discarded_events,
                discarded_bytes=counts.discarded_bytes,
            )
        return handed

    def settled(self, stream: Stream) -> Awaitable[int]:
        """``Replication.settled``: done once every segment ``stream`` sealed so far was answered; the events
        refused."""
        waiting = list(self._outstanding.get(stream, ()))
        return _refused_of(waiting)

    # -- the publishing task ----------------------------------------------------------------------------------------

    async def run(self, js: JetStreamApi) -> None:
        """Publish what is sealed, for ever (cancelled at stop)."""
        self._js = js
        try:
            while True:
                while not self._line:
                    self._wake.clear()
                    await self._wake.wait()
                await self._slots.acquire()
                task = asyncio.get_running_loop().create_task(self._publish(self._line.popleft()))
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)
        finally:
            for task in list(self._sending):
                task.cancel()

    async def _publish(self, item: _Outgoing) -> None:
        try:
            await self._publish_until_answered(item)
        finally:
            self._slots.release()

    async def _publish_until_answered(self, item: _Outgoing) -> None:
        from nats.js.errors import APIError

        js, segment = self._js, item.segment
        assert js is not None
        with memoryview(segment.buffer) as view:
            payload = bytes(view[: segment.used])
        size = len(payload) + sum(len(k) + len(v) + 4 for k, v in item.headers.items()) + 16
        if size > self.max_payload:
            log.error("a segment of %d bytes (with headers) exceeds the servers' max payload %d: its %d events are "
                      "counted discarded; lower --max-frame-size, or raise max_payload", size, self.max_payload,
                      segment.events)  # fmt: skip
            self._answered(item, refused=True)
            return
        backoff = 0.05
        while True:
            try:
                await js.publish(item.subject, payload, timeout=PUBLISH_TIMEOUT_S, headers=item.headers)
            except APIError as exc:
                if _is_refusal(exc):
                    log.warning("the stream refused a message of %d events: %s", segment.events, exc.description)
                    self._answered(item, refused=True)
                    return
                self._failed(exc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # no answer, no responders, reconnecting: the cluster is away; retry
                self._failed(exc)
            else:
                self._answered(item, refused=False, nbytes=len(payload))
                return
            self.counters.retries += 1
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _failed(self, exc: BaseException) -> None:
        counters = self.counters
        failing = publish_failure(exc, PUBLISH_TIMEOUT_S)
        if not counters.failing:
            counters.since = time.monotonic()
            log.warning("cannot publish to JetStream stream %r: %s; retrying: clients' flushes wait, and new events "
                        "are refused once --jetstream-buffer is full", self.stream_name, failing)  # fmt: skip
        counters.failing = failing

    def _answered(self, item: _Outgoing, *, refused: bool, nbytes: int = 0) -> None:
        store, segment, counters = self._store, item.segment, self.counters
        if counters.failing and not refused:
            log.info("publishing to JetStream stream %r again, after %.1fs", self.stream_name,
                     time.monotonic() - counters.since)  # fmt: skip
            counters.failing = ""
        events = segment.events
        store.unpin([segment])
        if refused:
            store.refused(segment)
            counters.refused_messages += 1
            counters.refused_events += events
        else:
            store.published(segment)
            counters.messages += 1
            counters.bytes += nbytes
            counters.events += events
        counters.waiting -= 1
        counters.waiting_events -= events
        outstanding = self._outstanding.get(item.stream)
        if outstanding is not None:
            outstanding.remove(item.done)
            if not outstanding:
                del self._outstanding[item.stream]
        item.done.set_result(events if refused else 0)


async def _refused_of(waiting: list[asyncio.Future[int]]) -> int:
    return sum([await future for future in waiting])


def _is_refusal(exc: Any) -> bool:
    """Whether the stream's error refuses the message for good (full under discard new; too large), rather than a
    passing state (no leader, JetStream not ready) worth a retry."""
    description = (exc.description or "").lower()
    return "maximum" in description or "exceeded" in description or "too large" in description


async def seal_every(connections: Iterable[Sealing]) -> None:
    """Every SEAL_INTERVAL_S, seal each connection's open segment that holds events, so that what a client sent is
    in the stream (and readable by every collector) within about twice that."""
    while True:
        await asyncio.sleep(SEAL_INTERVAL_S)
        for connection in list(connections):
            connection.seal_segment()
