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
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import functools
import logging
import re
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, Final

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as logs_service
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as metrics_service
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_service
from ringtrace.collector.ingest.connection import IngestProtocol, IngestSink
from ringtrace.collector.ingest.otlp.data_points import metrics_by_process
from ringtrace.collector.ingest.otlp.in_flight import Busy, BytesInFlight, RequestBytes
from ringtrace.collector.ingest.otlp.logs import LOG_FIELDS, LOG_TEXT, logs_by_process
from ringtrace.collector.ingest.otlp.loopback import LoopbackClosed, LoopbackConnection
from ringtrace.collector.ingest.otlp.resources import Lane, ProcessEvents
from ringtrace.collector.ingest.otlp.spans import spans_by_process
from ringtrace.collector.ingest.otlp.trace_lanes import MAX_TRACE_LANES, TraceLane, TraceLanes
from ringtrace.wire.frames import KindSpec, encode
from ringtrace.wire.message_format import PRIORITIES
from ringtrace.wire.model import SOURCE_TRACK, THREAD_TRACK, KindRegistry, TrackInfo, normalise_values
from ringtrace.wire.stream_encoder import StreamEncoder

__all__ = [
    "RETRY_AFTER_S",
    "SIGNALS",
    "BadRequest",
    "OtlpReceiver",
    "Signal",
    "Unavailable",
    "decode_request",
    "inflated",
    "read_body",
]

log = logging.getLogger("ringtrace.collector.otlp")

_PROTOBUF: Final = "application/x-protobuf"
_JSON: Final = "application/json"
#: Threads a process's data is drawn on at most; data of more threads goes to its ``threads`` track.
MAX_THREAD_TRACKS: Final = 1_000
#: Tracks of a process's stream that are neither a thread's nor a lane of a trace: ``threads``, ``logs``, ``metrics``.
_NAMED_TRACKS: Final = 3
#: The first track id of a process's stream, and its last (track ids are 32 bits): past it, they start again.
FIRST_TRACK_ID: Final = 1 << 24
_LAST_TRACK_ID: Final = 2**32 - 1
#: Resources whose stream closed whose next track id is remembered, at most (``OtlpReceiver._next_track_ids``).
_TRACK_IDS_REMEMBERED: Final = 10_000
#: Log categories (scope names) a process's messages keep at most; those of more are the ``log`` category's.
MAX_LOG_CATEGORIES: Final = 100
#: Bytes of request bodies in flight at once, as received and as inflated, in bodies of ``--otlp-max-body``; past it,
#: 503 with Retry-After. (A decoded request takes about 15 times its body, but one is decoded at a time: what waits for
#: the store is its frames.)
MAX_BODIES_IN_FLIGHT: Final = 8
#: What a gzip body inflates by at a time, each piece counted in flight before the next.
_INFLATE_STEP: Final = 1024 * 1024
#: Seconds after which an exporter refused for now may send again (``Retry-After``; gRPC's ``RetryInfo``).
RETRY_AFTER_S: Final = 1
#: OTLP/JSON ids are hex, where protobuf's JSON mapping expects base64.
_ID_FIELDS: Final = frozenset(("traceId", "spanId", "parentSpanId"))
_HEX: Final = re.compile(r"[0-9a-fA-F]*")


