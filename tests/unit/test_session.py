"""The session decoders, sans-I/O: the rules of a stream, its tables and limits, version negotiation, and replies.

``SessionDecoder`` reads what a client writes (a live connection, or a file with ``live=False``); ``ReplyDecoder``
reads what a collector answers. Framing alone is tested in ``test_protocol.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Protocol

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.collector.ingest.lending import IngestDecoder
from ringtrace.collector.store.segments import EVENTS_ENTRY
from ringtrace.wire.decoder import (
    MAX_KIND_FIELDS,
    Limits,
    ReplyDecoder,
    SessionDecoder,
    StreamTables,
    negotiate,
)
from ringtrace.wire.errors import (
    BadPreamble,
    ConfigError,
    FrameTooLarge,
    LimitExceeded,
    MalformedFrame,
    ProtocolError,
    TornStream,
    UnexpectedFrame,
    UnsupportedVersion,
)
from ringtrace.wire.frames import (
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
    Events,
    Flush,
    FlushAck,
    Frame,
    FrameType,
    Goodbye,
    Hello,
    KindSpec,
    Schema,
    Stats,
    Strings,
    Track,
    Welcome,
    encode,
    preamble,
)
from ringtrace.wire.model import (
    ASYNC_TRACK,
    BUILTIN_KINDS,
    FIRST_TYPED_KIND,
    INSTANT,
    MAX_STRING_CHARS,
    SOURCE_TRACK,
    SPAN,
    THREAD_TRACK,
    DecodedEvent,
    TrackInfo,
    display_text,
    normalise_args,
    normalise_values,
)
from ringtrace.wire.reader import CLOSED, NEED_DATA, Sentinel
from ringtrace.wire.stream_encoder import StreamEncoder

# Hypothesis must never turn slowness into a failure: these tests make no timing claims.
property_test = settings(deadline=None, max_examples=50)

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
MAIN = TrackInfo(1, THREAD_TRACK, "MainThread", thread_id=777)
TASK = TrackInfo(2, ASYNC_TRACK, "Task-1", parent=1)
SCHEMA = Schema(BUILTIN_KINDS)
HTTP_KIND = KindSpec(40, "http.request", "span", (("status", "u16"), ("path", "str")))

#: Records as a thread buffer holds them: ``kind, label, start_ns, end_ns, args``.
RECORDS: list[tuple[int, Any, int, int, Any]] = [
    (SPAN, "GET /users", 2**62, 2**62 + 1_500, {"status": 200, "path": "/users"}),
    (INSTANT, "cache.miss", 2**62 + 10, 2**62 + 10, None),
    (SPAN, "db.query", 2**62 + 20, 2**62 + 900, {"rows": [1, 2, 3], "meta": {"table": "users", "ok": True}}),
    (SPAN, "GET /users", 2**62 + 5, 2**62 + 7, {"ratio": 0.5, "blob": b"\x00\xff", "none": None}),
    (INSTANT, 42, 2**62 + 30, 2**62 + 30, {}),
    (SPAN, "ünïcødé ✓", 2**62 + 40, 2**62 + 41, {"big": 2**64 - 1, "neg": -(2**63)}),
]


# -- helpers -------------------------------------------------------------------------------------------------------


class Feedable(Protocol):
    def receive_data(self, data: bytes) -> None: ...
    def get_buffer(self, sizehint: int = -1) -> memoryview: ...
    def buffer_updated(self, nbytes: int) -> None: ...


def copy_in(decoder: Feedable, chunk: bytes) -> None:
    decoder.receive_data(chunk)


def write_in(decoder: Feedable, chunk: bytes) -> None:
    """Deliver ``chunk`` the way asyncio's BufferedProtocol does: into views from ``get_buffer()``."""
    while chunk:
        with decoder.get_buffer(len(chunk)) as view:
            n = min(len(view), len(chunk))
            view[:n] = chunk[:n]
        decoder.buffer_updated(n)
        chunk = chunk[n:]


Feed = Callable[[Feedable, bytes], None]
FEEDERS = [pytest.param(copy_in, id="receive_data"), pytest.param(write_in, id="get_buffer")]
MODES = [pytest.param(True, id="live"), pytest.param(False, id="file")]


def flat(records: Iterable[tuple[Any, ...]]) -> list[Any]:
    return [value for record in records for value in record]


def frames_of(track: TrackInfo, records: list[tuple[Any, ...]], encoder: StreamEncoder | None = None) -> bytes:
    """What a client sends for ``records`` on ``track``: a new stream's prefix, then the batch (StreamEncoder)."""
    encoder = encoder or StreamEncoder()
    prefix = encoder.prefix()
    batch = encoder.encode(track, flat(records))
    return b"".join([*prefix, *batch.control, *(frame for frame, _ in batch.events)])


def opening(*frames: Frame) -> bytes:
    """A preamble, HELLO, and ``frames``."""
    return preamble() + encode(HELLO) + b"".join(encode(frame) for frame in frames)


def track_frame(track: TrackInfo) -> Track:
    return Track(track.track_id, track.kind, track.name, track.thread_id, track.parent)


#: A client stream with every kind of frame: the encoder's prefix and events, a rename, stats, flushes, and frames of
#: unknown ignorable types.
STREAM = (
    opening()
    + frames_of(MAIN, RECORDS[:4])
    + FRAME_HEADER.pack(3, 0xA5)
    + b"new"
    + encode(track_frame(TASK))
    + encode(Schema((HTTP_KIND,)))
    + encode(Stats(1, 2, 3, 4))
    + encode(track_frame(replace(MAIN, name="main loop")))
    + encode(Flush(9))
    + encode(FlushAck(3))
    + FRAME_HEADER.pack(0, 0xFE)
    + encode(Goodbye("exiting"))
)


def read_session(
    chunks: Iterable[bytes], feed: Feed = copy_in, *, live: bool = True, limits: Limits | None = None
) -> tuple[SessionDecoder, list[Frame]]:
    """Every frame of a client stream delivered in ``chunks``, welcoming the client on HELLO if ``live``; the stream
    must then end cleanly."""
    decoder = SessionDecoder(limits or Limits(), live=live)
    frames: list[Frame] = []
    for chunk in chunks:
        if chunk:  # an empty chunk would mean end of stream
            feed(decoder, chunk)
            for frame in decoder:
                frames.append(frame)
                if live and isinstance(frame, Hello):
                    decoder.welcome()
    decoder.receive_data(b"")
    assert decoder.next_frame() is CLOSED
    return decoder, frames


def session_with(data: bytes, *, live: bool = False, eof: bool = False, **limits: int) -> SessionDecoder:
    decoder = SessionDecoder(Limits(**limits), live=live)
    decoder.receive_data(data)
    if eof:
        decoder.receive_data(b"")
    return decoder


def session_error(decoder: SessionDecoder, *, welcome: bool = False) -> ProtocolError:
    """The error the decoder raises while reading its buffered frames (fails if it raises none)."""
    with pytest.raises(ProtocolError) as info:
        for frame in decoder:
            if welcome and isinstance(frame, Hello):
                decoder.welcome()
    return info.value


def names_number(error: Exception, number: int) -> bool:
    """Whether the error message mentions ``number`` as a whole number."""
    return re.search(rf"(?<!\d){number}(?!\d)", str(error)) is not None


def tables_state(tables: StreamTables) -> tuple[Any, ...]:
    return (dict(tables.strings), dict(tables.kinds), dict(tables.tracks), tables.columns)


def decoded_rows(tables: StreamTables, frames: Iterable[Frame]) -> list[tuple[Any, ...]]:
    return [row for frame in frames if isinstance(frame, Events) for row in tables.rows(frame)]


