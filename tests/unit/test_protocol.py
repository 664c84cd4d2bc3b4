"""The sans-I/O wire protocol: frame encoding, the stream reader, and EVENTS payloads."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Literal

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.client.batch import BatchEncoder
from ringtrace.client.errors import (
    BadPreamble,
    ConfigError,
    FrameTooLarge,
    MalformedFrame,
    ProtocolError,
    UnexpectedFrame,
    UnsupportedVersion,
)
from ringtrace.client.model import INSTANT, KINDS, SPAN, StringTable
from ringtrace.client.protocol import (
    CLOSED,
    DEFAULT_MAX_FRAME_BYTES,
    EVENT_COLUMNS,
    EVENTS_HEADER,
    FRAME_HEADER,
    MAGIC,
    MIN_MAX_FRAME_BYTES,
    NEED_DATA,
    PREAMBLE,
    PROTOCOL_VERSION,
    Events,
    Flush,
    FlushAck,
    Frame,
    FrameReader,
    FrameType,
    Hello,
    Schema,
    Source,
    Stats,
    Strings,
    Welcome,
    decode_events,
    encode,
    preamble,
)

# Hypothesis must never turn slowness into a failure: these tests make no timing claims.
property_test = settings(deadline=None, max_examples=150)

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
    client_version="0.1.0",
)
WELCOME = Welcome(max_frame_bytes=DEFAULT_MAX_FRAME_BYTES, collector_version="0.1.0")
#: The frame each peer must send right after its preamble.
FIRST_FRAME: dict[Peer, Frame] = {"client": HELLO, "collector": WELCOME}

#: One of every frame a client sends after its HELLO.
CLIENT_FRAMES: list[Frame] = [
    Schema(KINDS),
    Strings(0, ("GET /", "db.query", "ünïcødé ✓")),
    Source(1, "MainThread", 777),
    Events(1, 3, 10, 2**63 - 1, b"\x93\x00\x01\x02" * 20),
    Stats(dropped_events=5, dropped_frames=2),
    Flush(2**64 - 1),
    FlushAck(0),
]
#: Every frame a collector sends after its WELCOME.
COLLECTOR_FRAMES: list[Frame] = [Flush(7), FlushAck(7)]
FRAMES_BY_PEER = {"client": CLIENT_FRAMES, "collector": COLLECTOR_FRAMES}
FRAME_CLASS = {frame.TYPE: type(frame) for frame in [*FIRST_FRAME.values(), *CLIENT_FRAMES, *COLLECTOR_FRAMES]}


# -- helpers -------------------------------------------------------------------------------------------------------


def opening(peer: Peer) -> bytes:
    """A preamble and the peer's mandatory first frame."""
    return preamble() + encode(FIRST_FRAME[peer])


def stream_of(peer: Peer, frames: Iterable[Frame]) -> bytes:
    return opening(peer) + b"".join(encode(frame) for frame in frames)


def raw_frame(frame_type: int, body: bytes) -> bytes:
    """A frame built by hand, so that its body can be anything."""
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


FEEDERS = [pytest.param(copy_in, id="receive_data"), pytest.param(write_in, id="get_buffer")]


