"""Delivery goes on while the program imports a module the client's threads look for: a module being imported is in
``sys.modules`` already, half run, and another thread must not take it for the module.

The streamer told a TLS connection from a plain one by ``ssl`` in ``sys.modules``: while the main thread imported ssl
(requests and aiohttp do, at start), a plain connection's first send or receive found no ``ssl.SSLSocket`` yet, and
the streamer's thread ended. A short-lived program's process then delivered none of its events, at exit too, and the
collector heard nothing of it. Here the program's import of ssl is held half run, deterministically, while it records
and flushes.
"""

from __future__ import annotations

import subprocess
import sys

from collector_process import CollectorProcess, events, metadata
from waiting import wait_for

#: Holds the import of ssl half run (in ``sys.modules``, its body not run yet) while a thread records 8 spans and
#: flushes; then lets it finish, records 8 more and exits (the exit delivers them).
PROGRAM = """
import importlib.util, sys, threading, ringtrace.client

class HeldImport:
    def __init__(self):
        self.begun, self.release = threading.Event(), threading.Event()
    def find_spec(self, name, path=None, target=None):
        if name != "ssl":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("ssl")
        self.loader, spec.loader = spec.loader, self
        return spec
    def create_module(self, spec):
        return self.loader.create_module(spec)
    def exec_module(self, module):
        self.begun.set()
        self.release.wait(60)
        self.loader.exec_module(module)

print("ssl imported before", "ssl" in sys.modules, flush=True)
held = HeldImport()
sys.meta_path.insert(0, held)
tl = ringtrace.client.connect(sys.argv[1], process_name="importing", exit_timeout_s=30)

def record():
    held.begun.wait(60)
    half = getattr(sys.modules.get("ssl"), "__spec__", None)
    print("ssl half imported", getattr(half, "_initializing", False), flush=True)
    for i in range(8):
        with tl.scope("work", i=i):
            pass
    print("flushed", tl.flush(timeout_s=20), flush=True)
    held.release.set()

recording = threading.Thread(target=record)
recording.start()
import ssl
recording.join()
for i in range(8, 16):
    with tl.scope("work", i=i):
        pass
"""


def test_a_process_delivers_while_its_program_imports_ssl(collector: CollectorProcess) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, collector.tcp_address], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # (ssl not imported by ringtrace itself, and half run while the thread flushed: else this tests nothing)
    assert done.stdout.splitlines() == ["ssl imported before False", "ssl half imported True", "flushed True"]
    assert done.stderr == ""
    trace = wait_for(
        collector.snapshot,
        until=lambda t: len([e for e in events(t, "X") if e["name"] == "work"]) >= 16,
        timeout_s=30,
        what="the 16 spans of the process that imported ssl",
    )
    assert "importing" in metadata(trace, "process_name").values()
    assert sorted(e["args"]["i"] for e in events(trace, "X") if e["name"] == "work") == list(range(16))