def expected_rows(records: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    kinds = {kind.id: kind for kind in BUILTIN_KINDS}
    return [(kinds[kind], display_text(label), start, end - start, args) for kind, label, start, end, args in records]


def events_body(
    count: int, first_ts: int, last_ts: int, payload: bytes, *, track: int = 1, header_size: int = EVENTS_HEADER.size
) -> bytes:
    extra = b"\xee" * (header_size - EVENTS_HEADER.size)
    return EVENTS_HEADER.pack(header_size, 0, track, count, first_ts, last_ts) + extra + payload


def raw_frame(frame_type: int, body: bytes) -> bytes:
    return FRAME_HEADER.pack(len(body), frame_type) + body


# -- a whole stream ------------------------------------------------------------------------------------------------

REFERENCE_DECODER, REFERENCE_FRAMES = read_session([STREAM], live=False)


def test_reference_stream_decodes_to_every_frame_and_table() -> None:
    types = [type(frame) for frame in REFERENCE_FRAMES]
    assert types == [Hello, Schema, Track, Strings, Events, Track, Schema, Stats, Track, Flush, FlushAck, Goodbye]
    tables = REFERENCE_DECODER.tables
    assert tables.tracks == {1: replace(MAIN, name="main loop"), 2: TASK}
    builtin = {kind.id: kind for kind in BUILTIN_KINDS}
    assert {k: tables.kinds[k] for k in [*builtin, 40]} == {**builtin, 40: HTTP_KIND}
    assert all(k >= FIRST_TYPED_KIND for k in tables.kinds.keys() - {*builtin, 40})  # typed event classes
    assert tables.strings == {0: "GET /users", 1: "cache.miss", 2: "db.query"}
    assert tables.columns == EVENT_COLUMNS
    assert decoded_rows(tables, REFERENCE_FRAMES) == expected_rows(RECORDS[:4])
    assert REFERENCE_DECODER.skipped_frames == 2
    assert REFERENCE_DECODER.hello == HELLO
    assert REFERENCE_DECODER.protocol_version == PROTOCOL_VERSION


@pytest.mark.parametrize("live", MODES)
@pytest.mark.parametrize("feed", FEEDERS)
def test_stream_split_at_every_offset(feed: Feed, live: bool) -> None:
    expected = tables_state(REFERENCE_DECODER.tables)
    for cut in range(len(STREAM) + 1):
        decoder, frames = read_session([STREAM[:cut], STREAM[cut:]], feed, live=live)
        assert frames == REFERENCE_FRAMES, f"split at {cut}"
        assert tables_state(decoder.tables) == expected, f"split at {cut}"
        assert decoder.skipped_frames == 2, f"split at {cut}"


@pytest.mark.parametrize("live", MODES)
@pytest.mark.parametrize("feed", FEEDERS)
def test_stream_fed_one_byte_at_a_time(feed: Feed, live: bool) -> None:
    decoder, frames = read_session([STREAM[i : i + 1] for i in range(len(STREAM))], feed, live=live)
    assert frames == REFERENCE_FRAMES
    assert tables_state(decoder.tables) == tables_state(REFERENCE_DECODER.tables)
    assert decoded_rows(decoder.tables, frames) == expected_rows(RECORDS[:4])


@property_test
@given(data=st.data())
def test_stream_split_anywhere(data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(STREAM)), max_size=8)))
    chunks = [STREAM[start:end] for start, end in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
    feed = data.draw(st.sampled_from([copy_in, write_in]))
    _, frames = read_session(chunks, feed, live=data.draw(st.booleans()))
    assert frames == REFERENCE_FRAMES


# -- connection rules ----------------------------------------------------------------------------------------------

#: One of every frame a client may send after HELLO.
LATER_FRAMES: list[Frame] = [
    SCHEMA,
    Strings(0, ("a",)),
    track_frame(MAIN),
    Events(1, 1, 0, 0, b"\x95\x91\x00\x91\x00\x91\x00\x91\x00\x91\xc0"),
    Stats(0, 0),
    Flush(1),
    FlushAck(1),
    Goodbye("bye"),
]
LATER = [pytest.param(frame, id=frame.TYPE.name) for frame in LATER_FRAMES]


@pytest.mark.parametrize("live", MODES)
@pytest.mark.parametrize("frame", LATER)
def test_first_frame_must_be_hello(frame: Frame, live: bool) -> None:
    error = session_error(session_with(preamble() + encode(frame), live=live))
    assert isinstance(error, UnexpectedFrame)
    assert "HELLO" in str(error)
    assert frame.TYPE.name in str(error)


@pytest.mark.parametrize("frame", [*LATER, pytest.param(HELLO, id="HELLO")])
def test_live_client_sends_nothing_after_hello_until_welcome(frame: Frame) -> None:
    decoder = session_with(opening(frame), live=True)
    assert decoder.next_frame() == HELLO
    with pytest.raises(UnexpectedFrame) as info:
        decoder.next_frame()
    assert frame.TYPE.name in str(info.value)
    assert "WELCOME" in str(info.value)


def test_live_client_frames_arrive_after_welcome() -> None:
    decoder = session_with(opening(), live=True)
    assert decoder.next_frame() == HELLO
    assert decoder.next_frame() is NEED_DATA
    assert decoder.protocol_version == 0  # nothing negotiated yet
    welcome = decoder.welcome("9.9.9")
    expected = Welcome(PROTOCOL_VERSION, Limits().max_frame_bytes, 100_000, 10_000, 1_000, "9.9.9", string_resets=True)
    assert welcome == expected
    assert decoder.protocol_version == PROTOCOL_VERSION
    decoder.receive_data(b"".join(map(encode, LATER_FRAMES[:3])))
    assert list(decoder) == LATER_FRAMES[:3]


def test_welcome_states_the_limits() -> None:
    limits = Limits(max_frame_bytes=MIN_MAX_FRAME_BYTES, max_strings=5, max_tracks=6, max_kinds=7)
    decoder = SessionDecoder(limits)
    decoder.receive_data(opening())
    assert list(decoder) == [HELLO]
    assert decoder.welcome("1.0") == Welcome(PROTOCOL_VERSION, MIN_MAX_FRAME_BYTES, 5, 6, 7, "1.0", string_resets=True)


def test_file_needs_no_welcome() -> None:
    decoder = session_with(opening(*LATER_FRAMES[:3]), live=False, eof=True)
    assert list(decoder) == [HELLO, *LATER_FRAMES[:3]]
    assert decoder.protocol_version == PROTOCOL_VERSION
    assert decoder.next_frame() is CLOSED


@pytest.mark.parametrize(
    ("data", "state"),
    [
        pytest.param(b"", "before HELLO", id="before-hello"),
        pytest.param(opening(), "twice", id="twice"),
    ],
)
def test_welcome_is_only_valid_right_after_hello(data: bytes, state: str) -> None:
    decoder = session_with(data, live=True)
    list(decoder)
    if state == "twice":
        decoder.welcome()
    with pytest.raises(UnexpectedFrame, match="welcome"):
        decoder.welcome()


def test_welcome_is_not_for_files() -> None:
    decoder = session_with(opening(), live=False)
    assert list(decoder) == [HELLO]
    with pytest.raises(UnexpectedFrame, match="welcome"):
        decoder.welcome()


@pytest.mark.parametrize("live", MODES)
def test_hello_twice_is_refused(live: bool) -> None:
    decoder = session_with(opening(SCHEMA, HELLO), live=live)
    error = session_error(decoder, welcome=live)
    assert isinstance(error, UnexpectedFrame)
    assert "HELLO may only be the first frame" in str(error)


@pytest.mark.parametrize("track_id", [0, 2, 2**32 - 1])
def test_events_for_an_undeclared_track_are_refused(track_id: int) -> None:
    events = Events(track_id, 1, 0, 0, b"\x95\x91\x00\x91\x00\x91\x00\x91\x00\x91\xc0")
    error = session_error(session_with(opening(SCHEMA, track_frame(MAIN), events)))
    assert isinstance(error, MalformedFrame)
    assert "EVENTS" in str(error)
    assert names_number(error, track_id)


def test_events_for_a_declared_track_are_accepted() -> None:
    events = replace(LATER_FRAMES[3], track_id=TASK.track_id)
    decoder = session_with(opening(SCHEMA, track_frame(TASK), events))
    assert list(decoder)[-1] == events


def test_schema_redeclaring_a_kind_identically_is_accepted() -> None:
    decoder = session_with(opening(SCHEMA, Schema((*BUILTIN_KINDS, HTTP_KIND)), Schema((HTTP_KIND,))))
    assert len(list(decoder)) == 4
    assert decoder.tables.kinds == {**{kind.id: kind for kind in BUILTIN_KINDS}, 40: HTTP_KIND}


@pytest.mark.parametrize(
    "changed",
    [
        replace(HTTP_KIND, name="http.server"),
        replace(HTTP_KIND, shape="instant"),
        replace(HTTP_KIND, fields=(("status", "u32"), ("path", "str"))),
        replace(HTTP_KIND, fields=()),
    ],
)
def test_schema_redeclaring_a_kind_differently_is_refused(changed: KindSpec) -> None:
    error = session_error(session_with(opening(Schema((HTTP_KIND,)), Schema((changed,)))))
    assert isinstance(error, MalformedFrame)
    assert "SCHEMA" in str(error)
    assert names_number(error, HTTP_KIND.id)


def test_schema_delta_adds_kinds() -> None:
    decoder = session_with(opening(SCHEMA))
    list(decoder)
    builtin = {kind.id for kind in BUILTIN_KINDS}
    assert set(decoder.tables.kinds) == builtin
    decoder.receive_data(encode(Schema((HTTP_KIND,))) + encode(Schema((KindSpec(41, "gc", "instant"),))))
    list(decoder)
    assert set(decoder.tables.kinds) == {*builtin, 40, 41}
    assert decoder.tables.kinds[41] == KindSpec(41, "gc", "instant")


@pytest.mark.parametrize(
    "columns",
    [
        pytest.param(("kind", "name", "ts", "dur"), id="no-args"),
        pytest.param(("kind", "ts", "dur", "args"), id="no-name"),
        pytest.param((), id="none"),
    ],
)
def test_schema_columns_must_name_every_needed_column(columns: tuple[str, ...]) -> None:
    error = session_error(session_with(opening(Schema(BUILTIN_KINDS, columns))))
    assert isinstance(error, MalformedFrame)
    assert "'columns'" in str(error)


def test_track_frame_for_a_known_id_renames_it() -> None:
    renamed = replace(MAIN, name="renamed", thread_id=778)
    decoder = session_with(opening(track_frame(MAIN), track_frame(TASK), track_frame(renamed)))
    list(decoder)
    assert decoder.tables.tracks == {1: renamed, 2: TASK}


def test_strings_continue_the_table() -> None:
    decoder = session_with(opening(Strings(0, ("a", "b")), Strings(2, ("c",)), Strings(10, ("k",))))
    list(decoder)
    assert decoder.tables.strings == {0: "a", 1: "b", 2: "c", 10: "k"}


def test_stats_flush_and_goodbye_pass_through() -> None:
    frames = [Stats(1, 2, 3, 4), Flush(5), FlushAck(6), Goodbye("bye")]
    decoder = session_with(opening(*frames), eof=True)
    assert list(decoder) == [HELLO, *frames]
    assert decoder.next_frame() is CLOSED


# -- after an error the decoder is dead ----------------------------------------------------------------------------

SESSION_ERRORS = [
    pytest.param(b"GET / HTTP/1.1\r\n", False, BadPreamble, id="bad-preamble"),
    pytest.param(preamble() + encode(SCHEMA), False, UnexpectedFrame, id="first-not-hello"),
    pytest.param(opening(SCHEMA), True, UnexpectedFrame, id="before-welcome"),
    pytest.param(opening(LATER_FRAMES[3]), False, MalformedFrame, id="undeclared-track"),
    pytest.param(opening(HELLO), False, UnexpectedFrame, id="hello-twice"),
    pytest.param(opening(Strings(99_999, ("a", "b"))), False, LimitExceeded, id="max-strings"),
    pytest.param(
        opening(Schema((HTTP_KIND,)), Schema((replace(HTTP_KIND, name="x"),))), False, MalformedFrame, id="kind-changed"
    ),
    pytest.param(opening() + raw_frame(FrameType.STATS, b"\xc1"), False, MalformedFrame, id="malformed"),
    pytest.param(opening() + raw_frame(0x33, b""), False, UnexpectedFrame, id="unknown-type"),
    pytest.param(opening() + FRAME_HEADER.pack(2**31, FrameType.EVENTS), False, FrameTooLarge, id="too-large"),
    pytest.param(
        preamble() + encode(replace(HELLO, protocol_min=3, protocol_max=3)), False, UnsupportedVersion, id="version"
    ),
]


@pytest.mark.parametrize(("data", "live", "kind"), SESSION_ERRORS)
def test_decoder_stays_dead_after_an_error(data: bytes, live: bool, kind: type[ProtocolError]) -> None:
    decoder = session_with(data, live=live)
    error = session_error(decoder)
    assert isinstance(error, kind)
    decoder.receive_data(encode(Stats(0, 0)) + encode(Flush(1)))
    decoder.receive_data(b"")
    for _ in range(3):
        with pytest.raises(ProtocolError) as again:
            decoder.next_frame()
        assert again.value is error
    with pytest.raises(ProtocolError) as again:
        list(decoder)
    assert again.value is error


def test_decoder_stays_dead_after_a_torn_stream() -> None:
    decoder = session_with(opening(SCHEMA) + encode(Flush(1))[:-2], eof=True)
    error = session_error(decoder)
    assert isinstance(error, TornStream)
    with pytest.raises(TornStream) as again:
        decoder.next_frame()
    assert again.value is error


# -- limits: exactly at each one is accepted, one past it is refused ------------------------------------------------

LIMIT = MIN_MAX_FRAME_BYTES


def frame_of_size(size: int) -> Events:
    """An EVENTS frame on MAIN whose encoding is exactly ``size`` bytes (its payload is not decoded here)."""
    return Events(MAIN.track_id, 1, 0, 0, b"x" * (size - FRAME_HEADER.size - EVENTS_HEADER.size))


@pytest.mark.parametrize("feed", FEEDERS)
def test_frame_of_exactly_max_frame_bytes_is_accepted(feed: Feed) -> None:
    frame = frame_of_size(LIMIT)
    data = opening(track_frame(MAIN)) + encode(frame, LIMIT)
    _, frames = read_session([data], feed, live=False, limits=Limits(max_frame_bytes=LIMIT))
    assert frames == [HELLO, track_frame(MAIN), frame]


@pytest.mark.parametrize("live", MODES)
@pytest.mark.parametrize("frame_type", [FrameType.EVENTS, FrameType.STRINGS, 0xC4])
def test_frame_over_max_frame_bytes_is_refused_as_soon_as_its_header_arrives(live: bool, frame_type: int) -> None:
    decoder = SessionDecoder(Limits(max_frame_bytes=LIMIT), live=live)
    header = FRAME_HEADER.pack(LIMIT + 1 - FRAME_HEADER.size, frame_type)
    decoder.receive_data(opening(track_frame(MAIN)) + header[:-1])
    assert next(iter(decoder)) == HELLO
    if live:
        decoder.welcome()
    assert list(decoder) == [track_frame(MAIN)]
    assert decoder.next_frame() is NEED_DATA
    decoder.receive_data(header[-1:])  # the header is complete; not one byte of the body was sent
    with pytest.raises(FrameTooLarge) as info:
        decoder.next_frame()
    assert (info.value.size, info.value.limit) == (LIMIT + 1, LIMIT)
    assert "max_frame_bytes" in str(info.value)


def test_session_refuses_a_frame_limit_below_the_protocol_minimum() -> None:
    with pytest.raises(ConfigError):
        SessionDecoder(Limits(max_frame_bytes=MIN_MAX_FRAME_BYTES - 1))


def assert_limit(error: ProtocolError, name: str, limit: int, value: int) -> None:
    assert isinstance(error, LimitExceeded)
    assert (error.limit_name, error.limit, error.value) == (name, limit, value)
    assert name in str(error)
    assert names_number(error, limit)
    assert names_number(error, value)


MAX_STRINGS = 10


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(Strings(MAX_STRINGS - 1, ("last",)), id="last-id"),
        pytest.param(Strings(0, tuple(map(str, range(MAX_STRINGS)))), id="full-run"),
        pytest.param(Strings(5, tuple(map(str, range(MAX_STRINGS - 5)))), id="run-to-the-end"),
        pytest.param(Strings(0, ()), id="empty"),
    ],
)
def test_string_ids_below_max_strings_are_accepted(frame: Strings) -> None:
    decoder = session_with(opening(frame), max_strings=MAX_STRINGS)
    assert list(decoder) == [HELLO, frame]
    assert max(decoder.tables.strings, default=0) <= MAX_STRINGS - 1