def read_stream(
    peer: Peer,
    chunks: Iterable[bytes],
    feed: Callable[[FrameReader, bytes], None] = copy_in,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
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


def hello_body(**changes: Any) -> bytes:
    """A HELLO body with fields replaced (or removed, for a value of ``...``)."""
    fields = msgpack.unpackb(HELLO.encode_body())
    fields.update(changes)
    return msgpack.packb({name: value for name, value in fields.items() if value is not ...})


def events_body(count: int, first_ts: int, last_ts: int, payload: bytes) -> bytes:
    return EVENTS_HEADER.pack(1, count, first_ts, last_ts) + payload


def events_frame_of_size(size: int) -> Events:
    """An EVENTS frame whose encoding is exactly ``size`` bytes."""
    return Events(1, 1, 0, 0, b"x" * (size - FRAME_HEADER.size - EVENTS_HEADER.size))


# -- strategies ----------------------------------------------------------------------------------------------------

texts = st.text(max_size=30)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
#: Integers in msgpack control-frame fields: the protocol caps them at 2**63 - 1.
fields = st.integers(0, 2**63 - 1)
timestamps = st.integers(0, 2**63 - 1)


@st.composite
def events_frames(draw: st.DrawFn) -> Events:
    payload = draw(st.binary(min_size=1, max_size=300))
    first_ts, last_ts = sorted(draw(st.tuples(timestamps, timestamps)))
    return Events(draw(u32), draw(st.integers(1, len(payload))), first_ts, last_ts, payload)


hellos = st.builds(
    Hello,
    pid=u32,
    host=texts,
    process_name=texts,
    instance_id=texts,
    boot_id=texts,
    monotonic_ns=timestamps,
    wall_ns=timestamps,
    client_version=texts,
)
welcomes = st.builds(Welcome, max_frame_bytes=st.integers(MIN_MAX_FRAME_BYTES, 2**63 - 1), collector_version=texts)
control_frames = st.one_of(st.builds(Flush, u64), st.builds(FlushAck, u64))
client_frames = st.one_of(
    st.builds(Schema, kinds=st.lists(st.tuples(st.integers(-(2**63), 2**64 - 1), texts), max_size=5).map(tuple)),
    st.builds(Strings, first_id=u32, strings=st.lists(texts, max_size=10).map(tuple)),
    st.builds(Source, source_id=fields, name=texts, thread_id=fields),
    events_frames(),
    st.builds(Stats, dropped_events=fields, dropped_frames=fields),
    control_frames,
)
msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | texts | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12,
)
#: Every field name some frame body uses, so that fuzzed maps reach the field checks.
FIELD_NAMES = (
    "pid",
    "host",
    "process_name",
    "instance_id",
    "boot_id",
    "monotonic_ns",
    "wall_ns",
    "client_version",
    "kinds",
    "columns",
    "first_id",
    "strings",
    "id",
    "name",
    "thread_id",
    "dropped_events",
    "dropped_frames",
    "max_frame_bytes",
    "collector_version",
)


# -- round trips ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("peer", PEERS)
def test_every_frame_type_round_trips(peer: Peer) -> None:
    frames = FRAMES_BY_PEER[peer]
    assert read_stream(peer, [stream_of(peer, frames)]) == [FIRST_FRAME[peer], *frames]


def test_every_frame_type_is_covered() -> None:
    assert set(FRAME_CLASS) == set(FrameType)


@property_test
@given(hello=hellos, frames=st.lists(client_frames, max_size=6))
def test_client_frames_round_trip(hello: Hello, frames: list[Frame]) -> None:
    data = preamble() + encode(hello) + b"".join(map(encode, frames))
    assert read_stream("client", [data]) == [hello, *frames]


@property_test
@given(welcome=welcomes, frames=st.lists(control_frames, max_size=6))
def test_collector_frames_round_trip(welcome: Welcome, frames: list[Frame]) -> None:
    data = preamble() + encode(welcome) + b"".join(map(encode, frames))
    assert read_stream("collector", [data]) == [welcome, *frames]


@property_test
@given(frame=events_frames())
def test_events_round_trip(frame: Events) -> None:
    (decoded,) = read_stream("client", [stream_of("client", [frame])])[1:]
    assert decoded == frame
    assert type(decoded.payload) is bytes


# -- chunking: the frames out never depend on how the bytes came in ------------------------------------------------

STREAM = stream_of("client", CLIENT_FRAMES)
STREAM_FRAMES = [HELLO, *CLIENT_FRAMES]


@pytest.mark.parametrize("feed", FEEDERS)
def test_stream_split_at_every_offset(feed: Callable[[FrameReader, bytes], None]) -> None:
    for cut in range(len(STREAM) + 1):
        assert read_stream("client", [STREAM[:cut], STREAM[cut:]], feed) == STREAM_FRAMES, f"split at {cut}"


@pytest.mark.parametrize("feed", FEEDERS)
@pytest.mark.parametrize("peer", PEERS)
def test_stream_fed_one_byte_at_a_time(peer: Peer, feed: Callable[[FrameReader, bytes], None]) -> None:
    data = stream_of(peer, FRAMES_BY_PEER[peer])
    single_bytes = [data[i : i + 1] for i in range(len(data))]
    assert read_stream(peer, single_bytes, feed) == [FIRST_FRAME[peer], *FRAMES_BY_PEER[peer]]


