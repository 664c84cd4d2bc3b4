"""A forked child is a new process to the collector; the parent's unsent events are not sent twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections import Counter
from pathlib import Path

import pytest
from collector_process import CollectorProcess, events, metadata
from waiting import wait_for


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


#: A connect() user whose forked child records and exits at once: its exit handlers deliver (``sys.exit``, atexit).
#: Run by other interpreters too, with this environment's packages (ringtrace, msgpack) added as a site directory.
EXITS_AT_ONCE = """
import site, sys
site.addsitedir(sys.argv[2])
import json, os, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="forker")
tl.instant("parent")
pid = os.fork()
if pid == 0:
    for i in range(10):
        tl.instant("child", i=i)
    sys.exit(0)
_, status = os.waitpid(pid, 0)
print(json.dumps({"child": pid, "status": status, "flushed": tl.flush(timeout_s=20)}))
"""


def _interpreter(version: str) -> str | None:
    """This interpreter, or another of ``version`` that runs (on the path, or installed by pyenv), if there is one."""
    if version == "{}.{}".format(*sys.version_info[:2]):
        return sys.executable
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates = [f"python{version}", *sorted(str(p) for p in pyenv.glob(f"{version}.*/bin/python{version}"))]
    for candidate in candidates:
        try:
            if subprocess.run([candidate, "-c", "pass"], capture_output=True, timeout=30).returncode == 0:
                return candidate
        except OSError:
            continue
    return None


@pytest.mark.parametrize("version", ["3.11", "3.12", "3.13"])
def test_a_forked_child_that_exits_at_once_delivers(collector: CollectorProcess, version: str) -> None:
    # Python 3.12 and later refuse to start a thread in exit handlers: the child's streamer starts at its first event.
    python = _interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version} here")
    site_packages = sysconfig.get_paths()["purelib"]
    done = subprocess.run(
        [python, "-W", "ignore::DeprecationWarning", "-c", EXITS_AT_ONCE, collector.tcp_address, site_packages],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == 0 and report["flushed"] is True
    assert "ringtrace" not in done.stderr, done.stderr  # nothing lost, no thread that could not start

    def child_events() -> list[int]:
        trace = collector.snapshot()
        return sorted(e["args"]["i"] for e in events(trace, "i") if e["pid"] == report["child"])

    assert wait_for(child_events, until=lambda seen: len(seen) >= 10, timeout_s=30, what="the child's 10") == list(
        range(10)
    )
