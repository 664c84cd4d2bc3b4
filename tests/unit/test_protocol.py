"""The sans-I/O wire format, version 2: frame encoding, frame bodies, and the stream reader (framing only).

The rules of a stream (frame order, tables, limits) are tested in ``test_session.py``.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Literal

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.wire.errors import (
    BadPreamble,
    ConfigError,
    FrameTooLarge,
    MalformedFrame,
    ProtocolError,
    TornStream,
    UnexpectedFrame,
    UnsupportedVersion,
)
from ringtrace.wire.frame_types import (
    CHECKSUM_TYPE,
    DEFAULT_MAX_FRAME_BYTES,
    EVENT_COLUMNS,
    EVENTS_HEADER,
    FRAME_HEADER,
    IGNORABLE,
    MAGIC,
    MIN_MAX_FRAME_BYTES,
    PREAMBLE,
    PROTOCOL_VERSION,
    PROTOCOL_VERSIONS,
    STREAM_FORMAT,
    FrameType,
)
from ringtrace.wire.frames import (
    Events,
    Flush,
    FlushAck,
    Frame,
    Goodbye,
    Refused,
    SetPriority,
    Stats,
    encode,
    preamble,
    unpack_columns,
)
from ringtrace.wire.handshake_frames import Hello, Welcome
from ringtrace.wire.model import ASYNC_TRACK, BUILTIN_KINDS, SOURCE_TRACK, SPAN, THREAD_TRACK
from ringtrace.wire.reader import CLOSED, NEED_DATA, FrameReader
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.table_frames import KindSpec, Schema, Strings, Track

# Hypothesis must never turn slowness into a failure: these tests make no timing claims.
property_test = settings(deadline=None, max_examples=60)

Peer = Literal["client", "collector"]
PEERS: tuple[Peer, ...] = ("client", "collector")

HELLO = Hello(
    pid=4242,
    host="build-host",
    process_name="worker",
    instance_id="0123456789abcdef",
    boot_id="boot-1",
    monotonic_ns=123_456_789,
    wall_ns=1_700_000_000_000_000_000,
    client_version="0.2.0",
)
WELCOME = Welcome(
    protocol_version=PROTOCOL_VERSION,
    max_frame_bytes=DEFAULT_MAX_FRAME_BYTES,
    max_strings=100_000,
    max_tracks=10_000,
    max_kinds=1_000,
    collector_version="0.2.0",
)
#: The frame each peer sends right after its preamble.
FIRST_FRAME: dict[Peer, Frame] = {"client": HELLO, "collector": WELCOME}

HTTP_KIND = KindSpec(7, "http.request", "span", (("status", "u16"), ("path", "str")))
#: One of every frame a client sends after its HELLO.
CLIENT_FRAMES: list[Frame] = [
    Schema((*BUILTIN_KINDS, HTTP_KIND)),
    Strings(0, ("GET /", "db.query", "ünïcødé ✓")),
    Track(1, THREAD_TRACK, "MainThread", thread_id=777),
    Track(2, ASYNC_TRACK, "Task-1", parent=1),
    Events(1, 3, 10, 2**64 - 1, b"\x93\x00\x01\x02" * 20, flags=0xBEEF),
    Stats(
        dropped_events=5,
        dropped_frames=2,
        label_overflow_events=3,
        clipped_args=4,
        unacknowledged_events=6,
        internal_error_events=1,
    ),
    Flush(2**64 - 1),
    FlushAck(0),
    Goodbye("shutting down"),
    Stacks(0, (("main", "app.py", 1), ("work", "app.py", 9)), 0, ((None, 0), (0, 1))),
]
#: Every frame a collector sends after its WELCOME.
COLLECTOR_FRAMES: list[Frame] = [
    Flush(7),
    FlushAck(7),
    Goodbye("max_connections reached"),
    SetPriority("debug"),
    SetPriority("trace+", "engine"),
    Refused(12),
]
FRAMES_BY_PEER = {"client": CLIENT_FRAMES, "collector": COLLECTOR_FRAMES}
FRAME_CLASS = {frame.TYPE: type(frame) for frame in [*FIRST_FRAME.values(), *CLIENT_FRAMES, *COLLECTOR_FRAMES]}


# -- helpers -------------------------------------------------------------------------------------------------------


def opening(peer: Peer) -> bytes:
    """A preamble and the peer's first frame."""
    return preamble() + encode(FIRST_FRAME[peer])


def stream_of(peer: Peer, frames: Iterable[Frame]) -> bytes:
    return opening(peer) + b"".join(encode(frame) for frame in frames)


def raw_frame(frame_type: int, body: bytes) -> bytes:
    """A frame built by hand, so that its type and body can be anything."""
    return FRAME_HEADER.pack(len(body), frame_type) + body


def copy_in(reader: FrameReader, chunk: bytes) -> None:
    reader.receive_data(chunk)


def write_in(reader: FrameReader, chunk: bytes) -> None:
    """Deliver ``chunk`` the way asyncio's BufferedProtocol does: into views from ``get_buffer()``."""
    while chunk:
        with reader.get_buffer() as view:
            n = min(len(view), len(chunk))
            view[:n] = chunk[:n]
        reader.buffer_updated(n)
        chunk = chunk[n:]


Feed = Callable[[FrameReader, bytes], None]
FEEDERS = [pytest.param(copy_in, id="receive_data"), pytest.param(write_in, id="get_buffer")]


