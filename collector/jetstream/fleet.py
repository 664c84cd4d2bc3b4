"""What every collector on a stream stored, read back from it: a snapshot of the fleet.

Each message is a segment, readable alone (``envelope.py``); read in the order each collector published its
messages, they become the segments of a store of their own, their HELLOs its processes, exactly as a data dir is
recovered or a file read (``foreign/offline.py``). The counts come from the messages' headers (``envelope.py``): what
the stream's limits removed is overwritten. From there on a fleet snapshot is served as a local one: every format
and filter (``read/``, ``export/``), ``/sources``.

Reading asks the stream for the messages of the processes selected (a subject filter, by pid) stored from a start
time on (``since``, less ``CLOCK_MARGIN_NS``), through an ordered consumer, and holds them in memory while the
snapshot is made: at most the stream's ``max_bytes`` (``--capacity``) of payload. A wait for the next message that
runs out is no end of the stream while the read's consumer still has messages to deliver (the delivery stalls while
the servers are starved of CPU, say): reading waits on for them, and is refused (``ConnectionError``) after a minute
of such waits in all. What was read up to a stall is never served as the whole stream.
"""

from __future__ import annotations

import datetime
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from ringtrace.collector.foreign.offline import read_stream
from ringtrace.collector.jetstream.envelope import Envelope, read_cleared
from ringtrace.collector.store.accounts import Counts
from ringtrace.collector.store.processes import Registry
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store

__all__ = ["CLOCK_MARGIN_NS", "Fleet", "StoredMessage", "fetch", "read_fleet"]

log = logging.getLogger("ringtrace.collector.jetstream")

#: Messages stored this long before a snapshot's ``since`` are read too: the servers' clocks and the clients' may
#: differ by about this much.
CLOCK_MARGIN_NS: Final = 60 * 10**9
#: How long reading waits for the next message before it asks the read's consumer whether it has more to deliver.
NEXT_MESSAGE_TIMEOUT_S: Final = 5.0
#: The waits for the next message that ran out while the read's consumer still had messages to deliver, in all,
#: before the read is refused (a delivery stalled that long is not coming; nor may a read hold a request so long).
MAX_STALL_S: Final = 60.0
#: JetStream's error code for "consumer not found".
CONSUMER_NOT_FOUND: Final = 10014


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as the stream holds it."""

    stream_seq: int
    subject: str
    headers: Mapping[str, str] | None
    data: bytes


class JetStreamReader(Protocol):
    """What reading needs of nats-py's JetStream context."""

    async def stream_info(self, name: str, subjects_filter: str | None = None) -> Any: ...

    async def subscribe(self, subject: str, **options: Any) -> Any: ...


async def fetch(
    js: JetStreamReader, stream: str, subject_filter: str, since_ns: int | None = None, *, headers_only: bool = False
) -> list[StoredMessage]:
    """The messages of the stream on ``subject_filter`` (stored from ``since_ns`` less CLOCK_MARGIN_NS on), oldest
    first; with ``headers_only``, their headers alone (their ``data`` empty)."""
    from nats.js.api import ConsumerConfig, DeliverPolicy

    info = await js.stream_info(stream, subjects_filter=subject_filter)
    if not info.state.messages or not (info.state.subjects or {}):
        return []
    config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    if since_ns is not None:
        start = datetime.datetime.fromtimestamp((since_ns - CLOCK_MARGIN_NS) / 1e9, tz=datetime.UTC)
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=start)
    pending_bytes = max(2 * info.state.bytes, 64 * 1024 * 1024)
    subscription = await js.subscribe(
        subject_filter, stream=stream, ordered_consumer=True, config=config, pending_bytes_limit=pending_bytes,
        pending_msgs_limit=-1, headers_only=headers_only or None,
    )  # fmt: skip
    messages: list[StoredMessage] = []
    stalled_s = 0.0
    try:
        while True:
            try:
                msg = await subscription.next_msg(timeout=NEXT_MESSAGE_TIMEOUT_S)
            except TimeoutError:
                # None came: nothing (more) stored since the start time, those pending removed by the stream's limits
                # meanwhile, the cluster gone, or the delivery stalled, the stream still holding them.
                if not await _more_to_come(subscription, stream, messages[-1].stream_seq if messages else 0):
                    break
                stalled_s += NEXT_MESSAGE_TIMEOUT_S
                if stalled_s >= MAX_STALL_S:
                    after = f"after sequence {messages[-1].stream_seq}" if messages else "from the first on"
                    raise ConnectionError(
                        f"JetStream stream {stream!r} held messages it did not deliver ({after}) while it was read: "
                        f"{stalled_s:g} s of stalls in all"
                    ) from None
                continue
            metadata = msg.metadata
            messages.append(StoredMessage(metadata.sequence.stream, msg.subject, msg.headers, msg.data))
            if metadata.num_pending == 0:
                break
    finally:
        await subscription.unsubscribe()
    return messages


