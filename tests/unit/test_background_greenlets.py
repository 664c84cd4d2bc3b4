"""ringtrace's background threads started after gevent's ``monkey.patch_all()`` are greenlets in the thread of the
hub that started them (``delivery/unpatched.py``): what they do to their OS thread, they do to the program's."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.skipif(not hasattr(__import__("signal"), "pthread_sigmask"), reason="per-thread signal masks"),
]

STARTED_AFTER_THE_PATCH = """
import signal

import ringtrace.client  # (imported first: it captures the interpreter's primitives)
from gevent import monkey

monkey.patch_all()

from ringtrace.client.delivery.threads import background_thread

ran = []
thread = background_thread(lambda: ran.append(1), "ringtrace-test")
thread.start()
thread.join(30)
assert ran
print(sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))
"""


def test_a_background_thread_run_as_a_greenlet_leaves_the_programs_signals_unblocked() -> None:
    pytest.importorskip("gevent")
    done = subprocess.run([sys.executable, "-c", STARTED_AFTER_THE_PATCH], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"  # (its greenlet ran in the main thread, which must still take SIGINT, ...)
