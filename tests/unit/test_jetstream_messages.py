"""The JetStream store's messages, without a cluster: subjects, what a sealed segment's message says, and what a
reader of the stream makes of the messages it finds (the accounting when the stream's limits removed some). The real
cluster is in ``tests/integration/test_jetstream.py``."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from ringtrace.collector.jetstream import fleet
from ringtrace.collector.jetstream.envelope import CLEARED, COUNTS, EVENTS, MSG_ID, Envelope, cleared_header
from ringtrace.collector.jetstream.fleet import StoredMessage, fetch, read_fleet
from ringtrace.collector.jetstream.fleet_counts import fleet_totals
from ringtrace.collector.jetstream.heartbeats import Heartbeat, Liveness, ProcessLiveness
from ringtrace.collector.jetstream.publisher import Publisher, message_segment_bytes
from ringtrace.collector.jetstream.subjects import (
    MAX_TOKEN_BYTES,
    process_of_subject,
    process_subject,
    subject_filter,
    subject_token,
)
from ringtrace.collector.store.accounts import Counts
from ringtrace.collector.store.processes import Registry
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.wire.handshake_frames import Hello
from store_client import Client


def test_a_subject_token_holds_only_what_a_token_may_and_tells_hosts_apart() -> None:
    hosts = ["web-1.example.com", "web-1_example_com", "a~2E", "a b", "", "*", ">", "naïve"]
    tokens = [subject_token(host) for host in hosts]
    assert len(set(tokens)) == len(hosts)
    for token in tokens:
        assert token and all(c.isascii() and (c.isalnum() or c in "_-~") for c in token), token
    assert process_subject("ringtrace", "h.x", 42, "ab.cd") == "ringtrace.h~2Ex.42.ab~2Ecd"
    for host in hosts:
        assert process_of_subject(process_subject("ringtrace", host, 7, "i-1")) == (host, 7, "i-1")


def test_a_text_too_long_for_a_subject_token_is_a_short_digest_distinct_from_every_written_out_token() -> None:
    longest = "\U0001f600" * 256  # (the longest host a HELLO may give: 1024 bytes, 3072 escaped)
    near = ["\U0001f600" * 255 + "x", "a" * MAX_TOKEN_BYTES, "a" * (MAX_TOKEN_BYTES + 1), "~~"]
    tokens = [subject_token(text) for text in (longest, *near)]
    assert len(set(tokens)) == len(tokens)
    for token in tokens:
        assert 0 < len(token) <= MAX_TOKEN_BYTES and all(c.isascii() and (c.isalnum() or c in "_-~") for c in token)
    subject = process_subject("ringtrace", longest, 7, longest)
    assert len(subject) < 1024
    assert subject_filter("ringtrace", host=longest, pid=7).removesuffix("*") in subject


class FakeStream:
    """What the publisher sends, kept as a stream would keep it: once per message id."""

    def __init__(self) -> None:
        self.messages: list[StoredMessage] = []
        self.ids: set[str] = set()

    async def publish(self, subject: str, payload: bytes = b"", timeout: float | None = None,
                      stream: str | None = None, headers: dict[str, Any] | None = None) -> None:  # fmt: skip
        assert headers is not None
        if headers[MSG_ID] not in self.ids:
            self.ids.add(headers[MSG_ID])
            self.messages.append(StoredMessage(len(self.messages) + 1, subject, dict(headers), payload))


def published(events_per_segment: list[int]) -> tuple[Store, list[StoredMessage]]:
    """A process's segments of ``events_per_segment`` events each, sealed and published; the store and the
    messages."""

    async def run() -> tuple[Store, list[StoredMessage]]:
        store = Store(64 * 1024 * 1024, 1024 * 1024, policy="discard")
        registry = Registry()
        uid = registry.known(Hello(100, "host", "proc-i1", "i1", "boot", 1, 2, "test")).uid
        stream = FakeStream()
        publisher = Publisher(store, registry, "ringtrace", "c0", 1024 * 1024)
        task = asyncio.get_running_loop().create_task(publisher.run(stream))
        client = Client(store, uid, tracks=1)
        for events in events_per_segment:
            client.record(0, events)
            store.end_segment(client.stream)
        await publisher.settled(client.stream)
        task.cancel()
        return store, stream.messages

    return asyncio.run(run())


def test_each_sealed_segment_is_one_message_that_says_whose_and_how_many_and_leaves_the_collector() -> None:
    store, messages = published([10, 20, 30])
    assert [int(m.headers[EVENTS]) for m in messages] == [10, 20, 30]  # type: ignore[index]
    assert len({m.headers[MSG_ID] for m in messages}) == 3  # type: ignore[index]
    assert {m.subject for m in messages} == {"ringtrace.host.100.i1"}
    # Published: nothing is held here any more, and all of it still counts stored.
    assert store.segment_count == 0 and store.totals().stored_events == 60
    envelope = Envelope.read(messages[-1].headers)
    assert envelope is not None and sum(c.received_events for c in envelope.counts.values()) == 60
    assert COUNTS in messages[0].headers  # type: ignore[operator]


def test_a_segment_grows_to_the_largest_power_of_two_a_message_within_the_servers_max_payload_holds() -> None:
    assert message_segment_bytes(1024 * 1024) == 512 * 1024  # (nats-server's default max_payload)
    assert message_segment_bytes(8 * 1024 * 1024) == 4 * 1024 * 1024
    assert message_segment_bytes(1000) == MIN_SEGMENT_BYTES
    store = Store(16 * 1024 * 1024, 512 * 1024, policy="discard")
    store.set_segment_bytes(4 * 1024 * 1024)
    assert store.segment_bytes == 4 * 1024 * 1024
    store.set_segment_bytes(64 * 1024 * 1024)  # (never past half the buffer, as at start)
    assert store.segment_bytes == 8 * 1024 * 1024


def test_a_reader_counts_what_the_stream_no_longer_holds_as_overwritten() -> None:
    _, messages = published([10, 20, 30])
    fleet = read_fleet(messages[1:])  # the stream's limits removed the oldest
    (counts,) = fleet.counts.values()
    assert counts.received_events == 60 and counts.stored_events == 50 and counts.overwritten_events == 10
    assert fleet.store.totals().stored_events == 50


def test_a_reader_takes_each_collectors_messages_in_the_order_it_sealed_them() -> None:
    _, messages = published([1, 2, 3])
    fleet = read_fleet([messages[2], messages[0], messages[1]])  # a retried publish stored after later ones
    snapshot = fleet.store.snapshot()
    assert [segment.events for segment in snapshot.segments] == [1, 2, 3]
    snapshot.close()


def test_a_reader_counts_what_a_note_says_was_purged_as_cleared_not_overwritten() -> None:
    _, messages = published([10, 20, 30])
    (((_, track), purged),) = read_fleet(messages[:1]).store.track_counts().items()
    headers = {CLEARED: cleared_header({track: (10, purged.received_bytes)}), MSG_ID: "c0.clear.1"}
    note = StoredMessage(99, messages[0].subject, headers, b"")
    fleet = read_fleet([*messages[1:], note])
    (counts,) = fleet.counts.values()
    assert counts.received_events == 60 and counts.stored_events == 50
    assert counts.cleared_events == 10 and counts.overwritten_events == 0
    assert counts.cleared_bytes == purged.received_bytes and counts.overwritten_bytes == 0


def test_a_process_forgotten_by_its_collector_and_back_keeps_the_counts_of_its_first_record() -> None:
    async def run() -> list[StoredMessage]:
        store = Store(64 * 1024 * 1024, 1024 * 1024, policy="discard")
        registry = Registry()
        hello = Hello(100, "host", "proc-i1", "i1", "boot", 1, 2, "test")
        stream = FakeStream()
        publisher = Publisher(store, registry, "ringtrace", "c0", 1024 * 1024)
        task = asyncio.get_running_loop().create_task(publisher.run(stream))
        first = registry.known(hello)
        client = Client(store, first.uid, tracks=1)
        for events in (10, 20, 30):
            client.record(0, events)
            store.end_segment(client.stream)
        await publisher.settled(client.stream)
        store.close_stream(client.stream)
        registry.forget(first)  # idle past --forget-after, nothing held here: it comes back as a new record
        again = Client(store, registry.known(hello).uid, tracks=1, instance="i1")  # (the same process)
        again.record(0, 10)
        store.end_segment(again.stream)
        await publisher.settled(again.stream)
        task.cancel()
        return stream.messages

    messages = asyncio.run(run())
    assert len({m.subject for m in messages}) == 1 and len(messages) == 4
    fleet = read_fleet(messages[1:])  # the stream's limits removed the oldest, of the first record
    counts = Counts()
    for track_counts in fleet.counts.values():  # (the test client names its tracks after its record)
        counts.add(track_counts)
    assert counts.received_events == 70 and counts.stored_events == 60 and counts.overwritten_events == 10


def test_the_fleet_counts_from_headers_alone_are_what_the_messages_read_whole_say() -> None:
    _, messages = published([10, 20, 30])
    ((_, track),) = read_fleet(messages[:1]).store.track_counts()
    note = StoredMessage(99, messages[0].subject, {CLEARED: cleared_header({track: (4, 40)}), MSG_ID: "c0.n"}, b"")
    kept = [*messages[2:], note]  # the oldest overwritten, the next one purged (its note says 4 of 10, say)
    whole = Counts()
    for counts in read_fleet(kept).counts.values():
        whole.add(counts)
    headers_only = [StoredMessage(m.stream_seq, m.subject, m.headers, b"") for m in kept]
    (process,) = fleet_totals(headers_only)
    assert (process.host, process.pid, process.instance, process.name) == ("host", 100, "i1", "proc-i1")
    assert process.counts == whole
    assert whole.received_events == 60 and whole.stored_events == 30 and whole.cleared_events == 4


class _CutShort:
    """Stands in for nats-py's JetStream context: the stream holds 3 messages; ``first`` of them are delivered (1 or
    0), then none comes for ``stall`` waits (for ever if None), then the rest. ``stored``: whether the stream still
    holds the rest (else its limits removed them meanwhile); ``lost``: its API stops answering after the first
    ``stream_info`` (the cluster went away mid-read); ``deleted``: the stream is deleted after it (its consumer
    with it); ``late``: the rest were sent as the stall began, and are still on their way to the subscription when
    its consumer is asked about them (none pending there: reach the subscription's queue as it answers);
    ``replaced``: the consumer is being replaced (an ordered consumer after missed heartbeats) while it stalls."""

    def __init__(
        self, *, lost: bool = False, stored: bool = True, stall: int | None = None, first: int = 1,
        deleted: bool = False, late: bool = False, replaced: bool = False,
    ) -> None:  # fmt: skip
        self.lost, self.stored, self.stall, self.first, self.deleted = lost, stored, stall, first, deleted
        self.late, self.replaced, self.asked = late, replaced, 0

    def _answering(self) -> None:
        from nats.js.errors import NotFoundError

        self.asked += 1
        if self.lost and self.asked > 1:
            raise TimeoutError("no responders")
        if self.deleted and self.asked > 1:
            raise NotFoundError(code=404, err_code=10059, description="stream not found")

    async def stream_info(self, name: str, subjects_filter: str | None = None) -> Any:
        self._answering()
        return SimpleNamespace(state=SimpleNamespace(messages=3, bytes=300, subjects={"ringtrace.h.1.i": 3}))

    async def subscribe(self, subject: str, **options: Any) -> Any:
        return _Subscription(self)


class _Subscription:
    """``_CutShort``'s ordered consumer's subscription."""

    def __init__(self, js: _CutShort) -> None:
        self.js, self.stalls, self.read = js, js.stall, 0
        self.queue = [self._message(seq) for seq in range(js.first, 0, -1)]

    @staticmethod
    def _message(seq: int) -> Any:
        return SimpleNamespace(
            subject="ringtrace.h.1.i", headers={}, data=b"x",
            metadata=SimpleNamespace(sequence=SimpleNamespace(stream=seq), num_pending=3 - seq),
        )  # fmt: skip

    @property
    def pending_msgs(self) -> int:
        return len(self.queue)

    def _the_rest(self) -> None:
        self.stalls = None
        self.queue.extend(self._message(seq) for seq in range(3, self.read, -1))

    async def next_msg(self, timeout: float) -> Any:
        if self.queue:
            self.read += 1
            return self.queue.pop()
        if self.stalls is not None and self.stalls <= 0 and self.js.stored and not self.js.late:
            self._the_rest()
            return await self.next_msg(timeout)
        if self.stalls is not None:
            self.stalls -= 1
        raise TimeoutError

    async def consumer_info(self) -> Any:
        from nats.js.errors import NotFoundError

        self.js._answering()
        if self.js.replaced and self.stalls:
            raise NotFoundError(code=404, err_code=10014, description="consumer not found")
        if self.js.late and self.stalls is not None and self.js.stored:  # sent as the stall began: on their way
            self._the_rest()
            return SimpleNamespace(num_pending=0, delivered=SimpleNamespace(stream_seq=3))
        pending = 3 - self.read if self.js.stored else 0
        return SimpleNamespace(num_pending=pending, delivered=SimpleNamespace(stream_seq=self.read))

    async def unsubscribe(self) -> None:
        pass


def read(js: _CutShort) -> list[int]:
    return [m.stream_seq for m in asyncio.run(fetch(js, "ringtrace", "ringtrace.>"))]


def test_a_read_cut_short_by_a_lost_cluster_or_a_deleted_stream_is_refused_not_served_as_the_whole_stream() -> None:
    with pytest.raises(ConnectionError, match="stopped answering while it was read: TimeoutError"):
        read(_CutShort(lost=True))
    with pytest.raises(ConnectionError, match="stopped answering while it was read: NotFoundError"):
        read(_CutShort(deleted=True))
    # The messages still pending were removed by the stream's limits meanwhile: what it holds was read.
    assert read(_CutShort(stored=False)) == [1]
    assert read(_CutShort(stored=False, first=0)) == []


@pytest.mark.parametrize("first", [1, 0], ids=["after the first", "before the first"])
def test_a_read_waits_for_messages_sent_and_not_there_yet_and_for_a_consumer_being_replaced(first: int) -> None:
    """Messages the consumer sent as a wait ran out are none of its ``num_pending`` (they reach the subscription as
    it answers): what it delivered past the last one read says they come; and a consumer being replaced (not found
    meanwhile) is a stall, not a stream gone."""
    assert read(_CutShort(stall=1, first=first, late=True)) == [1, 2, 3]
    assert read(_CutShort(stall=2, first=first, replaced=True)) == [1, 2, 3]


@pytest.mark.parametrize("first", [1, 0], ids=["after the first", "before the first"])
def test_a_read_whose_delivery_stalls_waits_for_the_messages_the_stream_still_holds(
    monkeypatch: pytest.MonkeyPatch, first: int
) -> None:
    """A stall longer than the wait for the next message (servers starved of CPU, say), before the first message or
    after one, is no end of the stream: the read goes on while its consumer has messages to deliver, and is refused
    after ``MAX_STALL_S`` of such waits in all."""
    monkeypatch.setattr(fleet, "MAX_STALL_S", 3 * fleet.NEXT_MESSAGE_TIMEOUT_S)  # (the fake's waits take no time)
    assert read(_CutShort(stall=2, first=first)) == [1, 2, 3]
    after = "after sequence 1" if first else "from the first on"
    with pytest.raises(ConnectionError, match=f"held messages it did not deliver \\({after}\\)"):
        read(_CutShort(stall=3, first=first))


def heartbeat_message(seq: int, data: bytes) -> StoredMessage:
    return StoredMessage(seq, f"ringtrace_collectors.c{seq}", None, data)


def test_a_process_is_connected_if_any_live_collectors_heartbeat_says_so_its_rate_their_sum() -> None:
    a = Heartbeat("a", 3, {"r.h.1.x": ProcessLiveness(1, (100.0, 2000.0)), "r.h.2.y": ProcessLiveness(2)})
    b = Heartbeat("b", 1, {"r.h.1.x": ProcessLiveness(1, (50.5, 1000.0))})
    messages = [heartbeat_message(k, heartbeat.encode(2**20)[0]) for k, heartbeat in enumerate((a, b))]
    liveness = Liveness.read([*messages, heartbeat_message(9, b"")])  # (an empty one: nothing)
    assert liveness.collectors == 2 and liveness.connections == 4
    assert liveness.of(["r.h.1.x"]) == ProcessLiveness(2, (150.5, 3000.0))
    assert liveness.of(["r.h.2.y"]) == ProcessLiveness(2, None)  # connected, its rate not known yet
    assert liveness.of(["r.h.3.z"]) == ProcessLiveness(0, None)  # connected to no live collector: gone


def test_a_heartbeat_past_the_max_payload_leaves_out_processes_and_says_how_many() -> None:
    heartbeat = Heartbeat("a", 100, {f"ringtrace.host.{pid}.i": ProcessLiveness(1, (1.0, 2.0)) for pid in range(100)})
    data, unlisted = heartbeat.encode(1000)
    assert len(data) <= 1000 and 0 < unlisted < 100
    read = Heartbeat.read(data)
    assert read is not None and len(read.processes) == 100 - unlisted and read.connections == 100
    assert heartbeat.encode(2**20) == (heartbeat.encode(2**20)[0], 0)


@pytest.mark.parametrize(
    "data",
    [
        b"garbage", b"[]", b'{"collector":"x"}', b'{"collector":"x","connections":-1,"processes":{}}',
        b'{"collector":"x","connections":1.5,"processes":{}}', b'{"collector":"x","connections":1,"processes":[]}',
        b'{"collector":"x","connections":1,"processes":{"s":[1,"fast",2]}}',
        b'{"collector":"x","connections":1,"processes":{"s":[1,1e400,2]}}',
        b'{"collector":"x","connections":1,"processes":{"s":[1,2]}}', b"\xff\xfe", b"[" * 100_000,
    ],
)  # fmt: skip
def test_what_is_no_heartbeat_on_the_heartbeat_subjects_is_skipped(data: bytes) -> None:
    assert Heartbeat.read(data) is None
    assert Liveness.read([heartbeat_message(1, data)]).collectors == 0