@pytest.mark.parametrize("feed", FEEDERS)
@pytest.mark.parametrize("chunk_size", [1000, 65536, 300_000])
def test_frames_larger_than_the_read_buffer(feed: Callable[[FrameReader, bytes], None], chunk_size: int) -> None:
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


# -- frame size limit ----------------------------------------------------------------------------------------------

LIMIT = MIN_MAX_FRAME_BYTES


@pytest.mark.parametrize("feed", FEEDERS)
def test_frame_of_exactly_max_frame_bytes_is_accepted(feed: Callable[[FrameReader, bytes], None]) -> None:
    frame = events_frame_of_size(LIMIT)
    data = opening("client") + encode(frame, LIMIT)
    assert read_stream("client", [data], feed, max_frame_bytes=LIMIT) == [HELLO, frame]


@pytest.mark.parametrize(
    ("prefix", "frame_type", "size"),
    [
        pytest.param(preamble(), FrameType.HELLO, LIMIT + 1, id="first-frame"),
        pytest.param(opening("client"), FrameType.EVENTS, LIMIT + 1, id="one-byte-over"),
        pytest.param(opening("client"), FrameType.EVENTS, FRAME_HEADER.size + 2**32 - 1, id="largest-length"),
    ],
)
def test_oversize_frame_refused_as_soon_as_its_header_arrives(prefix: bytes, frame_type: int, size: int) -> None:
    header = FRAME_HEADER.pack(size - FRAME_HEADER.size, frame_type)
    reader = reader_with("client", prefix + header[:-1], max_frame_bytes=LIMIT)
    list(reader)  # the frames before the oversize one
    assert reader.next_frame() is NEED_DATA
    reader.receive_data(header[-1:])  # the header is complete; not one byte of the body was sent
    with pytest.raises(FrameTooLarge) as info:
        reader.next_frame()
    assert (info.value.size, info.value.limit) == (size, LIMIT)
    assert names_number(info.value, size)
    assert names_number(info.value, LIMIT)


def test_encode_refuses_a_frame_over_the_limit() -> None:
    assert len(encode(events_frame_of_size(LIMIT), LIMIT)) == LIMIT
    with pytest.raises(FrameTooLarge) as info:
        encode(events_frame_of_size(LIMIT + 1), LIMIT)
    assert (info.value.size, info.value.limit) == (LIMIT + 1, LIMIT)
    assert names_number(info.value, LIMIT + 1)
    assert names_number(info.value, LIMIT)


def test_reader_refuses_a_limit_below_the_protocol_minimum() -> None:
    with pytest.raises(ConfigError, match=str(MIN_MAX_FRAME_BYTES)):
        FrameReader("client", MIN_MAX_FRAME_BYTES - 1)


# -- garbage -------------------------------------------------------------------------------------------------------

NOT_RINGTRACE = [
    pytest.param(b"GET / HTTP/1.1\r\n", id="http"),
    pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", id="tls"),
    pytest.param(b"SSH-2.0-OpenSSH_9.6\r\n", id="ssh"),
    pytest.param(b"\x00" * PREAMBLE.size, id="zeros"),
    pytest.param(b"rtrc\x01\x00\x00\x00", id="lower-case-magic"),
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


@pytest.mark.parametrize("data", [MAGIC[:1], MAGIC, preamble()[:-1]])
def test_stream_closed_inside_the_preamble_is_a_bad_preamble(data: bytes) -> None:
    reader = reader_with("client", data)
    assert reader.next_frame() is NEED_DATA
    reader.receive_data(b"")
    assert isinstance(protocol_error(reader), BadPreamble)


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
    | st.dictionaries(st.sampled_from(FIELD_NAMES), msgpack_values, max_size=10).map(msgpack.packb),
)
def test_arbitrary_frame_bodies_decode_or_raise_protocol_errors(peer: Peer, frame_type: int, body: bytes) -> None:
    reader = reader_with(peer, opening(peer) + raw_frame(frame_type, body), eof=True)
    assert reader.next_frame() == FIRST_FRAME[peer]
    try:
        frame = reader.next_frame()
    except ProtocolError:
        return
    assert isinstance(frame, FRAME_CLASS[frame_type])
    assert reader.next_frame() is CLOSED


