"""StoreBackend (``store/backend.py``): both backends the collector composes, its own store (memory or data dir) and
the JetStream tier, implement the protocol, and each decides what differs between them.

mypy checks the protocol statically where the collector composes them (``Collector.__init__`` assigns either to a
``Backend``); these tests hold the same at run time, member by member, and the choice the collector makes."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest
from ringtrace.collector.service.app import Collector
from ringtrace.collector.service.config import CollectorConfig
from ringtrace.collector.service.jetstream_tier import JETSTREAM_MAX_FRAME_BYTES, JetStreamTier
from ringtrace.collector.service.local_store import LocalStore
from ringtrace.collector.store.backend import StoreBackend

#: Never connected to: making a collector connects to nothing (``start`` does).
NATS = ("nats://127.0.0.1:4222",)


def collector_with(**options: Any) -> Collector:
    return Collector(CollectorConfig(tcp_port=0, http_port=0, **options))


def members() -> list[str]:
    """What the protocol declares (``typing.get_protocol_members`` comes with Python 3.13)."""
    return sorted(name for name in vars(StoreBackend) if not name.startswith("_"))


def test_the_protocol_names_what_ingest_reads_http_and_housekeeping_need() -> None:
    assert members() == [
        "clear", "close", "ingest_limits", "kind", "log_setup", "not_ready", "pop", "published_counters", "sources",
        "start", "stats", "stop", "store", "tail_step", "timers", "view",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("options", "implementation"), [({}, LocalStore), ({"jetstream": NATS}, JetStreamTier)], ids=["local", "jetstream"]
)
def test_each_backend_has_every_member_as_the_protocol_declares_it(
    options: dict[str, Any], implementation: type
) -> None:
    backend = collector_with(**options).backend
    assert type(backend) is implementation
    for name in members():
        declared = inspect.getattr_static(StoreBackend, name)
        if isinstance(declared, property):  # (an attribute or a property will do)
            assert hasattr(backend, name), name
            continue
        method = getattr(backend, name)
        assert inspect.iscoroutinefunction(method) == inspect.iscoroutinefunction(declared), name
        wanted = list(inspect.signature(declared).parameters)[1:]  # (self aside)
        assert list(inspect.signature(method).parameters) == wanted, name


def test_the_collector_writes_into_its_backend_store_and_reports_its_kind(tmp_path: Path) -> None:
    kinds = {}
    for name, options in {
        "memory": {},
        "data dir": {"data_dir": str(tmp_path / "data"), "fsync": "never"},
        "jetstream": {"jetstream": NATS},
    }.items():
        collector = collector_with(**options)
        assert collector.store is collector.backend.store
        kinds[name] = collector.stats()["store"]
        if collector.data_dir is not None:
            collector.data_dir.close()
    assert kinds == {"memory": "memory", "data dir": "data dir", "jetstream": "jetstream"}


def test_what_differs_between_the_backends_is_the_backend_s_to_say() -> None:
    large = CollectorConfig(tcp_port=0, http_port=0).max_frame_bytes
    local, tier = collector_with(max_age_s=60.0), collector_with(jetstream=NATS, max_age_s=60.0)
    # A message holds a segment and its frame: frames are smaller under --jetstream.
    assert local.limits.max_frame_bytes == large
    assert tier.limits.max_frame_bytes == min(large, JETSTREAM_MAX_FRAME_BYTES) < large
    # --max-age: the local store sweeps every second; the stream ages its own messages.
    assert len(local.backend.timers()) == 1
    assert tier.backend.timers() == ()
    # /stats and /metrics: only the tier publishes elsewhere (what it says needs the cluster: test_jetstream.py).
    assert local.published_counters() is None
    assert set(tier.published_counters() or {}) == {
        "messages", "bytes", "events", "retries", "refused_events", "waiting_events", "failing",
    }  # fmt: skip
    assert asyncio.run(local.fleet_stats()) == {}