@pytest.mark.parametrize(
    ("frame", "value"),
    [
        pytest.param(Strings(MAX_STRINGS, ("one past",)), MAX_STRINGS, id="first-id-at-limit"),
        pytest.param(Strings(0, tuple(map(str, range(MAX_STRINGS + 1)))), MAX_STRINGS, id="run-one-too-long"),
        pytest.param(Strings(MAX_STRINGS - 1, ("a", "b")), MAX_STRINGS, id="run-crossing-the-limit"),
        pytest.param(Strings(2**32 - 1, ("far",)), 2**32 - 1, id="largest-id"),
    ],
)
def test_string_id_at_max_strings_is_refused(frame: Strings, value: int) -> None:
    decoder = session_with(opening(frame), max_strings=MAX_STRINGS)
    assert decoder.next_frame() == HELLO
    assert_limit(session_error(decoder), "max_strings", MAX_STRINGS, value)
    assert decoder.tables.strings == {}


@pytest.mark.parametrize("char", ["a", "é", "✓", "🙂"])
def test_string_of_max_chars_is_accepted_and_one_more_refused(char: str) -> None:
    assert MAX_STRING_CHARS == 256
    longest = char * MAX_STRING_CHARS
    decoder = session_with(opening(Strings(0, ("short", longest))))
    list(decoder)
    assert decoder.tables.strings[1] == longest
    decoder = session_with(opening(Strings(0, ("short", longest + char))))
    assert decoder.next_frame() == HELLO
    assert_limit(session_error(decoder), "max_string_chars", MAX_STRING_CHARS, MAX_STRING_CHARS + 1)


