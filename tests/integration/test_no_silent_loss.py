"""Nothing is lost in silence: each case was found losing data without a word, and is shown here through a real
collector process and real client processes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from collector_process import CollectorProcess, events, metadata
from ringtrace.client import read_trace_streams
from ringtrace.wire.arg_values import MAX_STRING_CHARS
from ringtrace.wire.string_table import OVERFLOW_LABEL
from waiting import wait_for


def run_client(code: str, *args: str, script: bool = False, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (or the script at that path) in a fresh interpreter, as a user's script would run."""
    return subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", *([] if script else ["-c"]), code, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_counters(trace: dict[str, Any]) -> dict[str, Any]:
    (process,) = trace["otherData"]["processes"]
    return dict(process)


# -- 1. labels past the string limit ---------------------------------------------------------------------------------

#: A client that records ``sys.argv[2]`` labels, ``sys.argv[3]`` to a flush (a flush: a run of its own), then an early
#: label again, and prints whether every flush held and how many connections it made.
MANY_LABELS = (
    "import json, sys, ringtrace.client\n"
    "tl = ringtrace.client.connect(sys.argv[1])\n"
    "total, step = int(sys.argv[2]), int(sys.argv[3])\n"
    "ok = True\n"
    "for first in range(0, total, step):\n"
    "    for i in range(first, min(first + step, total)):\n"
    "        tl.instant(f'label-{i:05d}', i=i)\n"
    "    ok = tl.flush(timeout_s=20) and ok\n"
    "tl.instant('label-00000', i=-1)\n"
    "print(json.dumps({'ok': tl.flush(timeout_s=20) and ok, 'connects': tl.listeners[0].connects}))\n"
)


def expected_labels(total: int) -> list[str]:
    return [*(f"label-{i:05d}" for i in range(total)), "label-00000"]


@pytest.mark.parametrize(
    "limit",
    [("--max-strings", "100"), ("--max-string-bytes", "4KiB")],  # 99 labels a table; 11 bytes each: 370
    ids=["count", "bytes"],
)
def test_labels_past_the_collectors_string_limit_keep_their_names(limit: tuple[str, str], tmp_path: Path) -> None:
    """A full table starts again (a STRINGS frame that resets it): labels recorded later keep their names, for the
    life of the connection, in every snapshot format and after a restart on the data dir."""
    data_dir = str(tmp_path / "data")
    collector = CollectorProcess(*limit, "--data-dir", data_dir, "--capacity", "64MiB")
    try:
        done = run_client(MANY_LABELS, collector.tcp_address, "2000", "50")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"ok": True, "connects": 1}  # the connection never broke
        trace = collector.snapshot()
        assert [e["name"] for e in events(trace, "i")] == expected_labels(2000)
        assert trace["otherData"]["label_overflow_events"] == 0
        assert process_counters(trace)["label_overflow_events"] == 0
        assert not any("closing connection" in line for line in collector.lines)
        status, native = collector.get("/snapshot?format=native")
        assert status == 200
    finally:
        collector.stop()
    snapshot_file = tmp_path / "snapshot.rtsnap"
    snapshot_file.write_bytes(native)
    read_back = sorted((e.ts_ns, e.name) for stream in read_trace_streams(snapshot_file) for e in stream.events)
    assert [name for _, name in read_back] == expected_labels(2000)
    restarted = CollectorProcess("--data-dir", data_dir, "--capacity", "64MiB")
    try:
        assert [e["name"] for e in events(restarted.snapshot(), "i")] == expected_labels(2000)
    finally:
        restarted.stop()


def test_a_run_with_more_labels_than_the_table_holds_shows_the_rest_as_the_overflow_label_counted() -> None:
    collector = CollectorProcess("--max-strings", "100")
    try:
        done = run_client(MANY_LABELS, collector.tcp_address, "300", "300")  # one flush: runs as the flusher cuts them
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"ok": True, "connects": 1}
        trace = collector.snapshot()
        names = [e["name"] for e in events(trace, "i")]
        assert len(names) == 301
        overflowed = names.count(OVERFLOW_LABEL)
        assert overflowed == trace["otherData"]["label_overflow_events"]
        assert overflowed == process_counters(trace)["label_overflow_events"]
        assert overflowed <= 300 - 99  # a table holds 99 labels, and starts again for the next run
        assert names[-1] == "label-00000"  # recorded after the table filled: its own name again
    finally:
        collector.stop()


