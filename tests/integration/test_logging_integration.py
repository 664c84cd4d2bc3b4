"""The logging integration through a real collector: a program's log records become messages at the priority of their
level; by default those the program's levels let through, and while the timeline's priority is past info
(``POST /priority``, ``set_priority``) those of the more detailed levels the program leaves out too; the program's own
output does not change."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from collector_process import CollectorProcess, events, metadata
from waiting import wait_for

#: Runs the program given after the collector's address, with ringtrace connected and the logging integration applied
#: when the address is not "-" (its timeline at the priority LOGS_PRIORITY names, if set): the program's code and line
#: numbers are the same either way.
RUNNER = """
import os, sys
if sys.argv[1] != "-":
    import ringtrace.client
    from ringtrace.client.integrations import apply
    tl = ringtrace.client.connect(sys.argv[1], process_name="logs", exit_timeout_s=30)  # a busy machine: wait
    apply(tl, {"logging"})
    apply(tl, {"logging"})  # idempotent: each record is still recorded once
    if os.environ.get("LOGS_PRIORITY"):
        tl.set_priority(os.environ["LOGS_PRIORITY"])
exec(compile(sys.argv[2], "program.py", "exec"))
"""

LOGS = """
import logging
app, db = logging.getLogger("app"), logging.getLogger("app.db")
logging.addLevelName(5, "TRACE")
logging.addLevelName(25, "NOTICE")
app.critical("disk %s full", "/data")
db.error("lost %d rows", 3)
app.warning("slow")
db.info("connected to %s", "db1")
app.log(25, "notice me")
db.debug("query took %d ms", 12)
app.log(5, "byte %d", 1)
try:
    {}["missing"]
except KeyError:
    db.exception("lookup failed")
logging.getLogger("ringtrace.own").warning("ringtrace's own")
print("done")
"""


def run(address: str, program: str, *priority: str) -> subprocess.CompletedProcess[str]:
    """``program`` run with ringtrace connected to ``address`` ("-": without ringtrace), its timeline at ``priority``
    (when given) from the start."""
    env = {**os.environ, "LOGS_PRIORITY": "".join(priority)}
    return subprocess.run(
        [sys.executable, "-c", RUNNER, address, program],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def messages(trace: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(category, priority, rendered message) of each message in a snapshot, in time order."""
    shown = sorted((e for e in events(trace, "i") if "priority" in e["args"]), key=lambda e: e["ts"])
    return [(e["cat"], e["args"]["priority"], e["args"]["message"]) for e in shown]


def test_log_records_become_messages_at_their_level_s_priority_and_the_output_is_unchanged(
    collector: CollectorProcess,
) -> None:
    plain, recorded = run("-", LOGS), run(collector.tcp_address, LOGS)
    assert plain.returncode == recorded.returncode == 0, recorded.stderr
    assert (recorded.stdout, recorded.stderr) == (plain.stdout, plain.stderr)
    assert "disk /data full" in plain.stderr and "connected" not in plain.stderr  # logging's default: warnings on
    trace = collector.snapshot("?flush_timeout_s=5")
    # The timeline's priority is info, its default: what the program's levels (WARNING) let through, no more.
    assert messages(trace) == [
        ("app", "fatal", "disk /data full"),
        ("app.db", "error", "lost 3 rows"),
        ("app", "warning", "slow"),
        ("app.db", "error", "lookup failed"),
    ]
    failed = next(e for e in events(trace, "i") if e["args"].get("message") == "lookup failed")
    assert failed["args"]["exception"] == "KeyError" and failed["args"]["exception_text"] == "'missing'"
    # A record shows as its own text, as the program would print it.
    assert failed["name"] == "lookup failed (KeyError: 'missing')"
    assert next(e for e in events(trace, "i") if e["args"].get("message") == "slow")["name"] == "slow"


