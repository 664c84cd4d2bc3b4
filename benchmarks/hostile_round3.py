"""Round 3 hostile checks: what the real collector does now with the peers of issue 32, one scenario at a time.

Each scenario starts a fresh collector subprocess on 127.0.0.1 (OS-chosen ports, read from its log) and prints what it
measured; the expectations are printed beside, and a mismatch is marked MISS (it does not fail the run). The
requests, bodies and raw connections are the integration tests' own helpers (``tests/integration``), so that this
measures what the tests hold.

  1  one POST /v1/traces of 1,100 resources (distinct service.name): its answer, /healthz connections and
     otlp_streams, whether a native client then connects and flushes, and a request for one more service
  3  60 gzip requests of ~8.3 KB at once, each inflating to 8 MiB: the collector's RSS before and at its peak
     (VmHWM), the answers, /stats bytes in flight
  4  four connections that send only tables (every default limit), then a good client recording 100,000 events,
     at --capacity 64MiB: its flush, its events held, the fillers' refusals
  5  memory per table-filling connection: benchmarks/bench_table_memory.py, run as it is
  6  1,000 small OTLP requests at once while /healthz is polled 7 times: answers by status, polls answered
  7  100 requests with a NUL in a header to the API port, 100 to the OTLP port: the log lines that followed
  9  2,000 asyncio tasks, 10 alive at once, a span each: task lanes in /sources, C and pure-Python recorders

Examples:
  python benchmarks/hostile_round3.py all
  python benchmarks/hostile_round3.py 3 6
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import aiohttp
import ringtrace.client
from _common import read_status_kb, verdict

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests" / "integration"), str(HERE.parent / "tests")]  # the tests' helpers
from collector_process import CollectorProcess, RawClient, events, hello  # noqa: E402
from ringtrace.wire.frames import Flush, FlushAck, Goodbye  # noqa: E402
from test_memory import GOOD_CLIENT, tables_at_every_limit  # noqa: E402
from test_otlp import T0, OtlpCollector, request_of, response_of, services, span  # noqa: E402
from test_otlp_limits import MIB, gzip_bomb  # noqa: E402
from test_task_lanes import _TASKS  # noqa: E402

MB = 10**6


def show(title: str, rows: list[tuple[str, object, str]]) -> None:
    """Rows of (what, measured, "" or a verdict and what issue 32 expects), one a line."""
    print(title)
    width = max(len(what) for what, _, _ in rows)
    for what, measured, expected in rows:
        print(f"  {what.ljust(width)}  {measured}" + (f"   [{expected}]" if expected else ""))
    print()


def answers(counted: Counter[tuple[int, str | None]]) -> str:
    return ", ".join(
        f"{n} x {status}" + (f" (Retry-After {after})" if after else "")
        for (status, after), n in sorted(counted.items(), key=lambda item: (item[0][0], item[0][1] or ""))
    )


def temporary_refusals_ok(counted: Counter[tuple[int, str | None]]) -> bool:
    """Stored (200), or refused for now with a Retry-After (503 or 429): never a 400 for a refusal that passes."""
    return all(status == 200 or (status in (429, 503) and after) for status, after in counted)


def resources() -> None:
    collector = OtlpCollector()
    timeline = None
    try:
        status, headers, body = collector.export(services(*(f"service-{i}" for i in range(1100))))
        if status == 200:
            partial = response_of(body).partial_success
            said = f"rejected_spans={partial.rejected_spans}: {partial.error_message!r}"
        else:
            said = f"Retry-After {headers.get('Retry-After')}: {body[:200]!r}"
        health = collector.json("/healthz")
        timeline = ringtrace.client.connect(collector.tcp_address, process_name="native")
        with timeline.scope("work"):
            pass
        flushed = timeline.flush(timeout_s=30)
        one_more = collector.export(services("one-more"))[0]
        stats = collector.json("/stats")
    finally:
        if timeline is not None:
            timeline.close(timeout_s=30)
        collector.stop()
    show(
        "1. one POST /v1/traces of 1,100 resources (--otlp-max-processes 1024, --max-connections 1024)",
        [
            ("answer", status, ""),
            ("partial_success / body", said, ""),
            (
                "/healthz connections, otlp_streams",
                f"{health['connections']}, {health['otlp_streams']}",
                verdict(health["connections"] == 0) + ": OTLP takes no native connection",
            ),
            ("native connect() then flush(timeout_s=30)", flushed, verdict(flushed is True)),
            ("/stats connections_refused", stats["connections_refused"], verdict(stats["connections_refused"] == 0)),
            ("one more service's request", one_more, verdict(one_more == 200)),
        ],
    )


def post_all(url: str, body: bytes, headers: dict[str, str], count: int) -> Counter[tuple[int, str | None]]:
    """``count`` POSTs of ``body`` at once, each on a connection of its own: (status, Retry-After) counted. A request
    the collector closed without an answer counts as status 0."""

    async def post(session: aiohttp.ClientSession) -> tuple[int, str | None]:
        try:
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                return response.status, response.headers.get("Retry-After")
        except aiohttp.ClientError:
            return 0, None

    async def flood() -> Counter[tuple[int, str | None]]:
        connector = aiohttp.TCPConnector(limit=0, force_close=True)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
            return Counter(await asyncio.gather(*(post(session) for _ in range(count))))

    return asyncio.run(flood())


def gzip_bombs() -> None:
    collector = OtlpCollector()
    try:
        bomb = gzip_bomb(8 * MIB)
        pid = collector.proc.pid
        before = read_status_kb(pid, "VmRSS")
        gzip = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
        counted = post_all(collector.otlp_url, bomb, gzip, 60)
        peak = read_status_kb(pid, "VmHWM")
        stats = collector.json("/stats")
    finally:
        collector.stop()
    # docs/otlp.md: the bodies in flight (8 times --otlp-max-body), and one request decoded at a time (up to about
    # 15 times its body).
    bound = stats["otlp_max_bytes_in_flight"] + 15 * 8 * MIB
    show(
        f"3. 60 gzip requests of {len(bomb):,} bytes at once, each inflating to 8 MiB",
        [
            ("RSS before", f"{before / MB:.1f} MB", ""),
            ("peak RSS (VmHWM)", f"{peak / MB:.1f} MB", ""),
            (
                "peak growth",
                f"{(peak - before) / MB:.1f} MB",
                verdict(peak - before <= bound) + f": <= {bound / MB:.0f} MB (bodies in flight + one decoded)",
            ),
            ("answers", answers(counted), verdict(temporary_refusals_ok(counted)) + ": 200, or 503/429 + Retry-After"),
            (
                "otlp_bytes_in_flight_peak",
                f"{stats['otlp_bytes_in_flight_peak']:,}",
                verdict(stats["otlp_bytes_in_flight_peak"] <= stats["otlp_max_bytes_in_flight"]),
            ),
            ("otlp_max_bytes_in_flight", f"{stats['otlp_max_bytes_in_flight']:,}", ""),
        ],
    )


def declare_tables(raw: RawClient, payload: bytes) -> str:
    """Send only tables, then a FLUSH: "kept" if acknowledged, or the GOODBYE's reason."""
    raw.sock.settimeout(60)
    with contextlib.suppress(ConnectionError):  # (it stopped reading before all was sent: its GOODBYE is there)
        raw.send_raw(payload)
        raw.send(Flush(1))
    try:
        while True:
            frame = raw.next_frame()
            if isinstance(frame, FlushAck):
                return "kept"
            if isinstance(frame, Goodbye):
                return frame.reason
    except ConnectionError:
        return "closed with no GOODBYE"


