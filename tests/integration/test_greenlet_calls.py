"""Function tracing of a greenlet program, against a real collector: each greenlet's calls nest on a lane of their
own under the thread (the main greenlet's on the thread's track), whole across the switches made inside them, with
no span overlapping another on any track; a greenlet that dies of an exception ends its calls raised, one killed
never resumed (GreenletExit, as it goes) too, one still suspended at exit ends them there; gevent's greenlets each
on a lane; the C tracer and the pure-Python one give the same trees.
"""

from __future__ import annotations

import re
import socket
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from collector_process import CollectorProcess
from launching import RINGTRACE, program_environment, run
from perfetto_model import PerfettoTrace
from ringtrace.client import DecodedEvent
from test_run_functions import calls_of, traced_calls, trees

pytest.importorskip("greenlet")

SCRIPT = """
import greenlet

MAIN = greenlet.getcurrent()


def leaf():
    return 1


def pause():
    return MAIN.switch()


def step():
    leaf()
    pause()
    leaf()


def worker():
    step()
    step()


def failing():
    step()
    raise ValueError("no")


def forgotten():
    step()


def main():
    a, b = greenlet.greenlet(worker), greenlet.greenlet(worker)
    a.switch()
    b.switch()
    leaf()
    a.switch()
    b.switch()
    a.switch()
    b.switch()
    f = greenlet.greenlet(failing)
    f.switch()
    try:
        f.switch()
    except ValueError:
        leaf()
    killed = greenlet.greenlet(forgotten)
    killed.switch()
    del killed  # never resumed: killed as it goes (GreenletExit thrown in)
    kept = greenlet.greenlet(forgotten)
    kept.switch()
    return kept  # never resumed: suspended still at exit


KEPT = main()
"""

STEP = ("step", False, [("leaf", False, []), ("pause", False, []), ("leaf", False, [])])
STEP_KILLED = ("step", True, [("leaf", False, []), ("pause", True, [])])
STEP_AT_EXIT = ("step", False, [("leaf", False, []), ("pause", False, [])])
MAIN_TREE = [
    (
        "<module>",
        False,
        [("main", False, [("leaf", False, []), ("leaf", False, [])])],
    )
]
#: Each greenlet's tree, on the lanes (in no order: which lane each takes depends on the flusher's passes).
GREENLET_TREES = sorted(
    [
        ("worker", False, [STEP, STEP]),
        ("worker", False, [STEP, STEP]),
        ("failing", True, [STEP]),
        ("forgotten", True, [STEP_KILLED]),
        ("forgotten", False, [STEP_AT_EXIT]),
    ],
    key=repr,
)


def overlapping(calls: list[DecodedEvent]) -> list[tuple[str, str, str]]:
    """Pairs of calls on one track that overlap without one holding the other: (track, name, name)."""
    found = []
    by_track: dict[str, list[DecodedEvent]] = {}
    for event in calls:
        by_track.setdefault(event.track.name, []).append(event)
    for track, events in by_track.items():
        open_calls: list[DecodedEvent] = []
        for event in sorted(events, key=lambda e: (e.ts_ns, -e.dur_ns)):
            while open_calls and event.ts_ns >= open_calls[-1].ts_ns + open_calls[-1].dur_ns:
                open_calls.pop()
            if open_calls and event.ts_ns + event.dur_ns > open_calls[-1].ts_ns + open_calls[-1].dur_ns:
                found.append((track, open_calls[-1].name, event.name))
            open_calls.append(event)
    return found


@pytest.mark.parametrize("pure_python", ["1", ""])
def test_each_greenlets_calls_nest_on_a_lane_of_their_own(
    collector: CollectorProcess, tmp_path: Path, pure_python: str
) -> None:
    (tmp_path / "app.py").write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    name = f"greenlets-{'pure' if pure_python else 'c'}"
    calls = traced_calls(collector, tmp_path, name, RINGTRACE_PURE_PYTHON=pure_python)
    assert overlapping(calls) == []
    found: dict[str, list[Any]] = trees(calls)
    assert found.pop("MainThread") == MAIN_TREE, found
    assert all(track.startswith("MainThread greenlets [") for track in found), found
    assert sorted((tree for lane in found.values() for tree in lane), key=repr) == GREENLET_TREES, found
    # In Perfetto: each lane a track of the thread's, every slice ended where it began, nested as the calls were.
    status, body = collector.get(f"/snapshot?format=perfetto&process={name}")
    assert status == 200
    perfetto = PerfettoTrace(body)
    (thread,) = [t for t in perfetto.tracks.values() if t.kind == "thread" and t.name == "MainThread"]
    lanes = {t.uuid for t in perfetto.tracks.values() if t.name.startswith("MainThread greenlets [")}
    assert len(lanes) >= 2 and all(perfetto.tracks[uuid].parent == thread.uuid for uuid in lanes)
    assert perfetto.unmatched_ends == []
    slices = [s for s in perfetto.slices if {"call", "call_raised"} & set(s.categories)]
    assert len(slices) == len(calls) and all(s.track in lanes | {thread.uuid} and s.end_ns for s in slices)
    assert [s.depth for s in slices if s.name == "pause"] == [2] * 7  # under a greenlet's function and its step


