"""The sans-I/O link: events in (the time, a connection made or lost, the collector's bytes), actions and bytes out.

No socket, no thread, no clock: each test plays the collector's end in memory (``Peer``) and passes the time by hand.
The backoff's jitter is fixed at 1.0, so a wait is exactly the backoff.
"""

from __future__ import annotations

import errno
import logging
import socket
from dataclasses import replace
from typing import Any

import msgpack
import pytest
from ringtrace.client.delivery.streaming.exit_attempts import nothing_listens
from ringtrace.client.delivery.streaming.link import Link, LinkState, lose_in_flight
from ringtrace.client.delivery.streaming.link_actions import (
    Action,
    AnswerFlush,
    Close,
    Connect,
    FlushDone,
    Log,
    Prioritize,
)
from ringtrace.client.options import StreamerOptions
from ringtrace.wire.frame_types import AUTHENTICATION_FAILED, PROTOCOL_VERSIONS, TABLES_PAST_CAPACITY
from ringtrace.wire.frames import Events, Flush, FlushAck, Frame, Goodbye, Refused, SetPriority, Stats, encode, preamble
from ringtrace.wire.handshake_frames import Hello, Welcome
from ringtrace.wire.model import SPAN, THREAD_TRACK, TrackInfo
from ringtrace.wire.reader import FrameReader
from ringtrace.wire.stream_encoder import EncodedBatch, StreamEncoder
from ringtrace.wire.string_table import OVERFLOW_LABEL
from ringtrace.wire.table_frames import Strings, Track

ADDRESS = "collector:7700"
HELLO = Hello(1, "host", "proc", "instance", "boot", 0, 0, "0.1.0")
WELCOME = Welcome(PROTOCOL_VERSIONS[1], 1 << 20, 100_000, 10_000, 1_000, "test")
MAIN = TrackInfo(7, THREAD_TRACK, "main", 1234)


def make_link(**options: Any) -> tuple[Link, StreamEncoder]:
    settings = {"backoff_initial_s": 0.1, "backoff_max_s": 1.0, "heartbeat_s": 15.0, "token": "t"} | options
    encoder = StreamEncoder()
    options = StreamerOptions(**settings)
    link = Link(ADDRESS, options, encoder, jitter=lambda: 1.0)
    return link, encoder


def events(encoder: StreamEncoder, *labels: str, track: TrackInfo = MAIN) -> EncodedBatch:
    """A run of 10 ns spans, encoded as the flusher hands it to the link."""
    records = [value for i, label in enumerate(labels) for value in (SPAN, label, 100 * i, 100 * i + 10, None)]
    return encoder.encode(track, records)


class Peer:
    """The collector's end of the link: reads what the link sends (as the socket would take it) and answers."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.reader = FrameReader("client")
        self.opened = False
        self.welcomed: list[Action] = []

    def connect(self, now: float) -> None:
        """The link's next attempt is due at ``now``: the connection is made."""
        assert self.link.timer(now) == [Connect()]
        assert self.link.connected(now, HELLO) == []
        self.reader = FrameReader("client")
        self.opened = False

    def welcome(self, now: float, welcome: Welcome = WELCOME) -> list[Frame]:
        """Read HELLO, answer WELCOME; returns what the link sends then (the prefix and the queue)."""
        assert self.read(now) == [HELLO]
        self.welcomed = self.answer(now, welcome)  # (an INFO when it ends a warned-of outage)
        assert self.link.welcomed
        return self.read(now)

    def read(self, now: float) -> list[Frame]:
        """Everything the link has to send now, as frames."""
        while (data := self.link.data_to_send()) is not None:
            chunk = bytes(data)
            self.link.sent(len(chunk), now)
            self.reader.receive_data(chunk)
        return list(self.reader)

    def answer(self, now: float, *frames: Frame) -> list[Action]:
        data = b"".join(encode(frame) for frame in frames)
        if not self.opened:
            data, self.opened = preamble() + data, True
        return self.link.received(data, now)


def welcomed_and_sent(label: str) -> tuple[Link, StreamEncoder, Peer]:
    """A link connected and welcomed at 0.0 whose first batch (one span ``label``, with its tables) the peer read at
    0.1."""
    link, encoder = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    peer.welcome(0.0)
    link.enqueue(events(encoder, label), now=0.1)
    peer.read(0.1)
    return link, encoder, peer


