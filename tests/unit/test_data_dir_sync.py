"""The service's side of the data dir: recovering what it holds into the store and the registry, and syncing all of
it, one sync at a time, a failure logged rather than raised."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from ringtrace.collector.service.data_dir import DataDirSync, recover
from ringtrace.collector.store.processes import Registry
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.collector.store.segments import DataDir, FsyncPolicy, Segment
from ringtrace.wire.decoder import Limits
from store_client import Client


def data_dir_store(path: Path, fsync: FsyncPolicy = "never") -> tuple[Store, DataDir]:
    data_dir = DataDir(path, fsync)
    return Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, buffers=data_dir), data_dir


def test_recovery_adopts_every_segment_into_the_store_and_its_process_into_the_registry(tmp_path: Path) -> None:
    store, data_dir = data_dir_store(tmp_path)
    for owner in (1, 2):
        Client(store, owner).record(0, 40)
    held = store.totals().stored_events
    data_dir.close()
    again, data_dir = data_dir_store(tmp_path)
    registry = Registry()
    recover(data_dir, registry, again, Limits())
    assert sorted(p.instance_id for p in registry.processes.values()) == ["i1", "i2"]
    assert again.totals().stored_events == held == 80
    new = Client(again, 3)  # its segments take names not found there
    new.record(0, 10)
    assert len(list(tmp_path.glob("*.rtseg"))) == again.segment_count
    data_dir.close()


def test_syncs_asked_for_together_run_one_at_a_time_and_cover_what_was_written(
    tmp_path: Path, monkeypatch: Any
) -> None:
    store, data_dir = data_dir_store(tmp_path, "interval")
    Client(store, 1).record(0, 40)
    running, most_running, synced = [0], [0], []
    lock = threading.Lock()
    real_sync = data_dir.sync

    def counting_sync(segment: Segment, start: int, end: int) -> None:
        with lock:
            running[0] += 1
            most_running[0] = max(most_running[0], running[0])
        real_sync(segment, start, end)
        synced.append(segment.seq)
        with lock:
            running[0] -= 1

    monkeypatch.setattr(data_dir, "sync", counting_sync)

    async def scenario() -> None:
        sync = DataDirSync(store)
        await asyncio.gather(sync.sync(), sync.sync(), sync.sync())

    asyncio.run(scenario())
    assert synced
    assert most_running[0] == 1
    data_dir.close()


def test_a_failed_sync_is_logged_and_not_raised(tmp_path: Path, monkeypatch: Any, caplog: Any) -> None:
    store, data_dir = data_dir_store(tmp_path, "interval")
    Client(store, 1).record(0, 40)

    def failing_sync(segment: Segment, start: int, end: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(data_dir, "sync", failing_sync)
    with caplog.at_level("ERROR", logger="ringtrace.collector"):
        asyncio.run(DataDirSync(store).sync())
    assert "cannot sync the data dir: [Errno 5] Input/output error" in caplog.text
    data_dir.close()


def test_a_store_without_a_data_dir_has_nothing_to_sync() -> None:
    asyncio.run(DataDirSync(Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)).sync())