MAX_TRACKS = 3
TRACKS = [Track(i, SOURCE_TRACK, f"source {i}") for i in range(1, MAX_TRACKS + 2)]


def test_max_tracks_are_accepted_and_one_more_refused() -> None:
    decoder = session_with(opening(*TRACKS[:MAX_TRACKS]), max_tracks=MAX_TRACKS)
    list(decoder)
    assert len(decoder.tables.tracks) == MAX_TRACKS
    decoder.receive_data(encode(replace(TRACKS[0], name="renamed")))  # a rename at the limit adds nothing
    list(decoder)
    assert decoder.tables.tracks[1].name == "renamed"
    decoder.receive_data(encode(TRACKS[MAX_TRACKS]))
    assert_limit(session_error(decoder), "max_tracks", MAX_TRACKS, MAX_TRACKS + 1)
    assert TRACKS[MAX_TRACKS].track_id not in decoder.tables.tracks


@pytest.mark.parametrize("rename", [False, True])
def test_track_name_of_max_chars_is_accepted_and_one_more_refused(rename: bool) -> None:
    first = [track_frame(MAIN)] if rename else []
    ok = replace(track_frame(MAIN), name="t" * MAX_STRING_CHARS)
    decoder = session_with(opening(*first, ok))
    list(decoder)
    assert decoder.tables.tracks[MAIN.track_id].name == "t" * MAX_STRING_CHARS
    decoder = session_with(opening(*first, replace(ok, name="t" * (MAX_STRING_CHARS + 1))))
    error = session_error(decoder)
    assert_limit(error, "max_string_chars", MAX_STRING_CHARS, MAX_STRING_CHARS + 1)
    assert "TRACK" in str(error)


def test_strings_not_kept_are_still_checked() -> None:
    decoder = SessionDecoder(Limits(max_string_bytes=10), live=False, keep_strings=False)
    decoder.receive_data(opening(Strings(0, ("abc", "de")), Strings(1, ("de", "fgh"))))
    frames = list(decoder)
    assert [f.TYPE for f in frames] == [FrameType.HELLO, FrameType.STRINGS, FrameType.STRINGS]
    assert decoder.added_strings == [(2, "fgh")] and decoder.string_bytes == 8
    assert decoder.tables.strings == {}
    decoder.receive_data(encode(Strings(1, ("dx",))))
    error = session_error(decoder)
    assert isinstance(error, MalformedFrame) and "string id 1 redefined" in str(error)
    decoder = SessionDecoder(Limits(max_string_bytes=10), live=False, keep_strings=False)
    decoder.receive_data(opening(Strings(0, ("abcdef", "ghijk"))))
    assert_limit(session_error(decoder), "max_string_bytes", 10, 11)


def test_strings_not_kept_cost_little_even_declared_far_apart_and_stay_checked() -> None:
    """The collector keeps a hash an id, in one array for ids numbered from 0 up (as clients number them); an id far
    past those declared (near a large max_strings) goes to a dict instead of growing the array to it."""
    limits = Limits(max_strings=2**32 - 1)
    decoder = SessionDecoder(limits, live=False, keep_strings=False)
    decoder.receive_data(opening(Strings(0, ("a", "b")), Strings(2**32 - 3, ("far", "")), Strings(5, ("c",))))
    list(decoder)
    assert decoder.table_bytes < 1024 * 1024
    assert decoder.string_bytes == 6
    # Both are checked alike: a redefinition is refused wherever the id's hash is kept.
    for string_id in (2**32 - 2, 5):
        decoder = SessionDecoder(limits, live=False, keep_strings=False)
        decoder.receive_data(opening(Strings(2**32 - 2, ("",)), Strings(5, ("c",)), Strings(string_id, ("x",))))
        error = session_error(decoder)
        assert isinstance(error, MalformedFrame) and f"string id {string_id} redefined" in str(error)
    # A far id that the array grows to cover later is still known there.
    decoder = SessionDecoder(limits, live=False, keep_strings=False)
    many = Strings(0, tuple(f"s{i}" for i in range(20_000)))
    decoder.receive_data(opening(Strings(100_000, ("far",)), many, Strings(100_000, ("far",))))
    list(decoder)
    assert decoder.added_strings == [] and decoder.string_bytes == 3 + sum(len(s) for s in many.strings)
    decoder.receive_data(encode(Strings(100_000, ("other",))))
    assert "string id 100000 redefined" in str(session_error(decoder))


def test_live_track_names_have_a_budget_of_max_string_bytes_that_ended_tracks_give_back() -> None:
    name = "\u00e9" * 100  # 200 bytes of UTF-8
    decoder = session_with(opening(*(Track(i, SOURCE_TRACK, name) for i in range(1, 6))), max_string_bytes=1000)
    list(decoder)
    assert decoder.track_name_bytes == 1000
    # A rename and an end give their bytes back; then another track fits, and one byte more does not.
    ended = replace(Track(1, SOURCE_TRACK, ""), ended=True)
    decoder.receive_data(encode(replace(TRACKS[1], track_id=2, name="x")) + encode(ended))
    decoder.receive_data(encode(Track(7, SOURCE_TRACK, "\u00e9" * 199 + "x")))  # 399 bytes
    list(decoder)
    assert decoder.track_name_bytes == 1000
    decoder.receive_data(encode(Track(8, SOURCE_TRACK, "z")))
    error = session_error(decoder)
    assert_limit(error, "max_string_bytes", 1000, 1001)
    assert "TRACK" in str(error)


MAX_KINDS = 3
KINDS = tuple(KindSpec(i, f"kind {i}", "span") for i in range(MAX_KINDS + 1))


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param([Schema(KINDS[:MAX_KINDS])], id="one-frame"),
        pytest.param([Schema(KINDS[:1]), Schema(KINDS[1:MAX_KINDS])], id="delta"),
        pytest.param([Schema(KINDS[:MAX_KINDS]), Schema(KINDS[:MAX_KINDS])], id="redeclared-at-the-limit"),
    ],
)
def test_max_kinds_are_accepted(frames: list[Frame]) -> None:
    decoder = session_with(opening(*frames), max_kinds=MAX_KINDS)
    list(decoder)
    assert len(decoder.tables.kinds) == MAX_KINDS


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param([Schema(KINDS)], id="one-frame"),
        pytest.param([Schema(KINDS[:MAX_KINDS]), Schema(KINDS[MAX_KINDS:])], id="delta"),
    ],
)
def test_one_kind_past_max_kinds_is_refused(frames: list[Frame]) -> None:
    decoder = session_with(opening(*frames), max_kinds=MAX_KINDS)
    assert_limit(session_error(decoder), "max_kinds", MAX_KINDS, MAX_KINDS + 1)


# -- version negotiation -------------------------------------------------------------------------------------------


def hello_speaking(low: int, high: int) -> Hello:
    return replace(HELLO, protocol_min=low, protocol_max=high)


@pytest.mark.parametrize(
    ("client", "collector", "chosen"),
    [
        pytest.param((2, 2), (2, 2), 2, id="same"),
        pytest.param((1, 5), (2, 3), 3, id="client-wider"),
        pytest.param((2, 3), (1, 5), 3, id="collector-wider"),
        pytest.param((3, 9), (2, 4), 4, id="client-newer"),
        pytest.param((2, 4), (3, 9), 4, id="collector-newer"),
        pytest.param((1, 2), (2, 7), 2, id="touching-low"),
        pytest.param((7, 9), (2, 7), 7, id="touching-high"),
    ],
)
def test_negotiate_picks_the_highest_common_version(
    client: tuple[int, int], collector: tuple[int, int], chosen: int
) -> None:
    assert negotiate(hello_speaking(*client), collector) == chosen


@pytest.mark.parametrize(
    ("client", "collector"),
    [
        pytest.param((1, 1), (2, 2), id="client-older"),
        pytest.param((3, 5), (2, 2), id="client-newer"),
        pytest.param((1, 3), (4, 6), id="collector-newer"),
        pytest.param((7, 8), (4, 6), id="collector-older"),
    ],
)
def test_negotiate_without_a_common_version_names_both_ranges(
    client: tuple[int, int], collector: tuple[int, int]
) -> None:
    with pytest.raises(UnsupportedVersion) as info:
        negotiate(hello_speaking(*client), collector)
    assert f"{client[0]}..{client[1]}" in str(info.value)
    assert f"{collector[0]}..{collector[1]}" in str(info.value)


