"""The OTLP/HTTP receiver: ``POST /v1/traces``, ``/v1/logs`` and ``/v1/metrics`` as the OpenTelemetry protocol
specification says (protobuf or JSON, gzip or not), each resource's data stored through a loopback native connection
of its own (``loopback.py``): spans (``spans.py``), log records as messages (``logs.py``), gauges and sums as
counters (``data_points.py``).

Answers, as the specification says: 200 with the signal's ``Export*ServiceResponse`` (its ``partial_success`` counts
the items refused, with the first reason); 400 with a ``google.rpc.Status`` for a body that is not a request; 413 past
the body limit (compressed or not: a gzip bomb is refused as it inflates); 415 for another content type or encoding;
503 with ``Retry-After`` when the store refused everything (``--policy discard``), the bytes of the requests in
flight, as received and as inflated, would pass their bound (``in_flight.py``), or the streams of
``--otlp-max-processes`` resources are busy with other requests, so exporters retry rather than lose them. Resources'
streams are bounded apart from clients' connections (``--max-connections``): an idle one is closed when a new
resource needs its slot.

The OTLP/gRPC receiver (``grpc_receiver.py``) hands its requests to the same ``OtlpReceiver``: the limits, the
decoding, the streams, the store and the counts are the same: ``store_request`` answers either with the response
message or with an exception that says which refusal it is (``BadRequest``, ``Unavailable``).

The parts are modules of their own: the answers (``answers.py``), reading a body (``request_body.py``), the signals and
their decoding (``signals.py``), and the resources' streams (``process_streams.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gc
import logging
from collections import OrderedDict
from collections.abc import Iterator
from typing import Final

from aiohttp import web
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans
from ringtrace.collector.ingest.connection import IngestProtocol, IngestSink
from ringtrace.collector.ingest.otlp.answers import (
    JSON_CONTENT,
    BadRequest,
    Unavailable,
    message_answer,
    status_answer,
)
from ringtrace.collector.ingest.otlp.in_flight import Busy, BytesInFlight, RequestBytes
from ringtrace.collector.ingest.otlp.loopback import LoopbackClosed, LoopbackConnection
from ringtrace.collector.ingest.otlp.process_streams import (
    FIRST_TRACK_ID,
    MAX_THREAD_TRACKS,
    NAMED_TRACKS,
    Delivery,
    ProcessStream,
    Tally,
)
from ringtrace.collector.ingest.otlp.request_body import content_type, read_body
from ringtrace.collector.ingest.otlp.request_pieces import PIECE_BYTES, Piece, RequestPlan, plan
from ringtrace.collector.ingest.otlp.request_shape import check_shape
from ringtrace.collector.ingest.otlp.resources import MAX_SPAN_EVENTS, ProcessEvents, process_of
from ringtrace.collector.ingest.otlp.signals import SIGNALS, Signal, decoded_by_process, read_quickly
from ringtrace.collector.ingest.otlp.trace_lanes import MAX_TRACE_LANES

__all__ = ["MAX_BODIES_IN_FLIGHT", "OtlpReceiver"]

log = logging.getLogger("ringtrace.collector.otlp")

#: Resources whose stream closed whose next track id is remembered, at most (``OtlpReceiver._next_track_ids``).
_TRACK_IDS_REMEMBERED: Final = 10_000
#: Log categories (scope names) a process's messages keep at most; those of more are the ``log`` category's.
MAX_LOG_CATEGORIES: Final = 100
#: Bytes of request bodies in flight at once, as received and as inflated, in bodies of ``--otlp-max-body``; past it,
#: 503 with Retry-After. (What a request is decoded into takes up to about 50 times its body, or more, but one is
#: decoded at a time, a large one a piece at a time: ``request_pieces.py``; what waits for the store is its frames.)
MAX_BODIES_IN_FLIGHT: Final = 8
#: A body of at most this many bytes that the C reader takes (``fast_spans.py``) is read and packed on the event loop,
#: where it takes well under a millisecond: handing it to a thread and back would cost more than the work.
INLINE_BODY_BYTES: Final = 128 * 1024


class OtlpReceiver:
    """The routes of the OTLP/HTTP port, and what they share with the OTLP/gRPC one: the bound on requests in flight,
    the decoding, the loopback streams of the resources seen, and the counts."""

    def __init__(
        self,
        sink: IngestSink,
        token: str | None,
        max_body_bytes: int,
        max_processes: int,
        connections: set[IngestProtocol],
        timeout_s: float,
        max_span_events: int = MAX_SPAN_EVENTS,
    ) -> None:
        """``max_processes``: resources with a loopback stream open at once (``--otlp-max-processes``);
        ``connections``: their loopback connections, kept apart from the clients' (no ``--max-connections`` slot);
        ``timeout_s``: how long a body may send nothing (``--http-timeout``): one that stops would hold its bytes in
        flight; ``max_span_events``: a span's events, and links, kept at most (``--otlp-max-span-events``)."""
        self._sink = sink
        self.max_span_events = max_span_events
        self._token = token
        self.max_body_bytes = max_body_bytes
        self.max_processes = max_processes
        self._connections = connections
        self.timeout_s = timeout_s
        #: Each resource's stream, least recently used first (the first reclaimed when more are needed).
        self._streams: dict[str, ProcessStream] = {}
        #: The next track id of each resource whose stream closed, the latest last: the tracks of its next stream are
        #: new to its process, whose ended tracks (another trace's lanes) stay in the store.
        self._next_track_ids: OrderedDict[str, int] = OrderedDict()
        self._opening = asyncio.Lock()
        #: One request decoded and packed at a time (``export``).
        self._decoding = asyncio.Lock()
        #: Bytes of the bodies of the requests being handled, as received and as inflated, within a bound.
        self.in_flight = BytesInFlight(MAX_BODIES_IN_FLIGHT * max_body_bytes)
        #: The collector is stopping: no new request is taken, and no loopback connection opened (``stop``).
        self.stopping = False
        #: Items (spans, log records, data points) stored, and refused, since the start, by signal path.
        self.accepted: dict[str, int] = dict.fromkeys((signal.path for signal in SIGNALS), 0)
        self.refused: dict[str, int] = dict.fromkeys((signal.path for signal in SIGNALS), 0)
        #: Requests answered with an error status, by status (400, 408, 413, 415, 503). Those refused whole before they
        #: were decoded count no items above; those the store or a stream refused count theirs in ``refused``.
        self.refused_requests: dict[int, int] = {}

    @property
    def open_streams(self) -> int:
        """Resources whose loopback connection is open."""
        return len(self._streams)

    def routes(self) -> list[web.RouteDef]:
        return [web.post(signal.path, functools.partial(self.export, signal)) for signal in SIGNALS]

    async def export(self, signal: Signal, request: web.Request) -> web.Response:
        as_json = content_type(request) == JSON_CONTENT
        size = min(request.content_length or self.max_body_bytes, self.max_body_bytes)
        try:
            with self.admitted(size) as held:  # (given back when answered: the frames wait for the store meanwhile)
                body = await read_body(request, self.max_body_bytes, held.take, self.timeout_s)
                return await self.store(signal, body, as_json)
        except (BadRequest, Unavailable) as exc:
            return self._refusal(exc, as_json)

    async def store(self, signal: Signal, body: bytes, as_json: bool) -> web.Response:
        """The HTTP answer to the request in ``body``: its response (``store_request``), or the refusal's status."""
        try:
            return message_answer(await self.store_request(signal, body, as_json), as_json)
        except (BadRequest, Unavailable) as exc:
            return self._refusal(exc, as_json)

    def _refusal(self, refused: BadRequest | Unavailable, as_json: bool) -> web.Response:
        if isinstance(refused, Unavailable):
            return self._refuse(503, str(refused), as_json, retry=True)
        return self._refuse(refused.status, str(refused), as_json)

    def _refuse(self, status: int, message: str, as_json: bool, retry: bool = False) -> web.Response:
        self.count_refused(status)
        return status_answer(status, message, as_json, retry)

    def count_refused(self, status: int) -> None:
        """One more request answered with an error: ``status`` is its HTTP status (a gRPC one's HTTP equivalent)."""
        self.refused_requests[status] = self.refused_requests.get(status, 0) + 1

    @contextlib.contextmanager
    def admitted(self, size: int) -> Iterator[RequestBytes]:
        """A request of ``size`` bytes in flight while in the block; what its body inflates to is taken from it
        (``RequestBytes.take``) as it grows, and all of it given back at the end.

        Raises:
            Unavailable: the collector is stopping, or the bytes in flight would pass their bound (``busy``).
        """
        if self.stopping:  # (a kept-alive connection outlives the listener)
            raise Unavailable("the collector is stopping")
        try:
            with self.in_flight.request() as held:
                held.take(size)
                yield held
        except Busy as exc:
            raise Unavailable(str(exc), busy=True) from None

    async def store_request(self, signal: Signal, body: bytes, as_json: bool) -> Message:
        """Decode and pack the request (one at a time: its objects are freed before its frames wait for the store),
        then send each process's frames; the signal's response, with what was refused in its ``partial_success``. A
        protobuf body of more than ``PIECE_BYTES`` is read, packed and sent a piece at a time (``request_pieces.py``):
        what its reading holds is a piece's.

        Raises:
            BadRequest: the body is not a request (400), or its data broke a limit of its stream.
            Unavailable: the store refused everything (full, under ``--policy discard``), or the request's new
                resources do not fit in ``max_processes`` until other requests are done (``busy``).
        """
        tally = Tally()
        deliveries: list[Delivery] = []
        try:
            async with self._decoding:  # (on a worker thread: a large request takes the loop's time otherwise)
                planned = None
                if not as_json and len(body) > PIECE_BYTES:  # (cutting walks each item: off the loop, as reading does)
                    planned = await asyncio.to_thread(_planned, signal, body)
                if planned is None:
                    processes, inline = await self._read(signal, body, as_json)
                    del body
                    taken = self._taken(signal, processes, tally)
                    del processes
                    for process in taken:
                        deliveries.append(await self._packed(process, inline))
                    del taken
                else:  # (each piece sent before the next is read: the lock held meanwhile)
                    await self._store_pieces(signal, *planned, tally, deliveries)
            for delivery in deliveries:
                await self._send(signal, delivery, tally)
        finally:  # (a request cancelled or failing midway holds no stream)
            for delivery in deliveries:
                delivery.release()
        return self._answer(signal, tally)

    async def _read(
        self, signal: Signal, body: bytes, as_json: bool, inline: bool = True
    ) -> tuple[list[ProcessEvents], bool]:
        """The request's data per process, and whether it was read on the event loop (a small body the C reader
        takes, where ``inline``) rather than on a worker thread."""
        if inline and len(body) <= INLINE_BODY_BYTES:
            with _uncollected():
                processes = read_quickly(signal, body, as_json, self.max_span_events)
            if processes is not None:
                return processes, True
        return await asyncio.to_thread(decoded_by_process, signal, body, as_json, self.max_span_events), False

    def _taken(self, signal: Signal, processes: list[ProcessEvents], tally: Tally) -> list[ProcessEvents]:
        """Those of ``processes`` that get a stream (``_room_for``), the items of the others counted as refused.

        Raises:
            Unavailable: they would fit once the other requests in flight are done (``busy``).
        """
        room = self._room_for(processes)
        if room is None:
            why = (
                f"the OTLP processes are at --otlp-max-processes={self.max_processes}, storing other requests: this "
                f"one's new resources fit once they are done"
            )
            raise Unavailable(why, busy=True)
        taken, past_bound = room
        if past_bound:
            why = (
                f"{len(past_bound)} resources of the request past --otlp-max-processes={self.max_processes} "
                f"(resources with a stream at once) were not stored: send fewer resources a request"
            )
            log.warning("OTLP %s not stored: %s", signal.items, why)
            tally.not_stored(sum(process.items for process in past_bound), why)
        return taken

    async def _store_pieces(
        self, signal: Signal, plan: RequestPlan, keys: list[str], processes: list[ProcessEvents], tally: Tally,
        deliveries: list[Delivery],
    ) -> None:  # fmt: skip
        """Store the request of ``plan`` a piece at a time, each piece's frames sent before the next is read; its
        resources' streams decided first (``processes``: one per resource entry's ``keys``, with no items yet). A
        piece that is not a request after others were sent refuses the rest in ``partial_success``, and so does a
        stream that closed (a limit it broke) its process's items in the pieces after: sent again, they would be
        again."""
        taken = {process.key for process in self._taken(signal, processes, tally)}
        past_bound = frozenset(index for index, key in enumerate(keys) if key not in taken)
        if past_bound:  # (the items of their resource entries, none of them read: the reason is given above)
            tally.not_stored(await asyncio.to_thread(_items_of, plan, past_bound), "")
        pieces = plan.pieces(past_bound)  # (each cut on a worker thread: the loop's otherwise, as long as the reading)
        sent = False
        while (piece := await asyncio.to_thread(next, pieces, None)) is not None:
            try:
                # (on a worker thread, each: pieces one after the other would hold the loop as long as the request)
                read, inline = await self._read(signal, piece.body, False, inline=False)
            except BadRequest as exc:
                if not sent:
                    raise
                left = piece.items + await asyncio.to_thread(_items_left, pieces)
                why = f"{left} {signal.items} of the request were not read: {exc}"
                tally.not_stored(left, why)
                tally.closed = tally.closed or why  # (sent again, refused again: a 400 if none of it was stored)
                return
            for process in read:
                if process.key in tally.closed_keys:
                    tally.not_stored(process.items, "")
                else:
                    deliveries.append(await self._packed(process, inline))
            del read
            while deliveries:
                await self._send(signal, deliveries.pop(0), tally)
            sent = True

    async def _send(self, signal: Signal, delivery: Delivery, tally: Tally) -> None:
        try:
            await tally.send(delivery)
        except LoopbackClosed as exc:  # the stream broke a limit, or closed: what it had not stored is refused
            log.warning("OTLP %s of %r not stored: %s", signal.items, delivery.process_name, exc.reason)

    def _answer(self, signal: Signal, tally: Tally) -> Message:
        """The signal's response to a request of ``tally``, its counts added to the receiver's.

        Raises:
            BadRequest: its stream closed on a limit, and none of its items was stored.
            Unavailable: the store refused all of them, or the collector is stopping.
        """
        stored, refused = tally.stored, tally.refused
        self.accepted[signal.path] += stored
        self.refused[signal.path] += tally.rejected + refused
        if refused and not stored:
            if self.stopping:  # (its streams closed with the collector: not a limit, the exporter may send it again)
                raise Unavailable("the collector is stopping")
            if tally.closed:  # (a limit of the stream: sent again, it would break it again)
                raise BadRequest(400, f"the collector could not take the {signal.items}: {tally.closed}")
            raise Unavailable(f"the collector's store refused the {signal.items} (full, or the process at its cap)")
        response = signal.response()
        messages = []
        if tally.rejected or refused:
            full = f"the collector's store refused some {signal.items} (full, or the process at its cap)"
            messages.append(tally.why or tally.closed or full)
        if tally.dropped:  # (the spans are stored: a warning, with no item refused)
            limit = self.max_span_events
            messages.append(
                f"{tally.dropped} events and links of spans past --otlp-max-span-events={limit} were not stored "
                f"(each span's first {limit} of each were)"
            )
        if messages:
            partial = signal.partial(
                **{signal.rejected_field: tally.rejected + refused, "error_message": "; ".join(messages)}
            )
            response.partial_success.CopyFrom(partial)  # type: ignore[attr-defined]
        return response

    def _room_for(self, processes: list[ProcessEvents]) -> tuple[list[ProcessEvents], list[ProcessEvents]] | None:
        """Which of ``processes`` get a stream, and which are past ``max_processes``, idle streams closed (least
        recently used first) to make room: all of them, if they fit; None if they would once the other requests in
        flight are done (a 503: the exporter sends the request again, and nothing of it is stored twice); if there
        are more of them than there may be streams, as many as fit now (a partial success: sent again, the rest
        would never fit, and an exporter sends a request again until its timeout, then drops all of it). (Called
        holding ``_decoding``: no other request opens a stream meanwhile.)"""
        streams = self._streams
        for key, stream in list(streams.items()):
            if stream.connection.closed:  # (gone: forgotten, its slot free)
                del streams[key]
        keys = {process.key for process in processes}
        new = [process for process in processes if process.key not in streams]
        wanted = len(new) - (self.max_processes - len(streams))
        for key, stream in list(streams.items()):
            if wanted <= 0:
                break
            if key not in keys and not stream.lock.locked():  # idle: no request is packing or sending on it
                del streams[key]
                stream.connection.close()
                wanted -= 1
        if wanted <= 0:
            return processes, []
        if len(processes) <= self.max_processes or wanted == len(new) == len(processes):
            return None
        past = new[len(new) - wanted :]
        left_out = {id(process) for process in past}
        return [process for process in processes if id(process) not in left_out], past

    async def _packed(self, process: ProcessEvents, inline: bool) -> Delivery:
        """One process's events as frames, its stream held (its lock) until they are sent: frames go out in the order
        they were packed, each after the STRINGS frames it needs. ``inline``: packed on the event loop (a small
        request's), else on a worker thread."""
        delivery = Delivery(process)
        try:
            stream = await self._stream(process)
        except LoopbackClosed as exc:
            delivery.closed = exc
            return delivery
        await stream.lock.acquire()
        try:
            # (its lock held: one packer a stream)
            if inline:
                with _uncollected():
                    delivery.frames = stream.pack(process)
            else:
                delivery.frames = await asyncio.to_thread(stream.pack, process)
        except BaseException:
            stream.lock.release()
            raise
        delivery.stream = stream
        return delivery

    async def _stream(self, process: ProcessEvents) -> ProcessStream:
        stream = self._streams.pop(process.key, None)
        if stream is not None and not stream.connection.closed:
            self._streams[process.key] = stream  # (the most recently used last)
            return stream
        async with self._opening:  # (one connection per process, however many requests come at once)
            stream = self._streams.get(process.key)
            if self.stopping:  # ingest's connections are being closed: a new one would outlive them
                raise LoopbackClosed("the collector is stopping")
            if stream is None or stream.connection.closed:
                if stream is not None:  # closed, not forgotten yet: the next one goes on from it
                    self._next_track_ids[process.key] = stream.next_track_id
                first = self._next_track_ids.pop(process.key, FIRST_TRACK_ID)
                stream = self._streams[process.key] = await self._open(process, first)
            return stream

    async def _open(self, process: ProcessEvents, first_track_id: int) -> ProcessStream:
        hello = process.hello
        if self._token is not None:
            hello = dataclasses.replace(hello, token=self._token)
        connection = LoopbackConnection(self._sink, f"otlp:{hello.process_name}", self._connections)
        welcome = await connection.open(hello)
        stream = ProcessStream(connection, first_track_id)
        # A stream whose connection is gone (idle, a limit, the stop) is forgotten with its tables: resources come
        # and go (a pid, a service.instance.id per run), and each kept stream would hold its table for good.
        connection.on_lost = functools.partial(self._forget, process.key, stream)
        encoder = stream.encoder
        encoder.max_frame_bytes = welcome.max_frame_bytes
        encoder.max_kinds = welcome.max_kinds
        encoder.max_schema_bytes = welcome.max_schema_bytes
        encoder.strings.limit_to(welcome.max_strings, welcome.max_string_bytes)
        encoder.strings.recycles = welcome.string_resets
        lanes = stream.trace_lanes.max_lanes = max(min(MAX_TRACE_LANES, welcome.max_tracks // 2), 1)
        stream.max_threads = min(MAX_THREAD_TRACKS, welcome.max_tracks - lanes - NAMED_TRACKS)  # (threads: the rest)
        await connection.send(encoder.prefix())
        return stream

    def _forget(self, key: str, stream: ProcessStream) -> None:
        if self._streams.get(key) is stream:
            del self._streams[key]
            self._next_track_ids[key] = stream.next_track_id
            if len(self._next_track_ids) > _TRACK_IDS_REMEMBERED:
                self._next_track_ids.popitem(last=False)


def _planned(signal: Signal, body: bytes) -> tuple[RequestPlan, list[str], list[ProcessEvents]] | None:
    """The plan of the protobuf request in ``body`` to read in pieces, the process key of each of its resource entries
    and their processes (with no items yet); None to read it whole (not of the shape cut, or a resource protobuf
    refuses: the whole request is, saying why).

    Raises:
        BadRequest: the request holds more resources, scopes or items than it may (``request_shape.py``).
    """
    check_shape(body, signal.items)
    planned = plan(body)
    if planned is None:
        return None
    processes: dict[str, ProcessEvents] = {}
    try:
        keys = [
            process_of(ResourceSpans.FromString(header).resource, processes).key
            for header in planned.resource_headers  # (the three signals' resource entries: the same fields)
        ]
    except DecodeError:
        return None
    return planned, keys, list(processes.values())


def _items_of(plan: RequestPlan, resources: frozenset[int]) -> int:
    return sum(plan.items_of(index) for index in resources)


def _items_left(pieces: Iterator[Piece]) -> int:
    return sum(piece.items for piece in pieces)


@contextlib.contextmanager
def _uncollected() -> Iterator[None]:
    """No garbage collection in the block (a small request's read, or its packing, on the event loop: no await in it).
    Its objects, a few per span, die by reference counting once packed; a collection meanwhile would only walk them
    (a fifth of the CPU of reading and packing spans on lanes)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