ERROR_STREAMS = [
    pytest.param(b"GET / HTTP/1.1\r\n", id="bad-preamble"),
    pytest.param(preamble(PROTOCOL_VERSION + 1), id="version"),
    pytest.param(opening("client") + FRAME_HEADER.pack(DEFAULT_MAX_FRAME_BYTES, FrameType.EVENTS), id="too-large"),
    pytest.param(preamble() + encode(Stats(0, 0)), id="unexpected"),
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


# -- version and frame order ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, PROTOCOL_VERSION + 1, 0xFFFF])
def test_unsupported_version_names_both_versions(version: int) -> None:
    error = protocol_error(reader_with("client", preamble(version)))
    assert isinstance(error, UnsupportedVersion)
    assert (error.version, error.supported) == (version, PROTOCOL_VERSION)
    assert names_number(error, version)
    assert names_number(error, PROTOCOL_VERSION)


def unknown(frame_type: int) -> bytes:
    return raw_frame(frame_type, b"\x80")


UNEXPECTED = [
    pytest.param("client", preamble(), encode(Schema(KINDS)), "HELLO", id="client-first-frame-not-hello"),
    pytest.param("client", opening("client"), encode(HELLO), "HELLO", id="client-second-hello"),
    pytest.param("client", opening("client"), encode(WELCOME), "WELCOME", id="client-sends-welcome"),
    pytest.param("collector", preamble(), encode(Flush(1)), "WELCOME", id="collector-first-frame-not-welcome"),
    pytest.param("collector", opening("collector"), encode(WELCOME), "WELCOME", id="collector-second-welcome"),
    pytest.param("collector", opening("collector"), encode(CLIENT_FRAMES[3]), "EVENTS", id="collector-sends-events"),
    pytest.param("collector", preamble(), encode(HELLO), "HELLO", id="collector-sends-hello"),
    *(
        pytest.param(peer, opening(peer), unknown(frame_type), f"type {frame_type}", id=f"{peer}-type-{frame_type}")
        for peer in PEERS
        for frame_type in (0, max(FrameType) + 1, 255)
    ),
]


@pytest.mark.parametrize(("peer", "prefix", "frame", "named"), UNEXPECTED)
def test_unexpected_frame_refused_from_its_header(peer: Peer, prefix: bytes, frame: bytes, named: str) -> None:
    error = protocol_error(reader_with(peer, prefix + frame[: FRAME_HEADER.size]))
    assert isinstance(error, UnexpectedFrame)
    assert named in str(error)


# -- malformed bodies ----------------------------------------------------------------------------------------------

MALFORMED = [
    # (peer, frame type, body, words the message must contain)
    pytest.param("client", FrameType.HELLO, b"\xc1", ["HELLO", "msgpack"], id="hello-not-msgpack"),
    pytest.param("client", FrameType.HELLO, hello_body()[:-3], ["HELLO", "msgpack"], id="hello-truncated"),
    pytest.param("client", FrameType.HELLO, hello_body() + b"\x00", ["HELLO", "msgpack"], id="hello-trailing-bytes"),
    pytest.param("client", FrameType.HELLO, msgpack.packb([1, 2]), ["HELLO", "map"], id="hello-not-a-map"),
    pytest.param("client", FrameType.HELLO, hello_body(host=...), ["HELLO", "'host'"], id="hello-missing-host"),
    pytest.param("client", FrameType.HELLO, hello_body(pid="42"), ["HELLO", "'pid'"], id="hello-str-pid"),
    pytest.param("client", FrameType.HELLO, hello_body(pid=True), ["HELLO", "'pid'"], id="hello-bool-pid"),
    pytest.param("client", FrameType.HELLO, hello_body(pid=-1), ["HELLO", "'pid'"], id="hello-negative-pid"),
    pytest.param("client", FrameType.HELLO, hello_body(wall_ns=1.5), ["HELLO", "'wall_ns'"], id="hello-float-ts"),
    pytest.param("client", FrameType.HELLO, hello_body(boot_id=b"raw"), ["HELLO", "'boot_id'"], id="hello-bytes"),
    pytest.param(
        "collector",
        FrameType.WELCOME,
        msgpack.packb({"collector_version": "0.1.0"}),
        ["WELCOME", "'max_frame_bytes'"],
        id="welcome-missing-limit",
    ),
    pytest.param(
        "client",
        FrameType.SCHEMA,
        msgpack.packb({"kinds": [[0, "span", 1]], "columns": list(EVENT_COLUMNS)}),
        ["SCHEMA", "'kinds'"],
        id="schema-bad-kind",
    ),
    pytest.param(
        "client",
        FrameType.SCHEMA,
        msgpack.packb({"kinds": [], "columns": ["kind", "name"]}),
        ["SCHEMA", "'columns'"],
        id="schema-bad-columns",
    ),
    pytest.param(
        "client",
        FrameType.STRINGS,
        msgpack.packb({"first_id": 0, "strings": ["a", 2]}),
        ["STRINGS", "'strings'"],
        id="strings-not-str",
    ),
    pytest.param(
        "client",
        FrameType.SOURCE,
        msgpack.packb({"id": 1, "name": "t"}),
        ["SOURCE", "'thread_id'"],
        id="source-missing-thread-id",
    ),
    pytest.param(
        "client",
        FrameType.STATS,
        msgpack.packb({"dropped_events": 1, "dropped_frames": [1]}),
        ["STATS", "'dropped_frames'"],
        id="stats-list",
    ),
    pytest.param("client", FrameType.FLUSH, b"\x00" * 7, ["FLUSH", "8 bytes"], id="flush-short-token"),
    pytest.param("collector", FrameType.FLUSH_ACK, b"\x00" * 9, ["FLUSH_ACK", "8 bytes"], id="flush-ack-long-token"),
    pytest.param("client", FrameType.EVENTS, b"", ["EVENTS", "header"], id="events-empty"),
    pytest.param("client", FrameType.EVENTS, b"\x00" * 23, ["EVENTS", "header"], id="events-shorter-than-header"),
    pytest.param("client", FrameType.EVENTS, events_body(0, 0, 0, b"abc"), ["EVENTS", "'count'"], id="events-none"),
    pytest.param(
        "client", FrameType.EVENTS, events_body(4, 0, 0, b"abc"), ["EVENTS", "'count'"], id="events-count-over-payload"
    ),
    pytest.param(
        "client", FrameType.EVENTS, events_body(1, 0, 0, b""), ["EVENTS", "'count'"], id="events-empty-payload"
    ),
    pytest.param(
        "client", FrameType.EVENTS, events_body(1, 11, 10, b"a"), ["EVENTS", "first_ts", "last_ts"], id="events-ts"
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
    ],
)
def test_end_of_stream_at_a_frame_boundary_is_closed(data: bytes, frames: list[Frame]) -> None:
    reader = reader_with("client", data, eof=True)
    assert list(reader) == frames
    assert reader.next_frame() is CLOSED


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(1, id="one-header-byte"),
        pytest.param(FRAME_HEADER.size - 1, id="header"),
        pytest.param(FRAME_HEADER.size, id="header-only"),
        pytest.param(-1, id="body"),
    ],
)
def test_end_of_stream_inside_a_frame_is_a_protocol_error(cut: int) -> None:
    last = encode(CLIENT_FRAMES[0])
    reader = reader_with("client", opening("client") + last[:cut])
    assert list(reader) == [HELLO]
    reader.receive_data(b"")
    protocol_error(reader)