version_ranges = st.tuples(st.integers(0, 20), st.integers(0, 20)).map(sorted)


@property_test
@given(client=version_ranges, collector=version_ranges)
def test_negotiate_agrees_with_the_ranges(client: list[int], collector: list[int]) -> None:
    common = set(range(client[0], client[1] + 1)) & set(range(collector[0], collector[1] + 1))
    hello = hello_speaking(client[0], client[1])
    if common:
        assert negotiate(hello, (collector[0], collector[1])) == max(common)
    else:
        with pytest.raises(UnsupportedVersion):
            negotiate(hello, (collector[0], collector[1]))


def test_negotiate_defaults_to_the_versions_this_code_speaks() -> None:
    assert negotiate(HELLO) == PROTOCOL_VERSION
    assert negotiate(hello_speaking(0, 0xFFFF)) == PROTOCOL_VERSIONS[1]


def test_welcome_picks_the_highest_common_version() -> None:
    decoder = session_with(preamble() + encode(hello_speaking(1, 0xFFFF)), live=True)
    assert list(decoder) == [hello_speaking(1, 0xFFFF)]
    assert decoder.welcome().protocol_version == PROTOCOL_VERSIONS[1]
    assert decoder.protocol_version == PROTOCOL_VERSIONS[1]


@pytest.mark.parametrize(
    "client",
    [
        pytest.param((PROTOCOL_VERSIONS[1] + 1, PROTOCOL_VERSIONS[1] + 3), id="client-newer"),
        pytest.param((0, PROTOCOL_VERSIONS[0] - 1), id="client-older"),
    ],
)
def test_welcome_without_a_common_version_names_both_ranges(client: tuple[int, int]) -> None:
    hello = hello_speaking(*client)
    decoder = session_with(preamble() + encode(hello), live=True)
    assert list(decoder) == [hello]
    with pytest.raises(UnsupportedVersion) as info:
        decoder.welcome()
    assert f"{client[0]}..{client[1]}" in str(info.value)
    assert f"{PROTOCOL_VERSIONS[0]}..{PROTOCOL_VERSIONS[1]}" in str(info.value)
    # The stream is over: whatever the client sends next, or a clean close, raises the same error.
    decoder.receive_data(encode(SCHEMA))
    decoder.receive_data(b"")
    with pytest.raises(UnsupportedVersion) as again:
        decoder.next_frame()
    assert again.value is info.value


def test_file_without_a_common_version_is_refused_at_hello() -> None:
    decoder = session_with(preamble() + encode(hello_speaking(3, 4)) + encode(SCHEMA), live=False)
    error = session_error(decoder)
    assert isinstance(error, UnsupportedVersion)
    assert "3..4" in str(error)


@pytest.mark.parametrize("live", MODES)
def test_hello_with_protocol_min_above_max_is_malformed(live: bool) -> None:
    decoder = session_with(preamble() + encode(hello_speaking(3, 2)), live=live)
    error = session_error(decoder)
    assert isinstance(error, MalformedFrame)
    assert "protocol_min" in str(error)


@pytest.mark.parametrize("stream_format", [1, STREAM_FORMAT + 1])
def test_preamble_of_another_stream_format_is_unsupported(stream_format: int) -> None:
    decoder = session_with(PREAMBLE.pack(MAGIC, stream_format, 0) + encode(HELLO))
    error = session_error(decoder)
    assert isinstance(error, UnsupportedVersion)
    assert names_number(error, stream_format)
    assert names_number(error, STREAM_FORMAT)


def test_welcome_from_the_session_reads_back_at_the_client() -> None:
    decoder = session_with(opening(), live=True)
    list(decoder)
    welcome = decoder.welcome()
    reply = ReplyDecoder()
    reply.receive_data(preamble() + encode(welcome))
    assert list(reply) == [welcome]
    assert reply.welcomed


# -- frame types ---------------------------------------------------------------------------------------------------

IGNORED_STREAM = (
    opening()
    + raw_frame(0x80, b"")
    + encode(SCHEMA)
    + raw_frame(0xC1, msgpack.packb({"hint": 1}))
    + encode(track_frame(MAIN))
    + raw_frame(0xFE, b"\x00" * 40)
)


@pytest.mark.parametrize("live", MODES)
@pytest.mark.parametrize("feed", FEEDERS)
def test_unknown_ignorable_frames_are_skipped_at_every_split(feed: Feed, live: bool) -> None:
    for cut in range(len(IGNORED_STREAM) + 1):
        decoder, frames = read_session([IGNORED_STREAM[:cut], IGNORED_STREAM[cut:]], feed, live=live)
        assert frames == [HELLO, SCHEMA, track_frame(MAIN)], f"split at {cut}"
        assert decoder.skipped_frames == 3, f"split at {cut}"


@pytest.mark.parametrize("frame_type", [0, 10, 0x42, 0x7F])
def test_unknown_frame_without_the_ignorable_bit_is_refused(frame_type: int) -> None:
    assert not frame_type & IGNORABLE
    decoder = session_with(opening(SCHEMA) + raw_frame(frame_type, b"")[: FRAME_HEADER.size])
    error = session_error(decoder)
    assert isinstance(error, UnexpectedFrame)
    assert names_number(error, frame_type)


@pytest.mark.parametrize("live", MODES)
def test_a_client_may_not_send_welcome(live: bool) -> None:
    welcome = Welcome(PROTOCOL_VERSION, LIMIT, 2, 2, 2, "x")
    decoder = session_with(opening() + encode(welcome)[: FRAME_HEADER.size], live=live)
    error = session_error(decoder, welcome=live)
    assert isinstance(error, UnexpectedFrame)
    assert "WELCOME" in str(error)


# -- tables: decoding EVENTS payloads ------------------------------------------------------------------------------


def decode_stream(data: bytes, live: bool = False) -> tuple[SessionDecoder, list[Events]]:
    decoder, frames = read_session([data], live=live)
    return decoder, [frame for frame in frames if isinstance(frame, Events)]


def test_rows_decode_what_the_stream_encoder_wrote() -> None:
    decoder, events = decode_stream(opening() + frames_of(MAIN, RECORDS))
    rows = [row for frame in events for row in decoder.tables.rows(frame)]
    assert rows == expected_rows(RECORDS)
    assert rows[4][1] == "42"  # a label that is not text is sent as its text


def test_events_decode_what_the_stream_encoder_wrote() -> None:
    decoder, frames = decode_stream(opening() + frames_of(MAIN, RECORDS))
    events = [event for frame in frames for event in decoder.tables.events(frame)]
    assert events == [
        DecodedEvent(kind.name, name, ts, dur, args, MAIN) for kind, name, ts, dur, args in expected_rows(RECORDS)
    ]


def test_events_show_the_track_as_renamed() -> None:
    data = opening() + frames_of(MAIN, RECORDS[:1]) + encode(track_frame(replace(MAIN, name="renamed")))
    decoder, (frame,) = decode_stream(data)
    (event,) = decoder.tables.events(frame)
    assert event.track == replace(MAIN, name="renamed")


def test_events_split_over_frames_decode_in_order() -> None:
    encoder = StreamEncoder(max_events_per_frame=2)
    decoder, frames = decode_stream(opening() + frames_of(MAIN, RECORDS, encoder))
    assert [frame.count for frame in frames] == [2, 2, 2]
    assert decoded_rows(decoder.tables, frames) == expected_rows(RECORDS)


def test_rows_of_two_tracks() -> None:
    encoder = StreamEncoder()
    data = opening() + frames_of(MAIN, RECORDS[:3], encoder)
    batch = encoder.encode(TASK, flat(RECORDS[3:]))
    data += b"".join([*batch.control, *(frame for frame, _ in batch.events)])
    decoder, frames = decode_stream(data)
    assert [frame.track_id for frame in frames] == [MAIN.track_id, TASK.track_id]
    assert decoded_rows(decoder.tables, frames) == expected_rows(RECORDS)
    assert {event.track for frame in frames for event in decoder.tables.events(frame)} == {MAIN, TASK}


def test_rows_find_columns_by_name() -> None:
    """SCHEMA names the payload's columns: a reader finds the ones it needs wherever they are, and skips others."""
    columns = ("extra", "args", "dur", "ts", "name", "kind")
    payload = msgpack.packb([["x", "y"], [{"a": 1}, None], [10, 0], [0, 5], [0, 1], [SPAN, INSTANT]])
    events = Events(MAIN.track_id, 2, 100, 110, payload)
    data = opening(Schema(BUILTIN_KINDS, columns), Strings(0, ("first", "second")), track_frame(MAIN), events)
    decoder, (frame,) = decode_stream(data)
    assert decoder.tables.columns == columns
    assert list(decoder.tables.rows(frame)) == [
        (BUILTIN_KINDS[SPAN], "first", 100, 10, {"a": 1}),
        (BUILTIN_KINDS[INSTANT], "second", 105, 0, None),
    ]