def kinds(actions: list[Action]) -> list[type]:
    return [type(action) for action in actions]


def logged(actions: list[Action], level: int) -> list[str]:
    return [action.text for action in actions if isinstance(action, Log) and action.level == level]


def flush_tokens(frames: list[Frame]) -> list[int]:
    return [frame.token for frame in frames if isinstance(frame, Flush)]


def test_hello_goes_alone_until_welcome_then_the_prefix_goes_ahead_of_what_was_queued() -> None:
    link, encoder = make_link()
    peer = Peer(link)
    link.enqueue(events(encoder, "early", "also early"), now=0.0)  # before any connection
    assert link.state is LinkState.IDLE and link.queued_events == 2
    assert link.timer(0.0) == [Connect()] and link.state is LinkState.CONNECTING
    assert link.connected(0.0, HELLO) == [] and link.state is LinkState.HANDSHAKE
    assert peer.read(0.0) == [HELLO]
    link.timer(0.5)
    assert peer.read(0.5) == []  # nothing before WELCOME, however long it takes
    assert peer.answer(1.0, WELCOME) == [] and link.state is LinkState.WELCOMED
    frames = peer.read(1.0)
    types = [type(frame) for frame in frames]
    assert types.index(Strings) < types.index(Track) < types.index(Stats) < types.index(Events) == len(types) - 1
    strings = {text for frame in frames if isinstance(frame, Strings) for text in frame.strings}
    assert {"early", "also early"} <= strings
    assert link.counters.sent_events == 2 and link.counters.connects == 1 and link.queued_events == 0


def test_a_refusal_waits_the_longest_backoff_and_is_warned_of_at_once() -> None:
    link, _ = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    assert peer.read(0.0) == [HELLO]
    assert peer.answer(0.1, Goodbye(AUTHENTICATION_FAILED)) == []
    closed = link.received(b"", 0.1)
    assert kinds(closed) == [Close, Log] and link.state is LinkState.IDLE
    assert link.next_deadline() == 0.1  # the warning is due now
    warning = logged(link.timer(0.1), logging.WARNING)
    assert len(warning) == 1 and "authentication failed" in warning[0] and "RINGTRACE_TOKEN" in warning[0]
    assert link.next_deadline() == pytest.approx(1.1)  # backoff_max_s, not backoff_initial_s


def test_tables_past_the_collectors_capacity_are_a_refusal_warned_of_once_until_a_connection_takes_them() -> None:
    link, encoder = make_link(backoff_initial_s=0.1, backoff_max_s=1.0)
    peer = Peer(link)
    refusal = Goodbye(f"STRINGS frame: ... exceeds capacity=3000000: {TABLES_PAST_CAPACITY}")
    now, said = 0.0, []
    for attempt in range(4):
        peer.connect(now)
        peer.welcome(now)
        link.enqueue(events(encoder, f"e{attempt}"), now)
        peer.read(now)
        now += 2.0  # welcomed long enough ago to count as a connection that worked, were it not refused
        said += peer.answer(now, refusal) + link.received(b"", now)
        assert link.next_deadline() == (now if attempt == 0 else now + 1.0)  # the warning at once (no grace)
        said += link.timer(now)
        assert link.next_deadline() == pytest.approx(now + 1.0)  # backoff_max_s, as for any refusal
        now += 1.0
    warnings = logged(said, logging.WARNING)
    assert len(warnings) == 2, warnings  # the events the first break left unacknowledged, and the outage at once
    assert "1 events sent before the connection" in warnings[0]
    assert "cannot reach the collector" in warnings[1] and TABLES_PAST_CAPACITY in warnings[1]
    assert not logged(said, logging.INFO)  # a WELCOME alone does not end the outage: the tables were refused again
    assert link.counters.unacknowledged_events == 4  # each counted
    now += 60.0
    attempt = link.timer(now)
    later = logged(attempt, logging.WARNING)  # the outage's next warning counts them
    assert len(later) == 1 and "3 sent on connections that broke before an acknowledgement" in later[0], later
    assert Connect() in attempt and link.connected(now, HELLO) == []
    peer.reader, peer.opened = FrameReader("client"), False
    peer.welcome(now)
    assert not logged(peer.welcomed, logging.INFO)
    resumed = peer.answer(now, FlushAck(0))  # taken this time: delivery resumes
    assert logged(resumed, logging.INFO) and "reach the collector again" in logged(resumed, logging.INFO)[0]