class BadRequest(Exception):
    """The body is not an export request: ``status`` says which HTTP status, the message why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Unavailable(Exception):
    """The request is refused for now, and may be sent again later: 503 with ``Retry-After``; over gRPC UNAVAILABLE,
    or RESOURCE_EXHAUSTED where ``busy`` (too many requests in flight), with a RetryInfo."""

    def __init__(self, message: str, busy: bool = False) -> None:
        super().__init__(message)
        self.busy = busy


@dataclasses.dataclass(frozen=True)
class Signal:
    """One OTLP signal: its path, its request and response messages, and how its data becomes events."""

    path: str
    #: What its items are called (in answers and logs): spans, log records, data points.
    items: str
    request: type[Message]
    response: type[Message]
    partial: type[Message]
    #: The ``partial_success`` field that counts the items refused.
    rejected_field: str
    by_process: Callable[[Any], list[ProcessEvents]]


SIGNALS: Final = (
    Signal("/v1/traces", "spans", trace_service.ExportTraceServiceRequest, trace_service.ExportTraceServiceResponse,
           trace_service.ExportTracePartialSuccess, "rejected_spans", spans_by_process),
    Signal("/v1/logs", "log records", logs_service.ExportLogsServiceRequest, logs_service.ExportLogsServiceResponse,
           logs_service.ExportLogsPartialSuccess, "rejected_log_records", logs_by_process),
    Signal("/v1/metrics", "data points", metrics_service.ExportMetricsServiceRequest,
           metrics_service.ExportMetricsServiceResponse, metrics_service.ExportMetricsPartialSuccess,
           "rejected_data_points", metrics_by_process),
)  # fmt: skip


class _ProcessStream:
    """A resource's native stream: its loopback connection, encoder, tracks, log kinds and the lanes of its traces,
    kept across requests."""

    def __init__(self, connection: LoopbackConnection, first_track_id: int) -> None:
        self.connection = connection
        self.registry = KindRegistry()
        self.encoder = StreamEncoder(registry=self.registry)
        self.tracks: dict[Lane, TrackInfo] = {}
        # Not reused before the last one (the lanes of traces end; a stream of the process opened again goes on from
        # here), and far above a ringtrace client's: shown as one process with a client's (the same OS process), its
        # tracks keep their own tids.
        self.next_track_id = first_track_id
        self.trace_lanes = TraceLanes()
        #: Threads drawn on tracks of their own, at most: fewer than ``MAX_THREAD_TRACKS`` where the tracks its
        #: connection may hold, less its traces' lanes and named tracks, are fewer (``OtlpReceiver._open``).
        self.max_threads = MAX_THREAD_TRACKS
        self.log_kinds: dict[tuple[str, str], KindSpec] = {}
        self.lock = asyncio.Lock()

    def track(self, lane: Lane) -> TrackInfo:
        track = self.tracks.get(lane)
        if track is None:
            if isinstance(lane, tuple) and len(self.tracks) - self.trace_lanes.live >= self.max_threads:
                return self.track("threads")
            if isinstance(lane, TraceLane):  # a track of the process, beside its threads
                track = TrackInfo(self.next_track_id, SOURCE_TRACK, lane.name)
            else:
                thread_id, name = lane if isinstance(lane, tuple) else (0, lane)
                track = TrackInfo(self.next_track_id, THREAD_TRACK, name, thread_id)
            self.next_track_id = self.next_track_id + 1 if self.next_track_id < _LAST_TRACK_ID else FIRST_TRACK_ID
            self.tracks[lane] = track
        return track

    def log_kind(self, category: str, priority: str) -> KindSpec:
        if len(self.log_kinds) >= MAX_LOG_CATEGORIES * len(PRIORITIES):
            category = "log"
        kind = self.log_kinds.get((category, priority))
        if kind is None:
            kind = self.log_kinds[(category, priority)] = self.registry.register(
                category, "message", LOG_FIELDS, normalise_values, LOG_TEXT, priority
            )
        return kind

    def pack(self, process: ProcessEvents) -> list[bytes]:
        """The process's events as frames on this stream, the spans of its traces on their lanes, and a STATS frame
        that counts its items refused. The lanes of the traces forgotten end as they are, their spans of this request
        sent first: a request of more traces than the stream may hold tracks keeps within its bound."""
        frames: list[bytes] = []
        for lane, records in self.records(process).items():
            frames += self._frames(lane, records)
        lanes = self.trace_lanes
        spans: dict[Lane, list[Any]] = {}
        for span in process.trace_spans:
            spans.setdefault(lanes.place(span), []).extend(span.records)
            for retired in lanes.take_retired():
                placed = spans.pop(retired, None)
                if placed is not None:
                    frames += self._frames(retired, placed)
                track = self.tracks.pop(retired, None)
                ended = None if track is None else self.encoder.retire(track)
                if ended is not None:
                    frames.append(ended)
        for lane, records in spans.items():
            frames += self._frames(lane, records)
        self.encoder.rejected_events += process.rejected  # counted in the process's counters, in every snapshot
        frames.append(encode(self.encoder.stats(0, 0, 0)))
        return frames

    def _frames(self, lane: Lane, records: list[Any]) -> list[bytes]:
        """The frames of ``records`` on the track of ``lane`` (declared if new)."""
        frames: list[bytes] = []
        for batch, _ in self.encoder.encode_pieces(self.track(lane), records):
            frames += batch.control
            frames += (frame for frame, _ in batch.events)
        return frames

    def records(self, process: ProcessEvents) -> dict[Lane, list[Any]]:
        """The process's records per lane but its spans of traces: its log records among them as messages."""
        records = process.records
        for lane, category, priority, ts, values in process.messages:
            kind = self.log_kind(category, priority)
            records.setdefault(lane, []).extend((kind.id, kind.name, ts, ts, values))
        return records


