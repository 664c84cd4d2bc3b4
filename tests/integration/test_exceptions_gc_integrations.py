"""The exceptions and gc integrations through a real collector: an uncaught exception (main thread, another thread, an
asyncio task) is an instant while the program's output and exit status are as without ringtrace; a garbage collection
is a span on the thread that collected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from collector_process import CollectorProcess, events, metadata
from launching import RINGTRACE, program_environment
from waiting import wait_for

#: Runs the program given after the collector's address, with ringtrace connected and every integration of this
#: helper applied when the address is not "-": the program's code and line numbers are the same either way.
RUNNER = """
import sys
if sys.argv[1] != "-":
    import ringtrace.client
    from ringtrace.client.integrations import apply
    tl = ringtrace.client.connect(sys.argv[1], process_name="crashy", exit_timeout_s=30)  # a busy machine: wait
    apply(tl, {"exceptions", "logging", "gc"})
exec(compile(sys.argv[2], "program.py", "exec"))
"""

MAIN_THREAD = """
def parse(text):
    return int(text)
parse("forty-two")
"""

OTHER_THREAD = """
import threading
def work():
    raise RuntimeError("worker gave up")
worker = threading.Thread(target=work, name="worker")
worker.start()
worker.join()
print("main goes on")
"""

ASYNCIO_TASK = """
import asyncio, gc
async def boom():
    raise LookupError("lost in a task")
async def main():
    task = asyncio.get_running_loop().create_task(boom(), name="doomed")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    del task
    gc.collect()  # the task goes with its exception never retrieved: asyncio says so
    print("main goes on")
asyncio.run(main())
"""


def run(address: str, program: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUNNER, address, program], capture_output=True, text=True, timeout=60, check=False
    )


def uncaught(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e["args"] for e in events(trace, "i") if e["name"] == "uncaught exception"]


@pytest.mark.parametrize(
    ("program", "returncode", "expected"),
    [
        (MAIN_THREAD, 1, {"type": "ValueError", "thread": "MainThread"}),
        (OTHER_THREAD, 0, {"type": "RuntimeError", "message": "worker gave up", "thread": "worker"}),
        (ASYNCIO_TASK, 0, {"type": "LookupError", "message": "lost in a task", "task": "doomed"}),
    ],
    ids=["main-thread", "thread", "asyncio-task"],
)
def test_an_uncaught_exception_is_an_instant_and_the_program_s_output_is_byte_identical(
    collector: CollectorProcess, program: str, returncode: int, expected: dict[str, str]
) -> None:
    plain, recorded = run("-", program), run(collector.tcp_address, program)
    assert plain.returncode == recorded.returncode == returncode
    assert (recorded.stdout, recorded.stderr) == (plain.stdout, plain.stderr)
    assert "Traceback" in plain.stderr
    (instant,) = uncaught(collector.snapshot())
    assert instant.items() >= expected.items()
    assert instant["message"] and instant["message"] in plain.stderr


def test_a_hook_the_program_set_runs_as_before_and_a_thread_s_system_exit_is_not_an_exception(
    collector: CollectorProcess,
) -> None:
    program = """
import sys, threading
sys.excepthook = lambda t, e, tb: print("program's hook:", t.__name__, e)
threading.Thread(target=sys.exit, args=(3,), name="quitter").start()
raise KeyError("k")
"""
    plain, recorded = run("-", program), run(collector.tcp_address, program)
    assert (recorded.returncode, recorded.stdout, recorded.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert plain.stdout == "program's hook: KeyError 'k'\n"
    # The program replaced the hook after ringtrace's was installed: its own runs, and the exception Python left in
    # sys is recorded at exit (once); the thread's SystemExit is not.
    assert uncaught(collector.snapshot()) == [{"type": "KeyError", "message": "'k'", "thread": "MainThread"}]


REPLACED_HOOK = """
import sys
def own_hook(exc_type, exc, tb):
    print("own hook:", exc_type.__name__, exc, flush=True)
sys.excepthook = own_hook
def handle():
    raise ValueError("not handled")
handle()
"""


def test_under_run_a_hook_the_program_set_later_still_leaves_the_instant(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    (tmp_path / "replaced.py").write_text(REPLACED_HOOK)
    environment = program_environment()
    plain = subprocess.run(
        [sys.executable, "replaced.py"], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=60
    )
    recorded = subprocess.run(
        [RINGTRACE, "run", "--collector", collector.tcp_address, "replaced.py"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (recorded.returncode, recorded.stdout, recorded.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert (plain.returncode, plain.stdout) == (1, "own hook: ValueError not handled\n")
    wait_for(
        lambda: uncaught(collector.snapshot()),
        timeout_s=60,
        what="the uncaught exception's instant",
        until=lambda found: found == [{"type": "ValueError", "message": "not handled", "thread": "MainThread"}],
    )


def test_an_exception_whose_str_fails_is_recorded_by_its_type_and_printed_as_before(
    collector: CollectorProcess,
) -> None:
    program = """
class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")
raise Unprintable()
"""
    plain, recorded = run("-", program), run(collector.tcp_address, program)
    assert (recorded.returncode, recorded.stdout, recorded.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert "Unprintable" in plain.stderr
    assert uncaught(collector.snapshot()) == [
        {"type": "__main__.Unprintable", "message": "<Unprintable whose str() failed>", "thread": "MainThread"}
    ]


GC = """
import gc, threading
gc.collect()
threading.Thread(target=gc.collect, args=(1,), name="sweeper").start()
"""


def test_a_garbage_collection_is_a_span_on_the_thread_that_collected(collector: CollectorProcess) -> None:
    recorded = run(collector.tcp_address, GC)
    assert recorded.returncode == 0, recorded.stderr
    trace = collector.snapshot()
    threads = metadata(trace, "thread_name")
    spans = [(threads[(e["pid"], e["tid"])], e["args"]) for e in events(trace, "X") if e["name"] == "gc"]
    assert ("MainThread", 2) in [(thread, args["generation"]) for thread, args in spans]
    assert ("sweeper", 1) in [(thread, args["generation"]) for thread, args in spans]
    assert all(args["collected"] >= 0 and args["uncollectable"] >= 0 for _, args in spans)
