"""The installed scripts without the ``collector`` extra: a client-only ``pip install .`` still installs ``ringtrace``
and ``ringtrace-collector``, and each says in one line which install brings what it lacks, not an import's traceback.

Each script is loaded as the installed one is (its ``console_scripts`` entry point), in a fresh interpreter where the
extra's libraries cannot be imported.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

#: Runs one console script with the collector extra's libraries made unimportable.
WITHOUT_EXTRA = """
import sys
from importlib.metadata import entry_points

class WithoutExtra:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {"aiohttp", "orjson", "uvloop", "crc32c", "rich", "prometheus_client"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, WithoutExtra())
(script,) = entry_points(group="console_scripts", name=sys.argv[1])
sys.argv = sys.argv[1:]
sys.exit(script.load()())
"""


@pytest.mark.parametrize(
    "argv",
    [["ringtrace", "sources", "http://127.0.0.1:9"], ["ringtrace-collector", "--help"]],
    ids=["ringtrace", "ringtrace-collector"],
)
def test_a_script_without_the_collector_extra_says_which_install_brings_it(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA, *argv], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"{argv[0]}: needs ")
    assert "pip install 'ringtrace[collector]'" in lines[0]
