"""What the link delivers over a welcomed connection, sans-I/O: the stream prefix, the queued frames, the loss counters,
the FLUSH frames that ask for acknowledgements, and the heartbeat. The link (link.py) decides when a connection is
there; this decides what goes over it, given the time.

Theory of operation
-------------------
On WELCOME the collector's limits go into the encoder, what was queued before them is packed again within them, and
the whole stream prefix (SCHEMA, every string, every track, STATS) goes ahead of it. Control frames are queued only
while welcomed. Loss counters (STATS) go out when they change, at most every ``STATS_INTERVAL_S`` and with every flush.
While events go out, a FLUSH nobody waits for asks for an acknowledgement every ``ACKNOWLEDGE_EVERY_S``; with nothing
sent for ``heartbeat_s``, a FLUSH of token 0 tells the collector the connection is alive. Control frames piling up past
twice ``max_queue_bytes`` (a collector that does not read) set ``reset_reason``: the link then drops the queue and
connects again.
"""

from __future__ import annotations

from typing import Final

from ringtrace.client.delivery.streaming.acknowledgements import Acknowledgements
from ringtrace.client.delivery.streaming.send_queue import LinkCounters, SendQueue
from ringtrace.client.options import StreamerOptions
from ringtrace.wire.errors import UnsupportedVersion
from ringtrace.wire.frame_types import PROTOCOL_VERSIONS
from ringtrace.wire.frames import Flush, FlushAck, Stats, encode
from ringtrace.wire.handshake_frames import Welcome
from ringtrace.wire.stream_encoder import EncodedBatch, StreamEncoder

__all__ = ["HEARTBEAT_TOKEN", "STATS_INTERVAL_S", "Delivery"]

#: Loss counters are sent at most this often (and with every flush).
STATS_INTERVAL_S: Final = 0.25
#: The heartbeat is a FLUSH nobody waits for.
HEARTBEAT_TOKEN: Final = 0