async def _more_to_come(subscription: Any, stream: str, last_seq: int) -> bool:
    """Whether the read's consumer has more messages for it: in the subscription's queue, not sent yet
    (``num_pending``), or sent past ``last_seq``, the last one read (still on their way); or it is being replaced
    (nats-py recreates an ordered consumer that missed its heartbeats: "consumer not found" meanwhile).

    Raises:
        ConnectionError: the stream does not answer (the cluster went away, the stream was deleted): a read cut short
            so is no snapshot.
    """
    from nats.js.errors import NotFoundError

    if subscription.pending_msgs:
        return True
    try:
        info = await subscription.consumer_info()
    except Exception as exc:
        if isinstance(exc, NotFoundError) and exc.err_code == CONSUMER_NOT_FOUND:
            return True
        raise ConnectionError(
            f"JetStream stream {stream!r} stopped answering while it was read: {type(exc).__name__}: {exc}"
        ) from None
    delivered = info.delivered.stream_seq if info.delivered is not None else 0
    return bool(info.num_pending) or delivered > last_seq


@dataclass
class Fleet:
    """What the stream holds of the processes read: a store and registry of their own, and their counts."""

    store: Store
    registry: Registry
    #: (process uid, track id) -> received, overwritten (removed by the stream's limits), capped, discarded.
    counts: dict[tuple[int, int], Counts]
    messages: int = 0
    #: Messages that are no ringtrace segment, or are cut short (logged).
    unreadable: int = 0
    collectors: set[str] = field(default_factory=set)
    #: Per process uid: its subjects, each with the stream sequence of the newest message read on it.
    subjects: dict[int, dict[str, int]] = field(default_factory=dict)
    #: Per subject: what was purged of it on request so far (the newest note read), per track [events, bytes].
    cleared: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)

    @property
    def present(self) -> set[int]:
        """The uids of the processes the messages read hold."""
        return set(self.subjects)


def read_fleet(messages: Iterable[StoredMessage], registry: Registry | None = None) -> Fleet:
    """The segments and counts ``messages`` hold (see the module docstring), their processes in ``registry`` (a new
    one if None: one kept from read to read keeps each process's uid); run on a worker thread, one at a time per
    registry."""
    messages = list(messages)
    notes = [(m, cleared) for m in messages if (cleared := read_cleared(m.headers)) is not None]
    ordered = _in_publish_order([m for m in messages if read_cleared(m.headers) is None])
    store = Store(2**62, MIN_SEGMENT_BYTES)
    registry = Registry() if registry is None else registry
    newest: dict[tuple[str, int, str], Envelope] = {}
    uid_of_subject: dict[str, int] = {}
    fleet = Fleet(store, registry, {}, messages=len(ordered))
    for note, cleared in sorted(notes, key=lambda item: item[0].stream_seq):  # the newest note of a subject wins
        fleet.cleared[note.subject] = cleared
    for seq, (message, envelope) in enumerate(ordered):
        recovered, error = read_stream(message.data, seq)
        if recovered is None or error is not None:
            fleet.unreadable += 1
            log.warning("message %d on %s: %s", message.stream_seq, message.subject, error or "no HELLO frame")
        if recovered is None:
            continue
        process = registry.known(recovered.hello)
        if recovered.stats is not None:
            process.report(recovered.stats)
        store.adopt(recovered, process.uid)
        uid_of_subject[message.subject] = process.uid
        seqs = fleet.subjects.setdefault(process.uid, {})
        seqs[message.subject] = max(seqs.get(message.subject, 0), message.stream_seq)
        if envelope is not None:
            key = (envelope.collector, envelope.record, message.subject)
            fleet.collectors.add(envelope.collector)
            if key not in newest or newest[key].seq < envelope.seq:
                newest[key] = envelope
    fleet.counts = _counts(store, newest, uid_of_subject, fleet.cleared)
    return fleet