def read_stream(
    peer: Peer, chunks: Iterable[bytes], feed: Feed = copy_in, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> list[Frame]:
    """Every frame of a stream delivered in ``chunks``; the stream must then end cleanly."""
    reader = FrameReader(peer, max_frame_bytes)
    frames: list[Frame] = []
    for chunk in chunks:
        if chunk:  # an empty chunk would mean end of stream
            feed(reader, chunk)
            frames.extend(reader)
    reader.receive_data(b"")
    assert reader.next_frame() is CLOSED
    return frames


def reader_with(peer: Peer, data: bytes, *, eof: bool = False, **kwargs: Any) -> FrameReader:
    reader = FrameReader(peer, **kwargs)
    reader.receive_data(data)
    if eof:
        reader.receive_data(b"")
    return reader


def protocol_error(reader: FrameReader) -> ProtocolError:
    """The error the reader raises while draining its buffered frames (fails if it raises none)."""
    with pytest.raises(ProtocolError) as info:
        for _ in reader:
            pass
    return info.value


def names_number(error: Exception, number: int) -> bool:
    """Whether the error message mentions ``number`` as a whole number."""
    return re.search(rf"(?<!\d){number}(?!\d)", str(error)) is not None


def body_with(frame: Frame, **changes: Any) -> bytes:
    """A msgpack body of ``frame`` with fields replaced (or removed, for a value of ``...``)."""
    fields = msgpack.unpackb(frame.encode_body())
    fields.update(changes)
    return msgpack.packb({name: value for name, value in fields.items() if value is not ...})


def events_body(
    count: int,
    first_ts: int,
    last_ts: int,
    payload: bytes,
    *,
    header_size: int = EVENTS_HEADER.size,
    extra: bytes = b"",
) -> bytes:
    """An EVENTS body built by hand: the version-2 header, ``extra`` header bytes, the payload."""
    return EVENTS_HEADER.pack(header_size, 0, 1, count, first_ts, last_ts) + extra + payload


def events_frame_of_size(size: int) -> Events:
    """An EVENTS frame whose encoding is exactly ``size`` bytes."""
    return Events(1, 1, 0, 0, b"x" * (size - FRAME_HEADER.size - EVENTS_HEADER.size))


# -- strategies ----------------------------------------------------------------------------------------------------

texts = st.text(max_size=30)
u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
#: Integers in msgpack control-frame fields: the protocol caps them at 2**63 - 1.
fields = st.integers(0, 2**63 - 1)
#: A limit a WELCOME may state (at least 2).
limits = st.integers(2, 2**32 - 1)


@st.composite
def events_frames(draw: st.DrawFn) -> Events:
    payload = draw(st.binary(min_size=1, max_size=300))
    first_ts, last_ts = sorted(draw(st.tuples(u64, u64)))
    return Events(draw(u32), draw(st.integers(1, len(payload))), first_ts, last_ts, payload, draw(u16))


@st.composite
def hellos(draw: st.DrawFn) -> Hello:
    protocol_min, protocol_max = sorted(draw(st.tuples(u16, u16)))
    return Hello(
        pid=draw(u32),
        host=draw(texts),
        process_name=draw(texts),
        instance_id=draw(texts),
        boot_id=draw(texts),
        monotonic_ns=draw(fields),
        wall_ns=draw(fields),
        client_version=draw(texts),
        protocol_min=protocol_min,
        protocol_max=protocol_max,
        token=draw(texts),
        recorded=draw(st.booleans()),
        says_goodbye=draw(st.booleans()),
    )


welcomes = st.builds(
    Welcome,
    protocol_version=u16,
    max_frame_bytes=st.integers(MIN_MAX_FRAME_BYTES, 2**32 - 1),
    max_strings=limits,
    max_tracks=limits,
    max_kinds=limits,
    collector_version=texts,
)
kind_specs = st.builds(
    KindSpec,
    id=u32,
    name=texts,
    shape=st.sampled_from(["span", "instant"]) | texts,
    fields=st.lists(st.tuples(texts, st.sampled_from(["i64", "u32", "f64", "str", "any"])), max_size=4).map(tuple),
)
schemas = st.builds(
    Schema,
    kinds=st.lists(kind_specs, max_size=5).map(tuple),
    columns=st.just(EVENT_COLUMNS) | st.permutations(EVENT_COLUMNS).map(tuple) | st.lists(texts, max_size=7).map(tuple),
)
strings_frames = st.builds(Strings, first_id=u32, strings=st.lists(texts, max_size=10).map(tuple))
tracks = st.builds(Track, track_id=u32, kind=u8, name=texts, thread_id=fields, parent=u32)
stats = st.builds(
    Stats,
    dropped_events=fields,
    dropped_frames=fields,
    label_overflow_events=fields,
    clipped_args=fields,
    rejected_events=fields,
    unacknowledged_events=fields,
    internal_error_events=fields,
)
flushes = st.builds(Flush, u64)
flush_acks = st.builds(FlushAck, u64)
goodbyes = st.builds(Goodbye, texts)
set_priorities = st.builds(SetPriority, texts, texts)
refused_frames = st.builds(Refused, st.integers(0, 2**63 - 1))
collector_frames = st.one_of(flushes, flush_acks, goodbyes, set_priorities, refused_frames)
client_frames = st.one_of(schemas, strings_frames, tracks, events_frames(), stats, flushes, flush_acks, goodbyes)
#: Every frame type, with the peer that may send it.
any_frame = st.one_of(
    hellos().map(lambda f: ("client", f)),
    welcomes.map(lambda f: ("collector", f)),
    client_frames.map(lambda f: ("client", f)),
    collector_frames.map(lambda f: ("collector", f)),
)
msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | texts | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12,
)
#: Every field name some frame body uses, so that fuzzed maps reach the field checks.
MAP_BODIED = [frame for frame in [HELLO, WELCOME, *CLIENT_FRAMES] if not isinstance(frame, Events | Flush | FlushAck)]
FIELD_NAMES = sorted(
    {name for frame in MAP_BODIED for name in msgpack.unpackb(frame.encode_body())} | {"fields", "shape"}
)


# -- round trips ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("peer", PEERS)
def test_every_frame_type_round_trips(peer: Peer) -> None:
    frames = FRAMES_BY_PEER[peer]
    assert read_stream(peer, [stream_of(peer, frames)]) == [FIRST_FRAME[peer], *frames]


def test_every_frame_type_is_covered() -> None:
    assert set(FRAME_CLASS) == set(FrameType)


def test_goodbye_set_priority_and_refused_are_ignorable_and_the_rest_are_not() -> None:
    assert {t for t in FrameType if t & IGNORABLE} == {
        FrameType.GOODBYE, FrameType.SET_PRIORITY, FrameType.REFUSED, FrameType.STACKS
    }  # fmt: skip


@property_test
@given(peer_and_frame=any_frame)
def test_frame_bodies_round_trip(peer_and_frame: tuple[Peer, Frame]) -> None:
    _, frame = peer_and_frame
    assert type(frame).decode_body(frame.encode_body()) == frame


@property_test
@given(peer_and_frame=any_frame)
def test_frames_round_trip_through_the_reader(peer_and_frame: tuple[Peer, Frame]) -> None:
    peer, frame = peer_and_frame
    (decoded,) = read_stream(peer, [preamble() + encode(frame)])
    assert decoded == frame
    assert type(decoded) is type(frame)


