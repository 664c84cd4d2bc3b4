"""Running one test's body in a Python process of its own: for tests whose subject is process-wide state that every
other test of a test process shares (the flusher's thread) or may break on purpose (an allocation made to fail)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["run_alone"]


def run_alone(
    test_file: str, function: str, *args: str, switch_interval_s: float | None = None, **environment: str
) -> None:
    """Call ``function(*args)`` of the module ``test_file`` in a Python process of its own (``environment`` added to
    this one's; ``switch_interval_s``: the interpreter's switch interval there, if not its default), the tests'
    helpers importable, and fail with its error output if it does."""
    here = Path(test_file)
    paths = [str(here.parent), str(Path(__file__).parent)]
    program = f"import sys; sys.path[:0] = {paths!r}"
    if switch_interval_s is not None:
        program += f"; sys.setswitchinterval({switch_interval_s!r})"
    program += f"; from {here.stem} import {function}"
    done = subprocess.run(
        [sys.executable, "-c", f"{program}; {function}(*{list(args)!r})"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **environment},
    )
    assert done.returncode == 0, done.stderr[-4000:]
