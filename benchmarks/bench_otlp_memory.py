"""What reading one OTLP request holds: the collector's peak RSS growth (VmHWM) for one protobuf body POSTed to
``/v1/traces`` (``--otlp-http``), per body byte, by the shape of its spans, each body in a fresh collector.

Bodies (built beforehand; the collector warmed first by a small request of another service, so that what it imports
for OTLP is not counted):

  normal     512 spans as an SDK exports them (8 a trace, one attribute each): a small request, the baseline
  normal-8m  the same spans, one body of about --body-mib MiB
  events     one span of about --body-mib MiB of events (14 bytes each, 580,000 at 8 MiB)
  spans      about --body-mib MiB of minimal spans (51 bytes each, 160,000 at 8 MiB), each its own trace
  empty-events  about --body-mib MiB of spans of 1000 events with no field (2 bytes each), the most records a byte
             within the events a span keeps (--otlp-max-span-events)

For each: the body's bytes, the time from POST to answer and the collector's CPU meanwhile, the peak growth (VmHWM
after less VmRSS before), it per body byte and against ``normal``'s per byte, the RSS growth left after (what the
store keeps of the data is in it), and the spans and events stored. The peak is the collector's: the body as
received, what it is read into, and the frames of what it holds until stored.
"""

from __future__ import annotations

import argparse
import re
import time
import urllib.request
from collections.abc import Callable

from _common import collector, process_cpu_s, read_status_kb, recorder, table
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

_OTLP = re.compile(r"otlp listening on http://([^\s:]+):(\d+)")
T0 = 1_700_000_000_000_000_000


def request(service: str) -> tuple[ExportTraceServiceRequest, object]:
    made = ExportTraceServiceRequest()
    resource_spans = made.resource_spans.add()
    resource_spans.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value=service)))
    return made, resource_spans.scope_spans.add(scope={"name": "bench"})


def sdk_spans(n: int) -> bytes:
    made, scope = request("normal")
    for i in range(n):
        scope.spans.add(  # type: ignore[attr-defined]
            name="work",
            trace_id=(i // 8 + 1).to_bytes(16, "big"),
            span_id=(i + 1).to_bytes(8, "big"),
            parent_span_id=b"" if i % 8 == 0 else (i - i % 8 + 1).to_bytes(8, "big"),
            kind=2,
            start_time_unix_nano=T0 + 1000 * i,
            end_time_unix_nano=T0 + 1000 * i + 500,
            attributes=[KeyValue(key="http.route", value=AnyValue(string_value=f"/route/{i % 20}"))],
        )
    return made.SerializeToString()


def of_size(make: Callable[[int], bytes], body_bytes: int) -> bytes:
    """``make(n)`` for the n that makes a body of about ``body_bytes``."""
    unit = len(make(1000)) / 1000
    return make(int(body_bytes / unit))


def events(n: int) -> bytes:
    made, scope = request("events")
    span = scope.spans.add(  # type: ignore[attr-defined]
        name="s", trace_id=b"\x01" * 16, span_id=b"\x02" * 8, start_time_unix_nano=T0, end_time_unix_nano=T0 + 10**9
    )
    for i in range(n):
        span.events.add(name="e", time_unix_nano=T0 + i)
    return made.SerializeToString()


def empty_events(n: int) -> bytes:
    """Spans of 1000 events each with no field (2 bytes an event: the most records a byte within the events a span
    keeps), n events in all."""
    made, scope = request("empty-events")
    for j in range(max(n // 1000, 1)):
        span = scope.spans.add(  # type: ignore[attr-defined]
            name="s",
            trace_id=b"\x01" * 16,
            span_id=(j + 1).to_bytes(8, "big"),
            start_time_unix_nano=T0,
            end_time_unix_nano=T0 + 10**9,
        )
        for _ in range(1000):
            span.events.add()
    return made.SerializeToString()


def minimal_spans(n: int) -> bytes:
    made, scope = request("spans")
    for j in range(n):
        scope.spans.add(  # type: ignore[attr-defined]
            name="s",
            trace_id=(j + 1).to_bytes(16, "big"),
            span_id=(j + 1).to_bytes(8, "big"),
            start_time_unix_nano=T0,
            end_time_unix_nano=T0 + 10**9,
        )
    return made.SerializeToString()


def post(url: str, body: bytes) -> ExportTraceServiceResponse:
    headers = {"Content-Type": "application/x-protobuf"}
    with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers), timeout=600) as answer:
        return ExportTraceServiceResponse.FromString(answer.read())


def measure(body: bytes) -> tuple[float, float, int, int, int]:
    """Seconds to the answer, the collector's CPU seconds meanwhile, peak growth and growth left (bytes), and events
    stored, in a fresh collector."""
    with collector("--otlp-http", "127.0.0.1:0") as running:
        deadline = time.monotonic() + 30
        found = None
        while found is None and time.monotonic() < deadline:
            found = next((m for m in map(_OTLP.search, list(running.log)) if m), None)
            time.sleep(0.05)
        assert found is not None, "the OTLP listener did not start"
        url = f"http://{found.group(1)}:{found.group(2)}/v1/traces"
        post(url, sdk_spans(8))  # (warm: what OTLP imports is not the request's)
        warm = running.stored_events()
        pid = running.process.pid
        before = read_status_kb(pid, "VmRSS")
        cpu = process_cpu_s(pid)
        started = time.monotonic()
        post(url, body)
        took, cpu = time.monotonic() - started, process_cpu_s(pid) - cpu
        peak, after = read_status_kb(pid, "VmHWM"), read_status_kb(pid, "VmRSS")
        return took, cpu, peak - before, after - before, running.stored_events() - warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--body-mib", type=float, default=7.75, help="size of the large bodies (default %(default)s)")
    parser.add_argument("--only", nargs="*", help="these bodies only (and normal)")
    args = parser.parse_args()
    size = int(args.body_mib * 1024 * 1024)
    print(f"recorder: {recorder()}")
    bodies = {
        "normal": sdk_spans(512),
        "normal-8m": of_size(sdk_spans, size),
        "events": of_size(events, size),
        "spans": of_size(minimal_spans, size),
        "empty-events": of_size(empty_events, size),
    }
    rows = []
    base = None
    for name, body in bodies.items():
        if args.only and name != "normal" and name not in args.only:
            continue
        took, cpu, peak, left, stored = measure(body)
        per_byte = peak / len(body)
        base = per_byte if base is None else base
        rows.append(
            [
                name,
                f"{len(body):,}",
                f"{took:.2f}",
                f"{cpu:.2f}",
                f"{peak / 1e6:,.1f}",
                f"{per_byte:.1f}",
                f"{per_byte / base:.2f}x" if base > 0 else "-",
                f"{left / 1e6:,.1f}",
                f"{stored:,}",
            ]
        )
    headers = ["body", "bytes", "s", "cpu s", "peak growth MB", "growth/byte", "vs normal", "left MB", "stored"]
    print(table(headers, rows))


if __name__ == "__main__":
    main()