def _in_publish_order(messages: list[StoredMessage]) -> list[tuple[StoredMessage, Envelope | None]]:
    """Oldest first: in the stream's order, but each collector's messages in the order it sealed them (a retried
    publish may have been stored after a later one): they take the places the stream gave that collector's, in turn."""
    read = [(message, Envelope.read(message.headers)) for message in messages]
    places: dict[str | None, list[int]] = defaultdict(list)
    for index, (_, envelope) in enumerate(read):
        places[envelope.collector if envelope else None].append(index)
    ordered: list[tuple[StoredMessage, Envelope | None]] = [read[0]] * len(read) if read else []
    for collector, indexes in places.items():
        mine = [read[i] for i in indexes]
        if collector is not None:
            mine.sort(key=lambda item: item[1].seq if item[1] else 0)
        for index, item in zip(indexes, mine, strict=True):
            ordered[index] = item
    return ordered


def _counts(
    store: Store,
    newest: dict[tuple[str, int, str], Envelope],
    uid_of_subject: dict[str, int],
    cleared: dict[str, dict[int, tuple[int, int]]],
) -> dict[tuple[int, int], Counts]:
    """Per (process uid, track): the newest counts of each collector, summed; stored as read; cleared as the notes
    say; the rest overwritten."""
    stored = store.track_counts()  # (what adopting counted received: what the stream holds)
    counts: dict[tuple[int, int], Counts] = {}
    for (_, _, subject), envelope in newest.items():
        uid = uid_of_subject[subject]
        for track_id, sent in envelope.counts.items():
            counts.setdefault((uid, track_id), Counts()).add(sent)
    for subject, tracks in cleared.items():
        owner = uid_of_subject.get(subject)
        if owner is None:  # nothing of the process left to show: nor its counts
            continue
        for track_id, (events, nbytes) in tracks.items():
            total = counts.setdefault((owner, track_id), Counts())
            total.cleared_events += events
            total.cleared_bytes += nbytes
    for key, held in stored.items():
        total = counts.setdefault(key, Counts(held.received_events, held.received_bytes))
        # What was handed to the stream and is not there any more: its limits removed it. (Never below zero: a
        # message stored with no newer one read, say, counts as received at least.)
        handed_events = total.received_events - total.capped_events - total.discarded_events - total.cleared_events
        handed_bytes = total.received_bytes - total.capped_bytes - total.discarded_bytes - total.cleared_bytes
        if handed_events < held.received_events:
            total.received_events += held.received_events - handed_events
            total.received_bytes += max(held.received_bytes - handed_bytes, 0)
            handed_events, handed_bytes = held.received_events, max(handed_bytes, held.received_bytes)
        total.overwritten_events = handed_events - held.received_events
        total.overwritten_bytes = max(handed_bytes - held.received_bytes, 0)
    for key, total in counts.items():
        if key not in stored:  # nothing of the track left in the stream
            lost = total.capped_events + total.discarded_events + total.cleared_events
            total.overwritten_events = max(total.received_events - lost, 0)
            lost_bytes = total.capped_bytes + total.discarded_bytes + total.cleared_bytes
            total.overwritten_bytes = max(total.received_bytes - lost_bytes, 0)
            total.received_events = max(total.received_events, lost)
            total.received_bytes = max(total.received_bytes, lost_bytes)
    return counts