def test_the_backoff_doubles_up_to_its_max_and_starts_again_after_a_connection_that_worked() -> None:
    link, _ = make_link(backoff_initial_s=0.1, backoff_max_s=1.0)
    assert link.timer(0.0) == [Connect()]
    link.connect_failed("connection refused", 0.0)
    now = 0.0
    for wait in (0.1, 0.2, 0.4, 0.8, 1.0, 1.0):
        assert Connect() not in link.timer(now + wait - 0.001)  # (the outage's warning comes 2 s on)
        now += wait
        assert Connect() in link.timer(now)
        link.connect_failed("connection refused", now)

    now += 1.0
    peer = Peer(link)
    peer.connect(now)
    peer.welcome(now)
    assert logged(peer.welcomed, logging.INFO) == [
        "ringtrace: events reach the collector again, after 4.5s (0 dropped meanwhile)"
    ]
    link.connection_lost("receive failed", now + 0.1)  # welcomed, never acknowledged: no proof it works
    assert link.next_deadline() == pytest.approx(now + 1.1)

    now += 1.1
    peer.connect(now)
    peer.welcome(now)
    assert peer.answer(now, FlushAck(0)) == []  # the collector acknowledged a heartbeat: it works
    link.connection_lost("receive failed", now + 0.1)
    assert link.next_deadline() == pytest.approx(now + 0.2)  # backoff_initial_s again


def test_a_flush_is_answered_by_the_collectors_ack_of_its_token() -> None:
    link, encoder = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    peer.welcome(0.0)
    link.enqueue(events(encoder, "a", "b", "c"), now=0.1)
    request = link.request_flush(deadline=5.0)
    assert link.timer(0.1) == []
    frames = peer.read(0.1)
    assert [frame.count for frame in frames if isinstance(frame, Events)] == [3]
    (token,) = flush_tokens(frames)
    assert frames.index(Flush(token)) > max(i for i, frame in enumerate(frames) if isinstance(frame, Events))
    assert peer.answer(0.2, FlushAck(token + 1000)) == []  # another token answers nobody
    assert peer.answer(0.2, FlushAck(token)) == [FlushDone(request, True)]
    assert link.counters.sent_events == 3


def test_a_full_queue_drops_and_counts_and_the_next_flush_says_so() -> None:
    link, encoder = make_link(max_queue_bytes=300)
    peer = Peer(link)
    peer.connect(0.0)
    peer.welcome(0.0)
    link.enqueue(events(encoder, *["a"] * 100), now=0.1)  # its TRACK and STRINGS fit; its EVENTS frame does not
    assert (link.counters.dropped_events, link.counters.dropped_frames, link.queued_events) == (100, 1, 0)
    request = link.request_flush(deadline=5.0)
    link.timer(0.1)
    frames = peer.read(0.1)
    assert [frame.dropped_events for frame in frames if isinstance(frame, Stats)] == [100]  # ahead of the FLUSH
    (token,) = flush_tokens(frames)
    assert peer.answer(0.2, FlushAck(token)) == [FlushDone(request, False)]
    second = link.request_flush(deadline=5.0)
    link.timer(0.3)
    (token,) = flush_tokens(peer.read(0.3))
    assert peer.answer(0.4, FlushAck(token)) == [FlushDone(second, True)]  # nothing lost since the previous one


def test_a_flush_the_collector_refused_events_before_is_false() -> None:
    link, encoder = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    peer.welcome(0.0)
    link.enqueue(events(encoder, "a"), now=0.1)
    request = link.request_flush(deadline=5.0)
    link.timer(0.1)
    (token,) = flush_tokens(peer.read(0.1))
    assert peer.answer(0.2, Refused(1), FlushAck(token)) == [FlushDone(request, False)]
    assert link.counters.refused_events == 1