@property_test
@given(hello=hellos(), frames=st.lists(client_frames, max_size=6))
def test_client_streams_round_trip(hello: Hello, frames: list[Frame]) -> None:
    data = preamble() + encode(hello) + b"".join(map(encode, frames))
    assert read_stream("client", [data]) == [hello, *frames]


@property_test
@given(welcome=welcomes, frames=st.lists(collector_frames, max_size=6))
def test_collector_streams_round_trip(welcome: Welcome, frames: list[Frame]) -> None:
    data = preamble() + encode(welcome) + b"".join(map(encode, frames))
    assert read_stream("collector", [data]) == [welcome, *frames]


@property_test
@given(frame=events_frames())
def test_events_round_trip_with_an_opaque_payload(frame: Events) -> None:
    (decoded,) = read_stream("client", [stream_of("client", [frame])])[1:]
    assert isinstance(decoded, Events)
    assert decoded == frame
    assert bytes(decoded.payload) == frame.payload
    assert encode(decoded) == encode(frame)  # a decoded frame (memoryview payload) encodes to the same bytes


def test_unknown_map_keys_are_ignored() -> None:
    """A frame can gain fields without a new version: readers skip keys they do not know."""
    data = preamble() + raw_frame(FrameType.HELLO, body_with(HELLO, trace_level=3, future={"x": [1]}))
    data += raw_frame(FrameType.TRACK, body_with(CLIENT_FRAMES[2], color="red"))
    assert read_stream("client", [data]) == [HELLO, CLIENT_FRAMES[2]]


def test_stats_of_a_client_without_the_later_counters_reads_them_as_zero() -> None:
    """STATS gained counters within version 2: an older client's frame, without them, counted none of those."""
    body = msgpack.packb({"dropped_events": 5, "dropped_frames": 2, "label_overflow_events": 3, "clipped_args": 4})
    assert Stats.decode_body(body) == Stats(5, 2, 3, 4, rejected_events=0, unacknowledged_events=0)
    assert Stats.decode_body(body).internal_error_events == 0


def test_a_schema_body_decoded_again_gives_the_same_immutable_schema() -> None:
    """Every client of a version declares the same kinds on each connection: the collector decodes them once they
    came again (a body seen once keeps none of its objects: a peer's own kinds would outlive its connection)."""
    body = Schema((*BUILTIN_KINDS, KindSpec(900, "decoded.again", "span", (("n", "i"),)))).encode_body()
    once = Schema.decode_body(body)
    assert not once.remembered
    first = Schema.decode_body(memoryview(bytearray(body)))
    assert first.remembered and first is not once
    assert Schema.decode_body(memoryview(bytearray(body))) is first
    assert first == once == Schema((*BUILTIN_KINDS, KindSpec(900, "decoded.again", "span", (("n", "i"),))))
    other = Schema((KindSpec(901, "decoded.other", "instant"),)).encode_body()
    assert Schema.decode_body(other) is not first and Schema.decode_body(other).kinds[0].name == "decoded.other"


def test_a_bad_schema_body_is_refused_each_time() -> None:
    body = msgpack.packb({"kinds": [{"id": 1, "name": "k", "shape": "span", "fields": [[1, 2]]}], "columns": []})
    for _ in range(2):
        with pytest.raises(MalformedFrame, match="SCHEMA frame: a field"):
            Schema.decode_body(body)


def test_preamble_is_the_magic_the_stream_format_and_zero() -> None:
    assert preamble() == MAGIC + struct.pack("<HH", STREAM_FORMAT, 0)
    assert PREAMBLE.size == 8
    assert FRAME_HEADER.size == 5
    assert EVENTS_HEADER.size == 28


def test_encoded_frame_is_length_type_body() -> None:
    data = encode(Flush(0x0102030405060708))
    assert data == struct.pack("<IB", 8, FrameType.FLUSH) + struct.pack("<Q", 0x0102030405060708)


def test_hello_defaults_to_the_versions_this_code_speaks() -> None:
    assert (HELLO.protocol_min, HELLO.protocol_max) == PROTOCOL_VERSIONS


def test_says_goodbye_is_sent_only_when_true_and_absent_reads_false() -> None:
    """An older collector never sees the field from a client that does not promise; an older client's HELLO (without
    it) reads as one that does not."""
    assert b"says_goodbye" not in encode(HELLO) and not HELLO.says_goodbye
    promised = dataclasses.replace(HELLO, says_goodbye=True)
    assert b"says_goodbye" in encode(promised)
    assert Hello.decode_body(promised.encode_body()).says_goodbye


# -- chunking: the frames out never depend on how the bytes came in ------------------------------------------------

STREAM = stream_of("client", CLIENT_FRAMES)
STREAM_FRAMES = [HELLO, *CLIENT_FRAMES]


@pytest.mark.parametrize("feed", FEEDERS)
def test_stream_split_at_every_offset(feed: Feed) -> None:
    for cut in range(len(STREAM) + 1):
        assert read_stream("client", [STREAM[:cut], STREAM[cut:]], feed) == STREAM_FRAMES, f"split at {cut}"


@pytest.mark.parametrize("feed", FEEDERS)
@pytest.mark.parametrize("peer", PEERS)
def test_stream_fed_one_byte_at_a_time(peer: Peer, feed: Feed) -> None:
    data = stream_of(peer, FRAMES_BY_PEER[peer])
    single_bytes = [data[i : i + 1] for i in range(len(data))]
    assert read_stream(peer, single_bytes, feed) == [FIRST_FRAME[peer], *FRAMES_BY_PEER[peer]]


def test_feeding_styles_can_be_mixed() -> None:
    reader = FrameReader("client")
    frames: list[Frame] = []
    for i in range(0, len(STREAM), 7):
        (copy_in if i % 2 else write_in)(reader, STREAM[i : i + 7])
        frames.extend(reader)
    assert frames == STREAM_FRAMES


@pytest.mark.parametrize("feed", FEEDERS)
@pytest.mark.parametrize("chunk_size", [1000, 65536, 300_000])
def test_frames_larger_than_the_read_buffer(feed: Feed, chunk_size: int) -> None:
    big = Events(1, 1000, 0, 1, bytes(range(256)) * 1000)
    small = Strings(0, ("after",))
    data = stream_of("client", [big, small, big])
    chunks = [data[i : i + chunk_size] for i in range(0, len(data), chunk_size)]
    assert read_stream("client", chunks, feed) == [HELLO, big, small, big]


