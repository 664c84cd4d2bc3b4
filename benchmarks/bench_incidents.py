"""Incidents: a slow request's window kept whole under overload, and what watching 50 rules costs ingest.

Overload (default, and ``--quick``)
  A collector with ``--capacity 16MB`` and one rule (``span = "checkout"``, ``min_duration = "100ms"``, scope trace,
  ``before = "5s"``, ``after = "2s"``). Flooding client processes (``--floods``, default 3) record padded instants as
  fast as they go: the ring turns over every few seconds (the turnover rate is reported). Two more processes serve one
  request: a caller opens a client span, a server handles it in a slow ``checkout`` span of the same trace; both
  record numbered ticks all along (every 2 ms). Once the incident is listed, its snapshot is read (Chrome JSON) and,
  event by event, the ticks of both processes in the window are checked: every one is there, once, but those the
  record counts lost before the rule fired (the ring overwrote them before the window was pinned; none may be missing
  after the fire), and no event of another process is. Also: how long after the window's end the incident was listed
  (target <= 1 s), and what the record counts as lost (``overwritten_before_fire``: what of ``before`` the ring had
  taken already).

Rules (default; not with ``--quick``; alone with ``--rules-only``)
  ``bench_ingest.py``'s throughput rounds (large frames, 8 connections, in-memory collectors, interleaved rounds) of
  a web service's stream (``rules_stream``: requests of 20 routes, each a server span, three child spans, an
  instant, two counters and a message; now and then a slow request or query, an error status, an error or warning
  message, a counter past a threshold) into the plain collector and into one watching 50 rules of the kinds a service
  watches (``rules_file``: spans by route and by glob with a least duration, messages by category, priority and text,
  counters' thresholds, OTLP errors, crashes), which that stream meets now and then, each within a
  ``max_per_minute`` of 1 (few incidents): the ratio of their MB/s (target >= 0.9x), of their CPU per wire byte, how
  much of what it received the rule watch left unread, and what the rules fired, saved and suppressed. Rounds of
  ~1.5 s (3,000,000 requests, 4.6 GB a round): of 0.3 s (600,000), the ratio of one run swung from 0.80x to 1.02x.

The watch's reach (alone with ``--watch-rates``)
  How much of a steady stream the 50 rules' watch reads, by rate: the rules part's stream sent paced over 8
  connections at each rate given (MB/s of wire bytes) for ``--watch-seconds`` (default 8) into a fresh collector
  watching the 50 rules; for each, the events a second, the collector's CPU (share of a core) and what the watch left
  unread (``unread_events``).

Examples:
  python benchmarks/bench_incidents.py --quick
  python benchmarks/bench_incidents.py --watch-rates 100,200,400
  python benchmarks/bench_incidents.py --floods 4
  python benchmarks/bench_incidents.py --rules-only
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import Collector, collector, process_cpu_s, stop_process, table, verdict

#: What a peer process runs (``--peer ROLE ADDRESS``): the flood, the caller or the server.
PEER_ROLES = ("flood", "caller", "server")
LISTED_TARGET_S = 1.0
MARGIN_NS = 50_000_000
MS = 1_000_000
RULES_TARGET = 0.9


def peer(role: str, address: str) -> int:
    """A client process: floods, or serves the slow request's one side while ticking; prints what it did as JSON."""
    import threading

    import ringtrace.client

    tl = ringtrace.client.connect(address, process_name=role)
    stop = threading.Event()
    if role == "flood":
        pad, i = "x" * 200, 0
        while sys.stdin.readline().strip() != "stop":  # (one line per burst: the driver paces nothing)
            for _ in range(20_000):
                tl.instant("flood", i=i, pad=pad)
                i += 1
            print("ok", flush=True)
        return 0
    ticks: list[int] = []

    def tick() -> None:
        while not stop.wait(0.002):
            tl.instant("tick", i=len(ticks))
            ticks.append(time.time_ns())

    ticker = threading.Thread(target=tick)
    ticker.start()
    headers: dict[str, Any] = {}
    if role == "caller":
        with tl.client_span("call", headers):
            print(headers["traceparent"], flush=True)
            sys.stdin.readline()  # the server is done
    else:
        traceparent = sys.stdin.readline().strip()
        with tl.server_span("checkout", {"traceparent": traceparent}):
            time.sleep(0.15)
        print("served", flush=True)
    sys.stdin.readline()  # stop
    stop.set()
    ticker.join()
    tl.flush(timeout_s=30)
    print(json.dumps({"ticks_wall_ns": ticks}), flush=True)
    return 0