class Delivery:
    """The queue, the acknowledgements and the loss counters of one link (over all its connections)."""

    __slots__ = (
        "_stats_queued_at",
        "_stats_sent",
        "acks",
        "counters",
        "encoder",
        "last_sent_s",
        "options",
        "queue",
        "reset_reason",
    )

    def __init__(self, options: StreamerOptions, encoder: StreamEncoder, counters: LinkCounters) -> None:
        self.options = options
        self.encoder = encoder
        self.counters = counters
        self.queue = SendQueue(options.max_queue_bytes, counters)
        self.acks = Acknowledgements()
        self._stats_sent: Stats | None = None
        self._stats_queued_at = 0.0
        #: Set (with why) when the queue must be thrown away and the connection made again.
        self.reset_reason = ""
        #: When a frame last went out whole.
        self.last_sent_s = 0.0

    def stats(self) -> Stats:
        counters = self.counters
        return self.encoder.stats(
            counters.dropped_events,
            counters.dropped_frames,
            counters.unacknowledged_events,
            counters.internal_error_events,
        )

    @property
    def lost_events(self) -> int:
        """Events recorded and never delivered: dropped, or typed events whose values did not fit their types."""
        return self.counters.dropped_events + self.encoder.rejected_events

    def enqueue(self, batch: EncodedBatch, now: float, *, welcomed: bool) -> None:
        """One run's frames: control frames only ``welcomed`` (the prefix carries them otherwise), then EVENTS.
        Only control frames can pile up past the queue's bound: EVENTS frames that do not fit are dropped."""
        if welcomed:
            for frame in batch.control:
                self._queue_control(frame)
        self.queue.enqueue(batch, control=False)
        strings, stacks = self.encoder.strings, self.encoder.stacks
        if strings.retired:  # earlier epochs' strings are kept while frames packed with them are queued
            strings.keep_epochs(self.queue.epochs)
        if stacks.retired:  # and so are the stack tables that ended with them
            stacks.keep_epochs(self.queue.epochs)
        if welcomed:
            self.queue_stats(now)

    def welcome(self, welcome: Welcome) -> None:
        """Adopt the collector's limits, pack again what was packed before we knew them, then queue the prefix.

        Raises:
            UnsupportedVersion: the collector chose a version this client does not speak.
        """
        low, high = PROTOCOL_VERSIONS
        if not low <= welcome.protocol_version <= high:
            raise UnsupportedVersion(
                f"the collector chose protocol version {welcome.protocol_version}; this client speaks {low}..{high}"
            )
        encoder = self.encoder
        encoder.max_frame_bytes = min(self.options.max_frame_bytes, welcome.max_frame_bytes)
        strings = encoder.strings
        strings_cut = strings.limit_to(welcome.max_strings, welcome.max_string_bytes)
        # A full table starts again if the collector takes that; otherwise new labels overflow, as they always did.
        strings.recycles = strings.keeps_retired = welcome.string_resets
        encoder.max_kinds = welcome.max_kinds  # the prefix below declares at most these
        encoder.max_schema_bytes = welcome.max_schema_bytes
        encoder.stacks.limit_to(welcome.max_stacks, welcome.max_stack_frames)
        encoder.stacks.recycles = encoder.stacks.keeps_retired = welcome.string_resets  # (with the strings)
        prefix = encoder.prefix()  # the string table as it is now: what is packed again adds its STRINGS frames
        kept = self.queue.repacked(encoder, strings_cut)
        self._stats_sent = self.stats()
        prefix.append(encode(self._stats_sent))
        self.queue.rebuild(prefix, kept, live=encoder.tracks)
        strings.keep_epochs(self.queue.epochs)
        encoder.stacks.keep_epochs(self.queue.epochs)

    def start_flushes(self, now: float) -> None:
        """Queue a FLUSH for each pending flush request (welcomed)."""
        if self.acks.pending:
            self.queue_stats(now, now_or_never=True)  # the acknowledgement then covers the latest counters
            for token in self.acks.send_pending(self.counters.sent_events + self.queue.unsent_events):
                self._queue_control(encode(Flush(token)))

    def ask_acknowledgement(self, now: float, now_or_never: bool = False) -> None:
        """Every ACKNOWLEDGE_EVERY_S while events go out (or now), a FLUSH that only moves what is acknowledged
        (welcomed)."""
        token = self.acks.ask(now, self.counters.sent_events + self.queue.unsent_events, now_or_never)
        if token is not None:
            self._queue_control(encode(Flush(token)))

    def heartbeat(self, now: float) -> None:
        """With nothing sent for ``heartbeat_s``, a FLUSH nobody waits for (welcomed)."""
        if now - self.last_sent_s >= self.options.heartbeat_s:
            self._queue_control(encode(Flush(HEARTBEAT_TOKEN)))
            self.last_sent_s = now

    def flush_acknowledged(self, token: int) -> tuple[int, bool] | None:
        """FLUSH_ACK ``token`` came: the flush request it answers and its answer, if one waits."""
        counters = self.counters
        return self.acks.acknowledged(token, self.lost_events, counters.dropped_events, counters.unacknowledged_events)

    def answer_flush(self, token: int, now: float) -> None:
        """The collector's FLUSH ``token``, once the timelines were swept: FLUSH_ACK behind what they queued."""
        # Acknowledged before it answers: a collector that asks before it stops leaves nothing in doubt.
        self.ask_acknowledgement(now, now_or_never=True)
        self._queue_control(encode(FlushAck(token)))

    def refused(self, events: int) -> None:
        """The collector could not store ``events`` (REFUSED): counted, and the next flush is not clean."""
        self.counters.refused_events += events
        self.acks.refused_since_flush = True

    def sent(self, size: int, now: float) -> None:
        if self.queue.sent(size):
            self.last_sent_s = now

    def broken(self) -> int:
        """The connection broke: the frame going out is lost (counted), control frames come again with the next
        prefix, and what the collector never acknowledged is counted; returns that."""
        self.queue.cut()
        unacknowledged = self.acks.broken(self.counters.sent_events)
        self.counters.unacknowledged_events += unacknowledged  # reported in STATS on the next connection
        return unacknowledged

    def queue_stats(self, now: float, now_or_never: bool = False) -> None:
        """Queue the loss counters if they changed, at most one STATS frame waiting at a time (they are cumulative:
        the newest says everything), and no more often than ``STATS_INTERVAL_S`` unless ``now_or_never``."""
        stats = self.stats()
        due = now_or_never or (not self.queue.stats_pending and now - self._stats_queued_at >= STATS_INTERVAL_S)
        if stats != self._stats_sent and due:
            self._queue_control(encode(stats))
            self._stats_sent = stats
            self._stats_queued_at = now

    def _queue_control(self, frame: bytes) -> None:
        """Control frames are never dropped one by one: the stream needs every one of them. If a collector that
        welcomed us stops reading and they pile up past twice ``max_queue_bytes`` (tracks of short-lived threads,
        say), the link throws the queue away, counting its events, and reconnects: the next connection's prefix
        carries the tables as they are then."""
        self.queue.push_control(frame)
        self._check_overflow()

    def _check_overflow(self) -> None:
        if self.queue.control_overflow:
            self.reset_reason = f"{self.queue.queued_bytes} bytes queued for a collector that does not read"