def test_a_heartbeat_goes_out_after_heartbeat_s_with_nothing_sent() -> None:
    link, _ = make_link(heartbeat_s=5.0)
    peer = Peer(link)
    peer.connect(0.0)
    peer.welcome(0.0)
    assert link.next_deadline() == 1.0  # connected: the timer runs at least every second
    link.timer(4.9)
    assert peer.read(4.9) == []
    link.timer(5.0)
    assert peer.read(5.0) == [Flush(0)]
    link.timer(9.9)
    assert peer.read(9.9) == []


def test_a_reconnect_sends_the_whole_session_again_before_the_events_still_queued() -> None:
    link, encoder, peer = welcomed_and_sent("first")
    link.enqueue(events(encoder, "second"), now=0.2)  # queued, not sent, when the connection breaks
    assert link.connection_lost("send failed: broken pipe", 0.3)[0] == Close()
    assert link.counters.dropped_events == 0 and link.queued_events == 1
    assert link.counters.unacknowledged_events == 1  # "first": sent, never acknowledged
    now = link.next_deadline()
    peer.connect(now)
    frames = peer.welcome(now)
    strings = {text for frame in frames if isinstance(frame, Strings) for text in frame.strings}
    assert {"first", "second"} <= strings  # every string again, not only those not yet sent
    assert Track(MAIN.track_id, MAIN.kind, MAIN.name, MAIN.thread_id) in frames
    assert isinstance(frames[-1], Events) and frames[-1].count == 1
    assert link.counters.connects == 2 and link.counters.sent_events == 2


def test_a_frame_cut_short_by_a_break_is_dropped_and_counted() -> None:
    link, encoder, _ = welcomed_and_sent("a")
    link.enqueue(events(encoder, "a", "a", "a"), now=0.2)  # a known track and label: an EVENTS frame alone
    assert link.data_to_send() is not None
    link.sent(1, 0.2)  # one byte of it went out
    link.connection_lost("send failed", 0.2)
    assert (link.counters.dropped_events, link.counters.dropped_frames, link.queued_events) == (3, 1, 0)
    assert link.counters.sent_events == 1


def test_frames_queued_behind_each_other_go_out_in_one_gathered_send_within_its_bytes() -> None:
    link, encoder, peer = welcomed_and_sent("a")
    frames = [events(encoder, *["a"] * count) for count in (1, 2, 3, 4)]  # EVENTS frames alone: known labels
    for batch in frames:
        link.enqueue(batch, now=0.2)
    sizes = [len(frame) for batch in frames for frame, _ in batch.events]
    assert [len(buffer) for buffer in link.buffers_to_send(sum(sizes[:3]))] == sizes[:3]  # the fourth is past it
    buffers = link.buffers_to_send(sum(sizes))
    assert [len(buffer) for buffer in buffers] == sizes
    data = b"".join(bytes(buffer) for buffer in buffers)
    link.sent(sizes[0] + sizes[1] + 1, 0.2)  # two frames and a byte of the third went out
    assert link.counters.sent_events == 1 + 1 + 2 and link.queued_events == 3 + 4
    assert [len(buffer) for buffer in link.buffers_to_send(0)] == [sizes[2] - 1]  # the rest of the third, alone
    rest = link.buffers_to_send(1 << 20)
    assert [len(buffer) for buffer in rest] == [sizes[2] - 1, sizes[3]]
    link.sent(sum(len(buffer) for buffer in rest), 0.3)
    assert link.counters.sent_events == 1 + 1 + 2 + 3 + 4 and link.queued_events == 0
    assert link.buffers_to_send(1 << 20) == []
    peer.reader.receive_data(data)
    assert [frame.count for frame in peer.reader if isinstance(frame, Events)] == [1, 2, 3, 4]


def test_a_gathered_send_before_the_welcome_is_the_hello_alone() -> None:
    link, encoder = make_link()
    link.enqueue(events(encoder, "early"), now=0.0)
    Peer(link).connect(0.0)
    buffers = link.buffers_to_send(1 << 20)
    assert len(buffers) == 1 and bytes(buffers[0]).startswith(preamble())


