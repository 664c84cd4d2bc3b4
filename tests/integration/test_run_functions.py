"""``ringtrace run --functions``: a script with a known call tree, run against a real collector, is in its snapshot as
spans of kind call (call_raised where an exception left), nested as called, on their threads' tracks; the standard
library's calls are not there unless asked for; ``--include``, ``--exclude`` and ``--min-duration`` choose which;
the pure-Python tracer gives the same tree; the fleet switch traces too; a bad value is one line and status 2; each
asyncio task's calls nest on its own lane, the one its scopes are on.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from collector_process import CollectorProcess
from launching import RINGTRACE, program_environment, run
from ringtrace.client import DecodedEvent, read_trace_streams
from waiting import wait_for

SCRIPT = """
import json
import threading
import time

import helpers


def leaf(x):
    return x + 1


def branch(n):
    total = 0
    for i in range(n):
        total += leaf(i)
    return total


def fails():
    raise ValueError("no")


def catches():
    try:
        fails()
    except ValueError:
        pass


def slow():
    time.sleep(0.03)


def main():
    branch(2)
    catches()
    json.dumps({"a": 1})
    helpers.helper()
    slow()
    worker = threading.Thread(target=branch, args=(1,), name="worker")
    worker.start()
    worker.join()


main()
"""
HELPERS = """
def helper():
    return 1
