"""A forked child is a new process to the collector; the parent's unsent events are not sent twice."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

from collector_process import CollectorProcess, events, metadata


def test_forked_child_streams_as_its_own_process(collector: CollectorProcess) -> None:
    code = (
        "import json, os, ringtrace.client\n"
        f"tl = ringtrace.client.connect({collector.tcp_address!r}, process_name='parent', batch_interval_s=3600)\n"
        "for i in range(10):\n"
        "    tl.instant('parent-before-fork')\n"  # still buffered at fork time
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    for i in range(100):\n"
        "        with tl.scope('child-work', i=i):\n"
        "            pass\n"
        "    ok = tl.flush(timeout_s=20)\n"
        "    os._exit(0 if ok else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "flushed = tl.flush(timeout_s=20)\n"
        "print(json.dumps({'parent': os.getpid(), 'child': pid, 'status': status, 'flushed': flushed}))\n"
    )
    # Python warns that fork() in a process with threads may deadlock; ringtrace's at-fork handler is what is tested.
    done = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == 0 and report["flushed"] is True

    trace = collector.snapshot()
    counted = Counter((e["pid"], e["name"]) for e in trace["traceEvents"] if e["ph"] in "Xi")
    assert counted == {(report["parent"], "parent-before-fork"): 10, (report["child"], "child-work"): 100}
    names = {pid: name for (pid, _), name in metadata(trace, "process_name").items()}
    assert names == {report["parent"]: "parent", report["child"]: "parent"}
    assert len(events(trace, "X")) == 100