def test_events_sent_and_never_acknowledged_make_the_flush_waiting_false_on_the_next_connection() -> None:
    link, encoder = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    peer.welcome(0.0)
    link.enqueue(events(encoder, "a", "b"), now=0.1)
    request = link.request_flush(deadline=10.0)
    link.timer(0.1)
    (first_token,) = flush_tokens(peer.read(0.1))
    lost = link.connection_lost("receive failed", 0.2)
    assert "2 events sent before the connection to collector:7700 broke" in logged(lost, logging.WARNING)[0]
    assert link.counters.unacknowledged_events == 2
    now = link.next_deadline()
    peer.connect(now)
    frames = peer.welcome(now)  # the flush is asked again, with a new token
    assert [frame.unacknowledged_events for frame in frames if isinstance(frame, Stats)] == [2]
    link.timer(now)
    (token,) = flush_tokens(peer.read(now))
    assert token != first_token
    assert peer.answer(now, FlushAck(token)) == [FlushDone(request, False)]


def test_the_collectors_flush_is_answered_behind_what_the_sweep_queued_and_reading_goes_on() -> None:
    link, encoder = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    peer.welcome(0.0)
    assert peer.answer(0.1, Flush(42), SetPriority("debug")) == [AnswerFlush()]  # stops there until swept
    link.enqueue(events(encoder, "swept"), now=0.1)  # what the sweep hands over
    assert link.swept(0.1) == [Prioritize(SetPriority("debug"))]
    frames = peer.read(0.1)
    types = [type(frame) for frame in frames]
    assert types[-3:] == [Events, Flush, FlushAck] and frames[-1] == FlushAck(42)  # its own ack asked for first


def test_without_a_flush_waiting_the_link_asks_for_acknowledgements_every_second_while_events_go_out() -> None:
    link, encoder = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    peer.welcome(0.0)
    link.enqueue(events(encoder, "a"), now=0.5)
    link.timer(1.0)
    (token,) = flush_tokens(peer.read(1.0))
    link.timer(1.5)
    assert flush_tokens(peer.read(1.5)) == []  # asked a second ago
    link.timer(2.5)
    assert flush_tokens(peer.read(2.5)) == []  # nothing new to acknowledge
    peer.answer(2.6, FlushAck(token))
    link.connection_lost("receive failed", 3.0)
    assert link.counters.unacknowledged_events == 0  # the collector had said it stored them


def test_a_flush_does_not_wait_for_the_backoff_and_gives_up_at_its_deadline() -> None:
    link, _ = make_link(backoff_initial_s=1.0, backoff_max_s=1.0)
    assert link.timer(0.0) == [Connect()]
    link.connect_failed("connection refused", 0.0)
    request = link.request_flush(deadline=0.5)
    assert link.timer(0.1) == [Connect()]  # at once, not at 1.0
    link.connect_failed("connection refused", 0.1)
    assert link.next_deadline() == pytest.approx(0.35)  # while a flush waits, attempts are 0.25 s apart at most
    assert FlushDone(request, False) in link.timer(0.5)


def test_a_connection_waits_for_its_welcome_as_long_as_it_lasts() -> None:
    link, _ = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    assert link.timer(3600.0) == [] and link.state is LinkState.HANDSHAKE


def test_a_peer_that_is_not_a_collector_is_left_at_once_and_retried_slowly() -> None:
    link, _ = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    actions = link.received(b"HTTP/1.1 400 Bad Request\r\n\r\n", 0.1)
    assert Close() in actions and link.state is LinkState.IDLE
    warning = logged(link.timer(0.1), logging.WARNING)
    assert len(warning) == 1 and "HTTP port" in warning[0]
    assert link.next_deadline() == pytest.approx(1.1)


def test_a_welcome_naming_a_version_the_link_does_not_speak_closes_the_connection() -> None:
    link, _ = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    peer.read(0.0)
    actions = peer.answer(0.1, Welcome(99, 1 << 20, 1000, 1000, 1000, "future"))
    assert Close() in actions and not link.welcomed
    assert "chose protocol version 99" in logged(actions, logging.DEBUG)[0]


def test_control_frames_piling_up_for_a_collector_that_does_not_read_drop_the_queue_and_reconnect() -> None:
    link, encoder = make_link(max_queue_bytes=64)
    peer = Peer(link)
    peer.connect(0.0)
    peer.welcome(0.0)
    for i in range(40):  # a new thread each time: a TRACK frame each, never read
        link.enqueue(events(encoder, track=TrackInfo(100 + i, THREAD_TRACK, f"thread {i}", i)), now=0.1)
    assert link.next_deadline() == float("-inf")  # at once
    actions = link.timer(0.1)
    assert Close() in actions and link.state is LinkState.IDLE
    assert "for a collector that does not read; dropped 0 queued events" in logged(actions, logging.WARNING)[0]


