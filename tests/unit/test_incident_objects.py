"""IncidentObjects (``incidents/incident_objects.py``) over a bucket in memory with nats-py's object store methods:
records in headers, the retention, pending incidents handed back only once stale, failed records the bucket did not
take kept and written later, a bucket that does not answer failing at once for a while, and the event loop refused.
(The real object store, shared by two collectors: ``tests/integration/test_incident_fleet.py``.)"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from nats.js.errors import NotFoundError, ObjectNotFoundError
from ringtrace.collector.incidents import incident_objects
from ringtrace.collector.incidents.incident_objects import IncidentObjects, IncidentStoreError, bucket_name
from ringtrace.collector.incidents.object_bucket import RECORD_HEADER

SECOND = 10**9


class Bucket:
    """nats-py's ``ObjectStore`` as the incidents use it, in memory; ``down``: every use raises; ``hang``: none
    answers."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, dict[str, Any]]] = {}
        self.down = False
        self.hang = False

    async def _check(self) -> None:
        if self.hang:
            await asyncio.sleep(3600)
        if self.down:
            raise ConnectionRefusedError("the cluster is away")

    async def put(self, name: str, data: bytes, meta: Any) -> None:
        await self._check()
        self.objects[name] = (data, meta.headers)

    async def get_info(self, name: str) -> Any:
        await self._check()
        if name not in self.objects:
            raise ObjectNotFoundError
        data, headers = self.objects[name]
        return SimpleNamespace(name=name, size=len(data), headers=headers, deleted=False, description=None)

    async def get(self, name: str) -> Any:
        await self.get_info(name)
        return SimpleNamespace(data=self.objects[name][0])

    async def update_meta(self, name: str, meta: Any) -> None:
        await self.get_info(name)
        self.objects[name] = (self.objects[name][0], meta.headers)

    async def delete(self, name: str) -> None:
        await self.get_info(name)
        del self.objects[name]

    async def list(self, ignore_deletes: bool = False) -> list[Any]:
        await self._check()
        if not self.objects:
            raise NotFoundError
        return [await self.get_info(name) for name in self.objects]


class JetStream:
    def __init__(self, bucket: Bucket) -> None:
        self.bucket = bucket

    async def create_object_store(self, name: str, config: Any) -> Bucket:
        assert config.replicas == 3
        return self.bucket


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running on a thread of its own, as the collector's runs while worker threads use the bucket."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def opened(loop: asyncio.AbstractEventLoop, bucket: Bucket, max_count: int = 10) -> IncidentObjects:
    jetstream = JetStream(bucket)
    objects = IncidentObjects(
        "ringtrace-incidents", lambda: jetstream, replicas=3, storage="file", max_count=max_count, max_bytes=10**6
    )
    asyncio.run_coroutine_threadsafe(objects.open(), loop).result(10)
    return objects


def record_of(objects: IncidentObjects, time_ns: int, **fields: Any) -> dict[str, Any]:
    return {"id": objects.new_id("slow checkout", time_ns), "rule": "slow checkout", "time_ns": time_ns, **fields}


def test_the_bucket_is_named_for_the_stream_in_characters_a_bucket_may_have() -> None:
    assert bucket_name("ringtrace") == "ringtrace-incidents"
    assert bucket_name("team.a b") == "team_a_b-incidents"


def test_a_saved_incident_is_one_object_its_record_in_a_header_served_from_a_local_file(
    loop: asyncio.AbstractEventLoop,
) -> None:
    bucket = Bucket()
    objects = opened(loop, bucket)
    record = record_of(objects, 100 * SECOND)
    objects.begin(record)
    assert list(bucket.objects) == [f"{record['id']}.pending"]
    written = objects.save(record, [b"native ", b"snapshot"])
    assert written["status"] == "saved" and written["bytes"] == 15
    assert list(bucket.objects) == [record["id"]]
    assert RECORD_HEADER in bucket.objects[record["id"]][1]
    assert objects.records() == [written] and objects.record(record["id"]) == written
    path = objects.snapshot_path(record["id"])
    assert path is not None and path.read_bytes() == b"native snapshot"
    amended = objects.amend(record["id"], {"webhook": {"url": "http://x", "status": "delivered", "attempts": 1}})
    assert amended is not None and objects.record(record["id"]) == amended and amended["bytes"] == 15
    assert objects.snapshot_path(record["id"]) == path and path.read_bytes() == b"native snapshot"
    assert objects.delete(record["id"]) and not path.exists()
    assert objects.amend(record["id"], {"webhook": {}}) is None
    assert objects.records() == [] and objects.snapshot_path(record["id"]) is None
    assert not objects.delete(record["id"])
    objects.close()
    assert not Path(path).parent.exists()