def test_past_info_the_records_the_program_s_levels_leave_out_are_recorded_too_and_the_output_is_unchanged(
    collector: CollectorProcess,
) -> None:
    plain, recorded = run("-", LOGS), run(collector.tcp_address, LOGS, "debug")
    assert plain.returncode == recorded.returncode == 0, recorded.stderr
    assert (recorded.stdout, recorded.stderr) == (plain.stdout, plain.stderr)
    # The timeline's priority is debug: info and debug records too, though the program prints neither; not trace.
    assert messages(collector.snapshot("?flush_timeout_s=5")) == [
        ("app", "fatal", "disk /data full"),
        ("app.db", "error", "lost 3 rows"),
        ("app", "warning", "slow"),
        ("app.db", "info", "connected to db1"),
        ("app", "info", "notice me"),
        ("app.db", "debug", "query took 12 ms"),
        ("app.db", "error", "lookup failed"),
    ]


#: Logs a debug and an info record every 10 ms, its logger at INFO (so it writes no debug to its log file, the third
#: argument), and prints the timeline's priority whenever it changes, with the step it changed at.
CHATTY = """
import logging, sys, time
logging.basicConfig(level=logging.INFO, filename=sys.argv[3], format="%(levelname)s %(message)s")
log = logging.getLogger("chatty")
shown = None
deadline = time.monotonic() + 60
n = 0
while time.monotonic() < deadline:
    if tl.priority != shown:
        shown = tl.priority
        print("priority", shown, n, flush=True)
    log.debug("step %d", n)
    log.info("tick %d", n)
    n += 1
    time.sleep(0.01)
"""