class _Delivery:
    """One process's part of a request: its counts, and its frames to send on its stream (whose lock it holds)."""

    __slots__ = ("closed", "frames", "items", "process_name", "rejected", "stream", "why")

    def __init__(self, process: ProcessEvents) -> None:
        self.items, self.rejected, self.why = process.items, process.rejected, process.why
        self.process_name = process.hello.process_name
        self.frames: list[bytes] = []
        self.stream: _ProcessStream | None = None
        self.closed: LoopbackClosed | None = None

    async def send(self) -> int:
        """Send the frames and let the stream go; returns how many items the store refused.

        Raises:
            LoopbackClosed: the stream could not be opened, or closed.
        """
        if self.closed is not None:
            raise self.closed
        stream = self.stream
        assert stream is not None
        try:
            delivered = await stream.connection.send(self.frames)
        finally:
            self.release()
        if (process := stream.connection.process) is not None:
            process.last_seen_wall_ns = time.time_ns()
        # (A refused event of a span may be its begin, its end or one of its events: at most every item is.)
        return min(delivered.refused, self.items - self.rejected)

    def release(self) -> None:
        """Let the stream go (once), sent or not: frames packed and never sent leave it to a closed connection."""
        stream, self.stream, self.frames = self.stream, None, []
        if stream is not None:
            stream.lock.release()


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
    ) -> None:
        """``max_processes``: resources with a loopback stream open at once (``--otlp-max-processes``);
        ``connections``: their loopback connections, kept apart from the clients' (no ``--max-connections`` slot);
        ``timeout_s``: how long a body may send nothing (``--http-timeout``): one that stops would hold its bytes in
        flight."""
        self._sink = sink
        self._token = token
        self.max_body_bytes = max_body_bytes
        self.max_processes = max_processes
        self._connections = connections
        self.timeout_s = timeout_s
        #: Each resource's stream, least recently used first (the first reclaimed when more are needed).
        self._streams: dict[str, _ProcessStream] = {}
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
        as_json = _content_type(request) == _JSON
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
            return _message(await self.store_request(signal, body, as_json), as_json)
        except (BadRequest, Unavailable) as exc:
            return self._refusal(exc, as_json)

    def _refusal(self, refused: BadRequest | Unavailable, as_json: bool) -> web.Response:
        if isinstance(refused, Unavailable):
            return self._refuse(503, str(refused), as_json, retry=True)
        return self._refuse(refused.status, str(refused), as_json)

    def _refuse(self, status: int, message: str, as_json: bool, retry: bool = False) -> web.Response:
        self.count_refused(status)
        return _status(status, message, as_json, retry)

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
        then send each process's frames; the signal's response, with what was refused in its ``partial_success``.

        Raises:
            BadRequest: the body is not a request (400), or its data broke a limit of its stream.
            Unavailable: the store refused everything (full, under ``--policy discard``), or the request's new
                resources do not fit in ``max_processes`` until other requests are done (``busy``).
        """
        deliveries: list[_Delivery] = []
        try:
            async with self._decoding:  # (on a worker thread: a large request takes the loop's time otherwise)
                processes = await asyncio.to_thread(_decoded, signal, body, as_json)
                del body
                room = self._room_for(processes)
                if room is None:
                    why = (
                        f"the OTLP processes are at --otlp-max-processes={self.max_processes}, storing other "
                        f"requests: this one's new resources fit once they are done"
                    )
                    raise Unavailable(why, busy=True)
                taken, past_bound = room
                for process in taken:
                    deliveries.append(await self._packed(process))
                del processes, taken
            total, rejected, refused, why, closed = 0, 0, 0, "", ""
            if past_bound:
                why = (
                    f"{len(past_bound)} resources of the request past --otlp-max-processes={self.max_processes} "
                    f"(resources with a stream at once) were not stored: send fewer resources a request"
                )
                log.warning("OTLP %s not stored: %s", signal.items, why)
                for process in past_bound:
                    total += process.items
                    rejected += process.rejected
                    refused += process.items - process.rejected
            for delivery in deliveries:
                total += delivery.items
                rejected += delivery.rejected
                why = why or delivery.why
                try:
                    refused += await delivery.send()
                except LoopbackClosed as exc:  # the stream broke a limit, or closed: what it had not stored is refused
                    log.warning("OTLP %s of %r not stored: %s", signal.items, delivery.process_name, exc.reason)
                    refused += delivery.items - delivery.rejected
                    closed = closed or exc.reason
        finally:  # (a request cancelled or failing midway holds no stream)
            for delivery in deliveries:
                delivery.release()
        stored = total - rejected - refused
        self.accepted[signal.path] += stored
        self.refused[signal.path] += rejected + refused
        if refused and not stored:
            if self.stopping:  # (its streams closed with the collector: not a limit, the exporter may send it again)
                raise Unavailable("the collector is stopping")
            if closed:  # (a limit of the stream: sent again, it would break it again)
                raise BadRequest(400, f"the collector could not take the {signal.items}: {closed}")
            raise Unavailable(f"the collector's store refused the {signal.items} (full, or the process at its cap)")
        response = signal.response()
        if rejected or refused:
            full = f"the collector's store refused some {signal.items} (full, or the process at its cap)"
            message = why or closed or full
            partial = signal.partial(**{signal.rejected_field: rejected + refused, "error_message": message})
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

    async def _packed(self, process: ProcessEvents) -> _Delivery:
        """One process's events as frames, its stream held (its lock) until they are sent: frames go out in the order
        they were packed, each after the STRINGS frames it needs."""
        delivery = _Delivery(process)
        try:
            stream = await self._stream(process)
        except LoopbackClosed as exc:
            delivery.closed = exc
            return delivery
        await stream.lock.acquire()
        try:
            delivery.frames = await asyncio.to_thread(stream.pack, process)  # (its lock held: one packer a stream)
        except BaseException:
            stream.lock.release()
            raise
        delivery.stream = stream
        return delivery

    async def _stream(self, process: ProcessEvents) -> _ProcessStream:
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

    async def _open(self, process: ProcessEvents, first_track_id: int) -> _ProcessStream:
        hello = process.hello
        if self._token is not None:
            hello = dataclasses.replace(hello, token=self._token)
        connection = LoopbackConnection(self._sink, f"otlp:{hello.process_name}", self._connections)
        welcome = await connection.open(hello)
        stream = _ProcessStream(connection, first_track_id)
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
        stream.max_threads = min(MAX_THREAD_TRACKS, welcome.max_tracks - lanes - _NAMED_TRACKS)  # (threads: the rest)
        await connection.send(encoder.prefix())
        return stream

    def _forget(self, key: str, stream: _ProcessStream) -> None:
        if self._streams.get(key) is stream:
            del self._streams[key]
            self._next_track_ids[key] = stream.next_track_id
            if len(self._next_track_ids) > _TRACK_IDS_REMEMBERED:
                self._next_track_ids.popitem(last=False)


def _decoded(signal: Signal, body: bytes, as_json: bool) -> list[ProcessEvents]:
    return signal.by_process(decode_request(signal, body, as_json))


def decode_request(signal: Signal, body: bytes, as_json: bool) -> Any:
    """The ``signal``'s export request in ``body`` (protobuf, or OTLP/JSON with hex ids).

    Raises:
        BadRequest: it is not one.
    """
    export = signal.request()
    try:
        if as_json:
            value = _json(body)
            if not isinstance(value, dict):
                raise BadRequest(400, f"not an {signal.request.__name__}: a JSON object, got {_json_type(value)}")
            json_format.ParseDict(_ids_as_base64(value), export, ignore_unknown_fields=True)
        else:
            export.ParseFromString(body)
    except (DecodeError, json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise BadRequest(400, f"not an {signal.request.__name__}: {str(exc)[:200]}") from None
    return export


def _json(body: bytes) -> Any:
    import orjson  # (the collector's JSON library)

    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, f"not JSON: {exc}") from None


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _ids_as_base64(value: Any) -> Any:
    """OTLP/JSON's hex trace and span ids as the base64 protobuf's JSON mapping reads."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in _ID_FIELDS and isinstance(item, str):
                if len(item) % 2 or not _HEX.fullmatch(item):
                    raise BadRequest(400, f"field {key!r} must be hex, got {item[:40]!r}")
                item = base64.b64encode(bytes.fromhex(item)).decode()
            else:
                item = _ids_as_base64(item)
            out[key] = item
        return out
    if isinstance(value, list):
        return [_ids_as_base64(item) for item in value]
    return value