def test_rows_with_unknown_kind_and_string() -> None:
    payload = msgpack.packb([[99], [7], [0], [1], [None]])
    data = opening(SCHEMA, track_frame(MAIN), Events(MAIN.track_id, 1, 50, 51, payload))
    decoder, (frame,) = decode_stream(data)
    assert list(decoder.tables.rows(frame)) == [(None, "<unknown string 7>", 50, 1, None)]
    (event,) = decoder.tables.events(frame)
    assert (event.kind, event.name) == ("unknown", "<unknown string 7>")


def test_rows_of_a_longer_events_header() -> None:
    """A later version's EVENTS header (more than 28 bytes) is skipped: the payload starts at header_size."""
    encoder = StreamEncoder()
    data = opening() + b"".join(encoder.prefix())
    batch = encoder.encode(MAIN, flat(RECORDS))
    (frame, _), *_ = batch.events
    header_size, flags, track, count, first_ts, last_ts = EVENTS_HEADER.unpack_from(frame, FRAME_HEADER.size)
    payload = frame[FRAME_HEADER.size + header_size :]
    longer = EVENTS_HEADER.pack(40, flags, track, count, first_ts, last_ts) + b"\x01" * 12 + payload
    data += b"".join(batch.control) + raw_frame(FrameType.EVENTS, longer)
    decoder, frames = decode_stream(data)
    assert decoded_rows(decoder.tables, frames) == expected_rows(RECORDS)


records = st.lists(
    st.tuples(
        st.sampled_from([SPAN, INSTANT]),
        st.text(max_size=20) | st.text(min_size=250, max_size=300),
        st.integers(0, 2**62),
        st.integers(0, 2**40),
        st.none()
        | st.dictionaries(
            st.text(max_size=8),
            st.integers(-(2**63), 2**64 - 1)
            | st.text(max_size=8)
            | st.floats(allow_nan=False)
            | st.booleans()
            | st.none()
            | st.binary(max_size=8),
            max_size=3,
        ),
    ).map(lambda t: (t[0], t[1], t[2], t[2] + (t[3] if t[0] == SPAN else 0), t[4])),
    min_size=1,
    max_size=30,
)


@property_test
@given(records=records, per_frame=st.integers(1, 10), live=st.booleans())
def test_rows_round_trip_property(records: list[tuple[Any, ...]], per_frame: int, live: bool) -> None:
    encoder = StreamEncoder(max_events_per_frame=per_frame)
    decoder, frames = decode_stream(opening() + frames_of(MAIN, records, encoder), live=live)
    assert sum(frame.count for frame in frames) == len(records)
    assert decoded_rows(decoder.tables, frames) == expected_rows(records)


def one_event_payload(**changes: Any) -> bytes:
    cols = {"kind": [SPAN], "name": [0], "ts": [5], "dur": [10], "args": [None]}
    cols.update(changes)
    return msgpack.packb(list(cols.values()))


@pytest.mark.parametrize(
    ("payload", "count"),
    [
        pytest.param(one_event_payload(), 2, id="columns-shorter-than-count"),
        pytest.param(msgpack.packb([[0, 0], [0, 0], [0, 0], [0, 0], [None, None]]), 1, id="columns-longer"),
        pytest.param(one_event_payload(ts=[5, 6]), 1, id="one-column-too-long"),
        pytest.param(one_event_payload(args=[]), 1, id="one-column-too-short"),
        pytest.param(msgpack.packb([[0], [0], [0], [0]]), 1, id="four-columns"),
        pytest.param(one_event_payload() + b"\x00", 1, id="trailing-bytes"),
        pytest.param(b"\xc1", 1, id="not-msgpack"),
        pytest.param(one_event_payload(ts=[1.5]), 1, id="float-timestamp"),
        pytest.param(one_event_payload(ts=[None]), 1, id="nil-timestamp"),
        pytest.param(one_event_payload(dur=["10"]), 1, id="str-duration"),
        pytest.param(one_event_payload(kind=[True]), 1, id="bool-kind"),
        pytest.param(one_event_payload(name=["label"]), 1, id="str-name"),
    ],
)
def test_rows_refuse_a_payload_that_does_not_match(payload: bytes, count: int) -> None:
    """The session accepts the frame (it never decodes payloads); decoding its rows fails, naming EVENTS."""
    data = opening(SCHEMA, track_frame(MAIN), Events(MAIN.track_id, count, 0, 10, payload))
    decoder, (frame,) = decode_stream(data)
    with pytest.raises(MalformedFrame, match="EVENTS"):
        list(decoder.tables.rows(frame))
    with pytest.raises(MalformedFrame, match="EVENTS"):
        list(decoder.tables.events(frame))


def test_payload_in_the_columns_of_another_schema_is_refused() -> None:
    six = ("kind", "name", "ts", "dur", "args", "extra")
    data = opening(Schema(BUILTIN_KINDS, six), track_frame(MAIN), Events(MAIN.track_id, 1, 0, 10, one_event_payload()))
    decoder, (frame,) = decode_stream(data)
    with pytest.raises(MalformedFrame, match="6 columns"):
        list(decoder.tables.rows(frame))


# -- end of stream -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("live", MODES)
@pytest.mark.parametrize("cut", range(1, PREAMBLE.size))
def test_end_inside_the_preamble_is_torn(live: bool, cut: int) -> None:
    decoder = session_with(preamble()[:cut], live=live)
    assert decoder.next_frame() is NEED_DATA
    decoder.receive_data(b"")
    assert isinstance(session_error(decoder), TornStream)


@pytest.mark.parametrize("live", MODES)
@pytest.mark.parametrize("cut", [1, FRAME_HEADER.size - 1, FRAME_HEADER.size, -1])
def test_end_inside_a_frame_is_torn_and_costs_only_that_frame(live: bool, cut: int) -> None:
    data = STREAM[: len(opening())] + frames_of(MAIN, RECORDS)
    last = encode(Stats(1, 1))
    decoder = session_with(data + last[:cut], live=live, eof=True)
    frames: list[Frame] = []
    with pytest.raises(TornStream) as info:
        for frame in decoder:
            frames.append(frame)
            if live and isinstance(frame, Hello):
                decoder.welcome()
    assert names_number(info.value, len(last[:cut]))
    assert decoded_rows(decoder.tables, frames) == expected_rows(RECORDS)  # nothing before it is lost


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(preamble(), id="after-preamble"),
        pytest.param(opening(), id="after-hello"),
        pytest.param(STREAM, id="after-last-frame"),
    ],
)
def test_end_at_a_frame_boundary_is_closed(data: bytes) -> None:
    decoder = session_with(data, eof=True)
    list(decoder)
    assert decoder.next_frame() is CLOSED
    assert decoder.next_frame() is CLOSED


# -- ReplyDecoder: what a collector sends --------------------------------------------------------------------------

WELCOME = Welcome(PROTOCOL_VERSION, LIMIT, 100, 10, 5, "0.2.0")
REPLIES: list[Frame] = [WELCOME, Flush(1), FlushAck(2**64 - 1), Goodbye("shutting down")]
REPLY_STREAM = preamble() + b"".join(map(encode, REPLIES))


def read_replies(chunks: Iterable[bytes]) -> tuple[ReplyDecoder, list[Frame]]:
    decoder = ReplyDecoder(LIMIT)
    frames: list[Frame] = []
    for chunk in chunks:
        if chunk:
            decoder.receive_data(chunk)
            frames.extend(decoder)
    return decoder, frames


def reply_error(data: bytes) -> tuple[ReplyDecoder, ProtocolError]:
    decoder = ReplyDecoder()
    decoder.receive_data(data)
    with pytest.raises(ProtocolError) as info:
        list(decoder)
    return decoder, info.value


def test_replies_start_with_welcome() -> None:
    decoder, frames = read_replies([REPLY_STREAM])
    assert frames == REPLIES
    assert decoder.welcomed


def test_replies_split_at_every_offset_and_byte_by_byte() -> None:
    for cut in range(len(REPLY_STREAM) + 1):
        assert read_replies([REPLY_STREAM[:cut], REPLY_STREAM[cut:]])[1] == REPLIES, f"split at {cut}"
    assert read_replies([REPLY_STREAM[i : i + 1] for i in range(len(REPLY_STREAM))])[1] == REPLIES


def test_welcome_is_awaited() -> None:
    decoder = ReplyDecoder()
    decoder.receive_data(REPLY_STREAM[:10])
    assert list(decoder) == []
    assert not decoder.welcomed