def test_events_queued_behind_a_large_prefix_do_not_reset_the_connection() -> None:
    # Only control frames piling up mean a collector that does not read: a prefix larger than the queue (a big
    # string table, sent on every connection) followed by events must not reconnect for ever.
    link, encoder = make_link(max_queue_bytes=4096)
    labels = [f"{i:03d}" + "x" * 97 for i in range(200)]
    link.enqueue(events(encoder, *labels), now=0.0)  # too large for the queue: dropped, its strings declared
    peer = Peer(link)
    peer.connect(0.0)
    assert peer.read(0.0) == [HELLO]
    peer.answer(0.1, WELCOME)  # the prefix (about 20 KB of strings) is queued, not yet taken
    link.enqueue(events(encoder, labels[0]), now=0.2)  # EVENTS only: no new control frame
    actions = link.timer(0.2)
    assert Close() not in actions and link.state is LinkState.WELCOMED


def test_stopping_closes_the_connection_and_answers_every_waiting_flush_false() -> None:
    link, _ = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    waiting = link.request_flush(deadline=10.0)
    assert link.stop(0.1) == [Close(), FlushDone(waiting, False)]
    assert link.state is LinkState.STOPPED and link.next_deadline() == float("inf")


# -- a full string table starts again (string epochs) ----------------------------------------------------------------


def labels_sent(frames: list[Frame]) -> list[list[str]]:
    """The labels of each EVENTS frame among ``frames``, read with the STRINGS frames before it (a reset included)."""
    table: dict[int, str] = {}
    labels = []
    for frame in frames:
        if isinstance(frame, Strings):
            if frame.reset:
                table = {}
            table.update(enumerate(frame.strings, frame.first_id))
        elif isinstance(frame, Events):
            names = msgpack.unpackb(frame.payload)[1]
            labels.append([table[name] for name in names])
    return labels


RECYCLING = replace(WELCOME, max_strings=5, string_resets=True)  # 4 labels an epoch, the last id the overflow label's


def test_a_full_string_table_starts_again_in_order_with_what_was_queued_before() -> None:
    link, encoder = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    peer.welcome(0.0, RECYCLING)
    link.enqueue(events(encoder, "a", "b", "c"), now=0.1)
    link.enqueue(events(encoder, "d", "e"), now=0.1)  # "e" does not fit: the table starts again
    frames = peer.read(0.1)
    assert labels_sent(frames) == [["a", "b", "c"], ["d", "e"]]
    assert Strings(0, (), reset=True) in frames and encoder.label_overflow_events == 0


def test_frames_of_an_earlier_epoch_still_queued_at_a_reconnect_are_packed_again_in_the_current_one() -> None:
    link, encoder = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    peer.welcome(0.0, RECYCLING)
    link.enqueue(events(encoder, "a", "b"), now=0.1)
    link.enqueue(events(encoder, "c", "d", "e"), now=0.1)  # epoch 1: "c", "d", "e"; nothing sent yet
    assert link.connection_lost("send failed: broken pipe", 0.2)[0] == Close()
    now = link.next_deadline()
    peer.connect(now)
    frames = peer.welcome(now, RECYCLING)
    # The prefix holds epoch 1's table: "a" and "b" fill it and it starts again, and so it does for "e" later on.
    assert labels_sent(frames) == [["a", "b"], ["c", "d", "e"]]
    assert sum(1 for frame in frames if isinstance(frame, Strings) and frame.reset) == 2
    assert encoder.label_overflow_events == 0 and link.counters.dropped_events == 0
    link.enqueue(events(encoder, "f"), now=now)
    assert labels_sent(peer.read(now)) == [["f"]]
    assert encoder.strings.retired == {}  # nothing queued needs an earlier epoch's strings any more


def test_a_collector_that_does_not_take_resets_gets_the_overflow_label_as_before() -> None:
    link, encoder = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    peer.welcome(0.0, replace(RECYCLING, string_resets=False))
    link.enqueue(events(encoder, "a", "b", "c"), now=0.1)
    link.enqueue(events(encoder, "d", "e"), now=0.1)
    frames = peer.read(0.1)
    assert labels_sent(frames) == [["a", "b", "c"], ["d", OVERFLOW_LABEL]]
    assert not any(isinstance(frame, Strings) and frame.reset for frame in frames)
    assert encoder.label_overflow_events == 1