async def read_body(request: web.Request, limit: int, take: Callable[[int], None], timeout_s: float) -> bytes:
    """The request's body, inflated if gzip, within ``limit`` bytes both ways; ``take`` is told of each piece it
    inflates to before the next is inflated (``RequestBytes.take``: it may refuse).

    Raises:
        BadRequest: 413 past the limit; 415 for an encoding other than gzip; 400 for a broken gzip stream, or a body
            cut short by its peer closing the connection (an exporter's timeout: counted, not a traceback logged);
            408 when no part of the body came for ``timeout_s``.
        Busy: ``take`` refused.
    """
    if _content_type(request) not in (_PROTOBUF, _JSON):
        raise BadRequest(415, f"Content-Type must be {_PROTOBUF} or {_JSON}, got {request.content_type!r}")
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("gzip", "identity", ""):
        raise BadRequest(415, f"Content-Encoding must be gzip or identity, got {encoding[:40]!r}")
    if request.content_length is not None and request.content_length > limit:
        raise BadRequest(413, f"body of {request.content_length} bytes is past the limit of {limit} bytes")
    body = bytearray()
    chunks = request.content.iter_chunked(64 * 1024)
    try:
        while True:
            async with asyncio.timeout(timeout_s):
                chunk = await anext(chunks, b"")
            if not chunk:
                break
            body += chunk
            if len(body) > limit:
                raise BadRequest(413, f"body past the limit of {limit} bytes")
    except TimeoutError:
        raise BadRequest(408, f"no part of the body for http_timeout_s={timeout_s}, {len(body)} bytes in") from None
    except ConnectionResetError:
        raise BadRequest(400, f"body cut short: the connection closed after {len(body)} bytes of it") from None
    return bytes(body) if encoding != "gzip" else inflated(body, limit, take)