def test_a_flush_is_not_true_when_the_collector_refused_events() -> None:
    collector = CollectorProcess("--capacity", "512KiB", "--max-frame-size", "64KiB", "--policy", "discard")
    try:
        code = (
            "import json, sys, ringtrace.client\n"
            "tl = ringtrace.client.connect(sys.argv[1])\n"
            "for i in range(100_000):\n"
            "    tl.instant('tick', i=i)\n"
            "first = tl.flush(timeout_s=20)\n"
            "refused = tl.listeners[0].refused_events\n"
            "print(json.dumps({'first': first, 'refused': refused, 'again': tl.flush(timeout_s=20)}))\n"
        )
        done = run_client(code, collector.tcp_address)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        other = collector.snapshot()["otherData"]
    finally:
        collector.stop()
    assert result["first"] is False  # the store is full: what it refused was not delivered
    assert result["refused"] == other["discarded_events"] > 0
    assert result["again"] is True  # nothing new was refused since
    assert other["received_events"] == other["stored_events"] + other["discarded_events"] == 100_000


_REFUSED_WARNING = """
import json, logging, sys, time, ringtrace.client

said = []

class Said(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())

logging.getLogger("ringtrace").addHandler(Said())
tl = ringtrace.client.connect(sys.argv[1])
for i in range(100_000):
    tl.instant("tick", i=i)
tl.flush(timeout_s=20)
deadline = time.monotonic() + 30  # (the warning comes at the streamer's next turn after the refusal)
while not any("could not store" in line for line in said) and time.monotonic() < deadline:
    time.sleep(0.05)
print(json.dumps({"said": said, "dropped": tl.dropped_events, "refused": tl.listeners[0].refused_events}))
"""


def test_the_warning_of_refused_events_names_the_counter_that_holds_them() -> None:
    collector = CollectorProcess("--capacity", "512KiB", "--max-frame-size", "64KiB", "--policy", "discard")
    try:
        done = run_client(_REFUSED_WARNING, collector.tcp_address)
    finally:
        collector.stop()
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    [warning] = [line for line in result["said"] if "could not store" in line]
    assert result["refused"] > 0 and result["dropped"] == 0, result
    # (the warning comes at the first refusal: on a busy machine, before the last of them; the next a minute later)
    said = re.search(r"could not store ([\d,]+) events", warning)
    assert said is not None and 0 < int(said.group(1).replace(",", "")) <= result["refused"], (warning, result)
    assert "counted in the streamer's refused_events (among the timeline's listeners), not in dropped_events" in (
        warning
    )


# -- 2. one odd argument must not cost its batch ---------------------------------------------------------------------

_ODD_ARGS = """
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], batch_interval_s=3600)
deep = "bottom"
for _ in range(300):
    deep = [deep]
tl.instant("before", n=1)
tl.instant("tuple-key", m={(2, 3): "y"})
tl.instant("deep", d=deep)
tl.instant("huge-int", n={"v": 2**80})
with tl.scope("span-with-set", s={3, 1, 2}):
    pass
for i in range(1000):
    tl.instant("after", i=i)
print(tl.flush(timeout_s=20))
"""


def test_an_odd_argument_costs_no_other_event(collector: CollectorProcess) -> None:
    done = run_client(_ODD_ARGS, collector.tcp_address)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]
    trace = collector.snapshot()
    recorded = {e["name"]: e for e in trace["traceEvents"] if e["ph"] in "Xi"}
    assert len([e for e in events(trace, "i") if e["name"] == "after"]) == 1000
    assert recorded["tuple-key"]["args"] == {"m": {"(2, 3)": "y"}}
    assert recorded["huge-int"]["args"] == {"n": {"v": str(2**80)}}
    assert sorted(recorded["span-with-set"]["args"]["s"]) == [1, 2, 3]
    deep = recorded["deep"]["args"]["d"]
    depth = 0
    while isinstance(deep, list):
        deep, depth = deep[0], depth + 1
    assert deep.startswith("<ringtrace: clipped") and depth < 40  # cut, with a visible mark
    counters = process_counters(trace)
    assert counters["clipped_args"] == 1
    assert counters["undecodable_events"] == 0 and counters["client_dropped_events"] == 0


