"""``connect()`` again under another ``process_name`` closes the old connection on a thread of its own: the call
returns while the old streamer still delivers (with no collector there it would have waited its whole
``exit_timeout_s``), the events recorded before the call arrive under the old name and those after under the new,
and at exit what the old one could not deliver is counted and said, not lost in silence."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from collector_process import CollectorProcess, events

pytestmark = pytest.mark.integration


def run_client(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def collector() -> Iterator[CollectorProcess]:
    running = CollectorProcess()
    try:
        yield running
    finally:
        running.stop()


#: Connected as task-1 to ``sys.argv[1]``, one event, then connected as task-2: prints how long that call took and
#: whether the old streamer was still closing when it returned (its thread, and task-1's streamer thread, alive).
RENAME_UNREACHABLE = """
import json, sys, threading, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="task-1", exit_timeout_s=5.0)
tl.instant("before")
started = time.monotonic()
ringtrace.client.connect(sys.argv[1], process_name="task-2", exit_timeout_s=5.0)
took = time.monotonic() - started
names = [thread.name for thread in threading.enumerate()]
print(json.dumps({"took_s": took, "retiring": names.count("ringtrace-retiring"),
                  "streamers": names.count("ringtrace-streamer")}))
"""


def test_connect_under_another_name_returns_while_the_old_streamer_still_closes() -> None:
    done = run_client(RENAME_UNREACHABLE, f"127.0.0.1:{free_port()}")  # nothing listens there
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    # Returned while the old streamer still tries to deliver, on a thread of its own, beside the new one's.
    assert said["retiring"] == 1 and said["streamers"] == 2, said
    assert said["took_s"] < 2.5, said  # (it waited exit_timeout_s, 5 s, on the caller's thread)
    # At exit the old streamer's event, never delivered, is counted and said.
    assert "1 event" in done.stderr and "task-1" not in done.stdout, done.stderr


#: Six names in turn (more than close at once in the background), 50 events under each, no flush: the exit delivers.
RENAME_EACH_TASK = """
import sys, ringtrace.client
for task in range(6):
    tl = ringtrace.client.connect(sys.argv[1], process_name=f"task-{task}")
    for i in range(50):
        tl.instant(f"event {task}-{i}", task=task, i=i)
"""


def test_events_before_a_rename_arrive_under_the_old_name_and_after_it_under_the_new(
    collector: CollectorProcess,
) -> None:
    done = run_client(RENAME_EACH_TASK, collector.tcp_address)
    assert done.returncode == 0, done.stderr
    assert "undelivered" not in done.stderr.lower() and "dropped" not in done.stderr.lower(), done.stderr
    collector.wait_for_stored(6 * 50)
    trace = collector.snapshot()
    process_names = {process["pid"]: process["process_name"] for process in trace["otherData"]["processes"]}
    shown: dict[str, list[str]] = defaultdict(list)
    for event in events(trace, "i"):
        shown[process_names[event["pid"]]].append(event["name"])
    assert {name: sorted(names) for name, names in shown.items()} == {
        f"task-{task}": sorted(f"event {task}-{i}" for i in range(50)) for task in range(6)
    }
    assert trace["otherData"]["client_dropped_events"] == 0


#: A spawn pool whose workers connect under each task's name, 40 events a task; the pool closed and joined (its
#: workers end by multiprocessing's exit, which skips atexit: the old streamers still closing are waited for there).
POOL_RENAMING = """
import multiprocessing, sys, ringtrace.client

def task(n):
    tl = ringtrace.client.connect(sys.argv[1], process_name=f"task-{n}")
    for i in range(40):
        tl.instant(f"event {n}-{i}")
    return n

if __name__ == "__main__":
    pool = multiprocessing.get_context("spawn").Pool(2)
    print(sorted(pool.map(task, range(8), chunksize=1)))
    pool.close()
    pool.join()
"""


def test_pool_workers_renamed_per_task_deliver_every_tasks_events_under_its_name(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    script = tmp_path / "pool_renaming.py"
    script.write_text(POOL_RENAMING)
    done = subprocess.run(
        [sys.executable, str(script), collector.tcp_address], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    collector.wait_for_stored(8 * 40)
    trace = collector.snapshot()
    process_names = {process["pid"]: process["process_name"] for process in trace["otherData"]["processes"]}
    shown: dict[str, set[str]] = defaultdict(set)
    for event in events(trace, "i"):
        shown[process_names[event["pid"]]].add(event["name"])
    assert shown == {f"task-{n}": {f"event {n}-{i}" for i in range(40)} for n in range(8)}
    assert trace["otherData"]["client_dropped_events"] == 0