def inflated(body: bytes | bytearray, limit: int, take: Callable[[int], None]) -> bytes:
    """The gzip ``body`` inflated, within ``limit`` bytes, ``take`` told of each piece before the next is inflated.

    Raises:
        BadRequest: 413 past the limit; 400 for a broken gzip stream.
        Busy: ``take`` refused.
    """
    data = bytearray()
    rest: bytes | bytearray = body
    while True:  # each gzip member (RFC 1952: a body may hold several, as gzip.decompress reads them)
        inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        while not inflate.eof:
            try:
                piece = inflate.decompress(rest, min(_INFLATE_STEP, limit + 1 - len(data)))
            except zlib.error as exc:
                raise BadRequest(400, f"body is not gzip: {exc}") from None
            if len(data) + len(piece) > limit:
                raise BadRequest(413, f"body inflates past the limit of {limit} bytes")
            if not (piece or inflate.unconsumed_tail or inflate.eof):
                raise BadRequest(400, "gzip body cut short")
            take(len(piece))
            data += piece
            rest = inflate.unconsumed_tail
        rest = inflate.unused_data
        if not rest:
            return bytes(data)


def _content_type(request: web.Request) -> str:
    return request.content_type.strip().lower()


def _status(status: int, message: str, as_json: bool, retry: bool = False) -> web.Response:
    """An error answer: a ``google.rpc.Status`` with ``message`` (and ``Retry-After`` if the exporter may retry)."""
    code = _GRPC_CODES.get(status, 2)
    if as_json:
        response = web.json_response({"code": code, "message": message}, status=status)
    else:  # Status { int32 code = 1; string message = 2; }: two fields, written by hand
        text = message.encode()
        body = b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text
        response = web.Response(body=body, status=status, content_type=_PROTOBUF)
    if retry:
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


#: The gRPC status codes of our HTTP answers (google.rpc.Code): INVALID_ARGUMENT, DEADLINE_EXCEEDED, UNAVAILABLE...
_GRPC_CODES: Final = {400: 3, 408: 4, 413: 8, 415: 3, 503: 14}


def _message(message: Message, as_json: bool) -> web.Response:
    if as_json:
        return web.json_response(json_format.MessageToDict(message))
    return web.Response(body=message.SerializeToString(), content_type=_PROTOBUF)