def test_goodbye_may_come_instead_of_welcome() -> None:
    refusal = Goodbye("no common protocol version: the client speaks 3..3, this collector 2..2")
    decoder, frames = read_replies([preamble() + encode(refusal)])
    assert frames == [refusal]
    assert not decoder.welcomed


@pytest.mark.parametrize("frame", [Flush(1), FlushAck(1)])
def test_frames_before_welcome_are_refused(frame: Frame) -> None:
    _, error = reply_error(preamble() + encode(frame))
    assert isinstance(error, UnexpectedFrame)
    assert "WELCOME" in str(error)
    assert frame.TYPE.name in str(error)


def test_welcome_twice_is_refused() -> None:
    _, error = reply_error(preamble() + encode(WELCOME) + encode(Flush(1)) + encode(WELCOME))
    assert isinstance(error, UnexpectedFrame)
    assert "WELCOME" in str(error)


@pytest.mark.parametrize("frame", [HELLO, LATER_FRAMES[3], SCHEMA, Stats(0, 0)])
def test_a_collector_may_not_send_client_frames(frame: Frame) -> None:
    _, error = reply_error(preamble() + encode(WELCOME) + encode(frame))
    assert isinstance(error, UnexpectedFrame)
    assert frame.TYPE.name in str(error)


def test_replies_skip_unknown_ignorable_frames() -> None:
    data = preamble() + encode(WELCOME) + raw_frame(0x9A, b"later") + encode(Flush(3))
    assert read_replies([data])[1] == [WELCOME, Flush(3)]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(preamble() + encode(Flush(1)) + encode(WELCOME), id="flush-before-welcome"),
        pytest.param(preamble() + encode(WELCOME) + encode(WELCOME) + encode(Flush(1)), id="welcome-twice"),
        pytest.param(preamble() + encode(WELCOME) + raw_frame(0x21, b"") + encode(Flush(1)), id="unknown-type"),
    ],
)
def test_reply_decoder_stays_dead_after_an_error(data: bytes) -> None:
    decoder, error = reply_error(data)
    for _ in range(2):
        with pytest.raises(ProtocolError) as again:
            list(decoder)
        assert again.value is error


def test_replies_torn_inside_a_frame() -> None:
    decoder = ReplyDecoder()
    decoder.receive_data(preamble() + encode(WELCOME) + encode(Flush(1))[:-1])
    assert list(decoder) == [WELCOME]
    decoder.receive_data(b"")
    with pytest.raises(TornStream):
        list(decoder)


def test_replies_closed_at_a_frame_boundary() -> None:
    decoder = ReplyDecoder()
    decoder.receive_data(REPLY_STREAM)
    decoder.receive_data(b"")
    assert list(decoder) == REPLIES
    assert list(decoder) == []


def test_tables_only_grow_a_string_id_or_the_columns_cannot_be_redefined() -> None:
    from ringtrace.wire.model import BUILTIN_KINDS

    for later in (Strings(0, ("other",)), Schema(BUILTIN_KINDS, ("args", "kind", "name", "ts", "dur"))):
        decoder = SessionDecoder(live=False)
        decoder.receive_data(
            preamble() + encode(HELLO) + encode(Schema(BUILTIN_KINDS)) + encode(Strings(0, ("db.query",)))
        )
        decoder.receive_data(encode(Strings(0, ("db.query",))))  # the same again is fine (a resend)
        list(decoder)
        decoder.receive_data(encode(later))
        with pytest.raises(MalformedFrame, match=r"redefined|changed within the stream"):
            list(decoder)


def test_a_strings_frame_that_resets_the_table_starts_it_again_and_frames_read_before_keep_theirs() -> None:
    events = Events(MAIN.track_id, 1, 0, 0, msgpack.packb([[SPAN], [0], [0], [0], [None]]))
    first = opening(SCHEMA, track_frame(MAIN), Strings(0, ("é" * 10, "b")), events)
    for keep_strings in (True, False):
        decoder = SessionDecoder(Limits(max_string_bytes=30), live=False, keep_strings=keep_strings)
        decoder.receive_data(first)
        *_, before = decoder
        tables = decoder.tables
        assert decoder.string_bytes == 21
        # Ids are defined again, and the budget counts only the new table: 30 bytes of strings after 21.
        decoder.receive_data(encode(Strings(0, (), reset=True)) + encode(Strings(0, ("x" * 25, "y"))) + encode(events))
        *_, after = decoder
        assert decoder.string_bytes == 26 and decoder.added_strings == [(0, "x" * 25), (1, "y")]
        if keep_strings:
            assert decoder.tables is not tables and tables.strings == {0: "é" * 10, 1: "b"}
            assert [e.name for e in tables.events(before)] == ["é" * 10]  # as it was read
            assert [e.name for e in decoder.tables.events(after)] == ["x" * 25]
        assert decoder.tables.tracks is tables.tracks and decoder.tables.kinds is tables.kinds
        # Within the new table the old rules hold: no redefinition, and the byte budget.
        decoder.receive_data(encode(Strings(1, ("z",))))
        assert "string id 1 redefined" in str(session_error(decoder))


def test_a_reset_must_start_at_id_0() -> None:
    decoder = session_with(opening(Strings(0, ("a",)), Strings(0, ("b",), reset=True)))
    list(decoder)
    assert decoder.tables.strings == {0: "b"}
    body = msgpack.packb({"first_id": 3, "strings": ["c"], "reset": True})
    decoder.receive_data(FRAME_HEADER.pack(len(body), FrameType.STRINGS) + body)
    error = session_error(decoder)
    assert isinstance(error, MalformedFrame) and "'first_id' must be 0" in str(error) and "got 3" in str(error)


def test_strings_within_max_string_bytes_are_accepted_and_one_byte_more_refused() -> None:
    strings = ("é" * 100, "x" * 50)  # 200 + 50 bytes of UTF-8
    decoder = session_with(opening(Strings(0, strings)), max_string_bytes=250)
    list(decoder)
    assert decoder.string_bytes == 250
    # The same strings declared again (a duplicate run) cost nothing more.
    decoder = session_with(opening(Strings(0, strings), Strings(0, strings[:1])), max_string_bytes=250)
    list(decoder)
    decoder = session_with(opening(Strings(0, strings), Strings(2, ("y",))), max_string_bytes=250)
    assert decoder.next_frame() == HELLO
    assert_limit(session_error(decoder), "max_string_bytes", 250, 251)


def test_welcome_states_max_string_bytes_and_an_older_one_without_it_means_no_limit() -> None:
    decoder = session_with(preamble() + encode(HELLO), live=True, max_string_bytes=4096)
    assert decoder.next_frame() == HELLO
    welcome = decoder.welcome()
    assert Welcome.decode_body(welcome.encode_body()).max_string_bytes == 4096
    older = msgpack.unpackb(welcome.encode_body())
    del older["max_string_bytes"]
    assert Welcome.decode_body(msgpack.packb(older)).max_string_bytes == 2**63 - 1


def test_kinds_within_max_schema_bytes_are_accepted_and_past_it_refused() -> None:
    kinds = tuple(KindSpec(64 + i, f"kind{i}", "instant", (("field", "i64"),)) for i in range(3))
    size = sum(kind.text_bytes for kind in kinds)
    assert size == 3 * (len("kind0") + len("instant") + len("field") + len("i64"))
    decoder = session_with(opening(Schema(kinds)), max_schema_bytes=size)
    list(decoder)
    assert decoder.schema_bytes == size
    decoder = session_with(opening(Schema(kinds)), max_schema_bytes=size - 1)
    assert decoder.next_frame() == HELLO
    assert_limit(session_error(decoder), "max_schema_bytes", size - 1, size)


# -- a SCHEMA seen on another connection: its texts are not checked again (the twin of the full checks) ----------


def _schema_outcome(body: bytes, first: bytes = b"", **limits: int) -> tuple[Any, ...]:
    """What a fresh connection makes of a SCHEMA frame of ``body`` (after the frames ``first``): its tables, the kinds
    it added and its schema bytes, or the error it raised."""
    decoder = session_with(opening() + first + raw_frame(FrameType.SCHEMA, body), **limits)
    try:
        list(decoder)
    except ProtocolError as exc:
        return (type(exc).__name__, str(exc))
    return (tables_state(decoder.tables), list(decoder.added_kinds), decoder.schema_bytes)


