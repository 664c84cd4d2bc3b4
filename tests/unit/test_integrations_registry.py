"""The integration registry applies an integration at once when its library is already imported, else right after the
program imports it, never twice, and an install that fails is left out and said, not raised."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def _run(tmp_path: Path, program: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "watched_lib.py").write_text("LOADED = True\n")
    (tmp_path / "fake_integration.py").write_text(
        textwrap.dedent(
            """
            import sys
            CALLS = []

            def install(timeline):
                CALLS.append(("watched_lib" in sys.modules, timeline.name))

            def broken(timeline):
                raise RuntimeError("no such hook")
            """
        )
    )
    # A fresh interpreter: the import hook and the applied list are the process's.
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(program)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


_PRELUDE = """
import sys
sys.path.insert(0, ".")
from ringtrace.client import Timeline
from ringtrace.client.integrations import Integration, applied, apply, failed
import fake_integration
WATCHED = Integration("watched", "a test", ("watched_lib",), "fake_integration:install")
AT_ONCE = Integration("at-once", "a test", (), "fake_integration:install")
BROKEN = Integration("broken", "a test", (), "fake_integration:broken")
tl = Timeline("t")
"""


def test_an_integration_applies_only_once_its_library_is_imported(tmp_path: Path) -> None:
    result = _run(
        tmp_path,
        _PRELUDE
        + """
apply(tl, {"watched"}, [WATCHED])
print(fake_integration.CALLS, "watched_lib" in sys.modules)
import watched_lib
import watched_lib
print(fake_integration.CALLS, applied(), watched_lib.LOADED, watched_lib.__loader__.__class__.__name__)
""",
    )
    assert result.returncode == 0, result.stderr
    before, after = result.stdout.splitlines()
    assert before == "[] False"
    assert after == "[(True, 't')] ['watched'] True SourceFileLoader"


def test_an_integration_whose_library_is_imported_already_applies_at_once_and_a_switched_off_one_never(
    tmp_path: Path,
) -> None:
    result = _run(
        tmp_path,
        _PRELUDE
        + """
import watched_lib
apply(tl, {"watched"}, [WATCHED, AT_ONCE])
apply(tl, {"watched"}, [WATCHED])
print(fake_integration.CALLS, applied())
""",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[(True, 't')] ['watched']"


def test_an_install_that_fails_is_left_out_and_said_once_without_raising(tmp_path: Path) -> None:
    result = _run(
        tmp_path,
        _PRELUDE
        + """
import logging
logging.basicConfig(level=logging.WARNING, format="%(message)s")
apply(tl, {"broken", "at-once"}, [BROKEN, AT_ONCE])
apply(tl, {"broken"}, [BROKEN])
print(applied(), failed())
""",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['at-once'] {'broken': 'RuntimeError: no such hook'}"
    assert result.stderr.count("the broken integration is off: it failed to install: RuntimeError('no such hook')") == 1
