"""The session decoder, sans-I/O: the rules of a client's stream, and the tables it keeps to decode its events.

``SessionDecoder`` reads what a client writes (a live connection, at the collector, or a file); ``ReplyDecoder``
(``reply_decoder.py``) reads what a collector answers (at the client). Both take bytes in (``receive_data``, or
``get_buffer`` + ``buffer_updated`` for zero-copy reads) and give checked frames out (``next_frame()`` or iteration),
as h11's connection does for HTTP.
Every rule of a client stream lives here, with the limits in ``stream_limits.py`` (``PROTOCOL.md``, "Rules of a
stream"):

Theory of operation
-------------------
A client stream moves through three states::

    HELLO --HELLO--> WELCOME --welcome()--> OPEN          (a live connection)
    HELLO --HELLO--> OPEN                                 (a file: nobody answers)

Until the collector has called ``welcome()``, which picks the protocol version and states the limits, nothing but
HELLO may arrive. In OPEN, SCHEMA, STRINGS and TRACK frames update the stream's tables (``StreamTables``), within the
limits; EVENTS must name a declared track; their payloads stay undecoded until someone calls ``tables.rows(frame)``.
Any broken rule raises a ``ProtocolError`` subclass that names the rule, the limit and the value, and the decoder is
dead from then on.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Final

from ringtrace.wire.arg_values import MAX_STRING_CHARS
from ringtrace.wire.errors import LimitExceeded, MalformedFrame, ProtocolError, UnexpectedFrame, UnsupportedVersion
from ringtrace.wire.frame_types import FrameType
from ringtrace.wire.frames import Events, Frame
from ringtrace.wire.handshake_frames import Hello, Welcome
from ringtrace.wire.model import TrackInfo
from ringtrace.wire.reader import NEW_STREAM, FrameReader, Sentinel, complete_frames
from ringtrace.wire.recent import Recent
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.stream_limits import Limits, check_kind_texts, check_stacks, check_text, negotiate
from ringtrace.wire.stream_tables import StreamTables
from ringtrace.wire.table_frames import KindSpec, Schema, Strings, Track
from ringtrace.wire.version import __version__

__all__ = [
    "DENSE_STRING_IDS",
    "KIND_ENTRY_BYTES",
    "STACK_ENTRY_BYTES",
    "STACK_FRAME_ENTRY_BYTES",
    "STRING_ENTRY_BYTES",
    "TRACK_ENTRY_BYTES",
    "SessionDecoder",
]

#: Memory a declared track takes beside its name (a TrackInfo, its ints, entries in two dicts), and a string id when
#: the strings are kept (an int, a dict entry, the str's header), with room for the allocator's slack: measured, a
#: connection's RSS grew by less than ``table_bytes`` says at every table limit.
TRACK_ENTRY_BYTES: Final = 400
STRING_ENTRY_BYTES: Final = 160
#: String ids the hashes' array always covers (512 KiB); past them, up to 8 times the ids declared.
DENSE_STRING_IDS: Final = 65_536
#: A stack node (two list slots, an int each) and a code location beside its texts (a tuple, an int), kept or not:
#: the collector's segments replay the STACKS frames, whose bytes are about this much.
STACK_ENTRY_BYTES: Final = 64
STACK_FRAME_ENTRY_BYTES: Final = 160
#: A kind beside its texts (which Python may keep in up to 4 bytes a character).
KIND_ENTRY_BYTES: Final = 600

#: The limits of a decoder made without any: ``Limits``' defaults.
_NO_LIMITS_GIVEN: Final = Limits()


def _utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class SessionDecoder:
    """Reads one client stream: a live connection (``live=True``, the collector's side) or a file.

    Args:
        limits: what the stream may declare; frames beyond them raise ``LimitExceeded``.
        live: a connection, whose client waits for ``welcome()`` before it sends more than HELLO.
        borrow: EVENTS payloads and ``last_frame()`` are views valid until more bytes are given (``FrameReader``).
        read_size: the least free room ``get_buffer`` offers.
        keep_strings: fill ``tables.strings``; without, the strings are checked but not kept (for a reader that
            stores frames and decodes none, as the collector's ingest): a hash per string id is kept instead, in one
            array (8 bytes an id up to the highest declared), enough to refuse a redefinition.
        concatenated: a file of streams end to end (a snapshot file): at each new stream the tables start afresh,
            and its HELLO is the first frame it gives.
    """

    __slots__ = (
        "_hashed", "_keep_strings", "_live", "_reader", "_sparse_hashes", "_state", "_string_hashes", "_track_texts",
        "added_kinds", "added_strings", "hello", "limits", "protocol_version", "schema_bytes", "stack_bytes",
        "stack_count", "stack_frame_count", "string_bytes", "tables", "track_name_bytes",
    )  # fmt: skip

    #: The framing it reads through (a subclass may read with one that does more: the collector's lends it memory).
    _READER: ClassVar[type[FrameReader]] = FrameReader

    def __init__(
        self,
        limits: Limits = _NO_LIMITS_GIVEN,
        *,
        live: bool = True,
        borrow: bool = False,
        read_size: int = 64 * 1024,
        keep_strings: bool = True,
        concatenated: bool = False,
    ) -> None:
        self.limits = limits
        self._live = live
        self._keep_strings = keep_strings
        self._reader = self._READER(
            "client", limits.max_frame_bytes, borrow=borrow, read_size=read_size, live=live, concatenated=concatenated
        )
        self._start_stream()

    def _start_stream(self) -> None:
        #: Without keep_strings: a hash per string id instead of the string (0: not declared), in one buffer rather
        #: than a dict of int objects (which cost 13 times as much: 100,000 strings took 11 MB).
        self._string_hashes: array[int] | None = None if self._keep_strings else array("q")
        #: Hashes of ids far past those declared (clients number strings from 0 up; a peer that declares one id near
        #: a large max_strings would make the array huge).
        self._sparse_hashes: dict[int, int] = {}
        self._hashed = 0
        self._state = "HELLO"
        self.hello: Hello | None = None
        self.protocol_version = 0
        self.tables = StreamTables()
        #: UTF-8 bytes of the strings, and of the kinds' texts, declared so far; of the live tracks' names.
        self.string_bytes = 0
        self.schema_bytes = 0
        self.track_name_bytes = 0
        #: Stack nodes and code locations declared (STACKS, since its last reset), and UTF-8 bytes of their texts.
        self.stack_count = 0
        self.stack_frame_count = 0
        self.stack_bytes = 0
        #: Memory of the live tracks' names as Python keeps them (1, 2 or 4 bytes a character).
        self._track_texts = 0
        #: What the last STRINGS or SCHEMA frame added to the tables (a frame may repeat what is known).
        self.added_strings: list[tuple[int, str]] = []
        self.added_kinds: list[KindSpec] = []

    @property
    def table_bytes(self) -> int:
        """About the memory the tables take, at most what they take (an estimate by counts and sizes, in constant
        time): what a collector charges a connection's tables to (``Store.charge_tables``)."""
        if self._string_hashes is not None:
            strings = sys.getsizeof(self._string_hashes) + len(self._sparse_hashes) * STRING_ENTRY_BYTES
        else:
            strings = len(self.tables.strings) * STRING_ENTRY_BYTES + 4 * self.string_bytes
        tracks = len(self.tables.tracks) * TRACK_ENTRY_BYTES + self._track_texts
        stacks = self.stack_count * STACK_ENTRY_BYTES + self.stack_frame_count * STACK_FRAME_ENTRY_BYTES
        stacks += 4 * self.stack_bytes
        return strings + tracks + stacks + len(self.tables.kinds) * KIND_ENTRY_BYTES + 4 * self.schema_bytes

    # -- bytes in -------------------------------------------------------------------------------------------------

    def receive_data(self, data: bytes | memoryview) -> None:
        """Add received bytes; ``b""`` means the stream ended."""
        self._reader.receive_data(data)

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        return self._reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._reader.buffer_updated(nbytes)

    def last_frame(self) -> memoryview:
        """The bytes of the frame returned last, header included."""
        return self._reader.last_frame()

    @property
    def reader(self) -> FrameReader:
        """The framing underneath."""
        return self._reader

    @property
    def skipped_frames(self) -> int:
        """Frames of unknown ignorable types, skipped."""
        return self._reader.skipped_frames

    # -- frames out -----------------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Frame]:
        """Every complete frame buffered now (stops at NEED_DATA or CLOSED)."""
        return complete_frames(self.next_frame)

    def next_frame(self) -> Frame | Sentinel:
        """The next frame, checked and applied to the tables; ``NEED_DATA``; or ``CLOSED`` at a clean end.

        Raises:
            ProtocolError: the stream broke a rule (a subclass and its message say which).
        """
        frame = self._reader.next_frame()
        if frame is NEW_STREAM:
            self._start_stream()
            frame = self._reader.next_frame()
        if isinstance(frame, Sentinel):
            return frame
        try:
            self._apply(frame)
        except ProtocolError as exc:
            self._reader.fail(exc)  # the stream is dead: every later call raises the same error
            raise
        return frame

    def welcome(self, collector_version: str = __version__) -> Welcome:
        """The collector's answer to the HELLO just read: the version chosen and the limits.

        Raises:
            UnsupportedVersion: no common version (send GOODBYE with the message, then close).
        """
        if self._state != "WELCOME" or self.hello is None:
            raise UnexpectedFrame(f"welcome() is only valid right after HELLO (state {self._state})")
        try:
            self.protocol_version = negotiate(self.hello)
        except UnsupportedVersion as exc:
            self._reader.fail(exc)  # the stream cannot go on: every later call raises the same error
            raise
        self._state = "OPEN"
        limits = self.limits
        return Welcome(
            self.protocol_version,
            limits.max_frame_bytes,
            limits.max_strings,
            limits.max_tracks,
            limits.max_kinds,
            collector_version,
            limits.max_string_bytes,
            limits.max_schema_bytes,
            string_resets=True,
            max_stacks=limits.max_stacks,
            max_stack_frames=limits.max_stack_frames,
        )

    def _apply(self, frame: Frame) -> None:
        if self._state == "HELLO":
            self._apply_hello(frame)
        elif self._state == "WELCOME":
            raise UnexpectedFrame(
                f"{frame.TYPE.name} frame before WELCOME: a client sends nothing after HELLO until it is welcomed"
            )
        else:
            check = _OPEN_FRAME_RULES.get(frame.TYPE)
            if check is not None:  # STATS, FLUSH, FLUSH_ACK and GOODBYE change no table
                check(self, frame)

    def _apply_hello(self, frame: Frame) -> None:
        if not isinstance(frame, Hello):
            raise UnexpectedFrame(f"first frame from a client must be HELLO, got {frame.TYPE.name}")
        for name in ("host", "process_name", "instance_id", "boot_id", "client_version", "token"):
            check_text(f"HELLO frame: field {name!r}", getattr(frame, name))
        self.hello = frame
        self._state = "WELCOME" if self._live else "OPEN"
        if not self._live:
            self.protocol_version = negotiate(frame)

    def _check_events(self, frame: Events) -> None:
        if frame.track_id not in self.tables.tracks:
            raise MalformedFrame(f"EVENTS frame: field 'track' {frame.track_id} was never declared by TRACK")

    def _refuse_hello(self, frame: Hello) -> None:
        raise UnexpectedFrame("HELLO may only be the first frame")

    def _add_strings(self, frame: Strings) -> None:
        if frame.reset:
            self._reset_strings()
        limit = self.limits.max_strings
        last_id = frame.first_id + len(frame.strings) - 1
        if last_id >= limit:
            raise LimitExceeded("STRINGS frame: string id", "max_strings", limit, last_id)
        longest = max(map(len, frame.strings), default=0)
        if longest > MAX_STRING_CHARS:
            raise LimitExceeded("STRINGS frame: string length", "max_string_chars", MAX_STRING_CHARS, longest)
        if self._string_hashes is not None:
            self._add_string_hashes(frame, self._string_hashes)
        else:
            self._add_string_texts(frame, self.tables.strings)
        if self.string_bytes > self.limits.max_string_bytes:
            raise LimitExceeded(
                "STRINGS frame: bytes of all strings", "max_string_bytes", self.limits.max_string_bytes,
                self.string_bytes,
            )  # fmt: skip

    def _reset_strings(self) -> None:
        """The client started its string table again: new tables, so that frames read before keep theirs."""
        if self._string_hashes is not None:
            self._string_hashes = array("q")
            self._sparse_hashes = {}
            self._hashed = 0
        self.tables = self.tables.with_new_strings()
        self.string_bytes = 0

    def _add_string_texts(self, frame: Strings, strings: dict[int, str]) -> None:
        self.added_strings = added = []
        for string_id, text in enumerate(frame.strings, frame.first_id):
            known = strings.get(string_id)
            if known is None:
                added.append((string_id, text))
                strings[string_id] = text
                self.string_bytes += _utf8_bytes(text)
            elif known != text:  # stored frames decode with this table: it may only grow
                raise MalformedFrame(
                    f"STRINGS frame: string id {string_id} redefined as {text!r:.60}, was {known!r:.60}"
                )

    def _add_string_hashes(self, frame: Strings, hashes: array[int]) -> None:
        last_id, sparse = frame.first_id + len(frame.strings) - 1, self._sparse_hashes
        dense_limit = max(DENSE_STRING_IDS, 8 * (self._hashed + len(frame.strings)))
        if len(hashes) <= last_id < dense_limit:  # (doubling: few moves of the sparse ids)
            grown = min(max(last_id + 1, 2 * len(hashes)), dense_limit)
            hashes.frombytes(bytes(hashes.itemsize * (grown - len(hashes))))
            for string_id in [i for i in sparse if i < grown]:
                hashes[string_id] = sparse.pop(string_id)
        dense = len(hashes)
        self.added_strings = added = []
        for string_id, text in enumerate(frame.strings, frame.first_id):
            value = hash(text) or 1  # (0 marks an id not declared)
            known = hashes[string_id] if string_id < dense else sparse.get(string_id, 0)
            if not known:
                added.append((string_id, text))
                if string_id < dense:
                    hashes[string_id] = value
                else:
                    sparse[string_id] = value
                self._hashed += 1
                self.string_bytes += _utf8_bytes(text)
            elif known != value:  # stored frames decode with this table: it may only grow
                raise MalformedFrame(
                    f"STRINGS frame: string id {string_id} redefined as {text!r:.60}, was another text"
                )

    def _add_track(self, frame: Track) -> None:
        tracks, limit = self.tables.tracks, self.limits.max_tracks
        known = tracks.get(frame.track_id)
        if known is not None:
            self.track_name_bytes -= _utf8_bytes(known.name)
            self._track_texts -= sys.getsizeof(known.name)
        if frame.ended:  # frames already read keep their own reference to the track
            tracks.pop(frame.track_id, None)
            return
        if known is None and len(tracks) >= limit:
            raise LimitExceeded("TRACK frame: track count", "max_tracks", limit, len(tracks) + 1)
        if len(frame.name) > MAX_STRING_CHARS:
            raise LimitExceeded(
                "TRACK frame: field 'name' length", "max_string_chars", MAX_STRING_CHARS, len(frame.name)
            )
        # Names take memory as strings do: the live tracks' names have a budget of max_string_bytes of their own.
        self.track_name_bytes += _utf8_bytes(frame.name)
        self._track_texts += sys.getsizeof(frame.name)
        if self.track_name_bytes > self.limits.max_string_bytes:
            raise LimitExceeded(
                "TRACK frame: bytes of all live tracks' names", "max_string_bytes", self.limits.max_string_bytes,
                self.track_name_bytes,
            )  # fmt: skip
        tracks[frame.track_id] = TrackInfo(frame.track_id, frame.kind, frame.name, frame.thread_id, frame.parent)

    def _add_stacks(self, frame: Stacks) -> None:
        """Check (``check_stacks``) and add a run of the stack table, or start it again."""
        if frame.reset:
            self.tables = self.tables.with_new_stacks()
            self.stack_count = self.stack_frame_count = self.stack_bytes = 0
        self.stack_bytes += check_stacks(frame, self.stack_frame_count, self.stack_count, self.stack_bytes, self.limits)
        self.stack_frame_count += len(frame.frames)
        self.stack_count += len(frame.stacks)
        if self._keep_strings:
            self.tables.stacks.add(frame)

    def _add_schema(self, frame: Schema) -> None:
        kinds = self.tables.kinds
        if kinds and frame.columns != self.tables.columns:  # stored frames decode with these columns
            raise MalformedFrame(
                f"SCHEMA frame: field 'columns' changed within the stream to {list(frame.columns)!r:.120}"
            )
        self.tables.set_columns(frame.columns)
        self.added_kinds = []
        checked = _checked_schemas.get(id(frame))
        if checked is not None and checked[0] is frame:  # its texts passed, on another connection: only the tables'
            for spec, text_bytes in zip(frame.kinds, checked[1], strict=True):
                self._add_kind(spec, text_bytes)
            return
        sizes = []
        for spec in frame.kinds:
            check_kind_texts(spec)
            sizes.append(spec.text_bytes)
            self._add_kind(spec, sizes[-1])
        if not frame.remembered:  # it never comes again: kept, it would hold a past connection's kinds in memory
            return
        _checked_schemas.put(id(frame), (frame, tuple(sizes)))

    def _add_kind(self, spec: KindSpec, text_bytes: int) -> None:
        """Add ``spec`` (its texts checked; ``text_bytes``: its ``text_bytes``) to the kinds, within the limits."""
        kinds = self.tables.kinds
        known = kinds.get(spec.id)
        if known is None:
            if len(kinds) >= self.limits.max_kinds:
                raise LimitExceeded("SCHEMA frame: kind count", "max_kinds", self.limits.max_kinds, len(kinds) + 1)
            self.schema_bytes += text_bytes
            if self.schema_bytes > self.limits.max_schema_bytes:
                raise LimitExceeded(
                    "SCHEMA frame: bytes of all kinds' texts", "max_schema_bytes", self.limits.max_schema_bytes,
                    self.schema_bytes,
                )  # fmt: skip
            kinds[spec.id] = spec
            self.added_kinds.append(spec)
        elif known != spec:
            raise MalformedFrame(f"SCHEMA frame: kind {spec.id} redeclared as {spec.name!r}, was {known.name!r}")


#: SCHEMA frames whose every kind's texts passed ``check_kind_texts``, by ``id``, with the frame (kept alive, so that
#: its id is not reused while it is here) and each kind's ``text_bytes``: ``Schema.decode_body`` gives the same object
#: for a body decoded lately, so the clients of a version, connecting again and again, have their texts checked and
#: measured once (the checks were most of a SCHEMA's cost to a short connection). At most _CHECKED_SCHEMAS, and only
#: frames ``decode_body`` remembers (``Schema.remembered``: of a bounded size); shared by the collector's event loop
#: and its snapshot readers.
_CHECKED_SCHEMAS: Final = 16
_checked_schemas: Final[Recent[int, tuple[Schema, tuple[int, ...]]]] = Recent(_CHECKED_SCHEMAS)


#: What each frame type does to an open stream's tables (``SessionDecoder._apply``); a type not here changes none.
_OPEN_FRAME_RULES: Final[dict[FrameType, Callable[[SessionDecoder, Any], None]]] = {
    FrameType.EVENTS: SessionDecoder._check_events,
    FrameType.STRINGS: SessionDecoder._add_strings,
    FrameType.TRACK: SessionDecoder._add_track,
    FrameType.SCHEMA: SessionDecoder._add_schema,
    FrameType.STACKS: SessionDecoder._add_stacks,
    FrameType.HELLO: SessionDecoder._refuse_hello,
}