def _schema_cases(tag: str) -> list[tuple[tuple[KindSpec, ...], tuple[KindSpec, ...], dict[str, int]]]:
    """(kinds, kinds declared first, limits): accepted, past each limit, redeclared, and texts past their limits."""
    kinds = tuple(
        KindSpec(64 + i, f"{tag}.kind{i}", "instant", (("field", "i64"), ("path", "str")), f"got $field {i}", "info")
        for i in range(6)
    )
    size = sum(kind.text_bytes for kind in kinds)
    long = "x" * (MAX_STRING_CHARS + 1)
    many_fields = tuple((f"f{i}", "i64") for i in range(MAX_KIND_FIELDS + 1))
    return [
        (kinds, (), {}),
        (kinds, (), {"max_kinds": 3}),
        (kinds, (), {"max_schema_bytes": size - 1}),
        (kinds, kinds[:2], {}),  # declared again: only the others are added
        (kinds, (replace(kinds[3], name=f"{tag}.other"),), {}),  # redeclared otherwise
        (kinds, (KindSpec(900, f"{tag}.first", "instant"),), {"max_kinds": 6}),
        ((*kinds[:2], replace(kinds[2], text=long), *kinds[3:]), (), {}),
        ((*kinds[:2], replace(kinds[2], priority=long)), (), {"max_kinds": 2}),  # past max_kinds before the text
        ((*kinds[:4], replace(kinds[4], fields=((long, "i64"),))), (), {}),
        ((replace(kinds[0], fields=many_fields),), (), {}),
    ]


def _reordered_body(kinds: tuple[KindSpec, ...]) -> bytes:
    """A SCHEMA body that says what ``Schema(kinds).encode_body()`` says, in other bytes (its keys in another order):
    decoded, another object."""
    return msgpack.packb({"columns": list(Schema(kinds).columns), "kinds": [kind.to_wire() for kind in kinds]})


def test_a_schema_seen_again_gives_what_a_schema_checked_whole_gives() -> None:
    tag = f"twin{id(object())}"  # bodies no other test in this process decoded
    for kinds, first, limits in _schema_cases(tag):
        body, whole = Schema(kinds).encode_body(), _reordered_body(kinds)
        assert body != whole
        declared = encode(Schema(first)) if first else b""
        _schema_outcome(body)  # the first connection to send it: checked whole
        seen_again = _schema_outcome(body, declared, **limits)
        assert seen_again == _schema_outcome(whole, declared, **limits), (kinds, first, limits)
        assert seen_again == _schema_outcome(body, declared, **limits)


# -- the collector's fast path for runs of EVENTS frames ------------------------------------------------------------


def read_all(decoder: IngestDecoder, *, fast: bool) -> tuple[list[Any], str | None]:
    """Every frame, EVENTS as (track, count, first, last, offset, size), and the error that ended the stream."""
    out: list[Any] = []
    try:
        while True:
            if fast:
                run = decoder.events_run()
                if run is not None:
                    entries = list(EVENTS_ENTRY.iter_unpack(run.entries))[::-1]
                    out += [(t, c, f, la, o, s) for o, s, t, c, f, la in entries]
                    assert run.frames == len(entries) > 0
                    assert run.events == sum(c for _, _, _, c, _, _ in entries)
                    assert run.end == entries[-1][0] + entries[-1][1] == decoder.reader.position
                    sums: dict[int, list[int]] = {}
                    for _, s, t, c, _, _ in entries:
                        sums.setdefault(t, [0, 0])
                        sums[t][0] += c
                        sums[t][1] += s
                    assert run.tracks == sums
            frame = decoder.next_frame()
            if isinstance(frame, Sentinel):
                return out, None
            if isinstance(frame, Events):
                size = len(decoder.last_frame())
                offset = decoder.reader.frame_start
                out.append((frame.track_id, frame.count, frame.first_ts_ns, frame.last_ts_ns, offset, size))
            else:
                out.append(frame)
    except ProtocolError as exc:
        return out, f"{type(exc).__name__}: {exc}"


def events_frame(track: int, count: int, first: int, last: int, header_size: int, payload: int, lie: int) -> bytes:
    body = EVENTS_HEADER.pack(header_size, 0, track, count, first, last) + b"\x90" * payload
    return FRAME_HEADER.pack(max(0, len(body) + lie), FrameType.EVENTS) + body


EVENTS_FRAMES = st.builds(
    events_frame,
    track=st.sampled_from([1, 2, 3]),
    count=st.sampled_from([0, 1, 2, 40]),
    first=st.sampled_from([0, 5, 2**63]),
    last=st.sampled_from([0, 5, 2**64 - 1]),
    header_size=st.sampled_from([0, EVENTS_HEADER.size, EVENTS_HEADER.size + 3, 200]),
    payload=st.sampled_from([0, 1, 3, 40, 300]),
    lie=st.sampled_from([0, 0, 0, -1, 1, -30, 2**20]),
)
OTHER_FRAMES = st.sampled_from(
    [encode(Flush(1)), encode(Stats(1, 2)), encode(track_frame(TASK)), FRAME_HEADER.pack(2, 0xC4) + b"ab"]
)


@pytest.mark.parametrize("live", MODES)
@settings(max_examples=300, deadline=None)
@given(frames=st.lists(st.one_of(EVENTS_FRAMES, EVENTS_FRAMES, OTHER_FRAMES), max_size=12), cut=st.integers(0, 400))
def test_runs_of_events_frames_read_as_next_frame_reads_them(live: bool, frames: list[bytes], cut: int) -> None:
    data = opening(SCHEMA, track_frame(MAIN)) + b"".join(frames)
    results = []
    for fast in (False, True):
        decoder = IngestDecoder(Limits(max_frame_bytes=MIN_MAX_FRAME_BYTES), live=live)
        if live:
            decoder.receive_data(opening())
            list(decoder)
            decoder.welcome()
            data_after_hello = data[len(opening()) :]
        else:
            data_after_hello = data
        split = min(cut, len(data_after_hello))
        decoder.receive_data(data_after_hello[:split])
        first = read_all(decoder, fast=fast)
        decoder.receive_data(data_after_hello[split:])
        decoder.receive_data(b"")
        results.append((first, read_all(decoder, fast=fast)))
    assert results[0] == results[1]


@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(st.integers(1, 300), min_size=1, max_size=12), room=st.integers(0, 4000))
def test_a_run_of_events_frames_stops_where_its_index_entries_would_not_fit_below_top(
    payloads: list[int], room: int
) -> None:
    """The collector reads into a segment whose index grows down from ``top``: a run takes the frames that end, with
    an index entry each below them, by ``top``, and leaves the rest to the next segment."""
    frames = [events_frame(MAIN.track_id, 1, 5, 5, EVENTS_HEADER.size, payload, 0) for payload in payloads]
    decoder = IngestDecoder(Limits(max_frame_bytes=MIN_MAX_FRAME_BYTES), live=False)
    decoder.receive_data(opening(SCHEMA, track_frame(MAIN)) + b"".join(frames))
    for _ in range(3):  # HELLO, SCHEMA, TRACK
        decoder.next_frame()
    start = decoder.reader.position
    fit = 0
    while (
        fit < len(frames) and start + sum(map(len, frames[: fit + 1])) + EVENTS_ENTRY.size * (fit + 1) <= start + room
    ):
        fit += 1
    run = decoder.events_run(top=start + room)
    if fit == 0:
        assert run is None
    else:
        assert run is not None
        assert (run.frames, run.end) == (fit, start + sum(map(len, frames[:fit])))
        assert decoder.reader.position == run.end
    rest, error = read_all(decoder, fast=False)
    assert (len(rest), error) == (len(frames) - fit, None)  # the frames left are read as they are


#: Values as msgpack hands them to a reader: scalars, lists and str-keyed maps, nested at any depth.
NESTED_VALUES = st.recursive(
    st.none() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=60,
)


def chain(depth: int, leaf: object = 1) -> object:
    for level in range(depth):
        leaf = [leaf] if level % 2 else {"k": leaf}
    return leaf


@given(
    args=st.dictionaries(st.text(max_size=2), NESTED_VALUES | st.integers(0, 70).map(chain), max_size=3),
    values=st.lists(NESTED_VALUES | st.integers(0, 70).map(chain), max_size=3),
)
def test_a_reader_clips_args_nested_too_deep_exactly_as_the_client_would_have(
    args: dict[str, Any], values: list[Any]
) -> None:
    """What a peer sent past MAX_ARG_DEPTH (the real client never does) reads as the client's own clipping of it."""
    decoder = SessionDecoder(live=False)
    decoder.receive_data(opening() + frames_of(MAIN, RECORDS[:1]))
    while decoder.next_frame() is not NEED_DATA:
        pass
    kind = RECORDS[0][0]
    payload = msgpack.packb([[kind] * 3, [1] * 3, [0] * 3, [0] * 3, [args, values, 7]])
    shown = [row[4] for row in decoder.tables.rows(Events(MAIN.track_id, 3, 5, 5, payload))]
    assert shown == [normalise_args(args)[0], normalise_values(values)[0], 7]