GEVENT_SCRIPT = """
from gevent import monkey

monkey.patch_all()

import gevent


def leaf():
    return 1


def wait():
    gevent.sleep(0.06)  # (past the flusher's interval: each greenlet's calls cross its passes)


def step():
    leaf()
    wait()
    leaf()


def work():
    step()
    step()


def main():
    gevent.joinall([gevent.spawn(work), gevent.spawn(work), gevent.spawn(work)])
    leaf()


main()
"""
GEVENT_STEP = ("step", False, [("leaf", False, []), ("wait", False, []), ("leaf", False, [])])
_PATCH = "from gevent import monkey\n\nmonkey.patch_all()\n"


def on_the_main_thread_s_lanes(found: dict[str, list[Any]]) -> None:
    """``GEVENT_SCRIPT``'s calls, by track: its module's on ``MainThread`` and each greenlet's on a lane of it, named
    after the main thread (gevent's patch keys it by its main greenlet's id: its calls went to a track named after its
    OS ident, made anew at each drain, whose lanes the greenlets then took in turn)."""
    assert found.pop("MainThread") == [("<module>", False, [("main", False, [("leaf", False, [])])])], found
    assert all(track.startswith("MainThread greenlets [") for track in found), found
    assert list(found.values()) == [[("work", False, [GEVENT_STEP, GEVENT_STEP])]] * 3, found


@pytest.mark.parametrize("pure_python", ["1", ""])
def test_gevents_greenlets_each_have_their_calls_on_a_lane(
    collector: CollectorProcess, tmp_path: Path, pure_python: str
) -> None:
    pytest.importorskip("gevent")
    # The program patches threading once ringtrace's threads run (ringtrace run connects at interpreter start): it
    # ends as it should, with none of ringtrace's threads failing as they end (each asked gevent's patched get_ident
    # which thread it was, and the greenlet state that gave them crashed the program at exit), its calls delivered.
    (tmp_path / "app.py").write_text(textwrap.dedent(GEVENT_SCRIPT), encoding="utf-8")
    name = f"gevent-{'pure' if pure_python else 'c'}"
    done = run(
        [RINGTRACE, "run", "--collector", collector.tcp_address, "--process-name", name, "--functions", "app.py"],
        tmp_path,
        program_environment(RINGTRACE_PURE_PYTHON=pure_python),
    )
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    calls = calls_of(collector, tmp_path, name, said=done.stderr)
    assert overlapping(calls) == []
    on_the_main_thread_s_lanes(trees(calls))


TRACED_AFTER_THE_PATCH = """
from gevent import monkey

monkey.patch_all()

import sys

import ringtrace.client

tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
tracing = ringtrace.client.trace_functions(include=["work"])
tracing.start()
import work  # (its calls from its <module> on: the gevent program above, unpatched)

tracing.stop()
assert tl.flush(timeout_s=30)
"""


@pytest.mark.parametrize("pure_python", ["1", ""])
def test_greenlets_calls_traced_from_the_program_once_gevent_patched_are_on_the_main_thread_s_lanes(
    collector: CollectorProcess, tmp_path: Path, pure_python: str
) -> None:
    pytest.importorskip("gevent")
    # Function tracing started by the program after the patch: the main thread was known by its main greenlet's id
    # then, and the pure-Python tracer kept calls per greenlet (gevent's threading.local, its get_ident): every
    # greenlet's calls went to a track named after an ident ("thread 0x..."), none to MainThread's lanes.
    (tmp_path / "app.py").write_text(textwrap.dedent(TRACED_AFTER_THE_PATCH), encoding="utf-8")
    assert _PATCH in textwrap.dedent(GEVENT_SCRIPT)
    (tmp_path / "work.py").write_text(textwrap.dedent(GEVENT_SCRIPT).replace(_PATCH, ""), encoding="utf-8")
    name = f"gevent-after-{'pure' if pure_python else 'c'}"
    environment = program_environment(RINGTRACE_PURE_PYTHON=pure_python)
    done = run([sys.executable, "app.py", collector.tcp_address, name], tmp_path, environment)
    assert done.returncode == 0, done.stderr
    on_the_main_thread_s_lanes(trees(calls_of(collector, tmp_path, name, said=done.stderr)))


