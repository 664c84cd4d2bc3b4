"""Status: what /healthz, /stats and /metrics report, read from the collector's parts when asked."""

from __future__ import annotations

from ringtrace.collector.auth import Authenticator
from ringtrace.collector.http.guard import HttpGuard
from ringtrace.collector.ingest.traffic import Traffic
from ringtrace.collector.read.inventory import RateSampler
from ringtrace.collector.service.loop_lag import LoopLag
from ringtrace.collector.service.snapshots import Snapshots
from ringtrace.collector.service.status import Status
from ringtrace.collector.store.processes import Registry
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.wire.decoder import Limits
from store_client import Client

FACTS = {"collector_version": "1.2.3", "clock_origin_wall_ns": 5, "policy": "ring", "data_dir": None}


def test_stats_begin_with_the_facts_given_and_every_figure_is_read_when_asked() -> None:
    store, registry = Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES), Registry()
    snapshots = Snapshots(store, registry, set(), RateSampler(), Limits(), origin_ns=5, max_snapshots=2)
    traffic = Traffic()
    status = Status(
        FACTS,
        store,
        registry,
        set(),
        set(),
        traffic,
        snapshots,
        HttpGuard(30.0, 4),
        Authenticator(None),
        LoopLag(lambda lag_s: None),
    )
    assert status.health()["stored_events"] == 0
    Client(store, 1).record(0, 30)
    snapshots.running, snapshots.tails_running, traffic.bytes_received = 2, 1, 100
    stats = status.stats()
    assert list(stats)[: len(FACTS)] == list(FACTS)
    assert {name: stats[name] for name in FACTS} == FACTS
    assert (stats["snapshots_running"], stats["tails_running"], stats["ingest_bytes"]) == (2, 1, 100)
    assert stats["stored_events"] == status.health()["stored_events"] == 30
    assert status.health()["status"] == "ok"
    assert status.metric_gauges()["connections"] == 0
    totals, client = status.metric_totals()
    assert totals.received_events == 30
    assert set(client.values()) == {0}
