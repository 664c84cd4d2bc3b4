"""The OTLP/gRPC receiver (``--otlp-grpc``): ``TraceService/Export``, ``LogsService/Export`` and
``MetricsService/Export`` of the OpenTelemetry protocol, served by ``grpc.aio`` on the collector's event loop.

Each request is handed, as the bytes received, to the OTLP/HTTP receiver's ``OtlpReceiver``: decoded there on a
worker thread (not on the loop, as a generated servicer's deserializer would), within the same bound on requests in
flight, into the same streams and counts. It answers as the OTLP specification says for gRPC: OK with the signal's
``Export*ServiceResponse`` (its ``partial_success`` counts the items refused); INVALID_ARGUMENT for a message that is
not a request, or data that broke a limit of its process's stream; UNAVAILABLE (the store refused everything, the
collector is stopping) or RESOURCE_EXHAUSTED (too many requests in flight), each with a ``RetryInfo`` so exporters
retry; UNAUTHENTICATED without the collector's token (``authorization: Bearer TOKEN`` metadata). A message past
``--otlp-max-body``, compressed or as it inflates, is refused by gRPC itself with RESOURCE_EXHAUSTED and no
``RetryInfo``: sent again, it would be refused again.

grpc.aio runs on any event loop, uvloop's too: its completion queue is polled on a thread of its own, which wakes the
loop through a socket the loop reads.
"""

from __future__ import annotations

import functools
from typing import Final

from ringtrace.client.wire.errors import ConfigError
from ringtrace.collector.auth import Authenticator
from ringtrace.collector.ingest.otlp.receiver import (
    MAX_BODIES_IN_FLIGHT,
    RETRY_AFTER_S,
    SIGNALS,
    BadRequest,
    OtlpReceiver,
    Signal,
    Unavailable,
)

try:
    import grpc
    from google.protobuf import any_pb2, duration_pb2
    from google.rpc import error_details_pb2, status_pb2
    from grpc import aio
except ImportError:
    raise ConfigError("--otlp-grpc needs grpcio: pip install 'ringtrace[grpc]'") from None

__all__ = ["OtlpGrpcServer"]

#: gRPC requests handled at once; more wait in gRPC's queue, unread. Each holds its message (``--otlp-max-body`` at
#: most) from before it is handled, so this bounds what they hold; their bytes count in the bound on requests in
#: flight too, with the OTLP/HTTP receiver's.
MAX_RPCS_AT_ONCE: Final = MAX_BODIES_IN_FLIGHT
#: How long requests being handled at a stop have to be answered.
STOP_GRACE_S: Final = 1.0


class OtlpGrpcServer:
    """The gRPC server of the three Export methods, each handing its requests to ``receiver``.

    Args:
        receiver: the OTLP receiver (its limits, streams and counts are shared with the OTLP/HTTP listener's).
        auth: the collector's token, if it has one.
    """

    def __init__(self, receiver: OtlpReceiver, auth: Authenticator) -> None:
        self._receiver = receiver
        self._auth = auth
        self._server = aio.server(
            handlers=[self._service(signal) for signal in SIGNALS],
            options=[
                ("grpc.max_receive_message_length", receiver.max_body_bytes),
                # (gRPC's default on Linux: another process could then listen on the same port, and no error says so)
                ("grpc.so_reuseport", 0),
            ],
            maximum_concurrent_rpcs=MAX_RPCS_AT_ONCE,
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
        export: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(
            functools.partial(self._export, signal)
        )
        return grpc.method_handlers_generic_handler(service.full_name, {"Export": export})

    async def _export(self, signal: Signal, body: bytes, context: aio.ServicerContext[bytes, bytes]) -> bytes:
        await self._authenticate(signal, context)
        receiver = self._receiver
        try:
            with receiver.admitted(len(body)):
                response = await receiver.store_request(signal, body, as_json=False)
        except BadRequest as exc:
            receiver.count_refused(exc.status)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Unavailable as exc:
            receiver.count_refused(503)
            code = grpc.StatusCode.RESOURCE_EXHAUSTED if exc.busy else grpc.StatusCode.UNAVAILABLE
            await context.abort(code, str(exc), _retry_info(code, str(exc)))
        return response.SerializeToString()

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
