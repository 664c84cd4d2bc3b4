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

Rules (default; not with ``--quick``)
  ``bench_ingest.py``'s throughput rounds (large frames, 8 connections, in-memory collectors, interleaved rounds)
  with a collector variant that watches 50 rules (spans, messages, counters, OTLP errors, incident calls; none
  matches the workload's spans) next to the plain collector: the ratio of their MB/s (target >= 0.9x).

Examples:
  python benchmarks/bench_incidents.py --quick
  python benchmarks/bench_incidents.py --floods 4
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import Collector, collector, stop_process, table, verdict

#: What a peer process runs (``--peer ROLE ADDRESS``): the flood, the caller or the server.
PEER_ROLES = ("flood", "caller", "server")
LISTED_TARGET_S = 1.0
MARGIN_NS = 50_000_000
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


def rules_file(path: Path) -> Path:
    """50 rules of every kind, none met by ``bench_ingest.py``'s spans (names ``span``, short)."""
    lines = []
    for n in range(50):
        kind = n % 5
        body = [
            f'span = "request-{n}*"\nmin_duration = "200ms"',
            f'message = "*"\nmin_priority = "error"\ntext = "*failure {n}*"',
            f'counter = "queue-{n}"\nabove = 1000',
            f'otlp_error = true\nspan = "rpc-{n}*"',
            f'incident_call = true\nreason = "reason-{n}*"',
        ][kind]
        lines.append(f'[[rule]]\nname = "rule {n}"\n{body}\nscope = "process"\n')
    path.write_text("\n".join(lines))
    return path


def rules_cost() -> bool:
    sys.path.insert(0, str(Path(__file__).parent))
    import contextlib
    import io

    import bench_ingest

    with tempfile.TemporaryDirectory(prefix="bench_incidents-rules-") as directory:
        rules = rules_file(Path(directory) / "rules.toml")
        bench_ingest.COLLECTOR_VARIANTS.append(("50 rules", ("--rules", str(rules))))
        argv = ["bench_ingest.py", "--frames", "large", "--connections", "8", "--no-data-dir", "--no-rss"]
        argv += ["--rounds", "5"]
        out = io.StringIO()
        saved, sys.argv = sys.argv, argv
        try:
            with contextlib.redirect_stdout(out):
                bench_ingest.main()
        finally:
            sys.argv = saved
    text = out.getvalue()
    print(text)
    rows = {}
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == len(bench_ingest.HEADERS) and cells[0].startswith("large x8 "):
            rows[cells[0].removeprefix("large x8 ")] = cells
    if not {"collector", "50 rules"} <= rows.keys():
        print("could not read the rounds' figures from bench_ingest's output")
        return False
    mb_s, cpu = bench_ingest.HEADERS.index("MB/s"), bench_ingest.HEADERS.index("CPU ns/B")
    plain, ruled = rows["collector"], rows["50 rules"]
    ratio = float(ruled[mb_s].replace(",", "")) / float(plain[mb_s].replace(",", ""))
    cpu_ratio = float(ruled[cpu]) / float(plain[cpu])
    print(f"50 rules / none, ingest MB/s (large frames, 8 connections, same run): {ratio:.3f}x "
          f"(target >= {RULES_TARGET}x) {verdict(ratio >= RULES_TARGET)}; collector CPU per wire byte: "
          f"{cpu_ratio:.3f}x")  # fmt: skip
    return ratio >= RULES_TARGET


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the overload part only, with one flooding process")
    parser.add_argument("--floods", type=int, default=3, help="flooding client processes (default 3)")
    parser.add_argument("--after", type=float, default=2.0, help="the rule's after, seconds (default 2)")
    parser.add_argument("--no-rules", action="store_true", help="leave out the 50-rules ingest part")
    parser.add_argument("--peer", nargs=2, metavar=("ROLE", "ADDRESS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        return peer(*args.peer)
    ok = overload(1 if args.quick else args.floods, args.after)
    if not (args.quick or args.no_rules):
        ok = rules_cost() and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
