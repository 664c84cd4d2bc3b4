"""Two real processes of one request (``test_trace_across_processes.py``): an aiohttp server and a client calling it
with ``aiohttp.ClientSession``, both recording with ringtrace into a collector.

    trace_peers.py server COLLECTOR [--otel OTLP_URL]     prints "listening PORT", serves until GET /stop
    trace_peers.py client COLLECTOR PORT N [--otel OTLP_URL]   makes N concurrent calls, prints their trace ids (JSON)

Natively, the client's ``client_span`` writes ``traceparent`` and the server's ``server_span`` continues it; the
handler records a plain scope (``render``) inside it, which ``?trace_id=`` selects as the request's inner work. With
``--otel``, OpenTelemetry's SDK makes the client and server spans (exported to the collector as OTLP) and propagates
them with its own ``opentelemetry.propagate.inject``/``extract``; ringtrace's spans join its trace.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from typing import Any

import ringtrace.client
from aiohttp import ClientSession, web

tl = ringtrace.client.default_timeline()


def otel_tracer(otlp_url: str, service: str) -> Any:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=otlp_url)))
    trace.set_tracer_provider(provider)
    return provider


async def serve(otel: bool) -> None:
    stop = asyncio.Event()
    tracer = None
    if otel:
        from opentelemetry import propagate, trace

        tracer = trace.get_tracer("peers")

    async def work(request: web.Request) -> web.Response:
        if tracer is None:
            with tl.server_span("GET /work", request.headers, path=request.path):
                await asyncio.sleep(0.02)  # the other requests come in meanwhile, each in a task of its own
                with tl.trace_scope("query"):
                    await asyncio.sleep(0.001)
                with tl.scope("render"):  # plain: no trace id of its own, nested in the request's span
                    await asyncio.sleep(0.001)
        else:
            context = propagate.extract(request.headers)
            with tracer.start_as_current_span("handle /work", context=context, kind=trace.SpanKind.SERVER):
                await asyncio.sleep(0.02)
                with tl.trace_scope("query"), tl.scope("render"):  # plain, nested in ringtrace's span of the trace
                    await asyncio.sleep(0.001)
        return web.json_response({"ok": True})

    async def stop_serving(request: web.Request) -> web.Response:
        stop.set()
        return web.json_response({"stopping": True})

    app = web.Application()
    app.router.add_get("/work", work)
    app.router.add_get("/stop", stop_serving)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    print("listening", sock.getsockname()[1], flush=True)
    await stop.wait()
    await runner.cleanup()


async def call_all(port: int, calls: int, otel: bool) -> list[str]:
    url = f"http://127.0.0.1:{port}/work"
    tracer = None
    if otel:
        from opentelemetry import propagate, trace

        tracer = trace.get_tracer("peers")

    async def call(session: ClientSession, i: int) -> str:
        headers: dict[str, str] = {}
        if tracer is None:
            with tl.client_span("GET /work", headers, i=i) as span:
                async with session.get(url, headers=headers) as response:
                    assert response.status == 200
            assert span.context is not None
            return span.context.trace_id
        with tracer.start_as_current_span("GET /work", kind=trace.SpanKind.CLIENT) as otel_span:
            propagate.inject(headers)
            with tl.trace_scope("prepare", i=i):  # joins OpenTelemetry's trace
                pass
            async with session.get(url, headers=headers) as response:
                assert response.status == 200
        return f"{otel_span.get_span_context().trace_id:032x}"

    async with ClientSession() as session:
        return list(await asyncio.gather(*(call(session, i) for i in range(calls))))


def main() -> None:
    role, collector = sys.argv[1], sys.argv[2]
    otel_url = sys.argv[sys.argv.index("--otel") + 1] if "--otel" in sys.argv else None
    provider = otel_tracer(otel_url, f"otel {role}") if otel_url else None
    ringtrace.client.connect(collector, process_name=role)
    if role == "server":
        asyncio.run(serve(otel_url is not None))
    else:
        trace_ids = asyncio.run(call_all(int(sys.argv[3]), int(sys.argv[4]), otel_url is not None))
        print(json.dumps(trace_ids), flush=True)
    if provider is not None:
        assert provider.force_flush()
        provider.shutdown()
    assert tl.flush(timeout_s=20), "not delivered"


if __name__ == "__main__":
    main()