def test_frames_packed_with_the_overflow_id_are_packed_again_when_a_reconnect_lowers_the_limit() -> None:
    link, encoder = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    # room for 10 bytes of labels (the overflow label's 30 kept apart): "ccccc" gets the overflow id, 99
    peer.welcome(0.0, replace(WELCOME, max_strings=100, max_string_bytes=40))
    link.enqueue(events(encoder, "aaaaa", "bbbbb", "ccccc"), now=0.1)
    assert link.connection_lost("send failed: broken pipe", 0.2)[0] == Close()  # nothing of it sent
    now = link.next_deadline()
    peer.connect(now)
    frames = peer.welcome(now, replace(WELCOME, max_strings=5, max_string_bytes=40))  # the overflow id is now 4
    assert labels_sent(frames) == [["aaaaa", "bbbbb", OVERFLOW_LABEL]]


# -- losses while the collector is reachable are said -----------------------------------------------------------------


def test_events_dropped_or_refused_while_connected_are_warned_of_at_once_then_at_most_once_a_minute() -> None:
    link, _ = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    peer.welcome(0.0)
    assert logged(link.timer(1.0), logging.WARNING) == []  # nothing lost: nothing said
    link.counters.dropped_events += 1_000  # a thread's buffer was full (the listener counts it so)
    (said,) = logged(link.timer(2.0), logging.WARNING)
    assert "1,000 events dropped" in said and "max_buffered_events" in said and "since" not in said
    link.counters.dropped_events += 5
    peer.answer(2.5, Refused(7))
    assert logged(link.timer(3.0), logging.WARNING) == []  # within the minute: counted, not said again
    (said,) = logged(link.timer(62.0), logging.WARNING)
    assert "5 events dropped" in said and f"the collector at {ADDRESS} could not store 7 events" in said
    assert "since the last warning" in said
    assert logged(link.timer(200.0), logging.WARNING) == []  # nothing new


def test_while_delivery_is_out_the_outage_warning_counts_the_drops_alone() -> None:
    link, _ = make_link()
    peer = Peer(link)
    peer.connect(0.0)
    peer.welcome(0.0)
    link.connection_lost("send failed: broken pipe", 1.0)
    link.counters.dropped_events += 50
    warnings = [w for now in (2.0, 3.5, 5.0) for w in logged(link.timer(now), logging.WARNING)]
    assert warnings and all("events dropped:" not in w for w in warnings)


def test_at_exit_an_attempt_that_finds_nothing_listening_is_the_last_and_answers_the_flush_at_once() -> None:
    link, encoder = make_link()
    link.enqueue(events(encoder, "a"), now=0.0)
    assert link.timer(0.0) == [Connect()]
    link.connect_failed("connection to collector:7700 refused", 0.0, nobody=True)  # before exit: retried as ever
    assert Connect() in link.timer(0.1)
    link.connect_failed("connection to collector:7700 refused", 0.1, nobody=True)
    link.exit.begin()
    request = link.request_flush(deadline=11.0)
    assert link.timer(0.2) == [Connect()]  # the flush does not wait for the backoff: one attempt, at once
    answered = link.connect_failed("connection to collector:7700 refused", 0.2, nobody=True)
    assert FlushDone(request, False) in answered and Connect() not in link.timer(0.5)
    assert link.exit.gave_up == "connection to collector:7700 refused"
    later = link.timer(5.0)  # no attempt after, and no outage warning: the streamer's line at close says it
    assert Connect() not in later and logged(later, logging.WARNING) == []
    assert link.outage.unsaid == "connection to collector:7700 refused"  # (for that line to say)
    assert link.queued_events == 1  # still queued: closing counts it


def test_at_exit_a_flush_asked_for_while_an_attempt_is_under_way_is_answered_when_it_finds_nothing() -> None:
    link, _ = make_link()
    link.exit.begin()
    assert link.timer(0.0) == [Connect()]
    request = link.request_flush(deadline=10.0)
    failed = link.connect_failed("refused", 0.0, nobody=True)
    assert FlushDone(request, False) in failed + link.timer(0.0)