def _spawn(role: str, address: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--peer", role, address], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _send(process: subprocess.Popen[str], line: str) -> None:
    assert process.stdin is not None
    process.stdin.write(line + "\n")
    process.stdin.flush()


def _read(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    return process.stdout.readline().strip()


def _get(coll: Collector, path: str) -> Any:
    with urllib.request.urlopen(f"http://{coll.http}{path}", timeout=60) as response:
        body = response.read()
    return json.loads(body)


def _unread(stats: dict[str, Any]) -> str:
    """What the rule watch left unread of what the collector received (it reads at most its share of the time)."""
    watch = stats["incident_engine"]
    return (
        f"left {watch['unread_events']:,} of {stats['received_events']:,} received events unread (of them past what "
        f"it may hold: {watch['watch_hold_dropped_events']:,})"
    )


def overload(floods: int, after_s: float) -> bool:
    rule = f"slow: span=checkout, min_duration=100ms, scope=trace, before=5s, after={after_s:g}s"
    with tempfile.TemporaryDirectory(prefix="bench_incidents-") as directory, collector(
        "--capacity", "16MB", "--incident-capacity", "128MB", "--incidents-dir", directory, "--trigger", rule
    ) as coll:  # fmt: skip
        flooders = [_spawn("flood", coll.tcp) for _ in range(floods)]
        caller, server = _spawn("caller", coll.tcp), _spawn("server", coll.tcp)
        try:
            return _overload_round(coll, flooders, caller, server)
        finally:
            for process in [*flooders, caller, server]:
                if process.poll() is None:
                    _send(process, "stop")
            for process in [*flooders, caller, server]:
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    stop_process(process)


def _overload_round(
    coll: Collector, flooders: list[subprocess.Popen[str]], caller: subprocess.Popen[str], server: subprocess.Popen[str]
) -> bool:
    started, bursts = time.monotonic(), 0
    for process in flooders:  # the ring fills, then turns over
        _send(process, "go")
    while time.monotonic() - started < 3:
        for process in flooders:
            _read(process)
            _send(process, "go")
            bursts += 1
    traceparent = _read(caller)
    _send(server, traceparent)
    _read(server)  # served: the slow span is recorded
    _send(caller, "done")
    fired_at, fired_wall_ns, served = None, 0, time.monotonic()
    while fired_at is None or time.monotonic() - fired_at < 8:  # flood on through the window, and past it
        if fired_at is None and time.monotonic() - served > 60:
            raise RuntimeError("the rule did not fire within 60 s:\n" + "\n".join(coll.log[-20:]))
        for process in flooders:
            _read(process)
            _send(process, "go")
            bursts += 1
        if fired_at is None and _get(coll, "/stats")["incidents"]["fired"]:
            fired_at, fired_wall_ns = time.monotonic(), time.time_ns()
    flood_s = time.monotonic() - started
    records = _get(coll, "/incidents")["incidents"]
    listed_wall_ns = time.time_ns()
    stats = _get(coll, "/stats")
    for process in flooders:
        _read(process)
    _send(caller, "stop")
    _send(server, "stop")
    ticked = {
        "caller": json.loads(_read(caller))["ticks_wall_ns"],
        "server": json.loads(_read(server))["ticks_wall_ns"],
    }
    record = records[0]
    window = record["window"]
    with urllib.request.urlopen(f"http://{coll.http}/incidents/{record['id']}?format=chrome", timeout=120) as r:
        events = [e for e in json.loads(r.read())["traceEvents"] if e.get("ph") != "M"]
    names = {p["pid"]: p["name"] for p in record["processes"]}
    kept: dict[str, list[int]] = {"caller": [], "server": []}
    strangers = 0
    for event in events:
        role = names.get(event["pid"])
        if role is None:
            strangers += 1
        elif event["name"] == "tick":
            kept[role].append(event["args"]["i"])
    missing, missing_after_fire, doubled, wanted_total = 0, 0, 0, 0
    for role, times in ticked.items():
        # The window's ticks (50 ms in from either end: a tick's time here is taken just after it was recorded); of
        # them, those recorded once the window was pinned (after the fire, 200 ms on for the watch's step), which the
        # ring cannot take.
        since, until = window["since_ns"] + MARGIN_NS, window["until_ns"] - MARGIN_NS
        wanted = {i for i, ns in enumerate(times) if since <= ns < until}
        after_fire = {i for i in wanted if times[i] >= fired_wall_ns + 200_000_000}
        have = kept[role]
        missing_after_fire += len(after_fire - set(have))
        missing += len(wanted - set(have))
        doubled += len(have) - len(set(have))
        wanted_total += len(wanted)
    overwritten = stats["overwritten_events"]
    listed_s = max(0.0, (int(record["saved_wall_ns"]) - window["until_ns"]) / 1e9)
    turned = overwritten / max(stats["stored_events"], 1)
    polled_s = (listed_wall_ns - window["until_ns"]) / 1e9
    held_peak = stats["incident_engine"]["incident_held_peak_bytes"]
    rows = [
        ("flood", f"{len(flooders)} processes, {bursts * 20_000:,} events in {flood_s:.1f} s"),
        ("ring", f"{overwritten:,} events overwritten (the ring turned over ~{turned:.1f}x)"),
        ("incident", f"{record['events']:,} events, {record['bytes']:,} bytes, processes {sorted(names.values())}"),
        (
            "ticks in the window",
            f"{wanted_total:,}: {missing} missing ({missing_after_fire} after the fire), {doubled} twice",
        ),
        ("other processes' events", f"{strangers}"),
        ("lost", json.dumps(record["lost"])),
        ("listed after the window", f"{listed_s:.3f} s (saved_wall_ns - until_ns; polled at {polled_s:.1f} s)"),
        ("incident memory", f"peak {held_peak:,} bytes held beside the ring"),
        ("the rule watch", _unread(stats)),
    ]
    print(table(("overload", "measured"), rows, title="A slow request under overload"))
    print("the collector said:", next((line for line in coll.log if "incident " in line and "rule" in line), "-"))
    lost_before = record["lost"]["overwritten_before_fire"]
    ok = missing_after_fire == 0 and missing <= lost_before and doubled == 0 and strangers == 0 and wanted_total > 0
    ok = ok and listed_s <= LISTED_TARGET_S
    print(f"every tick of the window kept once (but those counted lost before the fire), only the trace's, listed <= "
          f"{LISTED_TARGET_S} s: {verdict(ok)}")  # fmt: skip
    return ok


#: The workload's routes: (route, share of requests in 1,000); the rules below name some of them.
ROUTES = (*((f"GET /api/item/{i}", 40) for i in range(16)), ("POST /api/checkout", 120), ("POST /api/login", 100),
          ("GET /admin/report", 60), ("PUT /api/cart", 80))  # fmt: skip
#: In how many requests of 1,000: a slow one (300-400 ms; of ``SLOW_ROUTES`` only), with an error status, with an
#: error message (a timeout), with a warning (a retry). And in each 1,000: one db query of 600 ms, one queue deeper than
#: 990, one pool near empty. About 14 of the 50 rules are met, each within its ``max_per_minute`` of 1.
SLOW, ERROR, TIMEOUT, RETRY = 5, 2, 1, 3
SLOW_ROUTES = frozenset(f"GET /api/item/{i}" for i in range(4))
#: A request every 100 us (a busy service's process; 600,000 requests are a minute of it).
SPACING_NS = 100_000


def rules_file(path: Path) -> Path:
    """50 rules of the kinds a service watches, some met by ``rules_stream``'s events (its slow requests and queries,
    error statuses, error and warning messages, counters past a threshold), each within a ``max_per_minute`` of 1:
    22 span rules (16 by route, 6 globs), 10 message rules, 8 counter rules, 8 OTLP error rules, 2 crash rules."""
    bodies = [f'span = "GET /api/item/{i}"\nmin_duration = "{250 + 10 * i}ms"' for i in range(16)]
    bodies += [f'span = "{glob}"\nmin_duration = "{ms}ms"' for glob, ms in (
        ("POST /api/*", 300), ("db.*", 500), ("render*", 1000), ("cache.?et", 50), ("GET /admin*", 350),
        ("*checkout*", 2000))]  # fmt: skip
    bodies += [f'message = "{category}"\nmin_priority = "{priority}"\ntext = "{text}"' for category, priority, text in (
        ("app", "error", "*"), ("*", "fatal", "*"), ("net", "warning", "*"), ("*", "error", "*timeout*"),
        ("db", "error", "*"), ("app", "warning", "*retry*"), ("app", "error", "*payment*"), ("audit", "info", "*"),
        ("*", "error", "*refused*"), ("app", "warning", "*slow*"))]  # fmt: skip
    bodies += [f'counter = "{name}"\n{side} = {value}' for name, side, value in (
        ("queue depth", "above", 990), ("queue depth", "below", 1), ("pool free", "below", 2),
        ("memory*", "above", 1e9), ("errors", "above", 0), ("latency*", "above", 500), ("pool free", "above", 10_000),
        ("queue*", "above", 5000))]  # fmt: skip
    bodies += [f'otlp_error = true\nspan = "{glob}"' for glob in (
        "GET /api/item/1*", "POST *", "db.*", "grpc.*", "checkout", "GET /admin*", "PUT *", "*payment*")]  # fmt: skip
    bodies += ["crash = true", "crash = true"]
    assert len(bodies) == 50
    rules = [f'[[rule]]\nname = "rule {n}"\n{body}\nscope = "process"\nbefore = "5s"\nafter = "1s"\n'
             f"max_per_minute = 1\n" for n, body in enumerate(bodies)]  # fmt: skip
    path.write_text("\n".join(rules))
    return path


def rules_stream(directory: Path, requests: int) -> Any:
    """A web service's stream for ``bench_ingest.py``'s blaster: ``requests`` requests, each a server span of one of
    ``ROUTES`` (with a trace id), three child spans (``db.query``, ``render``, ``cache.get``), an instant, a ``queue
    depth`` and a ``pool free`` counter and a message (``app``: info, or an error or warning now and then); in
    ``bench_ingest.py``'s large frames (64 KiB, 3,400 events at most), encoded by the client's stream encoder."""
    import itertools
    import random

    import bench_ingest
    from ringtrace.wire.model import COUNTER, INSTANT, SPAN, THREAD_TRACK, KindRegistry, TrackInfo
    from ringtrace.wire.stream_encoder import StreamEncoder

    max_frame_bytes, per_frame = bench_ingest.FRAME_SHAPES["large"]
    encoder = StreamEncoder(max_frame_bytes, per_frame, registry=KindRegistry())

    def message(priority: str, text: str) -> int:
        fields = (("what", "any"),)
        return encoder.registry.register("app", "message", fields, lambda v: (list(v), 0), text, priority).id

    info, warning, error = message("info", "did $what"), message("warning", "retry $what"), message("error", "$what")
    track = TrackInfo(100, THREAD_TRACK, "main", 1)
    routes = [route for route, share in ROUTES for _ in range(share)]
    rng = random.Random(46)
    # (the requests' times go on through the stream, which each connection of a round sends once, as a client's
    # would: a window holds its seconds' events, not every segment of the process, as a replay of the same times did)
    clock = itertools.count(time.monotonic_ns() - requests * SPACING_NS - 30 * 10**9, SPACING_NS)
    frames = list(encoder.prefix())
    records: list[Any] = []
    for i in range(requests):
        ts, nth = next(clock), i % 1000
        route = routes[rng.randrange(len(routes))]
        args = {"trace_id": f"{rng.getrandbits(128):032x}", "span_id": f"{rng.getrandbits(64):016x}"}
        if nth < ERROR:
            args["status"] = "error"
        slow = rng.randrange(1000) < SLOW and route in SLOW_ROUTES
        records += [SPAN, route, ts, ts + (rng.randrange(300, 400) if slow else rng.randrange(5, 60)) * MS, args]
        records += [SPAN, "db.query", ts + MS, ts + (600 if nth == 500 else 2) * MS, {"rows": i % 17}]
        records += [SPAN, "render", ts + 3 * MS, ts + 4 * MS, None]
        records += [SPAN, "cache.get", ts + 4 * MS, ts + 4 * MS + 500, None]
        records += [INSTANT, "cache miss", ts + 5 * MS, ts + 5 * MS, None]
        records += [COUNTER, "queue depth", ts, ts, {"value": 995 if nth == 700 else rng.randrange(10, 900)}]
        records += [COUNTER, "pool free", ts, ts, {"value": 1 if nth == 300 else rng.randrange(4, 64)}]
        if nth < TIMEOUT:
            records += [error, "", ts, ts, [f"timeout talking to db, request {i}"]]
        elif nth < TIMEOUT + RETRY:
            records += [warning, "", ts, ts, [f"request {i}"]]
        else:
            records += [info, "", ts, ts, [f"request {i}"]]
        if len(records) >= 5 * 8192:
            batch = encoder.encode(track, records)
            frames += [*batch.control, *(frame for frame, _ in batch.events)]
            records = []
    if records:
        batch = encoder.encode(track, records)
        frames += [*batch.control, *(frame for frame, _ in batch.events)]
    return bench_ingest.stream_of("large", frames, directory)


def rules_cost(requests: int = 3_000_000, rounds: int = 9) -> bool:
    """``bench_ingest.py``'s throughput rounds of ``rules_stream`` (large frames, 8 connections, in memory), the
    plain collector and one watching ``rules_file``'s 50 rules, interleaved: the ratio of their MB/s. Each
    connection of a round sends the stream once (a round's bytes are not sized by a warm-up)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import contextlib
    import io
    from contextlib import ExitStack

    import bench_ingest

    saved = list(bench_ingest.COLLECTOR_VARIANTS)
    out = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="bench_incidents-rules-") as directory, ExitStack() as stack:
        rules = rules_file(Path(directory) / "rules.toml")
        stream = rules_stream(Path(directory), requests)
        bench_ingest.COLLECTOR_VARIANTS[:] = [("collector", ()), ("50 rules", ("--rules", str(rules)))]
        args = argparse.Namespace(
            collector_arg=[], data_dir=False, capacity=bench_ingest.THROUGHPUT_CAPACITY, ring_sink=False,
            mb=8 * (len(stream.prefix) + len(stream.events)) / bench_ingest.MB, round_s=0.0, rounds=rounds,
            connections=[8],
        )  # fmt: skip
        try:
            with contextlib.redirect_stdout(out):
                code = bench_ingest.throughput(args, [stream], stack)
        finally:
            bench_ingest.COLLECTOR_VARIANTS[:] = saved
    text = out.getvalue()
    print(text)
    rows = {}
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == len(bench_ingest.HEADERS) and cells[0].startswith("large x8 "):
            rows[cells[0].removeprefix("large x8 ")] = cells
    if code != 0 or not {"collector", "50 rules"} <= rows.keys():
        print("could not read the rounds' figures from bench_ingest's output")
        return False
    mb_s, cpu = bench_ingest.HEADERS.index("MB/s"), bench_ingest.HEADERS.index("CPU ns/B")
    plain, ruled = rows["collector"], rows["50 rules"]
    ratio = float(ruled[mb_s].replace(",", "")) / float(plain[mb_s].replace(",", ""))
    cpu_ratio = float(ruled[cpu]) / float(plain[cpu])
    print(f"50 rules / none, ingest MB/s (a web service's stream, large frames, 8 connections, same run): "
          f"{ratio:.3f}x (target >= {RULES_TARGET}x) {verdict(ratio >= RULES_TARGET)}; collector CPU per wire byte: "
          f"{cpu_ratio:.3f}x; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")  # fmt: skip
    return ratio >= RULES_TARGET


def watch_reach(rates_mb_s: list[float], seconds: float, requests: int = 200_000) -> bool:
    """The 50 rules' watch on the rules part's stream sent paced at each rate: how much it read (see the docstring)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_ingest

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_incidents-reach-") as directory:
        rules = rules_file(Path(directory) / "rules.toml")
        stream = rules_stream(Path(directory), requests)
        for rate in rates_mb_s:
            with collector("--capacity", "256MiB", "--rules", str(rules)) as coll:
                cpu_before, began = process_cpu_s(coll.process.pid), time.monotonic()
                sent = bench_ingest.run_blaster(coll.tcp, "collector", 8, int(rate * 1e6 * seconds), stream, rate * 1e6)
                elapsed, cpu = time.monotonic() - began, process_cpu_s(coll.process.pid) - cpu_before
                watch = bench_ingest.rule_watch_stats(coll)
                received = int(coll.healthz()["received_events"])  # type: ignore[call-overload]
                unread = int(watch["unread_events"])
                rows.append([
                    f"{rate:g}", f"{sent['bytes'] / sent['seconds'] / 1e6:,.0f}", f"{received / elapsed / 1e6:.1f}",
                    f"{cpu / elapsed:.0%}", f"{unread:,} of {received:,}", f"{unread / received:.1%}",
                ])  # fmt: skip
    print(table(["MB/s asked", "MB/s sent", "M events/s", "collector CPU", "unread", "unread %"], rows,
                f"The 50 rules' watch on a steady stream, {seconds:g} s a rate, 8 connections; load average "
                f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"))  # fmt: skip
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the overload part only, with one flooding process")
    parser.add_argument("--floods", type=int, default=3, help="flooding client processes (default 3)")
    parser.add_argument("--after", type=float, default=2.0, help="the rule's after, seconds (default 2)")
    parser.add_argument("--no-rules", action="store_true", help="leave out the 50-rules ingest part")
    parser.add_argument("--rules-only", action="store_true", help="the 50-rules ingest part alone")
    parser.add_argument("--requests", type=int, default=3_000_000, help="requests in the rules part's stream (3000000)")
    parser.add_argument("--rounds", type=int, default=9, help="the rules part's interleaved rounds (default 9)")
    parser.add_argument("--watch-rates", help="the watch's reach alone, at these MB/s (comma-separated: 100,200,400)")
    parser.add_argument("--watch-seconds", type=float, default=8.0, help="seconds a rate (default 8)")
    parser.add_argument("--peer", nargs=2, metavar=("ROLE", "ADDRESS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        return peer(*args.peer)
    if args.watch_rates:
        try:
            rates = [float(rate) for rate in args.watch_rates.split(",")]
        except ValueError:
            parser.error(f"--watch-rates: {args.watch_rates!r} is not MB/s separated by commas (100,200,400)")
        if not rates or min(rates) <= 0:
            parser.error(f"--watch-rates: {args.watch_rates!r}: each rate must be above 0 MB/s")
        return 0 if watch_reach(rates, args.watch_seconds) else 1
    if args.rules_only:
        return 0 if rules_cost(args.requests, args.rounds) else 1
    ok = overload(1 if args.quick else args.floods, args.after)
    if not (args.quick or args.no_rules):
        ok = rules_cost(args.requests, args.rounds) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
