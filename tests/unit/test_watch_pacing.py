"""The pauses of the rules' watch between steps (``watch_pacing.py``), on clocks the test moves."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ringtrace.collector.incidents.watch_pacing import (
    BUSY_SHARE,
    LAG_BOUND_S,
    ROOMY_SHARE,
    WATCH_INTERVAL_S,
    WatchPacing,
)


class Clocks:
    """Wall time and the loop thread's CPU time, moved by hand."""

    def __init__(self) -> None:
        self.wall = 100.0
        self.cpu = 5.0

    def elapse(self, wall_s: float, loop_busy: float) -> None:
        self.wall += wall_s
        self.cpu += wall_s * loop_busy


def pacing(clocks: Clocks) -> WatchPacing:
    return WatchPacing(lambda: clocks.wall, lambda: clocks.cpu, first_pass_in_c=True)


def test_a_watch_that_keeps_up_steps_every_interval() -> None:
    clocks = Clocks()
    paced = pacing(clocks)
    clocks.elapse(0.1, 0.1)
    assert paced.pause_after(0.001, behind=False, late_s=0.0) == WATCH_INTERVAL_S


def test_a_watch_behind_on_a_loop_with_room_takes_the_roomy_share() -> None:
    clocks = Clocks()
    paced = pacing(clocks)
    clocks.elapse(0.2, 0.2)  # ingest keeps the loop's thread busy a fifth of the time
    pause = paced.pause_after(0.02, behind=True, late_s=0.0)
    assert pause == pytest.approx(0.02 * (1 - ROOMY_SHARE) / ROOMY_SHARE)
    assert 0.02 / (0.02 + pause) == pytest.approx(ROOMY_SHARE)


@pytest.mark.parametrize(("loop_busy", "late_s"), [(0.9, 0.0), (0.2, LAG_BOUND_S * 2)])
def test_a_watch_behind_on_a_busy_or_late_loop_keeps_to_the_busy_share(loop_busy: float, late_s: float) -> None:
    clocks = Clocks()
    paced = pacing(clocks)
    clocks.elapse(1.0, loop_busy)  # busy: ingest needs the loop; late: the loop waited (for the GIL the watch held)
    pause = paced.pause_after(0.02, behind=True, late_s=late_s)
    assert pause == pytest.approx(max(WATCH_INTERVAL_S, 0.02 * (1 - BUSY_SHARE) / BUSY_SHARE))
    assert 0.02 / (0.02 + pause) == pytest.approx(BUSY_SHARE)


def test_the_loop_is_judged_on_the_time_since_the_last_step_only() -> None:
    clocks = Clocks()
    paced = pacing(clocks)
    clocks.elapse(10.0, 0.95)  # a flood, over
    assert paced.pause_after(0.02, behind=True, late_s=0.0) > 0.1
    clocks.elapse(0.4, 0.1)  # since: room
    assert paced.pause_after(0.02, behind=True, late_s=0.0) < 0.02


def test_without_the_c_first_pass_a_watch_behind_keeps_to_the_busy_share() -> None:
    # All of a pure-Python step holds the GIL: at 150 MB/s the roomy share doubled the collector's CPU (67-78% of a
    # core against 31-34%) and its /healthz p99 tripled (248-275 ms against 50-95), with no more read (73% unread).
    program = (
        "from ringtrace.collector.incidents.watch_pacing import WatchPacing\n"
        "wall, cpu = iter([100.0, 100.2]), iter([5.0, 5.04])  # (room: a fifth of a core)\n"
        "paced = WatchPacing(lambda: next(wall), lambda: next(cpu))\n"
        "print(paced.pause_after(0.02, behind=True, late_s=0.0))\n"
    )
    environment = {**os.environ, "RINGTRACE_PURE_PYTHON": "1"}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, env=environment)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == pytest.approx(0.02 * (1 - BUSY_SHARE) / BUSY_SHARE)
