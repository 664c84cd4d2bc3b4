"""Incidents: the collector's event loop while a rule fires a thousand times a second.

One collector with one rule (``incident_call = true``, ``reason = "flood*"``, its default ``max_per_minute = 6``).
A client process records, in each round's phase, for ``--seconds`` (default 4) at 1,000 a second, paced:

- ``flood``: ``tl.incident("flood", n=...)``: each one fires the rule; six a minute become incidents, the rest are
  counted suppressed;
- ``instants``: ``tl.instant("tick", n=...)``: the same events' load, met by no rule;
- ``idle``: nothing.

The phases are interleaved round by round (rotating which goes first), on the same collector. For each phase: the
longest event-loop lag seen in it (``ringtrace_event_loop_lag_seconds`` at ``/metrics``, read before and after: the
least bucket bound that holds every lag observed), and the share of its time the loop waited for a core (the machine's
lag, not the collector's). At the end: fired, suppressed and saved, and ``/healthz``'s ``event_loop_lag_max_ms``.
Target: the flood's longest lag <= 20 ms.

Examples:
  python benchmarks/bench_incident_flood.py --quick
  python benchmarks/bench_incident_flood.py --rounds 5 --seconds 4
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import Collector, collector, core_wait_share, longest_lag, stop_process, table, verdict

RATE = 1000
PHASES = ("idle", "instants", "flood")
LAG_TARGET_S = 0.020


def peer(address: str) -> int:
    """A client process: on each line ``PHASE SECONDS``, records that phase's events at ``RATE`` a second (paced, in
    batches of ten), then answers ``done N``."""
    import ringtrace.client

    tl = ringtrace.client.connect(address, process_name="flood")
    n = 0
    for line in sys.stdin:
        phase, seconds = line.split()
        count, began = int(float(seconds) * RATE), time.perf_counter()
        for i in range(count):
            if phase == "flood":
                tl.incident("flood", n=n)
            elif phase == "instants":
                tl.instant("tick", n=n)
            n += 1
            if i % 10 == 9:  # (on schedule: a thousand a second, however long each call took)
                time.sleep(max(0.0, began + (i + 1) / RATE - time.perf_counter()))
        if phase == "idle":
            time.sleep(float(seconds))
        tl.flush(timeout_s=30)
        print(f"done {n}", flush=True)
    tl.close()
    return 0


def _get(coll: Collector, path: str) -> Any:
    with urllib.request.urlopen(f"http://{coll.http}{path}", timeout=60) as response:
        return json.loads(response.read())


def _loop_cpu_s(coll: Collector) -> float:
    """CPU seconds the collector's main thread (the event loop's) has run, from /proc's schedstat (nan without)."""
    try:
        with open(f"/proc/{coll.process.pid}/task/{coll.process.pid}/schedstat") as stats:
            return int(stats.read().split()[0]) / 1e9
    except OSError:
        return math.nan


Phase = tuple[float, float, float, int, int, float]
#: A look at the loop later than this counts as a long lag (a bucket bound of the histogram).
LONG_LAG_S = 0.025


def _long_share(before: dict[float, float], after: dict[float, float]) -> float:
    """Of the looks at the loop between two readings of ``Collector.lag_buckets``, the share later than
    ``LONG_LAG_S``."""
    looks = after[math.inf] - before.get(math.inf, 0)
    on_time = after[LONG_LAG_S] - before.get(LONG_LAG_S, 0)
    return (looks - on_time) / max(looks, 1)