# -- EVENTS payloads -----------------------------------------------------------------------------------------------

RECORDS = [
    (SPAN, "GET /users", 2**62, 2**62 + 1_500, {"status": 200, "path": "/users"}),
    (INSTANT, "cache.miss", 2**62 + 10, 2**62 + 10, {}),
    (SPAN, "db.query", 2**62 + 20, 2**62 + 900, {"rows": [1, 2, 3], "meta": {"table": "users", "ok": True}}),
    (SPAN, "GET /users", 2**62 + 5, 2**62 + 7, {"ratio": 0.5, "blob": b"\x00\xff", "none": None}),
]


def decode_batch_events(records: list[tuple[Any, ...]]) -> list[tuple[int, str, int, int, Any]]:
    """Encode ``records`` with a BatchEncoder, read the frames back, and decode every EVENTS payload."""
    table = StringTable()
    batch = BatchEncoder(table).encode(1, [value for record in records for value in record])
    frames = read_stream("client", [opening("client"), *batch.strings, *(frame for frame, _ in batch.events)])
    events = []
    for frame in frames:
        if isinstance(frame, Events):
            for kind, name_id, ts, dur, args in decode_events(frame.payload, frame.count, frame.first_ts_ns):
                events.append((kind, table.strings[name_id], ts, dur, args))
    return events


