"""The base install, in a real venv: ``pip install ringtrace`` (msgpack alone) gives a ``ringtrace`` whose ``run`` works
against a collector, whose other subcommands say in one line which extra to install, and the fleet switch's ``.pth``;
``pip install -e`` installs the ``.pth`` too, and ``pip uninstall`` removes it either way.

The collector these tests record to is the test environment's own (the venv has no collector extra to run one).
"""

from __future__ import annotations

import shutil
import subprocess
import venv
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from collector_process import CollectorProcess
from launching import program_environment, run, wait_for_names

#: Building and installing the checkout takes a while on a busy machine (the C accelerators are compiled).
pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).parents[2]
PTH = "ringtrace-fleet-switch.pth"


@dataclass(frozen=True)
class Venv:
    python: Path
    site_packages: Path

    @property
    def ringtrace(self) -> str:
        return str(self.python.parent / "ringtrace")

    def pip(self, *args: str) -> None:
        done = subprocess.run(
            [str(self.python), "-m", "pip", "--disable-pip-version-check", "-q", *args],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr


def _checkout_copy(directory: Path) -> Path:
    """The checkout's sources, copied: pip builds in the source tree (``build/``), which two builds at once (this
    module's on two test workers) would share."""
    ignored = shutil.ignore_patterns(
        ".venv",
        ".git",
        "build",
        "dist",
        "site",
        "*.egg-info",
        "__pycache__",
        "*.so",
        ".*_cache",
        ".hypothesis",
        ".fuzz",
    )
    shutil.copytree(ROOT, directory, ignore=ignored)
    return directory


def _make_venv(directory: Path) -> Venv:
    venv.EnvBuilder(with_pip=True).create(directory)
    python = directory / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Venv(python, Path(purelib))


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    """A venv with ``pip install <checkout>``: ringtrace and msgpack, nothing of the collector extra."""
    scratch = tmp_path_factory.mktemp("base")
    made = _make_venv(scratch / "venv")
    made.pip("install", str(_checkout_copy(scratch / "source")))
    yield made


def test_the_base_install_has_no_collector_extra_and_has_the_switch(base: Venv) -> None:
    probe = "import importlib.util as u; print([m for m in ('msgpack', 'aiohttp', 'orjson') if u.find_spec(m)])"
    done = run([str(base.python), "-c", probe], ROOT, program_environment())
    assert done.stdout == "['msgpack']\n"
    assert (base.site_packages / PTH).read_text() == (ROOT / "client" / "launch" / PTH).read_text()


def test_ringtrace_help_lists_run_and_a_collector_subcommand_says_which_extra(base: Venv, tmp_path: Path) -> None:
    helped = run([base.ringtrace, "--help"], tmp_path, program_environment())
    assert helped.returncode == 0
    assert "  run " in helped.stdout
    refused = run([base.ringtrace, "snapshot", "http://127.0.0.1:9", "-o", "x.json"], tmp_path, program_environment())
    assert refused.returncode == 1
    (line,) = refused.stderr.splitlines()
    assert line.startswith("ringtrace snapshot: needs ")
    assert line.endswith("pip install 'ringtrace[collector]'")


def test_ringtrace_run_and_the_switch_work_in_the_base_install(
    base: Venv, collector: CollectorProcess, tmp_path: Path
) -> None:
    (tmp_path / "job.py").write_text("import sys\nprint('job', sys.argv[1:])\nsys.exit(4)\n")
    environment = program_environment()
    plain = run([str(base.python), "job.py", "a"], tmp_path, environment)
    recorded = run([base.ringtrace, "run", "--collector", collector.tcp_address, "job.py", "a"], tmp_path, environment)
    assert (recorded.stdout, recorded.stderr, recorded.returncode) == (plain.stdout, plain.stderr, 4)
    switched = run(
        [str(base.python), "-c", "print('switched')"],
        tmp_path,
        program_environment(RINGTRACE_AUTO="1", RINGTRACE_COLLECTOR=collector.tcp_address),
    )
    assert (switched.stdout, switched.returncode) == ("switched\n", 0)
    wait_for_names(collector, Counter({"job.py": 1, "python": 1}))


def test_pip_installs_the_switch_as_a_wheel_and_editable_and_uninstall_removes_it(tmp_path: Path) -> None:
    made = _make_venv(tmp_path / "venv")
    source = str(_checkout_copy(tmp_path / "source"))
    for install in (["install", "--no-deps", source], ["install", "--no-deps", "-e", source]):
        made.pip(*install)
        assert (made.site_packages / PTH).is_file(), install
        made.pip("uninstall", "-y", "ringtrace")
        assert not (made.site_packages / PTH).exists(), install