def test_at_exit_a_collector_that_is_there_but_slow_keeps_the_whole_timeout() -> None:
    link, _ = make_link()
    link.exit.begin()
    request = link.request_flush(deadline=10.0)
    assert Connect() in link.timer(0.0)
    link.connect_failed("connecting to collector:7700 timed out after 5s", 0.0)  # (not "nothing listens")
    assert Connect() in link.timer(0.25)  # a flush waits: tried again soon
    peer = Peer(link)
    assert link.connected(0.3, HELLO) == []
    assert peer.read(0.3) == [HELLO]
    assert FlushDone(request, False) not in link.timer(9.9)  # no WELCOME yet: waits to its deadline
    assert FlushDone(request, False) in link.timer(10.0)
    assert link.exit.gave_up == ""


def test_at_exit_each_collector_of_several_gets_its_one_attempt() -> None:
    link = Link("c1:7700,c2:7700", StreamerOptions(backoff_initial_s=0.1), StreamEncoder(), jitter=lambda: 1.0)
    link.exit.begin()
    request = link.request_flush(deadline=10.0)
    assert Connect() in link.timer(0.0)
    assert FlushDone(request, False) not in link.connect_failed("c1 refused", 0.0, nobody=True)
    assert Connect() in link.timer(0.1)
    assert FlushDone(request, False) in link.connect_failed("c2 refused", 0.1, nobody=True)
    assert link.exit.gave_up == "c2 refused"


def test_nothing_listens_where_the_connection_is_refused_or_the_host_unreachable_not_where_it_times_out() -> None:
    with socket.socket() as sock:  # a real refusal: a port bound, then closed
        sock.bind(("127.0.0.1", 0))
        address = sock.getsockname()
    with pytest.raises(OSError) as refused:
        socket.create_connection(address, timeout=5).close()
    assert nothing_listens(refused.value)
    assert nothing_listens(OSError(errno.ENETUNREACH, "Network is unreachable"))
    assert nothing_listens(OSError(errno.EHOSTUNREACH, "No route to host"))
    assert not nothing_listens(TimeoutError("timed out"))  # there, perhaps, and slow: the whole exit timeout
    assert not nothing_listens(socket.gaierror(socket.EAI_NONAME, "Name or service not known"))


def test_a_failed_pass_loses_what_was_in_flight_counted_as_an_internal_error_and_the_next_connection_reports_it() -> (
    None
):
    link, encoder, peer = welcomed_and_sent("sent")
    link.enqueue(events(encoder, "queued", "queued too"), now=0.2)
    assert link.buffers_to_send(64)  # (part of the first queued frame goes out: the frame going out is lost too)
    link.sent(16, 0.2)
    lost, actions = lose_in_flight(link, "the streamer's pass failed: ValueError: bug", 0.3)
    assert lost == 2 and Close() in actions
    assert logged(link.timer(0.3), logging.WARNING) == []  # (not "recorded faster than they could be sent")
    assert link.counters.internal_error_events == 2 and link.counters.dropped_events == 2
    assert link.state is LinkState.IDLE and link.queued_events == 0
    assert link.next_deadline() > 0.3  # the next attempt waits for the backoff
    now = link.next_deadline()
    peer.connect(now)
    reported = [frame for frame in peer.welcome(now) if isinstance(frame, Stats)]
    assert [(stats.dropped_events, stats.internal_error_events) for stats in reported] == [(2, 2)]


@pytest.mark.parametrize("connecting", [True, False])
def test_a_pass_that_fails_with_no_connection_or_while_connecting_waits_for_the_backoff(connecting: bool) -> None:
    link, encoder = make_link()
    link.enqueue(events(encoder, "a"), now=0.0)
    if connecting:
        assert link.timer(0.0) == [Connect()]
    lost, actions = lose_in_flight(link, "the streamer's pass failed: ValueError: bug", 0.0)
    assert (lost, link.counters.internal_error_events, link.state) == (1, 1, LinkState.IDLE)
    assert Connect() not in actions
    if connecting:  # the attempt failed: the next waits for the backoff (without one, the thread's wait is it)
        assert link.timer(0.05) == [] and link.timer(link.next_deadline()) == [Connect()]
