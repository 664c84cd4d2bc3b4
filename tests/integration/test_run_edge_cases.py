"""``ringtrace run`` on programs a review tried as a new user would: each ends as under ``python``, says nothing of its
own on stderr, and loses nothing it did not count.
"""

from __future__ import annotations

import sys
from pathlib import Path

from collector_process import CollectorProcess
from launching import RINGTRACE, program_environment, run


def test_a_program_that_exits_at_once_loses_no_samples_at_exit(collector: CollectorProcess, tmp_path: Path) -> None:
    # The sampler went on sampling while the exit delivery ran: the samples it took between the last sweep and the
    # close were counted as dropped, and about one run in three said "N events dropped" on stderr.
    (tmp_path / "quick.py").write_text("print('done')\n")
    environment = program_environment()
    under_python = run([sys.executable, "quick.py"], tmp_path, environment)
    for _ in range(8):
        done = run(
            [RINGTRACE, "run", "--collector", collector.tcp_address, "--sample-hz", "1000", "quick.py"],
            tmp_path,
            environment,
        )
        assert (done.stdout, done.stderr, done.returncode) == (
            under_python.stdout,
            under_python.stderr,
            under_python.returncode,
        )