def test_post_priority_turns_debug_records_on_and_off(collector: CollectorProcess, tmp_path: Path) -> None:
    log_file = tmp_path / "chatty.log"
    chatty = subprocess.Popen(
        [sys.executable, "-c", RUNNER, collector.tcp_address, CHATTY, str(log_file)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert chatty.stdout is not None

        def priority_line() -> tuple[str, int]:
            line = chatty.stdout.readline()  # type: ignore[union-attr]
            assert line.startswith("priority "), f"the program ended: {line!r}"
            _, priority, step = line.split()
            return priority, int(step)

        assert priority_line()[0] == "info"

        def stored(query: str) -> list[tuple[str, str, str]]:
            return messages(collector.snapshot(f"?category=chatty&flush_timeout_s=5{query}"))

        wait_for(lambda: stored(""), timeout_s=30, what="info records stored")
        assert {priority for _, priority, _ in stored("")} == {"info"}
        status, body = collector.post("/priority", {"priority": "debug", "process": "logs"})
        assert status == 200, body
        assert priority_line()[0] == "debug"
        first = wait_for(
            lambda: [m for m in stored("") if m[1] == "debug"],
            until=lambda debug: len(debug) >= 5,
            timeout_s=30,
            what="debug records stored",
        )
        status, body = collector.post("/priority", {"priority": "info", "process": "logs"})
        assert status == 200, body
        priority, off_at = priority_line()
        assert priority == "info"
        # Once the info record of 20 steps later is stored, no debug record after the change can be missing.
        wait_for(
            lambda: stored(""),
            until=lambda shown: ("chatty", "info", f"tick {off_at + 20}") in shown,
            timeout_s=30,
            what=f"tick {off_at + 20} stored",
        )
        steps = [int(text.split()[1]) for _, priority, text in stored("") if priority == "debug"]
        assert len(steps) >= len(first) and steps == sorted(steps)
        assert steps[-1] <= off_at + 2  # the change lands within a step or two of when the program sees it
        assert steps == list(range(steps[0], steps[-1] + 1))  # on, every debug record, until off
        written = log_file.read_text().splitlines()
        assert written and all(re.fullmatch(r"INFO tick \d+", line) for line in written)  # the program's own: no debug
    finally:
        chatty.kill()
        chatty.wait()
        assert chatty.stdout is not None
        chatty.stdout.close()


BROKEN = """
import logging
from ringtrace.client.integrations.hook_errors import hook_failures
log = logging.getLogger("app")
log.info("%d items", "not a number")  # its getMessage raises: off for the program, created for ringtrace (debug)
log.info("%d items", "still not")
log.warning("went on %s", "fine")
print(hook_failures())
"""


def test_a_record_that_fails_to_render_is_recorded_unrendered_and_the_program_goes_on(
    collector: CollectorProcess,
) -> None:
    # Arguments that do not fit the format are the program's mistake, not a failure of ringtrace's hook: its
    # handlers say it if they ever format it (python never formats a record below its levels), ringtrace says nothing.
    recorded = run(collector.tcp_address, BROKEN, "debug")
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout == "{}\n"
    assert "ringtrace" not in recorded.stderr
    assert recorded.stderr.endswith("went on fine\n")
    assert messages(collector.snapshot("?flush_timeout_s=5")) == [
        ("app", "info", "%d items"),
        ("app", "info", "%d items"),
        ("app", "warning", "went on fine"),
    ]


THREADS_AND_FORK = """
import logging, os, threading
log = logging.getLogger("app.workers")
log.setLevel(logging.INFO)  # handed on to logging's last resort, which prints warnings only

def work(k):
    for i in range(200):
        log.info("item %d of worker %d", i, k)

workers = [threading.Thread(target=work, args=(k,), name=f"worker-{k}") for k in range(4)]
for worker in workers:
    worker.start()
pid = os.fork()  # while the workers log: the child's logging and recording go on
if pid == 0:
    log.warning("from the child")
    os._exit(0 if tl.flush(20) else 3)
for worker in workers:
    worker.join()
_, status = os.waitpid(pid, 0)
print(pid, status)
"""


def test_records_of_many_threads_and_of_a_forked_child_are_each_on_their_own_track(
    collector: CollectorProcess,
) -> None:
    recorded = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", RUNNER, collector.tcp_address, THREADS_AND_FORK],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert recorded.returncode == 0, recorded.stderr
    child, status = (int(x) for x in recorded.stdout.split())
    assert status == 0
    trace = collector.snapshot()
    threads = metadata(trace, "thread_name")
    shown = [e for e in events(trace, "i") if e["cat"] == "app.workers"]
    per_thread: dict[str, set[str]] = {}
    for e in shown:
        if e["pid"] != child:
            per_thread.setdefault(threads[(e["pid"], e["tid"])], set()).add(e["args"]["message"])
    assert per_thread == {f"worker-{k}": {f"item {i} of worker {k}" for i in range(200)} for k in range(4)}
    assert [(e["args"]["message"], e["args"]["priority"]) for e in shown if e["pid"] == child] == [
        ("from the child", "warning")
    ]


ANOTHER_TOOL = """
import logging, sys
import ringtrace.client
from ringtrace.client.integrations import apply, logging_records  # the integration's module, imported first

seen = []
previous = logging.Logger.callHandlers

def other_tool(self, record):  # another tool's wrapper (an error tracker's, say), put in after that import
    seen.append(record.getMessage())
    previous(self, record)

logging.Logger.callHandlers = other_tool
tl = ringtrace.client.connect(sys.argv[1], process_name="logs", exit_timeout_s=30)
apply(tl, {"logging"})
log = logging.getLogger("app")
log.warning("printed")
log.info("at info, neither")
tl.set_priority("debug")
log.info("recorded only")
tl.set_priority("info")
log.info("again neither")
print(seen)
"""


def test_another_tool_s_wrapper_of_call_handlers_still_sees_what_the_program_lets_through(
    collector: CollectorProcess,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", ANOTHER_TOOL, collector.tcp_address], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "['printed']\n" and done.stderr == "printed\n"
    assert messages(collector.snapshot()) == [("app", "warning", "printed"), ("app", "info", "recorded only")]
