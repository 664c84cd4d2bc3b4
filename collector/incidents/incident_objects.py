"""Saved incidents in JetStream's object store (``--jetstream``), so that every collector on the stream lists, serves
and deletes every incident: the twin of ``incident_files.py``, with its methods.

Theory of operation
-------------------
One bucket (the stream's name and ``-incidents``: ``ringtrace-incidents``), made with the stream's replicas and
storage, holds per incident id

- ``ID.pending``: an empty object whose ``Ringtrace-Record`` header holds the record of a fired incident whose window
  is still being collected;
- ``ID``: the finished incident: the native snapshot file as the object's data (none for a failed one), the record in
  its ``Ringtrace-Record`` header. An object's info is published after its last chunk: a listed incident always has
  its whole snapshot.

Listing reads the bucket's object infos (the last message of each), never the snapshots. A snapshot asked for is
fetched into a local cache file (an id is written once: a cached one never goes stale, but is served only while the
bucket still lists it), which is served as a local one is. The retention (count, bytes) is applied to the bucket by
the collector that saves; a removal another made meanwhile is not counted twice. A pending incident is handed back
at start (``pending``) only once its window ended ``STALE_PENDING_S`` ago: until then its collector may be writing
it.

The methods block, as ``IncidentFiles``' do: callers run them on worker threads (on the event loop's own thread they
are refused), and each runs its NATS calls on the event loop, ``OPERATION_TIMEOUT_S`` at most (after one that had no
answer, those of the next ``QUIET_S`` fail at once). A bucket that does not answer (the cluster gone, a stream leader
killed and not yet replaced, the bucket deleted) raises ``IncidentStoreError`` (an ``OSError``) naming the bucket and
why: the engine counts the incident failed with that reason. A failed incident's record that the bucket did not take
is kept by this collector (the newest ``MAX_UNWRITTEN``), listed and served by it, and written to the bucket with the
next incident saved.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any, Final, TypeVar

from ringtrace.collector.incidents import object_bucket as ops
from ringtrace.collector.incidents.incident_files import new_incident_id, valid_id
from ringtrace.collector.incidents.object_bucket import PENDING

__all__ = [
    "OPERATION_TIMEOUT_S",
    "IncidentObjects",
    "IncidentStoreError",
    "bucket_name",
]

log = logging.getLogger("ringtrace.collector.incidents")

#: How long one use of the bucket (a put, a listing, a fetch) may take before it is given up as unavailable.
OPERATION_TIMEOUT_S: Final = 10.0
#: How long after its window's end a pending incident is taken for one its collector will never finish.
STALE_PENDING_S: Final = 60.0
#: After a use of the bucket had no answer, the uses of this long fail at once: worker threads (which the watch and
#: the HTTP API share) do not each wait OPERATION_TIMEOUT_S for a cluster that is away.
QUIET_S: Final = 5.0
#: Failed incidents' records the bucket did not take, kept here at most.
MAX_UNWRITTEN: Final = 100
#: Snapshots kept in the local cache at most (each fetched again when asked for after it left).
CACHE_COUNT: Final = 8
_SNAPSHOT: Final = ".rtrace"
_BUCKET_CHARS: Final = re.compile(r"[^A-Za-z0-9_-]")
#: NATS's error code for a stream name in use with other settings (the bucket exists).
_STREAM_NAME_IN_USE: Final = 10058

_T = TypeVar("_T")


class IncidentStoreError(OSError):
    """The object store did not do what was asked (unavailable, refused, timed out); the message says why."""


def bucket_name(stream: str) -> str:
    """The incidents' bucket of the stream ``stream`` (characters a bucket may not have become ``_``)."""
    return _BUCKET_CHARS.sub("_", f"{stream}-incidents")