SAMPLED_SCRIPT = """
from gevent import monkey

monkey.patch_all()

import _thread
import time

from ringtrace.client.sampling import start_sampler

sampler = start_sampler()  # (ringtrace run's, sampling since the interpreter started)
patched_sleep = time.sleep
sleepers = set()


def counted_sleep(seconds):
    sleepers.add(_thread.get_native_id())  # (the OS thread's: gevent does not patch it)
    patched_sleep(seconds)


time.sleep = counted_sleep
first, deadline, total = sampler.passes, time.monotonic() + 60, 0
while sampler.passes < first + 20 and time.monotonic() < deadline:
    total += sum(range(1000))
time.sleep = patched_sleep
print(sampler.passes - first >= 20, sorted(sleepers - {_thread.get_native_id()}))
"""


@pytest.mark.parametrize("pure_python", ["1", ""])
def test_the_sampler_sleeps_between_passes_on_the_interpreter_s_sleep_once_gevent_patched(
    collector: CollectorProcess, tmp_path: Path, pure_python: str
) -> None:
    pytest.importorskip("gevent")
    # The pure-Python loop slept with ``time.sleep``, gevent's once patched: each sleep ran a hub of its own in the
    # sampler's OS thread, whose start could recurse through the import lock (patched too) until a RecursionError.
    (tmp_path / "app.py").write_text(textwrap.dedent(SAMPLED_SCRIPT), encoding="utf-8")
    argv = [RINGTRACE, "run", "--collector", collector.tcp_address, "--sample-hz", "200", "app.py"]
    done = run(argv, tmp_path, program_environment(RINGTRACE_PURE_PYTHON=pure_python))
    assert (done.returncode, done.stdout) == (0, "True []\n"), done.stderr
    assert "Traceback" not in done.stderr and "failed" not in done.stderr, done.stderr


HOT_SCRIPT = """
from gevent import monkey

monkey.patch_all()

import time

from ringtrace.client.sampling import start_sampler

sampler = start_sampler()  # (ringtrace run's, sampling since the interpreter started)


def hot():
    return sum(i * i for i in range(2000))


first, deadline = sampler.passes, time.monotonic() + 60
while sampler.passes < first + 30 and time.monotonic() < deadline:
    hot()
print(sampler.passes - first >= 30)
"""


@pytest.mark.parametrize("pure_python", ["1", ""])
def test_the_main_thread_is_sampled_once_gevent_patched(
    collector: CollectorProcess, tmp_path: Path, pure_python: str
) -> None:
    pytest.importorskip("gevent")
    # gevent's patch keys the main thread by its main greenlet's id in threading's table: the sampler, which meets
    # threads by their OS ident there, took it for one threading did not know, and sampled it no more.
    (tmp_path / "app.py").write_text(textwrap.dedent(HOT_SCRIPT), encoding="utf-8")
    name = f"gevent-hot-{'pure' if pure_python else 'c'}"
    argv = [RINGTRACE, "run", "--collector", collector.tcp_address, "--process-name", name, "app.py"]
    done = run(
        [*argv[:2], "--sample-hz", "200", *argv[2:]], tmp_path, program_environment(RINGTRACE_PURE_PYTHON=pure_python)
    )
    assert (done.returncode, done.stdout) == (0, "True\n"), done.stderr
    document = collector.snapshot(f"?process={name}")
    samples = [event for event in document["traceEvents"] if event["ph"] == "P"]
    leaves = Counter(document["stackFrames"][str(sample["sf"])]["name"] for sample in samples)
    in_hot = sum(count for leaf, count in leaves.items() if leaf == "hot" or leaf.startswith("hot."))
    assert in_hot >= 20, leaves  # (30 passes and more in it, but a few in the loop)
    threads = {event["tid"] for event in samples}
    assert len(threads) == 1, threads  # the main thread's one track, before the patch and after


UNREACHABLE_SCRIPT = """
from gevent import monkey

monkey.patch_all()

import _thread
import logging
import sys
import time

import gevent

MAIN = _thread.get_native_id()  # (the OS thread's: gevent does not patch it)
handled_in = []


class Seen(logging.Handler):  # (its lock gevent's: made once patched)
    def emit(self, record):
        if record.name.startswith("ringtrace"):
            handled_in.append(_thread.get_native_id())


class Captured:
    def __init__(self, stream):
        self.stream, self.text = stream, []

    def write(self, text):
        self.text.append(text)
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()


logging.getLogger().addHandler(Seen())
sys.stderr = Captured(sys.stderr)
logging.getLogger("app").warning("a first event")  # (the streamer starts, and finds no collector)
deadline = time.monotonic() + 60
while "cannot reach the collector" not in "".join(sys.stderr.text) and time.monotonic() < deadline:
    gevent.sleep(0.05)
warned = "cannot reach the collector" in "".join(sys.stderr.text)
print(warned, sorted(set(handled_in) - {MAIN}))
"""


