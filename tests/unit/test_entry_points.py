"""The installed scripts without the ``collector`` extra: a client-only ``pip install .`` still installs ``ringtrace``
and ``ringtrace-collector``; ``ringtrace run`` and ``--help`` work there, and every other subcommand says in one line
which install brings what it lacks, not an import's traceback.

Each script is loaded as the installed one is (its ``console_scripts`` entry point), in a fresh interpreter where the
extra's libraries cannot be imported.
"""

from __future__ import annotations

import importlib.metadata
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


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"]], ids=["ringtrace --help", "ringtrace run --help"])
def test_the_ringtrace_command_helps_without_the_collector_extra(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA, "ringtrace", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "ringtrace run" in done.stdout
    if argv == ["--help"]:  # the collector's subcommands are listed too, with the install they need
        assert "snapshot" in done.stdout
        assert "pip install 'ringtrace[collector]'" in done.stdout


def test_the_help_lists_the_collector_subcommands_its_parser_has() -> None:
    from ringtrace.client.launch.command import COLLECTOR_SUBCOMMANDS
    from ringtrace.collector.command.main import build_parser

    parser = build_parser()
    (subcommands,) = [action for action in parser._actions if action.dest == "command"]
    assert [name for name, _ in COLLECTOR_SUBCOMMANDS] == list(subcommands.choices)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("argv", "said_by"),
    [
        (["ringtrace", "sources", "http://127.0.0.1:9"], "ringtrace sources"),
        (["ringtrace", "snapshot", "http://127.0.0.1:9", "-o", "x.json"], "ringtrace snapshot"),
        (["ringtrace-collector", "--help"], "ringtrace-collector"),
    ],
    ids=["ringtrace sources", "ringtrace snapshot", "ringtrace-collector"],
)
def test_a_script_without_the_collector_extra_says_which_install_brings_it(argv: list[str], said_by: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA, *argv], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"{said_by}: needs ")
    assert "pip install 'ringtrace[collector]'" in lines[0]


def test_a_subcommand_imports_its_own_modules_and_no_other_s() -> None:
    seen = (
        "import sys; from ringtrace.collector.command.main import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('ringtrace.collector.', 'rich', 'duckdb')))))"
    )

    def imported(*argv: str) -> set[str]:
        done = subprocess.run([sys.executable, "-c", seen, *argv], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return set(done.stdout.split())

    query = imported("query", "--help")
    assert {"ringtrace.collector.command.sql", "ringtrace.collector.command.filters"} <= query
    others = ("files", "snapshot", "live", "search_commands", "incident_commands", "output")
    assert not query & {f"ringtrace.collector.command.{name}" for name in others}
    assert not [module for module in query if module.startswith(("rich", "duckdb", "ringtrace.collector.export.chr"))]
    assert {f"ringtrace.collector.command.{name}" for name in others} <= imported("--help")  # (every one listed)


#: Runs one console script, every extra there.
INSTALLED = """
import sys
from importlib.metadata import entry_points

(script,) = entry_points(group="console_scripts", name=sys.argv[1])
sys.argv = sys.argv[1:]
sys.exit(script.load()())
"""


def _installed(*argv: str, script: str = "ringtrace") -> subprocess.CompletedProcess[str]:
    """The installed console ``script`` run with ``argv``."""
    command = [sys.executable, "-c", INSTALLED, script, *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("script", ["ringtrace", "ringtrace-collector"])
def test_each_command_says_its_version(script: str) -> None:
    done = _installed("--version", script=script)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"{script} {importlib.metadata.version('ringtrace')}\n"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["run", "--include", "x", "app.py"], "ringtrace run: --include chooses what function tracing records, which "
         "is off: give --functions too (or set RINGTRACE_FUNCTIONS=1), or leave --include out"),
        (["run", "--collector", "127.0.0.1:9", "--builtins", "app.py"], "ringtrace run: --builtins chooses what "
         "function tracing records"),
        (["spans", "http://127.0.0.1:9", "--min-duration", "-5ms"],
         "ringtrace spans: --min-duration: a duration must not be negative, got '-5ms'"),
        (["top", "http://127.0.0.1:9", "--max-duration", "-5ms"],
         "ringtrace top: --max-duration: a duration must not be negative, got '-5ms'"),
        (["--bogus", "snapshot"], "ringtrace: unrecognized option --bogus: the command comes first: ringtrace --help"),
    ],
    ids=["--include without --functions", "--builtins without --functions", "spans -5ms", "top -5ms", "a flag first"],
)  # fmt: skip
def test_a_bad_argument_is_one_line_and_status_2(argv: list[str], said: str) -> None:
    done = _installed(*argv)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(said), done.stderr