def table_fillers() -> None:
    collector = CollectorProcess("--capacity", "64MiB")
    fillers: list[RawClient] = []
    try:
        payload = tables_at_every_limit()
        fillers = [RawClient(collector.tcp_address, hello(pid=1000 + n, instance=f"tables-{n}")) for n in range(4)]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:  # (those kept stay open while the good client records)
            outcomes = list(pool.map(lambda raw: declare_tables(raw, payload), fillers))
        started = time.perf_counter()
        good = subprocess.run(
            [sys.executable, "-c", GOOD_CLIENT, collector.tcp_address, "100000"],
            input="go\ndone\n",
            capture_output=True,
            text=True,
            timeout=120,
        )
        took = time.perf_counter() - started
        flushed = good.stdout.split()[:1] == ["True"]
        (told,) = (p for p in collector.json("/sources")["processes"] if p["process_name"] == "good")
        held = sum(1 for e in events(collector.snapshot(), "i") if e["name"] == "good" and e["args"]["i"] < 100_000)
        stats = collector.json("/stats")
    finally:
        for raw in fillers:
            raw.close()
        collector.stop()
    refused = [reason for reason in outcomes if reason != "kept"]
    show(
        "4. four connections sending only tables (every default limit), then a good client's 100,000 events "
        "(--capacity 64MiB)",
        [
            ("fillers kept / refused", f"{len(outcomes) - len(refused)} / {len(refused)}", ""),
            ("a refusal's reason", refused[0] if refused else "", ""),
            ("/stats connections_tables_refused", stats["connections_tables_refused"], ""),
            ("good client's flush(timeout_s=30)", f"{flushed} (its whole run {took:.1f} s)", verdict(flushed)),
            ("its events the snapshot holds", f"{held:,} of 100,000", verdict(held == 100_000)),
            (
                "its client_dropped_events / client_unacknowledged_events",
                f"{told['client_dropped_events']} / {told['client_unacknowledged_events']}",
                "",
            ),
            (
                "overwritten / discarded / capped events",
                f"{stats['overwritten_events']} / {stats['discarded_events']} / {stats['capped_events']}",
                "",
            ),
        ],
    )