def test_ringtrace_s_threads_log_past_the_program_s_handlers_once_gevent_patched(tmp_path: Path) -> None:
    pytest.importorskip("gevent")
    # The streamer's warning that the collector is down went through the program's handler, whose lock gevent's
    # patched threading made: taken from the streamer's OS thread it started a hub there, and the program died of
    # gevent's LoopExit or hung (a collector started late or restarted). Now it is written to stderr, at once.
    (tmp_path / "app.py").write_text(textwrap.dedent(UNREACHABLE_SCRIPT), encoding="utf-8")
    with socket.socket() as probe:  # (a port nothing listens on)
        probe.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{probe.getsockname()[1]}"
    done = run(
        [RINGTRACE, "run", "--collector", nowhere, "--exit-timeout", "1", "app.py"], tmp_path, program_environment()
    )
    assert (done.returncode, done.stdout) == (0, "True []\n"), done.stderr
    assert "Traceback" not in done.stderr and "LoopExit" not in done.stderr, done.stderr


SUBPROCESS_SCRIPT = """
from gevent import monkey

monkey.patch_all()

import subprocess
import sys

done = subprocess.run([sys.executable, "-c", "print('child')"], capture_output=True, text=True, timeout=60)
print(done.stdout.strip())
"""


def test_a_gevent_program_runs_a_subprocess(collector: CollectorProcess, tmp_path: Path) -> None:
    pytest.importorskip("gevent")
    # The forked child, before its exec, started the sampler again as a greenlet (threading patched), whose passes
    # never let gevent's hub run: the child never reached its exec, and the program's subprocess.run hung.
    (tmp_path / "app.py").write_text(textwrap.dedent(SUBPROCESS_SCRIPT), encoding="utf-8")
    # And the child's fork hook started no thread of ours before gevent's own ran (whose assertion then failed).
    done = run([RINGTRACE, "run", "--collector", collector.tcp_address, "app.py"], tmp_path, program_environment())
    assert (done.returncode, done.stdout) == (0, "child\n"), done.stderr
    stderr = _GEVENT_ON_313.sub("", done.stderr)
    assert "Exception ignored" not in stderr and "Traceback" not in stderr, done.stderr


#: gevent 26.9's own fork hook on Python 3.13.0, in a child forked where a thread started before the patch is alive,
#: under plain python too (``_ThreadHandle._set_done`` takes no keyword there): not ringtrace's.
_GEVENT_ON_313 = re.compile(
    r"Exception ignored in: <bound method _ForkHooks\.after_fork_in_child[^\n]*\n(?:[ \t].*\n|Traceback.*\n)*"
    r"TypeError: _ThreadHandle\._set_done\(\) takes no keyword arguments\n"
)


FORK_SCRIPT = """
from gevent import monkey

monkey.patch_all()

import logging
import os
import signal
import threading
import time

import gevent

pid = os.fork()
if pid == 0:
    logging.getLogger("app").warning("in the child")  # its first event: the flusher starts, a greenlet now
    deadline = time.monotonic() + 60
    while not any(t.name == "ringtrace-flusher" for t in threading.enumerate()) and time.monotonic() < deadline:
        gevent.sleep(0.01)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    wanted = {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}
    print("flusher", any(t.name == "ringtrace-flusher" for t in threading.enumerate()), flush=True)
    print("blocked", sorted(s.name for s in blocked & wanted), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_our_greenlets_leave_the_programs_signals_alone(collector: CollectorProcess, tmp_path: Path) -> None:
    pytest.importorskip("gevent")
    # A background thread started once gevent patched threading is a greenlet in the program's thread: blocking the
    # program's signals there blocked them for the program (SIGTERM and SIGINT no longer ended it).
    (tmp_path / "app.py").write_text(textwrap.dedent(FORK_SCRIPT), encoding="utf-8")
    argv = [RINGTRACE, "run", "--collector", collector.tcp_address, "--sample-hz", "0", "app.py"]
    done = run(argv, tmp_path, program_environment())
    assert (done.returncode, done.stdout) == (0, "flusher True\nblocked []\n"), done.stderr