"""

#: (name, raised, children): the calls of the main thread, and of the worker.
MAIN_TREE = [
    (
        "<module>",
        False,
        [
            ("<module>", False, []),  # helpers', imported
            (
                "main",
                False,
                [
                    ("branch", False, [("leaf", False, []), ("leaf", False, [])]),
                    ("catches", False, [("fails", True, [])]),
                    ("helper", False, []),
                    ("slow", False, []),
                ],
            ),
        ],
    )
]
WORKER_TREE = [("branch", False, [("leaf", False, [])])]


@pytest.fixture
def program(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    (tmp_path / "helpers.py").write_text(textwrap.dedent(HELPERS), encoding="utf-8")
    return tmp_path


def traced_calls(
    collector: CollectorProcess, program: Path, name: str, *flags: str, last: str = "main", **env: str
) -> list[DecodedEvent]:
    """Run ``app.py`` under ``ringtrace run --functions FLAGS`` as process ``name``; its calls in the collector, once
    it has the call named ``last`` and the script's ``<module>`` around it."""
    done = run(
        [RINGTRACE, "run", "--collector", collector.tcp_address, "--process-name", name, "--sample-hz", "0",
         "--functions", *flags, "app.py"],
        program,
        program_environment(**env),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return calls_of(collector, program, name, last)


def calls_of(
    collector: CollectorProcess, program: Path, name: str, last: str = "main", said: str = ""
) -> list[DecodedEvent]:
    """The calls process ``name`` recorded, once the collector has the call named ``last`` and a ``<module>`` that
    ends after it (the script's, which ends last); ``said``: what the program wrote on stderr, for a failure."""

    def calls() -> list[DecodedEvent]:
        snapshot = program / f"{name}.rtsnap"
        status, body = collector.get("/snapshot?format=native")
        assert status == 200
        snapshot.write_bytes(body)
        streams = [s for s in read_trace_streams(snapshot) if s.hello is not None and s.hello.process_name == name]
        return [e for s in streams for e in s.events if e.kind in ("call", "call_raised")]

    def complete(found: list[DecodedEvent]) -> bool:
        ends = [e.ts_ns + e.dur_ns for e in found if e.name == last]
        if last == "helper":  # (traced alone: nothing around it)
            return bool(ends)
        return bool(ends) and any(e.name == "<module>" and e.ts_ns + e.dur_ns >= max(ends) for e in found)

    explain = (lambda: f"the program's stderr:\n{said}") if said else None
    return wait_for(calls, timeout_s=60, what=f"the calls of {name}", until=complete, explain=explain)


def trees(calls: list[DecodedEvent]) -> dict[str, list[Any]]:
    """Each track's calls (by its name) nested by time: (name, raised, children)."""
    by_track: dict[str, list[DecodedEvent]] = {}
    for event in calls:
        by_track.setdefault(event.track.name, []).append(event)
    found = {}
    for track, events in by_track.items():
        roots: list[Any] = []
        open_calls: list[tuple[int, list[Any]]] = []  # (end, children) of the calls that hold the next ones
        for event in sorted(events, key=lambda e: (e.ts_ns, -e.dur_ns)):
            while open_calls and event.ts_ns >= open_calls[-1][0]:
                open_calls.pop()
            node: tuple[str, bool, list[Any]] = (event.name, event.kind == "call_raised", [])
            (open_calls[-1][1] if open_calls else roots).append(node)
            open_calls.append((event.ts_ns + event.dur_ns, node[2]))
        found[track] = roots
    return found


def test_every_call_of_the_scripts_code_is_a_span_and_none_of_the_standard_librarys(
    collector: CollectorProcess, program: Path
) -> None:
    found = trees(traced_calls(collector, program, "traced"))
    assert found == {"MainThread": MAIN_TREE, "worker": WORKER_TREE}  # no json, threading or time in it


def test_the_pure_python_tracer_gives_the_same_tree(collector: CollectorProcess, program: Path) -> None:
    found = trees(traced_calls(collector, program, "pure", RINGTRACE_PURE_PYTHON="1"))
    assert found == {"MainThread": MAIN_TREE, "worker": WORKER_TREE}


def test_include_and_exclude_choose_modules(collector: CollectorProcess, program: Path) -> None:
    only_helpers = traced_calls(
        collector, program, "include", "--include", "helpers", "--include", "nothing.*", last="helper"
    )
    assert {e.name for e in only_helpers} == {"<module>", "helper"}  # helpers' module code ran at its import
    without_helpers = trees(traced_calls(collector, program, "exclude", "--exclude", "help*"))
    main_calls = without_helpers["MainThread"][0][2][0][2]  # <module>, its first call: main
    assert [name for name, _, _ in main_calls] == ["branch", "catches", "slow"]


def test_min_duration_leaves_out_short_calls(collector: CollectorProcess, program: Path) -> None:
    found = trees(traced_calls(collector, program, "slow-only", "--min-duration", "20ms", last="slow"))
    assert found == {"MainThread": [("<module>", False, [("main", False, [("slow", False, [])])])]}


def test_library_code_is_traced_when_asked_for(collector: CollectorProcess, program: Path) -> None:
    names = {e.name for e in traced_calls(collector, program, "library", "--library")}
    assert {"dumps", "Thread.start", "leaf"} <= names
    assert not any(name.startswith(("Streamer", "Flusher", "Timeline")) for name in names)  # never ringtrace's


def test_the_fleet_switch_traces_functions(collector: CollectorProcess, program: Path) -> None:
    environment = program_environment(
        RINGTRACE_AUTO="1",
        RINGTRACE_COLLECTOR=collector.tcp_address,
        RINGTRACE_PROCESS_NAME="fleet",
        RINGTRACE_SAMPLE_HZ="0",
        RINGTRACE_FUNCTIONS="1",
        RINGTRACE_FUNCTIONS_INCLUDE="__main__",
    )
    done = run([sys.executable, "app.py"], program, environment)
    assert done.returncode == 0, done.stderr
    found = trees(calls_of(collector, program, "fleet"))
    assert set(found) == {"MainThread", "worker"}, found
    ((module, _, (main,)),) = found["MainThread"]  # not helpers' code: only __main__'s
    assert (module, main[0]) == ("<module>", "main")
    assert [name for name, _, _ in main[2]] == ["branch", "catches", "slow"]
    assert found["worker"] == WORKER_TREE


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--min-duration", "5"], "--min-duration takes a duration"),
        (["--max-depth", "deep"], "--max-depth takes a number of calls"),
    ],
)
def test_a_bad_value_is_one_line_and_status_2(program: Path, flags: list[str], said: str) -> None:
    done = run([RINGTRACE, "run", "--collector", "127.0.0.1:9", "--functions", *flags, "app.py"], program, {})
    assert done.returncode == 2
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_chrome_spans_of_calls_carry_their_file_and_line(collector: CollectorProcess, program: Path) -> None:
    traced_calls(collector, program, "chrome")
    trace = collector.snapshot()
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"] in ("leaf", "fails")]
    assert spans and all(e.get("cat", "").startswith("call") for e in spans)
    leaf = next(e for e in spans if e["name"] == "leaf")
    line = next(i for i, text in enumerate(textwrap.dedent(SCRIPT).splitlines(), 1) if text.startswith("def leaf"))
    assert leaf["args"] == {"file": str(program / "app.py"), "line": line}