def table_memory() -> None:
    print("5. memory per table-filling connection: python benchmarks/bench_table_memory.py", flush=True)
    subprocess.run([sys.executable, str(HERE / "bench_table_memory.py")], check=True, timeout=300)
    print()


def otlp_flood() -> None:
    collector = OtlpCollector()
    try:
        body = request_of(span("flood", T0, T0 + 1)).SerializeToString()
        polls: list[float | None] = []
        during = 0  # (polls answered before the flood's last answer)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            flood = pool.submit(post_all, collector.otlp_url, body, {"Content-Type": "application/x-protobuf"}, 1000)
            for _ in range(7):
                polls.append(probe(collector.http_url + "/healthz"))
                during += not flood.done()
                time.sleep(0.1)
            counted = flood.result()
        stats = collector.json("/stats")
    finally:
        collector.stop()
    answered = [s for s in polls if s is not None]
    show(
        "6. 1,000 small OTLP requests at once, /healthz polled 7 times meanwhile (5 s each)",
        [
            ("answers", answers(counted), verdict(temporary_refusals_ok(counted)) + ": 200, or 503/429 + Retry-After"),
            ("/healthz polls answered", f"{len(answered)} of 7", verdict(len(answered) == 7)),
            ("of them while the flood was still being answered", during, ""),
            ("slowest /healthz answer", f"{max(answered, default=0) * 1000:.0f} ms", ""),
            ("otlp_connections_refused", stats["otlp_connections_refused"], ""),
        ],
    )


def probe(url: str, timeout_s: float = 5.0) -> float | None:
    """Seconds a GET took to be answered 200, as a liveness probe would ask; None if not within ``timeout_s``."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            response.read()
            return time.perf_counter() - started if response.status == 200 else None
    except OSError:
        return None


def nul_headers() -> None:
    collector = OtlpCollector()
    answered: Counter[str] = Counter()
    try:
        started = len(collector.lines)
        for base, path in ((collector.http_url, "/healthz"), (collector.otlp_base, "/v1/traces")):
            port = int(base.rsplit(":", 1)[1])
            for _ in range(100):
                with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nX-Bad: a\0b\r\n\r\n".encode())
                    status_line = sock.recv(4096).split(b"\r\n")[0].decode()
                    answered[f"{path}: {status_line}"] += 1
        stats = collector.json("/stats")
    finally:
        collector.stop()  # (every line it wrote is read)
    logged = collector.lines[started:]
    tracebacks = sum("Traceback" in line for line in logged)
    warned = [line for line in logged if " INFO " not in line]  # (not its start's and stop's lines)
    show(
        "7. 100 requests with a NUL in a header to the API port, then 100 to the OTLP port",
        [
            ("answers", ", ".join(f"{n} x {what}" for what, n in answered.items()), ""),
            (
                "lines past INFO / tracebacks",
                f"{len(warned)} / {tracebacks}",
                verdict(tracebacks == 0 and len(warned) <= 2) + ": one rate-limited line a listener, no traceback",
            ),
            (
                "http / otlp requests_malformed",
                f"{stats['http_requests_malformed']} / {stats['otlp_requests_malformed']}",
                "",
            ),
        ],
    )
    print("  the log after them:")
    print("\n".join("    " + line for line in logged[:20]) or "    (nothing)")
    if len(logged) > 20:
        print(f"    ... {len(logged) - 20} more lines")
    print()


def task_lanes() -> None:
    rows: list[tuple[str, object, str]] = []
    for recorder, pure in (("C recorder", False), ("pure Python", True)):
        env = {name: value for name, value in os.environ.items() if name != "RINGTRACE_PURE_PYTHON"}
        if pure:
            env["RINGTRACE_PURE_PYTHON"] = "1"
        collector = CollectorProcess()
        try:
            done = subprocess.run(
                [sys.executable, "-c", _TASKS, collector.tcp_address, "2000", "10"],
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
            )
            (process,) = (p for p in collector.json("/sources")["processes"] if p["process_name"] == "lanes")
        finally:
            collector.stop()
        lanes = sum(" tasks [" in (track["name"] or "") for track in process["tracks"])
        rows.append(
            (
                f"{recorder}: {done.stdout.strip() or done.stderr[-200:]}",
                f"{lanes} task lanes of {len(process['tracks'])} tracks",
                verdict(lanes <= 2 * 10 + 2) + ": ~ 10, the tasks alive",
            )
        )
    show("9. 2,000 asyncio tasks, 10 alive at once, a span each: task lanes in /sources", rows)


SCENARIOS: dict[str, Callable[[], None]] = {
    "1": resources,
    "3": gzip_bombs,
    "4": table_fillers,
    "5": table_memory,
    "6": otlp_flood,
    "7": nul_headers,
    "9": task_lanes,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="+", choices=[*SCENARIOS, "all"])
    args = parser.parse_args()
    chosen = list(SCENARIOS) if "all" in args.scenario else args.scenario
    for name in chosen:
        SCENARIOS[name]()
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
