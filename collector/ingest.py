"""One asyncio BufferedProtocol per client connection, feeding the shared sans-I/O frame reader.

The kernel writes straight into the reader's buffer (``get_buffer``/``buffer_updated``); each complete frame is
handled synchronously: tables are updated, EVENTS payloads go into the store undecoded. A protocol error closes this
connection only, with a log line that names the peer and the broken limit or field.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING, cast

from ringtrace.client.errors import MalformedFrame, ProtocolError
from ringtrace.client.model import MAX_STRING_CHARS
from ringtrace.client.protocol import (
    Events,
    Flush,
    FlushAck,
    Frame,
    FrameReader,
    Hello,
    Schema,
    Source,
    Stats,
    Strings,
    Welcome,
    encode,
    preamble,
)

from .sessions import ProcessRecord, SourceContext

if TYPE_CHECKING:
    from .app import Collector

__all__ = ["IngestProtocol"]

log = logging.getLogger("ringtrace.collector.ingest")

_tokens = itertools.count(1)


class IngestProtocol(asyncio.BufferedProtocol):
    __slots__ = (
        "_collector",
        "_flushes",
        "_kinds",
        "_peer",
        "_reader",
        "_sources",
        "_strings",
        "_transport",
        "process",
    )

    def __init__(self, collector: Collector) -> None:
        self._collector = collector
        self._reader = FrameReader("client", collector.config.max_frame_bytes)
        self._transport: asyncio.Transport | None = None
        self._peer = "?"
        self.process: ProcessRecord | None = None
        self._strings: dict[int, str] = {}
        self._kinds: dict[int, str] = {}
        self._sources: dict[int, SourceContext] = {}
        self._flushes: dict[int, asyncio.Future[bool]] = {}

    # -- asyncio callbacks (kept thin) ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A cast, not an isinstance check: uvloop's transports do not subclass asyncio's.
        self._transport = transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        connections = self._collector.connections
        limit = self._collector.config.max_connections
        if len(connections) >= limit:
            log.warning("refusing connection from %s: max_connections=%d reached", self._peer, limit)
            transport.abort()
            return
        connections.add(self)
        asyncio.get_running_loop().call_later(self._collector.config.handshake_timeout_s, self._check_handshake)
        welcome = Welcome(self._collector.config.max_frame_bytes, self._collector.version)
        transport.write(preamble() + encode(welcome))

    def pause_writing(self) -> None:
        # Our writes are small answers (FLUSH_ACK); a peer that lets them pile up must not get more read.
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None:
            self._transport.resume_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        view: memoryview = self._reader.get_buffer(sizehint)
        return view

    def buffer_updated(self, nbytes: int) -> None:
        self._reader.buffer_updated(nbytes)
        self._process_frames()

    def eof_received(self) -> bool:
        self._reader.receive_data(b"")
        self._process_frames()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._collector.connections.discard(self)
        if self.process is not None:
            self.process.live_connections -= 1
        for future in self._flushes.values():
            if not future.done():
                future.set_result(False)
        self._flushes.clear()

    def _check_handshake(self) -> None:
        transport = self._transport
        if self.process is None and transport is not None and not transport.is_closing():
            timeout_s = self._collector.config.handshake_timeout_s
            log.warning("closing connection from %s: no HELLO within handshake_timeout_s=%s", self._peer, timeout_s)
            transport.abort()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # -- flush ----------------------------------------------------------------------------------------------------

    def request_flush(self) -> asyncio.Future[bool]:
        """Ask the client to send everything it holds; the future is True once all of it is stored."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        transport = self._transport
        if transport is None or transport.is_closing() or self.process is None:
            future.set_result(False)
            return future
        token = next(_tokens)
        self._flushes[token] = future
        future.add_done_callback(lambda _: self._flushes.pop(token, None))  # answered, cancelled or lost
        transport.write(encode(Flush(token)))
        return future

    # -- frames ---------------------------------------------------------------------------------------------------

    def _process_frames(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        try:
            for frame in self._reader:
                self._handle(frame)
        except ProtocolError as exc:
            who = f"{self.process.name} (pid {self.process.pid})" if self.process else "before HELLO"
            log.warning("closing connection from %s, %s: %s", self._peer, who, exc)
            transport.abort()

    def _add_strings(self, frame: Strings) -> None:
        config = self._collector.config
        if frame.first_id + len(frame.strings) > config.max_strings:
            last_id = frame.first_id + len(frame.strings) - 1
            raise MalformedFrame(f"STRINGS frame: ids up to {last_id} exceed max_strings={config.max_strings}")
        longest = max(map(len, frame.strings), default=0)
        if longest > MAX_STRING_CHARS:
            raise MalformedFrame(
                f"STRINGS frame: a string of {longest} characters exceeds the limit of {MAX_STRING_CHARS}"
            )
        self._strings.update(zip(itertools.count(frame.first_id), frame.strings))

    def _add_source(self, frame: Source) -> None:
        assert self.process is not None
        limit = self._collector.config.max_sources
        if frame.source_id not in self._sources and len(self._sources) >= limit:
            raise MalformedFrame(f"SOURCE frame: source {frame.source_id} is one more than max_sources={limit}")
        if len(frame.name) > MAX_STRING_CHARS:
            raise MalformedFrame(
                f"SOURCE frame: field 'name' of {len(frame.name)} characters exceeds the limit of {MAX_STRING_CHARS}"
            )
        self.process.thread_names[frame.thread_id] = frame.name
        self._sources[frame.source_id] = SourceContext(self.process, frame.thread_id, self._strings, self._kinds)

    def _handle(self, frame: Frame) -> None:
        if isinstance(frame, Events):
            context = self._sources.get(frame.source_id)
            if context is None:
                raise MalformedFrame(f"EVENTS frame: field 'source_id' {frame.source_id} was never declared by SOURCE")
            self._collector.store.append(
                context.key, context, frame.count, frame.first_ts_ns, frame.last_ts_ns, frame.payload
            )
        elif isinstance(frame, Strings):
            self._add_strings(frame)
        elif isinstance(frame, Source):
            self._add_source(frame)
        elif isinstance(frame, Flush):
            assert self._transport is not None
            self._transport.write(encode(FlushAck(frame.token)))  # everything before it is stored already
        elif isinstance(frame, FlushAck):
            future = self._flushes.pop(frame.token, None)
            if future is not None and not future.done():
                future.set_result(True)
        elif isinstance(frame, Stats):
            assert self.process is not None
            self.process.client_dropped_events = frame.dropped_events
            self.process.client_dropped_frames = frame.dropped_frames
        elif isinstance(frame, Schema):
            self._kinds.update(frame.kinds)
        elif isinstance(frame, Hello):
            self.process = self._collector.registry.hello(frame)
            log.info(
                "connection from %s: process %r pid %d on %s",
                self._peer,
                frame.process_name,
                frame.pid,
                frame.host,
            )
