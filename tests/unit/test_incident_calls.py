"""``Timeline.incident``: one event of kind ``incident`` named by its reason, recorded alike by the C recorder and its
pure-Python twin, never raising into the program, and handed over at once rather than at the flusher's interval."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from alone import run_alone
from ringtrace.client import MemoryListener, Timeline
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.wire.model import INCIDENT
from ringtrace.wire.optional_c import PURE_PYTHON_ENV
from waiting import ringtrace_threads, wait_for

#: Records on a thread and in an asyncio task, to a file; prints each event's kind, name, args and track name.
TWIN = """
import asyncio, json, sys, threading
from ringtrace.client import FileListener, Timeline, read_trace_file
tl = Timeline("twin", [FileListener(sys.argv[1], process_name="twin")])
class Unprintable:
    def __str__(self):
        raise RuntimeError("no text")
tl.incident("payment declined", order=7, amount=12.5, tags=["a", "b"], nested={"k": (1, 2)})
tl.incident("bare")
tl.incident("odd args", value=Unprintable(), data=b"\\x00\\x01", reason="an arg called reason")
tl.instant("tick", i=1)
async def task():
    tl.incident("in a task", n=2)
asyncio.run(task())
thread = threading.Thread(target=lambda: tl.incident("on a thread"), name="worker")
thread.start()
thread.join()
assert tl.close(timeout_s=30)
events = read_trace_file(sys.argv[1]).events
print(json.dumps([[e.kind, e.name, e.args, e.track.name, e.dur_ns] for e in events], default=repr))
"""


class SlowListener(MemoryListener):
    """A memory listener that asks the flusher to sweep once a minute."""

    batch_interval_s = 60.0


def recorded(pure_python: bool, path: Path) -> list[Any]:
    env = {**os.environ, PURE_PYTHON_ENV: "1" if pure_python else "0"}
    done = subprocess.run([sys.executable, "-c", TWIN, str(path)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    events: list[Any] = json.loads(done.stdout)
    return events


def test_the_c_recorder_and_its_twin_record_the_same_incidents(tmp_path: Path) -> None:
    accelerated = recorded(False, tmp_path / "c.rttrace")
    assert accelerated == recorded(True, tmp_path / "python.rttrace")
    incidents = [(name, args, track) for kind, name, args, track, _ in accelerated if kind == "incident"]
    assert incidents == [
        (
            "payment declined",
            {"order": 7, "amount": 12.5, "tags": ["a", "b"], "nested": {"k": [1, 2]}},
            "twin (MainThread)",
        ),
        ("bare", None, "twin (MainThread)"),
        ("odd args", incidents[2][1], "twin (MainThread)"),
        ("in a task", {"n": 2}, incidents[3][2]),
        ("on a thread", None, "twin (worker)"),
    ]
    assert incidents[2][1]["reason"] == "an arg called reason"  # (readers show the name as the reason)
    assert all(dur == 0 for *_, dur in accelerated)


def test_an_incident_is_one_instant_of_kind_13_in_the_buffer() -> None:
    listener = MemoryListener()
    tl = Timeline("raw", [listener])
    with FLUSHER.sweeping():  # the flusher's thread takes nothing meanwhile (an incident wakes it at once)
        tl.incident("slow checkout", ms=250)
        drained = tl.drain()
    values = [value for _, run in drained.runs for value in run]  # type: ignore[union-attr]
    assert values[0] == INCIDENT and values[1] == "slow checkout" and values[2] == values[3]
    assert values[4] == {"ms": 250}
    tl.close()


def test_an_incident_never_raises_into_the_program() -> None:
    tl = Timeline("nobody listens")
    tl.incident("kept nowhere", x=1)  # no listener: nothing kept, nothing raised
    listener = MemoryListener()
    tl = Timeline("hostile", [listener], max_buffered_events=100)
    threads = [
        threading.Thread(target=lambda: [tl.incident(f"flood {i % 7}", i=i, pad="x" * 100) for i in range(5_000)])
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    tl.incident(object(), **{"": None})  # type: ignore[arg-type]  # a reason that is no str, an empty key
    tl.flush(timeout_s=30)
    got = [e for e in listener.events if e.kind == "incident"]
    assert len(got) + listener.dropped_events == 20_001  # a flood is just events: each kept or counted as dropped
    assert got[-1].name == str(got[-1].name) and got[-1].args == {"": None}
    tl.close()


def test_an_incident_is_handed_over_without_waiting_for_the_flushers_interval() -> None:
    run_alone(__file__, "incident_handed_over_at_once")  # (it waits on the flusher's thread: test_flusher_thread.py)


def incident_handed_over_at_once() -> None:
    listener = SlowListener()
    tl = Timeline("prompt", [listener])
    tl.instant("before")
    assert tl.flush(timeout_s=30)  # the flusher now waits up to a minute, unless woken
    tl.incident("now")
    wait_for(
        lambda: [e.name for e in listener.events],
        until=lambda names: "now" in names,
        timeout_s=30,
        what="the incident handed over by the flusher's own sweep, with no flush()",
        explain=ringtrace_threads,
    )
    tl.close()
