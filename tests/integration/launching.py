"""What the tests of recording with no code change share: the environment the programs run in, the installed
``ringtrace`` command, and the processes a collector has seen, by name."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from collector_process import CollectorProcess
from ringtrace.client.integrations import INTEGRATIONS
from waiting import wait_for

#: The installed script (the console script of this interpreter's environment).
RINGTRACE = str(Path(sys.executable).parent / "ringtrace")
#: The variables of ours a program's environment is cleared of, so that the test's own do not leak in.
OURS = (
    "RINGTRACE_AUTO",
    "RINGTRACE_COLLECTOR",
    "RINGTRACE_PROCESS_NAME",
    "RINGTRACE_SAMPLE_HZ",
    "RINGTRACE_EXIT_TIMEOUT",
    "RINGTRACE_BATCH_INTERVAL",
    "RINGTRACE_PARENT_PROCESS",
    "RINGTRACE_FUNCTIONS",
    "RINGTRACE_FUNCTIONS_INCLUDE",
    "RINGTRACE_FUNCTIONS_EXCLUDE",
    "RINGTRACE_FUNCTIONS_MIN_DURATION",
    "RINGTRACE_FUNCTIONS_MAX_DEPTH",
    "RINGTRACE_FUNCTIONS_BUILTINS",
    "RINGTRACE_FUNCTIONS_LIBRARY",
    "RINGTRACE_PURE_PYTHON",
)


def program_environment(**extra: str) -> dict[str, str]:
    """This process's environment without our variables; integrations whose module this install lacks turned off
    (each says so in a line of its own on stderr, which would make the outputs differ for a reason not tested here);
    a long wait at exit for a collector that is there.
    """
    environment = {name: value for name, value in os.environ.items() if name not in OURS}
    missing = [
        integration.name
        for integration in INTEGRATIONS
        if importlib.util.find_spec(integration.install.partition(":")[0]) is None
    ]
    environment["RINGTRACE_INTEGRATIONS_OFF"] = ",".join(missing)
    # A collector that is there is waited for at exit up to 30 s, not 2: on a busy machine the default ran out once
    # (a program that exits at once, its collector serving other tests' snapshots), and what it recorded was lost.
    environment["RINGTRACE_EXIT_TIMEOUT"] = "30"
    environment.update(extra)
    return environment


def run(argv: list[str], cwd: Path, environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=environment, capture_output=True, text=True, timeout=120, check=False)


def names_seen(collector: CollectorProcess) -> Counter[str]:
    """How many processes (by pid) the collector has seen under each name."""
    return Counter(process["process_name"] for process in collector.json("/sources")["processes"])


def wait_for_names(collector: CollectorProcess, expected: Counter[str]) -> Counter[str]:
    """Wait until the collector has seen at least ``expected`` processes under each name."""
    return wait_for(
        lambda: names_seen(collector),
        timeout_s=60,
        what=f"processes named {dict(expected)} in /sources",
        until=lambda seen: all(seen[name] >= count for name, count in expected.items()),
    )
