"""The OTLP/gRPC receiver (``--otlp-grpc``): ``TraceService/Export``, ``LogsService/Export`` and
``MetricsService/Export`` of the OpenTelemetry protocol, served by ``grpc.aio`` on the collector's event loop.

Each request is handed, as the bytes received, to the OTLP/HTTP receiver's ``OtlpReceiver``: decoded there on a
worker thread (not on the loop, as a generated servicer's deserializer would), within the same bound on requests in
flight, into the same streams and counts. It answers as the OTLP specification says for gRPC: OK with the signal's
``Export*ServiceResponse`` (its ``partial_success`` counts the items refused); INVALID_ARGUMENT for a message that is
not a request, or data that broke a limit of its process's stream; UNAVAILABLE (the store refused everything, the
collector is stopping) or RESOURCE_EXHAUSTED (too many requests in flight, or being handled), each with a
``RetryInfo`` so exporters retry; UNAUTHENTICATED without the collector's token (``authorization: Bearer TOKEN``
metadata); DEADLINE_EXCEEDED for a request whose message has not come within ``--http-timeout``, so that a peer
cannot hold the requests handled at once with messages it never sends. A message past ``--otlp-max-body``,
compressed or as it inflates, is refused by gRPC itself with RESOURCE_EXHAUSTED and no ``RetryInfo``: sent again, it
would be refused again.

grpc.aio runs on any event loop, uvloop's too: its completion queue is polled on a thread of its own, which wakes the
loop through a socket the loop reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Iterator
from typing import Final

from ringtrace.collector.auth import Authenticator
from ringtrace.collector.ingest.otlp.answers import RETRY_AFTER_S, BadRequest, Unavailable
from ringtrace.collector.ingest.otlp.receiver import MAX_BODIES_IN_FLIGHT, OtlpReceiver
from ringtrace.collector.ingest.otlp.signals import SIGNALS, Signal
from ringtrace.wire.errors import ConfigError

try:
    import grpc
    from google.protobuf import any_pb2, duration_pb2
    from google.rpc import error_details_pb2, status_pb2
    from grpc import aio
except ImportError:
    raise ConfigError("--otlp-grpc needs grpcio: pip install 'ringtrace[grpc]'") from None

__all__ = ["OtlpGrpcServer"]

#: gRPC requests handled at once; more are refused RESOURCE_EXHAUSTED with a RetryInfo, their message unread. Each
#: holds its message (``--otlp-max-body`` at most) once read, so this bounds what they hold; their bytes count in the
#: bound on requests in flight too, with the OTLP/HTTP receiver's.
MAX_RPCS_AT_ONCE: Final = MAX_BODIES_IN_FLIGHT
#: The HTTP status a request whose message did not come in time counts under (``otlp_requests_refused``).
_TIMED_OUT: Final = 408
#: How long requests being handled at a stop have to be answered.
STOP_GRACE_S: Final = 1.0


class OtlpGrpcServer:
    """The gRPC server of the three Export methods, each handing its requests to ``receiver``.

    Args:
        receiver: the OTLP receiver (its limits, streams and counts are shared with the OTLP/HTTP listener's).
        auth: the collector's token, if it has one.
        timeout_s: how long a request's message may take to come (``--http-timeout``).
    """

    def __init__(self, receiver: OtlpReceiver, auth: Authenticator, timeout_s: float) -> None:
        self._receiver = receiver
        self._auth = auth
        self._timeout_s = timeout_s
        #: Requests being handled (``MAX_RPCS_AT_ONCE`` at most). Not gRPC's ``maximum_concurrent_rpcs``: past it,
        #: gRPC answers RESOURCE_EXHAUSTED without a RetryInfo, and exporters but Python's drop the data.
        self._handling = 0
        self._server = aio.server(
            handlers=[self._service(signal) for signal in SIGNALS],
            options=[
                ("grpc.max_receive_message_length", receiver.max_body_bytes),
                # (gRPC's default on Linux: another process could then listen on the same port, and no error says so)
                ("grpc.so_reuseport", 0),
            ],
        )

    async def listen(self, address: str, tls: tuple[bytes, bytes] | None) -> int:
        """Listen on ``address`` (``HOST:PORT``), with TLS if given ``(key, certificate chain)`` in PEM; the port bound.

        Raises:
            OSError: the address cannot be bound.
        """
        try:
            if tls is None:
                port = self._server.add_insecure_port(address)
            else:
                port = self._server.add_secure_port(address, grpc.ssl_server_credentials([tls]))
        except RuntimeError:  # (how gRPC says it could not bind; it has logged why)
            port = 0
        if not port:
            raise OSError(f"--otlp-grpc {address}: cannot listen there (in use, or not an address of this machine)")
        await self._server.start()
        return port

    async def stop(self) -> None:
        """Take no more requests, and give those being handled ``STOP_GRACE_S`` to be answered."""
        await self._server.stop(STOP_GRACE_S)

    def _service(self, signal: Signal) -> grpc.GenericRpcHandler:
        (service,) = signal.request.DESCRIPTOR.file.services_by_name.values()
        # No (de)serializers: the request arrives as bytes, decoded by the receiver off the loop; the answer goes so.
        # Stream-unary (the same on the wire as unary): its message is read once the request is admitted, not before.
        export: grpc.RpcMethodHandler[bytes, bytes] = grpc.stream_unary_rpc_method_handler(
            functools.partial(self._export, signal)
        )
        return grpc.method_handlers_generic_handler(service.full_name, {"Export": export})

    async def _export(
        self, signal: Signal, messages: AsyncIterator[bytes], context: aio.ServicerContext[bytes, bytes]
    ) -> bytes:
        await self._authenticate(signal, context)
        receiver = self._receiver
        try:
            with self._admitted():
                body = await self._message(messages, context)
                with receiver.admitted(len(body)):
                    response = await receiver.store_request(signal, body, as_json=False)
        except BadRequest as exc:
            receiver.count_refused(exc.status)
            # (past a bound on what a request holds: RESOURCE_EXHAUSTED with no RetryInfo, as sent again it would be
            # refused again)
            code = grpc.StatusCode.RESOURCE_EXHAUSTED if exc.status == 413 else grpc.StatusCode.INVALID_ARGUMENT
            await context.abort(code, str(exc))
        except Unavailable as exc:
            receiver.count_refused(503)
            code = grpc.StatusCode.RESOURCE_EXHAUSTED if exc.busy else grpc.StatusCode.UNAVAILABLE
            await context.abort(code, str(exc), _retry_info(code, str(exc)))
        return response.SerializeToString()

    @contextlib.contextmanager
    def _admitted(self) -> Iterator[None]:
        """A request being handled while in the block.

        Raises:
            Unavailable: ``MAX_RPCS_AT_ONCE`` are (``busy``).
        """
        if self._handling >= MAX_RPCS_AT_ONCE:
            raise Unavailable(f"{self._handling} gRPC requests being handled, the most at once; retry later", busy=True)
        self._handling += 1
        try:
            yield
        finally:
            self._handling -= 1

    async def _message(self, messages: AsyncIterator[bytes], context: aio.ServicerContext[bytes, bytes]) -> bytes:
        """The request's message (a unary method's one), or the request answered DEADLINE_EXCEEDED if it has not
        come within ``timeout_s``, or INVALID_ARGUMENT if there is none."""
        try:
            async with asyncio.timeout(self._timeout_s):
                async for body in messages:
                    return body
        except TimeoutError:
            self._receiver.count_refused(_TIMED_OUT)
            why = f"no request message within http_timeout_s={self._timeout_s}"
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, why)
        # None: its sender cancelled the request (or sent none, as no exporter does). Nothing refused, nothing counted.
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no request message")

    async def _authenticate(self, signal: Signal, context: aio.ServicerContext[bytes, bytes]) -> None:
        """Nothing if the request carries the token (or none is needed); else it is answered UNAUTHENTICATED."""
        auth = self._auth
        if not auth.required:
            return
        header = next((value for key, value in context.invocation_metadata() or () if key == "authorization"), None)
        reason = auth.bearer_refusal(header if isinstance(header, str) else None)
        if reason is None:
            return
        auth.http_refusals += 1
        peer = context.peer().partition(":")[2]  # (gRPC's "ipv4:HOST:PORT")
        auth.log_refusal(f"gRPC {signal.path.removeprefix('/v1/')} export", peer, reason)
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "authentication failed")


def _retry_info(code: grpc.StatusCode, message: str) -> tuple[tuple[str, bytes], ...]:
    """Trailing metadata that tell the exporter to send the request again in ``RETRY_AFTER_S``: a ``RetryInfo`` in
    the status details, where the specification puts it, and alone, where OpenTelemetry's Python exporter reads it."""
    retry = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=RETRY_AFTER_S))
    detail = any_pb2.Any()
    detail.Pack(retry)
    status = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    return (
        ("grpc-status-details-bin", status.SerializeToString()),
        ("google.rpc.retryinfo-bin", retry.SerializeToString()),
    )