def test_the_retention_removes_the_oldest_from_the_bucket(loop: asyncio.AbstractEventLoop) -> None:
    objects = opened(loop, Bucket(), max_count=2)
    records = [record_of(objects, k * SECOND) for k in (3, 1, 2)]
    for record in records:
        objects.save(record, [b"x"])
    assert [r["time_ns"] for r in objects.records()] == [3 * SECOND, 2 * SECOND]
    assert objects.removed == 1


def test_a_pending_incident_is_handed_back_only_once_its_window_ended_long_enough_ago(
    loop: asyncio.AbstractEventLoop,
) -> None:
    objects = opened(loop, Bucket())
    now = time.time_ns()
    stale = record_of(objects, now - 300 * SECOND, window={"since_ns": 0, "until_ns": now - 120 * SECOND})
    running = record_of(objects, now, window={"since_ns": 0, "until_ns": now + 5 * SECOND})
    finished = record_of(objects, now - 300 * SECOND, window={"since_ns": 0, "until_ns": now - 120 * SECOND})
    for record in (stale, running, finished):
        objects.begin(record)
    objects.save(finished, [b"x"])
    assert [r["id"] for r in objects.pending()] == [stale["id"]]


def test_a_failed_record_the_bucket_does_not_take_is_kept_here_then_written(loop: asyncio.AbstractEventLoop) -> None:
    bucket = Bucket()
    objects = opened(loop, bucket)
    lost = record_of(objects, 1 * SECOND)
    bucket.down = True
    with pytest.raises(IncidentStoreError, match=r"ringtrace-incidents.*ConnectionRefusedError: the cluster is away"):
        objects.begin(lost)
    failed = objects.fail(lost, "the bucket is away")
    assert failed["status"] == "failed" and objects.record(lost["id"]) == failed
    bucket.down = False
    assert objects.records() == [failed] and lost["id"] not in bucket.objects
    objects.save(record_of(objects, 2 * SECOND), [b"x"])
    assert lost["id"] in bucket.objects and len(objects.records()) == 2


def test_a_bucket_that_does_not_answer_fails_the_uses_of_the_next_seconds_at_once(
    loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(incident_objects, "OPERATION_TIMEOUT_S", 0.2)
    bucket = Bucket()
    objects = opened(loop, bucket)
    bucket.hang = True
    with pytest.raises(IncidentStoreError, match=r"no answer within 0\.2 s"):
        objects.records()
    bucket.hang = False
    with pytest.raises(IncidentStoreError, match="a use less than 5 s ago"):
        objects.records()
    monkeypatch.setattr(incident_objects, "QUIET_S", 0.0)
    objects._silent = None
    assert objects.records() == []


def test_its_methods_are_refused_on_the_event_loop_and_before_it_is_opened(loop: asyncio.AbstractEventLoop) -> None:
    unopened = IncidentObjects("b", lambda: None, replicas=1, storage="file", max_count=1, max_bytes=1)
    with pytest.raises(IncidentStoreError, match="not connected to JetStream yet"):
        unopened.records()
    objects = opened(loop, Bucket())

    async def on_the_loop() -> None:
        objects.records()

    with pytest.raises(RuntimeError, match="worker thread"):
        asyncio.run_coroutine_threadsafe(on_the_loop(), loop).result(10)
    with pytest.raises(ValueError, match="max count must be at least 1, not 0"):
        IncidentObjects("b", lambda: None, replicas=1, storage="file", max_count=0, max_bytes=1)