def _phase(coll: Collector, client: subprocess.Popen[str], phase: str, seconds: float) -> Phase:
    """One phase: its longest loop lag (s, at most), the share of its time the loop waited for a core, the event
    loop's CPU seconds per second, the incidents begun and saved in it (a save runs five seconds after its firing:
    perhaps in another phase), and the share of its looks at the loop later than ``LONG_LAG_S``."""
    assert client.stdin is not None and client.stdout is not None
    counts = _get(coll, "/stats")["incidents"]
    lags, waited, cpu_s, began = coll.lag_buckets(), coll.loop_core_wait(), _loop_cpu_s(coll), time.monotonic()
    client.stdin.write(f"{phase} {seconds}\n")
    client.stdin.flush()
    answer = client.stdout.readline()
    if not answer.startswith("done"):
        raise RuntimeError(f"the client ended ({client.poll()}):\n" + "\n".join(coll.log[-20:]))
    time.sleep(0.3)  # (the watch's last steps of the phase, 0.1 s apart)
    lags_after = coll.lag_buckets()
    lag, wait = longest_lag(lags, lags_after), core_wait_share(waited, coll.loop_core_wait())
    cpu = (_loop_cpu_s(coll) - cpu_s) / (time.monotonic() - began)
    after = _get(coll, "/stats")["incidents"]
    return (
        lag,
        wait,
        cpu,
        after["fired"] - counts["fired"],
        after["saved"] - counts["saved"],
        _long_share(lags, lags_after),
    )


def run(rounds: int, seconds: float) -> bool:
    rule = "asked: incident_call=true, reason=flood*"
    with tempfile.TemporaryDirectory(prefix="bench_incident_flood-") as directory, collector(
        "--incidents-dir", directory, "--trigger", rule
    ) as coll:  # fmt: skip
        client = subprocess.Popen(
            [sys.executable, __file__, "--peer", coll.tcp], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            _phase(coll, client, "instants", 1.0)  # (warm-up: the client connected, the watch stepping)
            results: dict[str, list[Phase]] = {phase: [] for phase in PHASES}
            for round_ in range(rounds):
                order = PHASES[round_ % len(PHASES) :] + PHASES[: round_ % len(PHASES)]
                for phase in order:
                    results[phase].append(_phase(coll, client, phase, seconds))
            stats, health = _get(coll, "/stats"), coll.healthz()
        finally:
            if client.stdin is not None:
                client.stdin.close()
            try:
                client.wait(30)
            except subprocess.TimeoutExpired:
                stop_process(client)
    rows = []
    for phase, values in results.items():
        lags = [lag * 1000 for lag, *_ in values]
        cpu = statistics.median(v[2] for v in values)
        begun, saved = sum(v[3] for v in values), sum(v[4] for v in values)
        waited = max(v[1] for v in values)
        long_share = statistics.median(v[5] for v in values)
        per_round = " ".join(f"{lag:g}" for lag in lags)
        share = f"{long_share * 100:.3f}%"
        rows.append([phase, max(lags), statistics.median(lags), share, waited, cpu, begun, saved, per_round])
    headers = ["phase", "longest lag <= ms", "median <= ms", f"looks > {LONG_LAG_S * 1000:g} ms", "core wait (max)",
               "loop CPU s/s", "begun", "saved", "rounds' longest ms"]  # fmt: skip
    print(table(headers, rows, title=f"event-loop lag, {rounds} rounds of {seconds:g} s a phase, {RATE}/s"))
    incidents = stats["incidents"]
    lag_ms = health["event_loop_lag_max_ms"]
    print(f"rule fired {incidents['fired']}, suppressed {incidents['suppressed']}, saved {incidents['saved']}, "
          f"failed {incidents['failed']}; /healthz event_loop_lag_max_ms {lag_ms}")  # fmt: skip
    flood, idle, instants = (max(v[0] for v in results[phase]) for phase in ("flood", "idle", "instants"))
    ok = flood <= LAG_TARGET_S and incidents["suppressed"] > incidents["fired"]
    print(f"flood / idle longest lag: {flood / max(idle, 1e-9):.2f}x; flood / instants: "
          f"{flood / max(instants, 1e-9):.2f}x; flood's longest lag <= {LAG_TARGET_S * 1000:g} ms and most "
          f"suppressed: {verdict(ok)}")  # fmt: skip
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 2 s a phase")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the three phases (default 5)")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds a phase (default 4)")
    parser.add_argument("--peer", metavar="ADDRESS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        return peer(args.peer)
    sys.path.insert(0, str(Path(__file__).parent))
    ok = run(2, 2.0) if args.quick else run(args.rounds, args.seconds)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
