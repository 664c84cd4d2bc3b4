"""The logging integration's map from logging levels to ringtrace's nine priorities (importing it installs nothing),
and when it widens ``Logger.isEnabledFor`` (in a subprocess: installing it patches ``logging`` for good)."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from ringtrace.client.integrations.logging_records import priority_of_level
from ringtrace.wire.message_format import PRIORITIES


@pytest.mark.parametrize(
    ("level", "priority"),
    [
        (logging.CRITICAL, "fatal"),
        (100, "fatal"),
        (logging.ERROR, "error"),
        (45, "error"),
        (logging.WARNING, "warning"),
        (25, "info"),  # NOTICE, SUCCESS
        (logging.INFO, "info"),
        (15, "debug"),  # VERBOSE
        (logging.DEBUG, "debug"),
        (9, "trace"),
        (5, "trace"),  # TRACE
        (4, "trace+"),
        (3, "trace+"),
        (2, "trace++"),
        (1, "trace+++"),
        (logging.NOTSET, "trace+++"),
        (-5, "trace+++"),
    ],
)
def test_a_level_takes_the_priority_of_the_standard_level_at_or_below_it(level: int, priority: str) -> None:
    assert priority_of_level(level) == priority


def test_every_priority_is_some_level_s_and_importing_the_integration_patched_nothing() -> None:
    assert {priority_of_level(level) for level in range(-1, 60)} == set(PRIORITIES)
    assert logging.Logger.isEnabledFor.__module__ == "logging"


#: Installs the integration on a timeline kept in memory and prints, at each step, whether ``Logger.isEnabledFor`` is
#: logging's own ("own"), the integration's ("widened") or another tool's ("other"), the records logging created so
#: far, and what the timeline recorded.
WIDENING = """
import logging
from ringtrace.client import MemoryListener, Timeline
from ringtrace.client.integrations import logging_records

own = logging.Logger.isEnabledFor
created = []
make = logging.getLogRecordFactory()
logging.setLogRecordFactory(lambda *a, **k: created.append(1) or make(*a, **k))
listener = MemoryListener()
tl = Timeline("logs", [listener])
quiet = logging.getLogger("app")  # logging's default: WARNING, no handler

def step(name):
    hook = logging.Logger.isEnabledFor
    which = "own" if hook is own else "widened" if hook is logging_records._is_enabled_for else "other"
    tl.flush(30)
    print(name, which, len(created), [e.name for e in listener.events if e.kind == "app"])

logging_records.install(tl)
quiet.info("a"); quiet.debug("b"); quiet.warning("c")
step("info")
tl.set_priority("debug")
quiet.info("d"); quiet.debug("e"); logging.getLogger("app").log(5, "f")
step("debug")
tl.set_priority("info")
quiet.info("g"); quiet.debug("h")
step("info-again")
tl.set_priority("warning")
step("warning")
tl.set_priority("trace")
widened = logging.Logger.isEnabledFor
logging.Logger.isEnabledFor = lambda self, level: widened(self, level)  # another tool wraps it while widened
quiet.log(5, "i")
tl.set_priority("info")
quiet.info("j")
step("wrapped")
tl.set_priority("debug")  # ours is still under the other tool's wrapper: widened again, not wrapped twice
quiet.info("k")
tl.set_priority("info")
quiet.info("l")
step("wrapped-again")
"""


def test_the_program_s_levels_decide_at_info_and_the_timeline_s_past_it() -> None:
    done = subprocess.run([sys.executable, "-c", WIDENING], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        # At info (the default), the hook is logging's own: a record the program's levels leave out is never made.
        "info own 1 ['c']",
        # Past info, the records the program leaves out are made and recorded up to the timeline's priority.
        "debug widened 3 ['c', 'd', 'e']",
        # Back at info, logging's own again.
        "info-again own 3 ['c', 'd', 'e']",
        "warning own 3 ['c', 'd', 'e']",
        # Another tool's wrapper of the widened hook stays; the integration's then answers as the program's levels.
        "wrapped other 4 ['c', 'd', 'e', 'i']",
        "wrapped-again other 5 ['c', 'd', 'e', 'i', 'k']",
    ]