# -- 3. flush() and the exit flush wait for a collector that is starting ----------------------------------------------

_RECORD_THEN_FLUSH = """
import json, sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1])
for i in range(500):
    tl.instant("early", i=i)
print("recorded", flush=True)
sys.stdin.readline()  # the test starts the collector now
print(json.dumps({"flushed": tl.flush(timeout_s=30)}), flush=True)
"""


@contextlib.contextmanager
def collector_started_late(code: str, ready: str) -> Iterator[tuple[Callable[[], str], CollectorProcess]]:
    """Run ``code`` (a client) until it prints ``ready``, then start a collector on the address it was given and
    tell the client (a line on its stdin); yields a reader of the client's next output line, and the collector."""
    address = f"127.0.0.1:{free_port()}"
    client = subprocess.Popen(
        [sys.executable, "-c", code, address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    collector = None
    try:
        stdin, stdout = client.stdin, client.stdout
        assert stdin is not None and stdout is not None
        assert stdout.readline().strip() == ready
        collector = CollectorProcess(tcp=address)
        stdin.write("\n")
        stdin.flush()
        yield stdout.readline, collector
    finally:
        client.kill()
        client.communicate(timeout=30)  # also closes the pipes
        if collector is not None:
            collector.stop()


def test_flush_connects_at_once_and_waits_for_a_collector_that_starts_late() -> None:
    with collector_started_late(_RECORD_THEN_FLUSH, "recorded") as (next_line, collector):
        assert json.loads(next_line()) == {"flushed": True}
        assert len(events(collector.snapshot(), "i")) == 500


def test_a_script_that_exits_at_once_is_delivered_by_the_exit_flush(collector: CollectorProcess) -> None:
    code = "import sys, ringtrace.client\ntl = ringtrace.client.connect(sys.argv[1])\ntl.instant('only', n=1)\n"
    done = run_client(code, collector.tcp_address)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert [e["name"] for e in events(collector.snapshot(), "i")] == ["only"]


# -- 4. multiprocessing children -------------------------------------------------------------------------------------

_POOL = """
import multiprocessing, sys, ringtrace.client

def work(k):
    tl = ringtrace.client.default_timeline()
    for i in range(100):
        tl.instant("task", k=k, i=i)
    return k

if __name__ == "__main__":
    method, ending = sys.argv[2], sys.argv[3]
    context = multiprocessing.get_context(method)
    if method == "fork":
        ringtrace.client.connect(sys.argv[1], process_name="parent")
        # The docs' one line for spawn, under fork (Linux's default before Python 3.14): changes nothing.
        pool = context.Pool(2, initializer=ringtrace.client.connect, initargs=(sys.argv[1],))
    else:  # spawn and forkserver children are new interpreters: the documented one line connects them
        ringtrace.client.connect(sys.argv[1], process_name="web")  # named after it: web (SpawnPoolWorker-1)
        pool = context.Pool(2, initializer=ringtrace.client.connect, initargs=(sys.argv[1],))
    if ending == "close":
        pool.map(work, range(4))
        pool.close()
        pool.join()
    else:
        with pool:  # __exit__ terminates the workers
            pool.map(work, range(4))
"""


@pytest.mark.parametrize(
    ("method", "ending"),
    [("fork", "close"), ("fork", "terminate"), ("spawn", "close"), ("forkserver", "close")],
)
def test_pool_children_deliver_what_they_recorded(
    collector: CollectorProcess, tmp_path: Path, method: str, ending: str
) -> None:
    script = tmp_path / "pool_script.py"  # spawn and forkserver children import the main module by its path
    script.write_text(_POOL)
    done = run_client(str(script), collector.tcp_address, method, ending, script=True, timeout_s=90)
    assert done.returncode == 0, done.stderr
    trace = collector.snapshot()
    tasks = [e for e in events(trace, "i") if e["name"] == "task"]
    assert len(tasks) == 400
    assert {(e["args"]["k"], e["args"]["i"]) for e in tasks} == {(k, i) for k in range(4) for i in range(100)}
    names = {e["pid"]: e["args"]["name"] for e in events(trace, "M") if e["name"] == "process_name"}
    workers = {names[e["pid"]] for e in tasks}
    # Named after the parent and itself, whatever the start method (a fork child's copy of its parent's connection
    # takes its name once multiprocessing has made it a Process).
    parent = "parent" if method == "fork" else "web"
    kind = {"fork": "Fork", "spawn": "Spawn", "forkserver": "ForkServer"}[method]
    assert workers and all(re.fullmatch(rf"{parent} \({kind}PoolWorker-\d+\)", name) for name in workers), workers


_TASK_NAMES = """
import json, multiprocessing, os, sys, ringtrace.client

def task(i):  # as a new user wrote it: each task connects under a name of its own
    tl = ringtrace.client.connect(sys.argv[1], process_name=f"child{i}")
    log = tl.message("app", "info", "task $task item $n")
    for n in range(1000):
        log(i, n)
    return os.getpid(), tl.flush(timeout_s=30)

if __name__ == "__main__":
    ringtrace.client.connect(sys.argv[1], process_name="parent").instant("started")
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        print(json.dumps(pool.map(task, range(6), chunksize=1)))
"""


def test_a_pool_worker_that_connects_under_each_task_name_shows_each_as_a_source(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    """Six tasks on three workers: a worker runs two at least, and connects under a second name. That process was
    renamed, so ``/sources`` listed the last name of each worker alone; each name is a source of its own now, holding
    what was recorded under it."""
    script = tmp_path / "task_names.py"  # spawn children import the main module by its path
    script.write_text(_TASK_NAMES)
    done = run_client(str(script), collector.tcp_address, script=True, timeout_s=120)
    assert done.returncode == 0, done.stderr
    pids, flushed = zip(*json.loads(done.stdout), strict=True)
    assert all(flushed) and len(set(pids)) < 6  # (a worker connected twice: what is shown here)
    names = [f"child{i}" for i in range(6)]
    sources = wait_for(
        lambda: {p["process_name"]: p for p in collector.json("/sources")["processes"]},
        until=lambda held: all(held.get(name, {}).get("stored_events") == 1000 for name in names),
        timeout_s=60,
        what="each task's 1000 messages stored under its name",
    )
    assert set(sources) == {"parent", *names}
    assert [sources[name]["os_pid"] for name in names] == list(pids)
    trace = collector.snapshot()
    shown_as = {e["pid"]: e["args"]["name"] for e in events(trace, "M") if e["name"] == "process_name"}
    tasks_under: defaultdict[str, set[int]] = defaultdict(set)
    for event in events(trace, "i"):
        if event.get("cat") == "app":
            tasks_under[shown_as[event["pid"]]].add(event["args"]["task"])
    assert len(tasks_under) == 6
    # (A second process of one OS pid is shown with the pid: "child1 (pid 4242)".)
    for name, tasks in tasks_under.items():
        i = int(name.removeprefix("child").split(" ")[0])
        assert name in (f"child{i}", f"child{i} (pid {pids[i]})") and tasks == {i}


_NAMES_IN_TURN = """
import os, sys, ringtrace.client
for name in ("a", "b", "a"):
    tl = ringtrace.client.connect(sys.argv[1], process_name=name)
    tl.instant("under", name=name)
    assert tl.flush(timeout_s=30)
print(os.getpid())
"""


def test_a_process_connected_again_under_a_name_it_had_is_that_source_again(collector: CollectorProcess) -> None:
    done = run_client(_NAMES_IN_TURN, collector.tcp_address)
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout)  # (each flush acknowledged: stored)
    sources = [(p["process_name"], p["os_pid"], p["stored_events"]) for p in collector.json("/sources")["processes"]]
    assert sorted(sources) == [("a", pid, 2), ("b", pid, 1)]


_PROCESS = """
import multiprocessing, sys, ringtrace.client

def child():
    for i in range(100):
        ringtrace.client.default_timeline().instant("in-child", i=i)

if __name__ == "__main__":
    ringtrace.client.connect(sys.argv[1])
    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join()
    print(process.exitcode)
"""


def test_a_fork_started_process_delivers_before_it_exits(collector: CollectorProcess) -> None:
    done = run_client(_PROCESS, collector.tcp_address)
    assert done.returncode == 0 and done.stdout.split() == ["0"], done.stderr
    assert len([e for e in events(collector.snapshot(), "i") if e["name"] == "in-child"]) == 100


_TERMINATED_WAITING = """
import json, multiprocessing, os, signal, socket, sys, time, ringtrace.client

def work(ready):
    sys.setswitchinterval(1.0)  # the exit delivery's thread keeps the interpreter until it waits
    tl = ringtrace.client.default_timeline()
    tl.instant("never acknowledged")
    tl.flush(timeout_s=0.1)  # queued by the streamer, never acknowledged
    ready.set()
    time.sleep(60)

if __name__ == "__main__":
    silent = socket.create_server(("127.0.0.1", 0))  # accepts, never answers
    ringtrace.client.connect(f"127.0.0.1:{silent.getsockname()[1]}", exit_timeout_s=float(sys.argv[1]))
    context = multiprocessing.get_context("fork")
    readies = [context.Event() for _ in range(3)]
    children = [context.Process(target=work, args=(ready,)) for ready in readies]
    for child in children:
        child.start()
    assert all(ready.wait(30) for ready in readies)
    started = time.monotonic()
    for child in children:
        os.kill(child.pid, signal.SIGTERM)
    waited = []
    for child in children:
        child.join(60)
        waited.append((time.monotonic() - started, child.exitcode))
    print(json.dumps(waited))
"""


def test_a_terminated_child_waits_its_whole_exit_timeout_for_a_silent_collector() -> None:
    # The child's SIGTERM delivery waits exit_timeout_s for the collector, the streamer's, not the flusher's
    # default (2 s), which it fell back to when it read the timeout once the timeline had closed its listeners.
    done = run_client(_TERMINATED_WAITING, "4.0", timeout_s=90)
    assert done.returncode == 0, done.stderr
    waited = json.loads(done.stdout)
    assert [exitcode for _, exitcode in waited] == [-15] * 3  # died by SIGTERM, as before
    assert all(3.9 <= seconds < 30 for seconds, _ in waited), waited


_TRACED_TASKS = """
import concurrent.futures, multiprocessing, sys, ringtrace.client

@ringtrace.client.traced
def square(x):
    return x * x

if __name__ == "__main__":
    address, how = sys.argv[1], sys.argv[2]
    ringtrace.client.connect(address, process_name="parent")
    context = multiprocessing.get_context("spawn")  # the function goes to the children pickled, by its name
    if how == "pool":
        pool = context.Pool(2, initializer=ringtrace.client.connect, initargs=(address,))
        results = pool.map(square, range(8))
        pool.close()
        pool.join()
    else:
        with concurrent.futures.ProcessPoolExecutor(
            2, mp_context=context, initializer=ringtrace.client.connect, initargs=(address,)
        ) as executor:
            results = list(executor.map(square, range(8)))
    print(type(square).__name__, *results)
"""


@pytest.mark.parametrize("pure_python", [False, True], ids=["c-recorder", "pure-python"])
@pytest.mark.parametrize("how", ["pool", "executor"])
def test_a_traced_function_runs_in_pool_children_and_each_call_is_a_span(
    collector: CollectorProcess, tmp_path: Path, how: str, pure_python: bool
) -> None:
    script = tmp_path / "traced_tasks.py"  # spawn children import the main module by its path
    script.write_text(_TRACED_TASKS)
    env = {name: value for name, value in os.environ.items() if name != "RINGTRACE_PURE_PYTHON"}
    if pure_python:
        env["RINGTRACE_PURE_PYTHON"] = "1"
    done = subprocess.run(
        [sys.executable, str(script), collector.tcp_address, how], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    kind, *results = done.stdout.split()
    assert kind == ("function" if pure_python else "Traced")
    assert results == [str(x * x) for x in range(8)]
    trace = collector.snapshot()
    names = {e["pid"]: e["args"]["name"] for e in events(trace, "M") if e["name"] == "process_name"}
    calls = [e for e in events(trace, "X") if e["name"] == "square"]
    assert len(calls) == 8
    workers = {names[e["pid"]] for e in calls}  # each a child: parent (SpawnPoolWorker-1), parent (SpawnProcess-2)
    assert all(re.fullmatch(r"parent \(Spawn\w+-\d+\)", name) for name in workers), workers


# -- 5. reconnect after a collector restart ---------------------------------------------------------------------------

_RESTART = """
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1])
for line in sys.stdin:
    tl.instant(line.strip())
    print(tl.flush(timeout_s=10), tl.listeners[0].connects, flush=True)
"""


def test_after_a_collector_restart_the_next_flush_is_delivered() -> None:
    first = CollectorProcess()
    address = first.tcp_address
    client = subprocess.Popen(
        [sys.executable, "-c", _RESTART, address], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    second = None
    try:
        assert client.stdin is not None and client.stdout is not None

        def step(label: str) -> list[str]:
            client.stdin.write(label + "\n")  # type: ignore[union-attr]
            client.stdin.flush()  # type: ignore[union-attr]
            return client.stdout.readline().split()  # type: ignore[union-attr]

        assert step("before") == ["True", "1"]
        first.stop()
        second = CollectorProcess(tcp=address)
        # No retry loop: flush() connects at once, whatever the backoff says.
        assert step("after") == ["True", "2"]
        assert [e["name"] for e in events(second.snapshot(), "i")] == ["after"]
    finally:
        client.communicate(timeout=30)
        first.stop()
        if second is not None:
            second.stop()


# -- 6. asyncio ------------------------------------------------------------------------------------------------------

_ASYNC = """
import asyncio, sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1])

async def request(n):
    with tl.scope("request", n=n):
        await asyncio.sleep(0.01 * (n % 3))
        with tl.scope("db", n=n):
            await asyncio.sleep(0.01)
        tl.instant("done", n=n)

async def main():
    with tl.scope("main"):
        await asyncio.gather(*(request(n) for n in range(20)))

asyncio.run(main())
print(tl.flush(timeout_s=20))
"""


def test_concurrent_asyncio_tasks_get_tracks_on_which_spans_nest(collector: CollectorProcess) -> None:
    done = run_client(_ASYNC, collector.tcp_address)
    assert done.returncode == 0 and done.stdout.split() == ["True"], done.stderr
    trace = collector.snapshot()
    spans = events(trace, "X")
    assert len(spans) == 41
    by_track: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for span in spans:
        by_track[(span["pid"], span["tid"])].append(span)
    # Every request and its db span share a track; no two spans on one track overlap without nesting.
    assert len({(s["pid"], s["tid"]) for s in spans if s["name"] == "request"}) == 20
    for track_spans in by_track.values():
        track_spans.sort(key=lambda s: (s["ts"], -s["dur"]))
        open_ends: list[float] = []
        for span in track_spans:
            while open_ends and open_ends[-1] <= span["ts"]:
                open_ends.pop()
            end = span["ts"] + span["dur"]
            assert not open_ends or end <= open_ends[-1] + 1e-3, f"{span} overlaps its parent"
            open_ends.append(end)
    names = metadata(trace, "thread_name")
    request_tracks = {(s["pid"], s["tid"]) for s in spans if s["name"] == "request"}
    assert all(names[track].startswith("MainThread tasks [") for track in request_tracks)


# -- 7. configuration ------------------------------------------------------------------------------------------------

_CONFIG = """
import json, sys, ringtrace.client
from ringtrace.client import ConfigError
results = {}
for name, call in [
    ("unit size", lambda: ringtrace.client.connect(sys.argv[1], max_queue_bytes="16MiB")),
    ("bad size", lambda: ringtrace.client.connect(sys.argv[1], max_queue_bytes="lots")),
    ("wrong type", lambda: ringtrace.client.connect(sys.argv[1], batch_interval_s="fast")),
    ("misspelled", lambda: ringtrace.client.connect(sys.argv[1], max_que_bytes=1)),
    ("scheme", lambda: ringtrace.client.connect("tcp://" + sys.argv[1])),
    ("http", lambda: ringtrace.client.connect("http://" + sys.argv[1])),
    ("space", lambda: ringtrace.client.connect(" " + sys.argv[1])),
]:
    try:
        call()
        results[name] = "ok"
    except ConfigError as exc:
        results[name] = str(exc)
tl = ringtrace.client.default_timeline()
tl.instant("x" * 1000)
results["flushed"] = tl.flush(timeout_s=20)
print(json.dumps(results))
"""


def test_bad_configuration_is_refused_naming_the_option_and_long_labels_show_their_cut(
    collector: CollectorProcess,
) -> None:
    done = run_client(_CONFIG, collector.tcp_address)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results["unit size"] == "ok" and results["flushed"] is True
    assert "max_queue_bytes" in results["bad size"] and "'lots'" in results["bad size"]
    assert "batch_interval_s" in results["wrong type"] and "number" in results["wrong type"]
    assert "'fast'" in results["wrong type"]
    assert "max_que_bytes" in results["misspelled"] and "max_queue_bytes" in results["misspelled"]
    for name in ("scheme", "http", "space"):
        assert "HOST:PORT" in results[name], results[name]
    (label,) = [e["name"] for e in events(collector.snapshot(), "i")]
    assert len(label) == MAX_STRING_CHARS and label.endswith("…") and label.startswith("xxx")


def test_more_threads_over_a_lifetime_than_the_collector_allows_tracks_at_once() -> None:
    collector = CollectorProcess("--max-tracks", "20")
    try:
        code = (
            "import json, sys, threading, ringtrace.client\n"
            "tl = ringtrace.client.connect(sys.argv[1])\n"
            "for i in range(200):\n"
            "    t = threading.Thread(target=tl.instant, args=('thr',), kwargs={'i': i})\n"
            "    t.start(); t.join()\n"
            "for i in range(100):\n"
            "    tl.instant('main', i=i)\n"
            "print(json.dumps({'flushed': tl.flush(timeout_s=20), 'connects': tl.listeners[0].connects}))\n"
        )
        done = run_client(code, collector.tcp_address)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"flushed": True, "connects": 1}
        names = [e["name"] for e in events(collector.snapshot(), "i")]
        assert names.count("thr") == 200 and names.count("main") == 100
    finally:
        collector.stop()


_CONNECT_AGAIN_IN_CHILD = """
import json, os, sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="parent")
tl.instant("parent-event")
assert tl.flush(timeout_s=20)
pid = os.fork()
if pid == 0:
    tl = ringtrace.client.connect(sys.argv[1], process_name="child")  # a Pool initializer under fork does this
    tl.instant("child-event")
    os._exit(0 if tl.flush(timeout_s=20) and len(tl.listeners) == 1 else 3)
_, status = os.waitpid(pid, 0)
print(json.dumps({"status": status, "child": pid}))
"""


def test_connect_again_in_a_forked_child_streams_each_event_once(collector: CollectorProcess) -> None:
    done = run_client(_CONNECT_AGAIN_IN_CHILD, collector.tcp_address)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == 0
    child_events = [e for e in events(collector.snapshot(), "i") if e["name"] == "child-event"]
    assert [e["pid"] for e in child_events] == [report["child"]]


_LANE_REUSED_ACROSS_A_RECONNECT = """
import asyncio, json, sys, ringtrace.client
from ringtrace.client import Streamer, StreamerOptions, Timeline

streamer = Streamer(sys.argv[1], StreamerOptions(process_name="lanes"))
tl = Timeline("lanes", [streamer])

async def main():
    async def first():
        tl.instant("first-task")
    await asyncio.create_task(first())
    assert not tl.flush(timeout_s=0.3)  # no collector yet: its lane ends while its frame is queued
    go = asyncio.Event()
    async def second():  # takes the same lane
        tl.instant("second-task-a")
        await go.wait()
        tl.instant("second-task-b")
    task = asyncio.create_task(second())
    await asyncio.sleep(0.01)
    print("waiting", flush=True)
    sys.stdin.readline()  # the test starts the collector
    first_flush = tl.flush(timeout_s=20)
    go.set()
    await task
    print(json.dumps({"flushes": [first_flush, tl.flush(timeout_s=20)], "connects": streamer.connects}), flush=True)

asyncio.run(main())
"""


def test_a_task_lane_reused_while_its_last_owner_s_frames_wait_for_a_collector_stays_declared() -> None:
    with collector_started_late(_LANE_REUSED_ACROSS_A_RECONNECT, "waiting") as (next_line, collector):
        assert json.loads(next_line()) == {"flushes": [True, True], "connects": 1}
        names = sorted(e["name"] for e in events(collector.snapshot(), "i"))
        assert names == ["first-task", "second-task-a", "second-task-b"]
        assert not any("closing connection" in line for line in collector.lines)