def as_decoded(records: list[tuple[Any, ...]]) -> list[tuple[int, str, int, int, Any]]:
    return [(kind, label, start, end - start, args) for kind, label, start, end, args in records]


def test_decode_events_round_trips_batch_encoder_output() -> None:
    assert decode_batch_events(RECORDS) == as_decoded(RECORDS)


@property_test
@given(
    st.lists(
        st.tuples(
            st.sampled_from([SPAN, INSTANT]),
            st.text(max_size=20),
            st.integers(0, 2**62),
            st.integers(0, 2**40),
            st.dictionaries(st.text(max_size=8), st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8), max_size=3),
        ).map(lambda t: (t[0], t[1], t[2], t[2] + t[3], t[4])),
        min_size=1,
        max_size=40,
    )
)
def test_decode_events_round_trip_property(records: list[tuple[Any, ...]]) -> None:
    assert decode_batch_events(records) == as_decoded(records)


def payload_with(**changes: Any) -> bytes:
    """A one-event payload with some columns replaced."""
    cols = {"kind": [SPAN], "name": [0], "ts": [5], "dur": [10], "args": [{}]}
    cols.update(changes)
    return msgpack.packb(list(cols.values()))


def test_decode_events_of_a_well_formed_payload() -> None:
    assert list(decode_events(payload_with(), 1, 1_000)) == [(SPAN, 0, 1_005, 10, {})]


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
        pytest.param(payload_with(ts=[1.5]), 1, id="float-timestamp"),
        pytest.param(payload_with(ts=["5"]), 1, id="str-timestamp"),
        pytest.param(payload_with(ts=[None]), 1, id="nil-timestamp"),
        pytest.param(payload_with(dur=[2.0]), 1, id="float-duration"),
        pytest.param(payload_with(kind=[True]), 1, id="bool-kind"),
        pytest.param(payload_with(name=["label"]), 1, id="str-name"),
    ],
)
def test_decode_events_refuses_malformed_payloads(payload: bytes, count: int) -> None:
    with pytest.raises(MalformedFrame, match="EVENTS"):
        list(decode_events(payload, count, 0))


@pytest.mark.parametrize(
    ("frame", "field", "limit"),
    [
        (Stats(2**63, 0), "dropped_events", "0..9223372036854775807"),
        (Source(1, "t", 2**64 - 1), "thread_id", "0..9223372036854775807"),
        (replace(HELLO, pid=2**32), "pid", "0..4294967295"),
    ],
)
def test_integers_beyond_their_range_are_refused_by_name(frame: Frame, field: str, limit: str) -> None:
    stream = preamble() + encode(HELLO) + encode(frame) if not isinstance(frame, Hello) else preamble() + encode(frame)
    reader = FrameReader("client")
    reader.receive_data(stream)
    with pytest.raises(MalformedFrame, match=f"field '{field}' must be in {limit}"):
        list(reader)


def test_welcome_below_the_smallest_frame_limit_is_refused() -> None:
    reader = FrameReader("collector")
    reader.receive_data(preamble() + encode(Welcome(MIN_MAX_FRAME_BYTES - 1, "0.1.0")))
    with pytest.raises(MalformedFrame, match=f"'max_frame_bytes' must be >= {MIN_MAX_FRAME_BYTES}"):
        list(reader)