@property_test
@given(frames=st.lists(client_frames, max_size=5), data=st.data())
def test_stream_split_anywhere(frames: list[Frame], data: st.DataObject) -> None:
    stream = stream_of("client", frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    chunks = [stream[start:end] for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    feed = data.draw(st.sampled_from([copy_in, write_in]))
    assert read_stream("client", chunks, feed) == [HELLO, *frames]


def test_get_buffer_offers_at_least_the_size_hint() -> None:
    reader = reader_with("client", STREAM[:-3])  # a partial frame stays buffered
    assert len(reader.get_buffer()) >= 64 * 1024
    assert len(reader.get_buffer(500_000)) >= 500_000
    assert list(reader) == STREAM_FRAMES[:-1]
    assert reader.buffered_bytes == len(encode(STREAM_FRAMES[-1])) - 3
    reader.receive_data(STREAM[-3:])
    assert list(reader) == STREAM_FRAMES[-1:]
    assert reader.buffered_bytes == 0


def test_a_frame_outlives_the_buffer_it_came_from() -> None:
    """Decoded frames own their bytes: later reads into the same buffer do not change them."""
    first = Events(1, 1, 0, 0, b"A" * 100)
    reader = reader_with("client", stream_of("client", [first]))
    frames = list(reader)
    write_in(reader, encode(Events(1, 1, 0, 0, b"B" * 100)))
    frames += list(reader)
    assert frames[1] == first
    assert bytes(frames[2].payload) == b"B" * 100  # type: ignore[union-attr]


# -- frame size limit ----------------------------------------------------------------------------------------------

LIMIT = MIN_MAX_FRAME_BYTES


@pytest.mark.parametrize("feed", FEEDERS)
def test_frame_of_exactly_max_frame_bytes_is_accepted(feed: Feed) -> None:
    frame = events_frame_of_size(LIMIT)
    data = opening("client") + encode(frame, LIMIT)
    assert read_stream("client", [data], feed, max_frame_bytes=LIMIT) == [HELLO, frame]


@pytest.mark.parametrize(
    ("peer", "prefix", "frame_type", "size"),
    [
        pytest.param("client", preamble(), FrameType.HELLO, LIMIT + 1, id="first-frame"),
        pytest.param("client", opening("client"), FrameType.EVENTS, LIMIT + 1, id="one-byte-over"),
        pytest.param("client", opening("client"), 0xC4, LIMIT + 1, id="ignorable-unknown-type"),
        pytest.param("client", opening("client"), FrameType.EVENTS, FRAME_HEADER.size + 2**32 - 1, id="largest"),
        pytest.param("collector", opening("collector"), FrameType.GOODBYE, LIMIT + 1, id="collector-goodbye"),
    ],
)
def test_oversize_frame_refused_as_soon_as_its_header_arrives(
    peer: Peer, prefix: bytes, frame_type: int, size: int
) -> None:
    header = FRAME_HEADER.pack(size - FRAME_HEADER.size, frame_type)
    reader = reader_with(peer, prefix + header[:-1], max_frame_bytes=LIMIT)
    list(reader)  # the frames before the oversize one
    assert reader.next_frame() is NEED_DATA
    reader.receive_data(header[-1:])  # the header is complete; not one byte of the body was sent
    with pytest.raises(FrameTooLarge) as info:
        reader.next_frame()
    assert (info.value.size, info.value.limit) == (size, LIMIT)
    assert names_number(info.value, size)
    assert names_number(info.value, LIMIT)
    assert "max_frame_bytes" in str(info.value)


def test_ignorable_frame_of_exactly_max_frame_bytes_is_skipped() -> None:
    data = opening("client") + raw_frame(0xC4, b"z" * (LIMIT - FRAME_HEADER.size)) + encode(Flush(1))
    reader = reader_with("client", data, max_frame_bytes=LIMIT)
    assert list(reader) == [HELLO, Flush(1)]
    assert reader.skipped_frames == 1


def test_encode_refuses_a_frame_over_the_limit() -> None:
    assert len(encode(events_frame_of_size(LIMIT), LIMIT)) == LIMIT
    with pytest.raises(FrameTooLarge) as info:
        encode(events_frame_of_size(LIMIT + 1), LIMIT)
    assert (info.value.size, info.value.limit) == (LIMIT + 1, LIMIT)
    assert names_number(info.value, LIMIT + 1)
    assert names_number(info.value, LIMIT)


def test_reader_refuses_a_limit_below_the_protocol_minimum() -> None:
    assert FrameReader("client", MIN_MAX_FRAME_BYTES).max_frame_bytes == MIN_MAX_FRAME_BYTES
    with pytest.raises(ConfigError, match=str(MIN_MAX_FRAME_BYTES)):
        FrameReader("client", MIN_MAX_FRAME_BYTES - 1)


# -- preamble and garbage ------------------------------------------------------------------------------------------

NOT_RINGTRACE = [
    pytest.param(b"GET / HTTP/1.1\r\n", id="http"),
    pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", id="tls"),
    pytest.param(b"SSH-2.0-OpenSSH_9.6\r\n", id="ssh"),
    pytest.param(b"\x00" * PREAMBLE.size, id="zeros"),
    pytest.param(b"rtrc\x02\x00\x00\x00", id="lower-case-magic"),
    pytest.param(b"RTRX", id="last-magic-byte-wrong"),
    pytest.param(b"X", id="first-byte-wrong"),
]


@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("data", NOT_RINGTRACE)
def test_wrong_magic_is_a_bad_preamble_without_waiting_for_more(peer: Peer, data: bytes) -> None:
    error = protocol_error(reader_with(peer, data))
    assert isinstance(error, BadPreamble)
    assert repr(MAGIC) in str(error)


@property_test
@given(data=st.binary(min_size=1, max_size=64).filter(lambda data: data[:4] != MAGIC[: len(data[:4])]))
def test_any_stream_not_starting_with_the_magic_is_a_bad_preamble(data: bytes) -> None:
    assert isinstance(protocol_error(reader_with("client", data)), BadPreamble)


@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("stream_format", [0, 1, STREAM_FORMAT + 1, 0xFFFF])
def test_another_stream_format_is_unsupported_and_names_both(peer: Peer, stream_format: int) -> None:
    error = protocol_error(reader_with(peer, PREAMBLE.pack(MAGIC, stream_format, 0)))
    assert isinstance(error, UnsupportedVersion)
    assert names_number(error, stream_format)
    assert names_number(error, STREAM_FORMAT)


@property_test
@given(
    peer=st.sampled_from(PEERS),
    prefix=st.sampled_from(["", "preamble", "opening"]),
    data=st.binary(max_size=200),
)
def test_arbitrary_bytes_raise_only_protocol_errors(peer: Peer, prefix: str, data: bytes) -> None:
    head = {"": b"", "preamble": preamble(), "opening": opening(peer)}[prefix]
    reader = reader_with(peer, head + data, eof=True)
    try:
        for _ in reader:
            pass
    except ProtocolError:
        return
    assert reader.next_frame() is CLOSED


@property_test
@given(
    peer=st.sampled_from(PEERS),
    frame_type=st.integers(0, 255),
    body=st.binary(max_size=100)
    | st.dictionaries(st.sampled_from(FIELD_NAMES), msgpack_values, max_size=12).map(msgpack.packb),
)
def test_arbitrary_frame_bodies_decode_or_raise_protocol_errors(peer: Peer, frame_type: int, body: bytes) -> None:
    reader = reader_with(peer, opening(peer) + raw_frame(frame_type, body), eof=True)
    assert reader.next_frame() == FIRST_FRAME[peer]
    try:
        frame = reader.next_frame()
    except ProtocolError:
        return
    if frame is CLOSED:  # an unknown ignorable type, skipped
        assert frame_type & IGNORABLE and frame_type not in FRAME_CLASS
        assert reader.skipped_frames == 1
        return
    assert isinstance(frame, FRAME_CLASS[frame_type])
    assert reader.next_frame() is CLOSED


ERROR_STREAMS = [
    pytest.param(b"GET / HTTP/1.1\r\n", id="bad-preamble"),
    pytest.param(PREAMBLE.pack(MAGIC, STREAM_FORMAT + 1, 0), id="stream-format"),
    pytest.param(opening("client") + FRAME_HEADER.pack(DEFAULT_MAX_FRAME_BYTES, FrameType.EVENTS), id="too-large"),
    pytest.param(preamble() + encode(WELCOME), id="unexpected"),
    pytest.param(opening("client") + raw_frame(0x42, b""), id="unknown-type"),
    pytest.param(opening("client") + raw_frame(FrameType.STATS, b"\xc1"), id="malformed"),
]


@pytest.mark.parametrize("data", ERROR_STREAMS)
def test_reader_stays_failed_after_an_error(data: bytes) -> None:
    reader = reader_with("client", data)
    error = protocol_error(reader)
    reader.receive_data(encode(Stats(0, 0)))
    reader.receive_data(b"")
    for _ in range(3):
        with pytest.raises(ProtocolError) as again:
            reader.next_frame()
        assert again.value is error
    with pytest.raises(ProtocolError) as again:
        list(reader)
    assert again.value is error


def test_reader_stays_failed_after_a_torn_stream() -> None:
    reader = reader_with("client", opening("client") + encode(Flush(1))[:-1], eof=True)
    assert reader.next_frame() == HELLO
    error = protocol_error(reader)
    assert isinstance(error, TornStream)
    with pytest.raises(TornStream) as again:
        reader.next_frame()
    assert again.value is error


def test_fail_makes_the_reader_raise_a_rule_broken_above_it() -> None:
    reader = reader_with("client", stream_of("client", CLIENT_FRAMES))
    assert reader.next_frame() == HELLO
    rule = UnexpectedFrame("a rule of the session")
    reader.fail(rule)
    with pytest.raises(UnexpectedFrame) as info:
        reader.next_frame()
    assert info.value is rule


# -- frame types: unknown, ignorable, not allowed from this peer ---------------------------------------------------

IGNORABLE_UNKNOWN = [IGNORABLE, IGNORABLE | 5, IGNORABLE | 0x40, 0xFE]


@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("frame_type", IGNORABLE_UNKNOWN)
def test_unknown_ignorable_frames_are_skipped(peer: Peer, frame_type: int) -> None:
    after = FRAMES_BY_PEER[peer]
    skipped = raw_frame(frame_type, b"future") + raw_frame(frame_type, b"")
    data = opening(peer) + skipped + b"".join(map(encode, after))
    reader = reader_with(peer, data, eof=True)
    assert list(reader) == [FIRST_FRAME[peer], *after]
    assert reader.next_frame() is CLOSED
    assert reader.skipped_frames == 2


def test_a_checksum_frame_is_skipped_in_a_file_and_refused_from_a_live_peer() -> None:
    data = opening("client") + raw_frame(CHECKSUM_TYPE, b"\x00" * 4) + encode(CLIENT_FRAMES[1])
    from_file = FrameReader("client", live=False)
    from_file.receive_data(data)
    assert list(from_file) == [HELLO, CLIENT_FRAMES[1]]
    live = FrameReader("client")
    live.receive_data(data)
    with pytest.raises(UnexpectedFrame, match="0xff \\(CHECKSUM\\) is only valid in files"):
        list(live)


#: A client stream with unknown ignorable frames between (and after) known ones.
SKIPPING_STREAM = (
    opening("client")
    + raw_frame(0x90, b"\x00" * 11)
    + encode(CLIENT_FRAMES[1])
    + raw_frame(0xFE, msgpack.packb({"hint": "later"}))
    + raw_frame(0xFE, b"")
    + encode(CLIENT_FRAMES[4])
    + raw_frame(0x80, b"!")
)


@pytest.mark.parametrize("feed", FEEDERS)
def test_unknown_ignorable_frames_are_skipped_when_split_at_every_offset(feed: Feed) -> None:
    data = SKIPPING_STREAM
    for cut in range(len(data) + 1):
        reader = FrameReader("client")
        frames: list[Frame] = []
        for chunk in (data[:cut], data[cut:]):
            if chunk:
                feed(reader, chunk)
                frames.extend(reader)
        reader.receive_data(b"")
        assert reader.next_frame() is CLOSED, f"split at {cut}"
        assert frames == [HELLO, CLIENT_FRAMES[1], CLIENT_FRAMES[4]], f"split at {cut}"
        assert reader.skipped_frames == 4, f"split at {cut}"


@pytest.mark.parametrize("feed", FEEDERS)
def test_unknown_ignorable_frames_are_skipped_one_byte_at_a_time(feed: Feed) -> None:
    reader = FrameReader("client")
    frames: list[Frame] = []
    for i in range(len(SKIPPING_STREAM)):
        feed(reader, SKIPPING_STREAM[i : i + 1])
        frames.extend(reader)
    assert frames == [HELLO, CLIENT_FRAMES[1], CLIENT_FRAMES[4]]
    assert reader.skipped_frames == 4


def unknown(frame_type: int) -> bytes:
    return raw_frame(frame_type, b"\x80")


UNEXPECTED = [
    pytest.param("client", opening("client"), encode(WELCOME), "WELCOME", id="client-sends-welcome"),
    pytest.param("client", preamble(), encode(WELCOME), "WELCOME", id="client-first-frame-welcome"),
    *(
        pytest.param("collector", opening("collector"), encode(frame), frame.TYPE.name, id=f"collector-sends-{name}")
        for name, frame in [
            ("hello", HELLO),
            ("schema", CLIENT_FRAMES[0]),
            ("strings", CLIENT_FRAMES[1]),
            ("track", CLIENT_FRAMES[2]),
            ("events", CLIENT_FRAMES[4]),
            ("stats", CLIENT_FRAMES[5]),
        ]
    ),
    *(
        pytest.param(peer, opening(peer), unknown(frame_type), f"type {frame_type}", id=f"{peer}-type-{frame_type}")
        for peer in PEERS
        for frame_type in (0, max(t for t in FrameType if not t & IGNORABLE) + 1, 0x7F)
    ),
]


@pytest.mark.parametrize(("peer", "prefix", "frame", "named"), UNEXPECTED)
def test_unexpected_frame_refused_from_its_header(peer: Peer, prefix: bytes, frame: bytes, named: str) -> None:
    error = protocol_error(reader_with(peer, prefix + frame[: FRAME_HEADER.size]))
    assert isinstance(error, UnexpectedFrame)
    assert named in str(error)


def test_unknown_type_without_the_ignorable_bit_says_so() -> None:
    error = protocol_error(reader_with("client", opening("client") + unknown(0x7F)))
    assert isinstance(error, UnexpectedFrame)
    assert "ignorable" in str(error)


# -- malformed bodies ----------------------------------------------------------------------------------------------

STRINGS_FRAME = CLIENT_FRAMES[1]
TRACK_FRAME = CLIENT_FRAMES[2]
STATS_FRAME = CLIENT_FRAMES[5]

MALFORMED = [
    # (peer, frame type, body, words the message must contain)
    pytest.param("client", FrameType.HELLO, b"\xc1", ["HELLO", "msgpack"], id="hello-not-msgpack"),
    pytest.param("client", FrameType.HELLO, body_with(HELLO)[:-3], ["HELLO", "msgpack"], id="hello-truncated"),
    pytest.param("client", FrameType.HELLO, body_with(HELLO) + b"\x00", ["HELLO", "msgpack"], id="hello-trailing"),
    pytest.param("client", FrameType.HELLO, msgpack.packb([1, 2]), ["HELLO", "map"], id="hello-not-a-map"),
    pytest.param("client", FrameType.HELLO, msgpack.packb({1: 2}), ["HELLO", "msgpack"], id="hello-int-keys"),
    pytest.param("client", FrameType.HELLO, body_with(HELLO, host=...), ["HELLO", "'host'"], id="hello-no-host"),
    pytest.param("client", FrameType.HELLO, body_with(HELLO, pid="42"), ["HELLO", "'pid'"], id="hello-str-pid"),
    pytest.param("client", FrameType.HELLO, body_with(HELLO, pid=True), ["HELLO", "'pid'"], id="hello-bool-pid"),
    pytest.param("client", FrameType.HELLO, body_with(HELLO, pid=-1), ["HELLO", "'pid'"], id="hello-negative-pid"),
    pytest.param("client", FrameType.HELLO, body_with(HELLO, wall_ns=1.5), ["HELLO", "'wall_ns'"], id="hello-float"),
    pytest.param("client", FrameType.HELLO, body_with(HELLO, boot_id=b"raw"), ["HELLO", "'boot_id'"], id="hello-bin"),
    pytest.param(
        "client",
        FrameType.HELLO,
        body_with(HELLO, protocol_max=...),
        ["HELLO", "'protocol_max'"],
        id="hello-no-protocol-max",
    ),
    pytest.param(
        "client",
        FrameType.HELLO,
        body_with(HELLO, protocol_min=3, protocol_max=2),
        ["HELLO", "protocol_min", "protocol_max", "3", "2"],
        id="hello-min-above-max",
    ),
    pytest.param(
        "collector",
        FrameType.WELCOME,
        body_with(WELCOME, max_frame_bytes=...),
        ["WELCOME", "'max_frame_bytes'"],
        id="welcome-missing-limit",
    ),
    pytest.param(
        "collector",
        FrameType.WELCOME,
        body_with(WELCOME, protocol_version="2"),
        ["WELCOME", "'protocol_version'"],
        id="welcome-str-version",
    ),
    pytest.param(
        "collector",
        FrameType.WELCOME,
        body_with(WELCOME, max_frame_bytes=MIN_MAX_FRAME_BYTES - 1),
        ["WELCOME", "'max_frame_bytes'", str(MIN_MAX_FRAME_BYTES)],
        id="welcome-frame-limit-below-minimum",
    ),
    *(
        pytest.param(
            "collector",
            FrameType.WELCOME,
            body_with(WELCOME, **{name: 1}),
            ["WELCOME", repr(name), ">= 2"],
            id=f"welcome-{name}-1",
        )
        for name in ("max_strings", "max_tracks", "max_kinds")
    ),
    pytest.param(
        "client",
        FrameType.SCHEMA,
        msgpack.packb({"kinds": [[0, "span", "span", []]], "columns": list(EVENT_COLUMNS)}),
        ["SCHEMA", "kind", "map"],
        id="schema-kind-not-a-map",
    ),
    pytest.param(
        "client",
        FrameType.SCHEMA,
        msgpack.packb({"kinds": [{"id": 0, "name": "span", "shape": "span"}], "columns": list(EVENT_COLUMNS)}),
        ["SCHEMA", "'fields'"],
        id="schema-kind-without-fields",
    ),
    pytest.param(
        "client",
        FrameType.SCHEMA,
        msgpack.packb(
            {"kinds": [{"id": 0, "name": "span", "shape": "span", "fields": [["a"]]}], "columns": list(EVENT_COLUMNS)}
        ),
        ["SCHEMA", "field", "type code"],
        id="schema-field-without-type",
    ),
    pytest.param(
        "client",
        FrameType.SCHEMA,
        msgpack.packb({"kinds": [{"id": -1, "name": "x", "shape": "span", "fields": []}], "columns": []}),
        ["SCHEMA", "'id'"],
        id="schema-negative-kind-id",
    ),
    pytest.param(
        "client",
        FrameType.SCHEMA,
        msgpack.packb({"kinds": [], "columns": ["kind", 1]}),
        ["SCHEMA", "'columns'"],
        id="schema-int-column",
    ),
    pytest.param("client", FrameType.SCHEMA, msgpack.packb({"kinds": []}), ["SCHEMA", "'columns'"], id="schema-nocols"),
    pytest.param(
        "client",
        FrameType.STRINGS,
        msgpack.packb({"first_id": 0, "strings": ["a", 2]}),
        ["STRINGS", "'strings'"],
        id="strings-not-str",
    ),
    pytest.param(
        "client",
        FrameType.STRINGS,
        body_with(STRINGS_FRAME, first_id=2**32),
        ["STRINGS", "'first_id'"],
        id="strings-first-id-over-u32",
    ),
    pytest.param(
        "client", FrameType.TRACK, body_with(TRACK_FRAME, thread_id=...), ["TRACK", "'thread_id'"], id="track-no-tid"
    ),
    pytest.param("client", FrameType.TRACK, body_with(TRACK_FRAME, kind=256), ["TRACK", "'kind'"], id="track-kind"),
    pytest.param("client", FrameType.TRACK, body_with(TRACK_FRAME, name=None), ["TRACK", "'name'"], id="track-no-name"),
    pytest.param(
        "client",
        FrameType.STATS,
        body_with(STATS_FRAME, dropped_frames=[1]),
        ["STATS", "'dropped_frames'"],
        id="stats-list",
    ),
    pytest.param(
        "client",
        FrameType.STATS,
        body_with(STATS_FRAME, clipped_args=...),
        ["STATS", "'clipped_args'"],
        id="stats-no-clipped-args",
    ),
    pytest.param("client", FrameType.FLUSH, b"\x00" * 7, ["FLUSH", "8 bytes"], id="flush-short-token"),
    pytest.param("collector", FrameType.FLUSH_ACK, b"\x00" * 9, ["FLUSH_ACK", "8 bytes"], id="flush-ack-long-token"),
    pytest.param("collector", FrameType.GOODBYE, msgpack.packb({}), ["GOODBYE", "'reason'"], id="goodbye-no-reason"),
    pytest.param("client", FrameType.EVENTS, b"", ["EVENTS", "header"], id="events-empty"),
    pytest.param("client", FrameType.EVENTS, b"\x00" * 27, ["EVENTS", "header"], id="events-shorter-than-header"),
    pytest.param(
        "client",
        FrameType.EVENTS,
        events_body(1, 0, 0, b"abc", header_size=EVENTS_HEADER.size - 1),
        ["EVENTS", "'header_size'", "27"],
        id="events-header-size-below-28",
    ),
    pytest.param(
        "client",
        FrameType.EVENTS,
        events_body(1, 0, 0, b"", header_size=0),
        ["EVENTS", "'header_size'"],
        id="events-header-size-0",
    ),
    pytest.param(
        "client",
        FrameType.EVENTS,
        events_body(1, 0, 0, b"abc", header_size=EVENTS_HEADER.size + 4),
        ["EVENTS", "'header_size'", "32"],
        id="events-header-size-beyond-body",
    ),
    pytest.param(
        "client",
        FrameType.EVENTS,
        events_body(1, 0, 0, b"abc", header_size=0xFFFF),
        ["EVENTS", "'header_size'", "65535"],
        id="events-header-size-max",
    ),
    pytest.param("client", FrameType.EVENTS, events_body(0, 0, 0, b"abc"), ["EVENTS", "'count'"], id="events-count-0"),
    pytest.param(
        "client", FrameType.EVENTS, events_body(4, 0, 0, b"abc"), ["EVENTS", "'count'"], id="events-count-over-payload"
    ),
    pytest.param(
        "client", FrameType.EVENTS, events_body(1, 0, 0, b""), ["EVENTS", "'count'"], id="events-empty-payload"
    ),
    pytest.param(
        "client",
        FrameType.EVENTS,
        events_body(1, 0, 0, b"", header_size=32, extra=b"abcd"),
        ["EVENTS", "'count'"],
        id="events-payload-empty-after-a-longer-header",
    ),
    pytest.param(
        "client",
        FrameType.EVENTS,
        events_body(1, 11, 10, b"a"),
        ["EVENTS", "first_ts", "last_ts", "11", "10"],
        id="events-first-after-last",
    ),
]


@pytest.mark.parametrize(("peer", "frame_type", "body", "words"), MALFORMED)
def test_malformed_body_names_the_frame_and_field(peer: Peer, frame_type: int, body: bytes, words: list[str]) -> None:
    first = frame_type == FIRST_FRAME[peer].TYPE
    prefix = preamble() if first else opening(peer)
    error = protocol_error(reader_with(peer, prefix + raw_frame(frame_type, body)))
    assert isinstance(error, MalformedFrame)
    for word in words:
        assert word in str(error)


@pytest.mark.parametrize(
    ("frame", "field", "limit"),
    [
        (Stats(2**63, 0), "dropped_events", "0..9223372036854775807"),
        (Track(1, SOURCE_TRACK, "t", 2**64 - 1), "thread_id", "0..9223372036854775807"),
        (Track(1, SOURCE_TRACK, "t", parent=2**32), "parent", "0..4294967295"),
        (Track(2**32, SOURCE_TRACK, "t"), "id", "0..4294967295"),
        (Strings(2**32, ("x",)), "first_id", "0..4294967295"),
        (Schema((KindSpec(2**32, "k", "span"),)), "id", "0..4294967295"),
        (replace(HELLO, pid=2**32), "pid", "0..4294967295"),
        (replace(HELLO, monotonic_ns=2**63), "monotonic_ns", "0..9223372036854775807"),
        (replace(HELLO, protocol_max=0x10000), "protocol_max", "0..65535"),
    ],
)
def test_integers_beyond_their_range_are_refused_by_name(frame: Frame, field: str, limit: str) -> None:
    stream = preamble() + (encode(frame) if isinstance(frame, Hello) else encode(HELLO) + encode(frame))
    reader = FrameReader("client")
    reader.receive_data(stream)
    with pytest.raises(MalformedFrame, match=f"field '{field}' must be in {limit}"):
        list(reader)


# -- EVENTS header -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [b"\x01", b"\xff" * 4, b"future header fields!" * 10])
def test_events_header_longer_than_28_bytes_is_skipped(extra: bytes) -> None:
    """A later version may add header fields: the payload starts at header_size, whatever lies between."""
    payload = b"\x95\x91\x00\x91\x00\x91\x00\x91\x00\x91\xc0"  # five one-value columns
    body = events_body(1, 5, 9, payload, header_size=EVENTS_HEADER.size + len(extra), extra=extra)
    frame = Events.decode_body(body)
    assert (frame.track_id, frame.count, frame.first_ts_ns, frame.last_ts_ns) == (1, 1, 5, 9)
    assert bytes(frame.payload) == payload
    assert unpack_columns(frame) == [[0], [0], [0], [0], [None]]
    (read,) = read_stream("client", [opening("client") + raw_frame(FrameType.EVENTS, body)])[1:]
    assert read == frame


def test_events_header_fields_in_order() -> None:
    frame = Events(track_id=0x01020304, count=2, first_ts_ns=7, last_ts_ns=2**64 - 1, payload=b"ab", flags=0x0506)
    body = frame.encode_body()
    assert EVENTS_HEADER.unpack_from(body) == (28, 0x0506, 0x01020304, 2, 7, 2**64 - 1)
    assert body[28:] == b"ab"


@pytest.mark.parametrize(
    ("count", "payload"),
    [(1, b"a"), (3, b"abc"), (1, b"abc")],
)
def test_events_count_up_to_the_payload_length_is_accepted(count: int, payload: bytes) -> None:
    assert Events.decode_body(events_body(count, 3, 3, payload)).count == count


# -- EVENTS payloads -----------------------------------------------------------------------------------------------


def payload_with(**changes: Any) -> bytes:
    """A one-event payload with some columns replaced."""
    cols = {"kind": [SPAN], "name": [0], "ts": [5], "dur": [10], "args": [{}]}
    cols.update(changes)
    return msgpack.packb(list(cols.values()))


def events_of(payload: bytes, count: int = 1) -> Events:
    return Events(1, count, 1_000, 2_000, payload)


def test_unpack_columns_of_a_well_formed_payload() -> None:
    assert unpack_columns(events_of(payload_with())) == [[SPAN], [0], [5], [10], [{}]]


def test_unpack_columns_keeps_args_maps_with_int_keys() -> None:
    assert unpack_columns(events_of(payload_with(args=[{1: "one", b"k": 2}])))[4] == [{1: "one", b"k": 2}]


def test_unpack_columns_takes_the_column_names_given() -> None:
    columns = ("args", "dur", "ts", "name", "kind", "extra")
    payload = msgpack.packb([[None], [10], [5], [0], [SPAN], ["x"]])
    assert unpack_columns(events_of(payload), columns) == [[None], [10], [5], [0], [SPAN], ["x"]]


@pytest.mark.parametrize(
    ("payload", "count"),
    [
        pytest.param(b"\xc1", 1, id="not-msgpack"),
        pytest.param(payload_with() + b"\x00", 1, id="trailing-bytes"),
        pytest.param(msgpack.packb({"kind": [0]}), 1, id="not-an-array"),
        pytest.param(msgpack.packb([[0], [0], [0], [0]]), 1, id="four-columns"),
        pytest.param(msgpack.packb([[0], [0], [0], [0], [{}], [0]]), 1, id="six-columns"),
        pytest.param(payload_with(), 2, id="columns-shorter-than-count"),
        pytest.param(payload_with(ts=[1, 2]), 1, id="one-column-too-long"),
        pytest.param(payload_with(dur=[]), 1, id="one-column-too-short"),
        pytest.param(payload_with(name=0), 1, id="column-not-an-array"),
    ],
)
def test_unpack_columns_refuses_malformed_payloads(payload: bytes, count: int) -> None:
    with pytest.raises(MalformedFrame, match="EVENTS"):
        unpack_columns(events_of(payload, count))


# -- end of stream -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("peer", PEERS)
def test_end_of_stream_before_any_byte_is_closed(peer: Peer) -> None:
    reader = FrameReader(peer)
    assert reader.next_frame() is NEED_DATA
    reader.receive_data(b"")
    assert reader.next_frame() is CLOSED
    assert reader.next_frame() is CLOSED


@pytest.mark.parametrize(
    ("data", "frames"),
    [
        pytest.param(preamble(), [], id="after-preamble"),
        pytest.param(opening("client"), [HELLO], id="after-hello"),
        pytest.param(STREAM, STREAM_FRAMES, id="after-last-frame"),
        pytest.param(opening("client") + raw_frame(0xA0, b"x"), [HELLO], id="after-a-skipped-frame"),
    ],
)
def test_end_of_stream_at_a_frame_boundary_is_closed(data: bytes, frames: list[Frame]) -> None:
    reader = reader_with("client", data, eof=True)
    assert list(reader) == frames
    assert reader.next_frame() is CLOSED


@pytest.mark.parametrize("cut", range(1, PREAMBLE.size))
def test_end_of_stream_inside_the_preamble_is_torn(cut: int) -> None:
    reader = reader_with("client", preamble()[:cut])
    assert reader.next_frame() is NEED_DATA
    reader.receive_data(b"")
    error = protocol_error(reader)
    assert isinstance(error, TornStream)
    assert "preamble" in str(error)


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(1, id="one-header-byte"),
        pytest.param(FRAME_HEADER.size - 1, id="header"),
        pytest.param(FRAME_HEADER.size, id="header-only"),
        pytest.param(FRAME_HEADER.size + 1, id="one-body-byte"),
        pytest.param(-1, id="body"),
    ],
)
@pytest.mark.parametrize("last", [CLIENT_FRAMES[0], CLIENT_FRAMES[4], raw_frame(0xA0, b"skipped")])
def test_end_of_stream_inside_a_frame_is_torn(cut: int, last: Frame | bytes) -> None:
    data = last if isinstance(last, bytes) else encode(last)
    reader = reader_with("client", opening("client") + encode(STATS_FRAME) + data[:cut])
    assert list(reader) == [HELLO, STATS_FRAME]  # nothing before the torn frame is lost
    reader.receive_data(b"")
    error = protocol_error(reader)
    assert isinstance(error, TornStream)
    assert names_number(error, len(data[:cut]))


def test_a_track_frame_can_end_a_track_and_an_older_body_without_the_field_is_a_live_track() -> None:
    ended = Track(7, 0, "worker", 1234, 0, ended=True)
    assert Track.decode_body(ended.encode_body()) == ended
    older = msgpack.packb({"id": 7, "kind": 0, "name": "worker", "thread_id": 1234, "parent": 0})
    assert Track.decode_body(older).ended is False