class IncidentObjects:
    """The incidents of one bucket; see the module docstring.

    Args:
        bucket: the bucket's name (``bucket_name``).
        jetstream: the JetStream context of the collector's connection (None until it is connected).
        replicas, storage: the bucket's, as the stream's (``file`` or ``memory``).
        max_count, max_bytes: the retention, as ``IncidentFiles``'.

    Raises:
        ValueError: a limit below 1.
    """

    def __init__(
        self,
        bucket: str,
        jetstream: Callable[[], Any],
        *,
        replicas: int,
        storage: str,
        max_count: int,
        max_bytes: int,
    ) -> None:
        if max_count < 1:
            raise ValueError(f"incidents max count must be at least 1, not {max_count}")
        if max_bytes < 1:
            raise ValueError(f"incidents max bytes must be at least 1, not {max_bytes}")
        self.bucket = bucket
        self.replicas, self.storage = replicas, storage
        self.max_count, self.max_bytes = max_count, max_bytes
        #: What the log and ``/stats`` say incidents are kept in.
        self.where = f"JetStream object store bucket {bucket!r}"
        #: Incidents removed by the retention since start (by this collector).
        self.removed = 0
        self._jetstream = jetstream
        self._loop: asyncio.AbstractEventLoop | None = None
        self._store: Any = None
        self._lock = threading.Lock()
        self._unwritten: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._cache: Path | None = None
        self._issued: set[str] = set()
        #: Until when (monotonic s) uses fail at once, and why: after one that had no answer.
        self._silent: tuple[float, str] | None = None
        self._ids = threading.Lock()  # (the event loop takes it: never held across a use of the bucket)

    @property
    def directory(self) -> Path:
        """The local cache of fetched snapshots (made when the first is fetched)."""
        with self._ids:  # (two worker threads make one)
            if self._cache is None:
                self._cache = Path(tempfile.mkdtemp(prefix="ringtrace-incident-cache-"))
            return self._cache

    async def open(self) -> None:
        """Make the bucket (or bind the one there) on the running loop, which every later use goes through. A bucket
        that cannot be made now is logged, and tried again at each use."""
        self._loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(self._bound(), OPERATION_TIMEOUT_S)
        except Exception as exc:
            log.warning("incidents: %s cannot be used yet (tried again at each incident): %s", self.where, ops.why(exc))

    def close(self) -> None:
        """Remove the local cache of snapshots."""
        with self._ids:
            if self._cache is not None:
                shutil.rmtree(self._cache, ignore_errors=True)
                self._cache = None

    # -- IncidentFiles' methods ----------------------------------------------------------------------------------------

    def new_id(self, rule: str, time_ns: int) -> str:
        """A new id, as ``IncidentFiles.new_id`` makes them (random digits enough that collectors sharing the bucket
        do not pick the same one); no IO: the event loop calls it."""
        with self._ids:
            while True:
                incident_id = new_incident_id(rule, time_ns, secrets.token_hex(4))
                if incident_id not in self._issued:
                    if len(self._issued) >= 10_000:
                        self._issued.clear()
                    self._issued.add(incident_id)
                    return incident_id

    def begin(self, record: dict[str, Any]) -> None:
        """Keep ``record`` as pending (``ID.pending``)."""
        incident_id = _id_of(record)
        pending = {**record, "status": "pending"}
        self._call("keep a pending incident", lambda store: ops.put(store, incident_id + PENDING, b"", pending))

    def save(self, record: dict[str, Any], chunks: Iterable[bytes]) -> dict[str, Any]:
        """Put the incident's snapshot from ``chunks`` with its record (``bytes``, ``status`` saved, ``saved_wall_ns``
        if not given), drop its pending object, then remove the oldest incidents past the retention.

        Raises:
            IncidentStoreError: the bucket did not take it.
        """
        incident_id = _id_of(record)
        # (Gathered on this worker thread: nats-py would read a file on the loop's own executor, which the threads
        # waiting here may all hold.)
        data = bytearray()
        for chunk in chunks:
            data += chunk
        finished = {**record, "status": "saved", "bytes": len(data)}
        finished.setdefault("saved_wall_ns", time.time_ns())
        self._call("save an incident", lambda store: ops.finish(store, incident_id, bytes(data), finished))
        with self._lock:
            self._retain(keep=incident_id)
            self._write_unwritten()
        return finished

    def fail(self, record: dict[str, Any], reason: str) -> dict[str, Any]:
        """Put the record of an incident that could not be saved (``status`` failed, why in ``failure``), drop its
        pending object; if the bucket does not take it, this collector keeps it (and says so)."""
        incident_id = _id_of(record)
        finished = {**record, "status": "failed", "failure": reason, "bytes": 0}
        try:
            self._call("record a failed incident", lambda store: ops.finish(store, incident_id, b"", finished))
        except IncidentStoreError as exc:
            with self._lock:
                self._unwritten[incident_id] = finished
                while len(self._unwritten) > MAX_UNWRITTEN:
                    self._unwritten.popitem(last=False)
            log.warning("incident %s: its failed record is kept by this collector only for now: %s", incident_id, exc)
            return finished
        with self._lock:
            self._retain(keep=incident_id)
        return finished

    def amend(self, incident_id: str, fields: dict[str, Any]) -> dict[str, Any] | None:
        """Rewrite the finished record of ``incident_id`` with ``fields`` (its object's header only); None if there
        is none."""
        if not valid_id(incident_id):
            return None
        with self._lock:
            kept = self._unwritten.get(incident_id)
            if kept is not None:
                self._unwritten[incident_id] = {**kept, **fields}
                return self._unwritten[incident_id]
        return self._call("amend an incident", partial(ops.amend, incident_id=incident_id, fields=fields))

    def pending(self) -> list[dict[str, Any]]:
        """The pending records whose window ended ``STALE_PENDING_S`` ago or more (left by a collector that stopped),
        oldest first; one that has a finished object too is dropped, not returned."""
        infos = self._call("list incidents", ops.infos)
        finished = {info.name for info in infos if not info.name.endswith(PENDING)}
        stale_ns = time.time_ns() - int(STALE_PENDING_S * 1e9)
        found = []
        for info in infos:
            if not info.name.endswith(PENDING):
                continue
            incident_id = info.name.removesuffix(PENDING)
            if incident_id in finished:
                self._call("drop a pending incident", partial(ops.delete, name=info.name))
                continue
            record = ops.record_of(info, incident_id)
            until_ns = (record or {}).get("window", {}).get("until_ns")
            if record is not None and (not isinstance(until_ns, int) or until_ns <= stale_ns):
                found.append(record)
        return sorted(found, key=_age)

    def records(self, *, pending: bool = False) -> list[dict[str, Any]]:
        """The finished records (saved and failed), newest first: the bucket's, and the failed ones it did not take;
        with ``pending``, the pending ones too (status ``pending``, those with no finished record yet: any
        collector's, so that each lists what another is capturing)."""
        infos = self._call("list incidents", ops.infos)
        found, left = {}, {}
        for info in infos:
            if not info.name.endswith(PENDING):
                record = ops.record_of(info, info.name)
                if record is not None:
                    found[info.name] = record
            elif pending:
                record = ops.record_of(info, info.name.removesuffix(PENDING))
                if record is not None:
                    left[record["id"]] = {**record, "status": "pending"}
        with self._lock:
            for incident_id, record in self._unwritten.items():
                found.setdefault(incident_id, record)
        for incident_id, record in left.items():
            found.setdefault(incident_id, record)
        return sorted(found.values(), key=_age, reverse=True)

    def record(self, incident_id: str, *, pending: bool = False) -> dict[str, Any] | None:
        """The finished record of ``incident_id`` (with ``pending``, else its pending one, any collector's); None if
        there is none (or the id cannot be one)."""
        if not valid_id(incident_id):
            return None
        with self._lock:
            if incident_id in self._unwritten:
                return self._unwritten[incident_id]
        info = self._call("read an incident", lambda store: ops.info_of(store, incident_id))
        if info is not None or not pending:
            return ops.record_of(info, incident_id) if info is not None else None
        info = self._call("read an incident", lambda store: ops.info_of(store, incident_id + PENDING))
        record = ops.record_of(info, incident_id) if info is not None else None
        return {**record, "status": "pending"} if record is not None else None

    def snapshot_path(self, incident_id: str) -> Path | None:
        """A local file of the snapshot of the saved incident ``incident_id`` (fetched into the cache unless there);
        None if it has none (unknown, failed)."""
        if not valid_id(incident_id):
            return None
        info = self._call("read an incident", lambda store: ops.info_of(store, incident_id))
        record = ops.record_of(info, incident_id) if info is not None else None
        if record is None or record.get("status") != "saved":
            return None
        path = self.directory / f"{incident_id}{_SNAPSHOT}"
        if path.exists():
            os.utime(path)  # (the most recently served is kept longest)
            return path
        data = self._call("fetch an incident's snapshot", lambda store: ops.contents(store, incident_id))
        if data is None:  # (deleted meanwhile)
            return None
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, path)
        self._prune_cache(keep=path)
        return path

    def delete(self, incident_id: str) -> bool:
        """Remove the finished incident ``incident_id``, for every collector; False if there is none."""
        if not valid_id(incident_id):
            return False
        with self._lock:
            kept_here = self._unwritten.pop(incident_id, None) is not None
        existed = self._call("delete an incident", lambda store: ops.delete(store, incident_id))
        if self._cache is not None:
            with contextlib.suppress(FileNotFoundError):
                (self._cache / f"{incident_id}{_SNAPSHOT}").unlink()
        return existed or kept_here

    # -- the retention, the cache -------------------------------------------------------------------------------------

    def _retain(self, keep: str) -> None:
        """Remove the oldest finished incidents of the bucket while more than ``max_count`` are kept or their
        snapshots hold more than ``max_bytes`` (never ``keep``). Under ``_lock``."""
        infos = self._call("list incidents", ops.infos)
        kept = []
        for info in infos:
            record = None if info.name.endswith(PENDING) else ops.record_of(info, info.name)
            if record is not None:
                kept.append((_age(record), info.name, info.size or 0))
        kept.sort()
        count, total = len(kept), sum(size for _, _, size in kept)
        for _, incident_id, size in kept:
            if count <= self.max_count and total <= self.max_bytes:
                break
            if incident_id == keep:
                continue
            count, total = count - 1, total - size
            if self._call("remove an incident", partial(ops.delete, name=incident_id)):
                self.removed += 1
                log.info(
                    "incident %s removed from %s: more than %d incidents or %d bytes are kept (--incidents-max-count, "
                    "--incidents-max-bytes)",
                    incident_id,
                    self.where,
                    self.max_count,
                    self.max_bytes,
                )

    def _write_unwritten(self) -> None:
        """Put the failed records the bucket did not take before (it takes incidents again). Under ``_lock``."""
        while self._unwritten:
            incident_id, record = next(iter(self._unwritten.items()))
            try:
                self._call(
                    "record a failed incident", partial(ops.finish, incident_id=incident_id, data=b"", record=record)
                )
            except IncidentStoreError:
                return
            del self._unwritten[incident_id]

    def _prune_cache(self, keep: Path) -> None:
        cached = sorted(self.directory.glob(f"*{_SNAPSHOT}"), key=_mtime)
        for path in cached[: max(0, len(cached) - CACHE_COUNT)]:
            if path != keep:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    # -- the bucket, through the event loop --------------------------------------------------------------------------

    def _call(self, what: str, use: Callable[[Any], Awaitable[_T]]) -> _T:
        """``use(bucket)`` run on the event loop, waited for here (a worker thread).

        Raises:
            IncidentStoreError: the bucket cannot be had, or did not answer within OPERATION_TIMEOUT_S, or refused.
        """
        loop = self._loop
        if loop is None:
            raise IncidentStoreError(f"{self.where} cannot {what}: the collector is not connected to JetStream yet")
        if _running_loop() is loop:
            raise RuntimeError("IncidentObjects' methods block: call them on a worker thread, not the event loop")
        silent = self._silent
        if silent is not None and time.monotonic() < silent[0]:  # (no worker thread waits again so soon)
            raise IncidentStoreError(f"{self.where} cannot {what}: {silent[1]} (a use less than {QUIET_S:g} s ago)")
        future = asyncio.run_coroutine_threadsafe(self._use(what, use), loop)
        try:
            return future.result(OPERATION_TIMEOUT_S + 5)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise IncidentStoreError(self._timed_out(what)) from None

    async def _use(self, what: str, use: Callable[[Any], Awaitable[_T]]) -> _T:
        try:
            async with asyncio.timeout(OPERATION_TIMEOUT_S):
                result = await use(await self._bound())
        except IncidentStoreError:
            raise
        except TimeoutError:
            raise IncidentStoreError(self._timed_out(what)) from None
        except Exception as exc:
            raise IncidentStoreError(f"{self.where} cannot {what}: {ops.why(exc)}") from None
        self._silent = None
        return result

    def _timed_out(self, what: str) -> str:
        """Why a use that had no answer failed; the uses of the next QUIET_S fail at once, saying so."""
        self._silent = (time.monotonic() + QUIET_S, f"no answer within {OPERATION_TIMEOUT_S:g} s")
        return f"{self.where} cannot {what}: no answer within {OPERATION_TIMEOUT_S:g} s"

    async def _bound(self) -> Any:
        """The bucket: made with the stream's replicas and storage, or bound if it is there already."""
        if self._store is not None:
            return self._store
        js = self._jetstream()
        if js is None:
            raise IncidentStoreError(f"{self.where}: the collector is not connected to JetStream")
        from nats.js.api import ObjectStoreConfig, StorageType
        from nats.js.errors import BadRequestError

        config = ObjectStoreConfig(
            description="ringtrace incidents: the native snapshot as the object, the record in its header",
            storage=StorageType.FILE if self.storage == "file" else StorageType.MEMORY,
            replicas=self.replicas,
        )
        try:
            self._store = await js.create_object_store(self.bucket, config=config)
        except BadRequestError as exc:
            if exc.err_code != _STREAM_NAME_IN_USE:  # (there, with settings of its own: used as it is)
                raise
            self._store = await js.object_store(self.bucket)
        log.info("incidents: kept in %s (%d replicas, %s storage)", self.where, self.replicas, self.storage)
        return self._store


def _id_of(record: dict[str, Any]) -> str:
    incident_id = record.get("id")
    if not isinstance(incident_id, str) or not valid_id(incident_id):
        raise ValueError(f"an incident id is 1 to 200 of A-Z a-z 0-9 _ -, not {incident_id!r}")
    return incident_id


def _age(record: dict[str, Any]) -> tuple[int, str]:
    time_ns = record.get("time_ns")
    return (time_ns if isinstance(time_ns, int) else 0, str(record.get("id")))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