ASYNC_SCRIPT = """
import asyncio

import ringtrace.client


def leaf():
    return 1


async def pause():
    await asyncio.sleep(0.02)
    return leaf()


async def worker(name):
    with ringtrace.client.default_timeline().scope(name):
        leaf()
        await pause()
        await pause()


async def main():
    await asyncio.gather(worker("a"), worker("b"))


asyncio.run(main())
"""
#: A worker task's calls, one tree a step: it began, and ran until each await of its pauses' sleeps suspended it.
WORKER_STEPS = [
    ("worker", False, [("leaf", False, []), ("pause", False, [])]),
    ("worker", False, [("pause", False, [("leaf", False, [])]), ("pause", False, [])]),
    ("worker", False, [("pause", False, [("leaf", False, [])])]),
]


@pytest.mark.parametrize("pure_python", ["1", ""])
def test_the_calls_of_each_asyncio_task_nest_on_its_own_lane(
    collector: CollectorProcess, tmp_path: Path, pure_python: str
) -> None:
    (tmp_path / "app.py").write_text(textwrap.dedent(ASYNC_SCRIPT), encoding="utf-8")
    name = f"tasks-{'pure' if pure_python else 'c'}"
    calls = traced_calls(collector, tmp_path, name, RINGTRACE_PURE_PYTHON=pure_python)
    found = trees(calls)
    assert found.pop("MainThread") == [("<module>", False, [])]  # asyncio.run's tasks ran every other call
    lanes = sorted(found.values(), key=len)
    assert lanes == [[("main", False, []), ("main", False, [])], WORKER_STEPS, WORKER_STEPS], found
    status, body = collector.get("/snapshot?format=native")
    assert status == 200
    (tmp_path / "scopes.rtsnap").write_bytes(body)
    streams = [s for s in read_trace_streams(tmp_path / "scopes.rtsnap") if s.hello and s.hello.process_name == name]
    scopes = {e.name: e.track.name for s in streams for e in s.events if e.name in ("a", "b")}
    assert set(scopes) == {"a", "b"} and scopes["a"] != scopes["b"]
    assert found[scopes["a"]] == found[scopes["b"]] == WORKER_STEPS  # the lane each task's scope is on


EXIT_SCRIPT = """
import sys


def finish(code):
    sys.exit(code)


def main():
    finish(CODE)


main()
"""


@pytest.mark.parametrize("code", [0, 3])
@pytest.mark.parametrize("pure_python", ["1", ""])
def test_a_program_that_exits_with_status_0_raised_nothing(
    collector: CollectorProcess, tmp_path: Path, code: int, pure_python: str
) -> None:
    (tmp_path / "app.py").write_text(textwrap.dedent(EXIT_SCRIPT).replace("CODE", str(code)), encoding="utf-8")
    name = f"exit-{code}-{'pure' if pure_python else 'c'}"
    done = run(
        [RINGTRACE, "run", "--collector", collector.tcp_address, "--process-name", name, "--sample-hz", "0",
         "--functions", "app.py"],
        tmp_path,
        program_environment(RINGTRACE_PURE_PYTHON=pure_python),
    )  # fmt: skip
    assert done.returncode == code, done.stderr
    # (3.11's profile function, which the pure-Python tracer uses there, is not shown the exception: all raised)
    raised = code != 0 or (pure_python == "1" and sys.version_info < (3, 12))
    found = trees(calls_of(collector, tmp_path, name))
    assert found == {"MainThread": [("<module>", raised, [("main", raised, [("finish", raised, [])])])]}
